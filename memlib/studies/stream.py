"""Chapter 06: encode -> forget -> retrieve over time, in a live store against published policies.

The pure parts work on arrays: :func:`replay` feeds one history (a frame of turns
with their embeddings and emotion) into a fresh :class:`~memlib.store.MemoryStore`,
consolidating at session ends; :func:`fold_weights` learns the value's weights
on a blind :class:`~memlib.cases.CaseSet` for a two-fold split;
:func:`question_scores` asks a store one question; :func:`stream_table`
averages per-question scores. :func:`stream` and :func:`store_demo` load their
data, its embeddings and factors, and compose them.

>>> import numpy as np, pandas as pd
>>> from memlib.store import make_policy
>>> history = pd.DataFrame({"text": ["a", "b", "c", "d"], "role": "user", "speaker": "ana",
...                         "session": ["s1", "s1", "s2", "s2"], "time": [0.0, 0.1, 7.0, 7.1]})
>>> E = np.eye(384)[:4]
>>> store = replay(history, np.ones(7), make_policy("memgpt_fifo"), budget=2, embeddings=E, emotion=np.zeros(4))
>>> store.ids   # first in, first out: the first session is gone
[2, 3]
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from memlib import FACTORS
from memlib._checks import ParameterError, check_choice, check_fraction, check_int
from memlib.cases import CaseSet
from memlib.forgetting import consolidation_drops, over_budget
from memlib.learning import hill_climb
from memlib.metrics import RetentionEvaluator, keep_count, retrieval_metrics
from memlib.store import MERGE_THRESHOLD, MemoryStore, Policy, ValuePolicy, make_policy, replay_history, valence
from memlib.store.backend import MemoryBackend
from memlib.studies._common import learner_settings
from memlib.studies.data_spec import LOCOMO, DataSpec

#: Policies of the streaming comparison: the names of :data:`memlib.store.POLICIES` (``learned_V`` is the
#: paper's policy, ``paper``), plus ``learned_V_keep``, the value policy that drops the lowest value first.
STREAM_POLICIES = (
    "learned_V",
    "learned_V_keep",
    "generative_agents",
    "memorybank",
    "memgpt_fifo",
    "recency",
    "rag_unbounded",
)
STREAM_BUDGETS = (0.1, 0.3, 0.5)
STREAM_KS = (5, 10, 30)


def stream_policy(name: str, beta: float = 1.0) -> Policy:
    """Return the store policy of one row of the comparison (``beta`` applies to ``learned_V``)."""
    check_choice("policy", name, STREAM_POLICIES)
    if name == "learned_V_keep":
        return make_policy("value", keep_top_value=True, value_weight=0.5, mood_weight=0.1, beta=beta)
    # eq. 3 on the learned V with the paper's retrieval mix: the paper's rules
    return make_policy("paper", beta=beta) if name == "learned_V" else make_policy(name)


def budget_count(budget, n_turns: int) -> int:
    """Count the turns of a budget given as a share of the history (float in (0, 1)) or as a count (int >= 1).

    A share is what ``--keep-fraction`` sets, and its errors name ``keep_fraction``.

    >>> budget_count(0.3, 10), budget_count(4, 10)
    (3, 4)
    """
    if isinstance(budget, (int, np.integer)) and not isinstance(budget, bool):
        return check_int("budget", int(budget), minimum=1)
    return int(keep_count([max(int(n_turns), 1)], check_fraction("keep_fraction", budget))[0])


def history_frame(ds, rows: np.ndarray) -> pd.DataFrame:
    """Return the turns at ``rows`` of ``ds.turns`` (in time order): text, role, speaker, session and time in days."""
    turns = ds.turns
    ts = ((turns["timestamp"].to_numpy()[rows] - np.datetime64("1970-01-01")) / np.timedelta64(1, "D")).astype(float)
    return pd.DataFrame(
        {
            "text": turns["text"].to_numpy()[rows],
            "role": turns["role"].to_numpy()[rows],
            "speaker": turns["speaker"].to_numpy()[rows],
            "session": turns["session"].to_numpy()[rows],
            "time": ts,
        }
    )


def replay(
    history: pd.DataFrame,
    weights,
    policy: Policy,
    budget: int,
    embeddings: np.ndarray,
    emotion: np.ndarray,
    stats: dict | None = None,
    factor_set: str = "paper",
    merge_threshold: float | None = None,
) -> MemoryStore:
    """Replay one history into a fresh store, consolidating to ``budget`` items at each session end.

    Parameters
    ----------
    history : DataFrame
        ``text, role, speaker, session, time`` (days), one row per turn in time order
        (see :func:`history_frame`); item ids in the store are row positions.
    weights : array_like, shape (7,), or None
        The paper's value with these weights; None: the store's default value.
    policy : Policy
    budget : int
    embeddings : ndarray, shape (n, 384)
        Unit embedding of each turn.
    emotion : ndarray, shape (n,)
        Emotional intensity of each turn.
    stats : dict, optional
        ``stats["peak_items"]`` is raised to the largest store size seen at a session end.
    factor_set : {'paper', 'extended'}
        The store's reliability (:class:`~memlib.store.MemoryStore`).
    merge_threshold : float, optional
        The store's near-duplicate merging; off by default, so that every policy,
        the baselines included, stores the same turns.

    Returns
    -------
    MemoryStore
        The store after the last session.
    """
    st = MemoryStore(weights=weights, policy=policy, factor_set=factor_set, merge_threshold=merge_threshold)
    cols = {k: history[k].to_numpy() for k in ("text", "role", "time", "speaker", "session")}
    turns = [
        {**{k: v[i] for k, v in cols.items()}, "embedding": embeddings[i], "emotion": float(emotion[i])}
        for i in range(len(history))
    ]
    peak = replay_history(st, turns, budget)
    if stats is not None:
        stats["peak_items"] = max(stats.get("peak_items", 0), peak)
    return st


def restricted_store(store: MemoryStore, keep, now: float) -> MemoryStore:
    """Return a copy of ``store`` that holds only the items at positions ``keep``, its clock at ``now``; for reading.

    Every column of a kept item is the one ``store`` holds (copied); the settings
    (value, weights, policy, factor set) are shared. Its session scalars and running
    sums are ``store``'s, so the copy is for scoring and ranking
    (:meth:`~memlib.store.MemoryStore.rank`, :meth:`~memlib.store.MemoryStore.values`,
    a policy's forget scores), not for adding turns.
    """
    return _Restriction(store)(keep, now)


class _Restriction:
    """:func:`restricted_store` for many subsets of one store: its columns and strings indexed as arrays."""

    def __init__(self, store: MemoryStore):
        cols = store._backend.cols
        self.store, self.cols = store, cols
        self.arrays = {k: a[: cols.n] for k, a in cols.data.items()}
        self.strings = {}
        for k, s in cols.strings.items():
            self.strings[k] = np.empty(len(s), dtype=object)
            self.strings[k][:] = s

    def __call__(self, keep, now: float) -> MemoryStore:
        keep = np.asarray(keep, dtype=np.int64)
        cols = copy.copy(self.cols)  # (as Columns.take: new arrays, the store's are left as they are)
        cols.data = {k: a[keep] for k, a in self.arrays.items()}
        cols.strings = {k: s[keep].tolist() for k, s in self.strings.items()}
        cols.n = len(keep)
        backend = MemoryBackend()
        backend.cols, backend.sums = cols, self.store._backend.sums
        backend.scalars = {**self.store._backend.scalars, "now": float(now)}
        out = copy.copy(self.store)  # (an in-memory store copies with a lock of its own)
        out._backend = backend
        return out


def replay_cuts(
    history: pd.DataFrame,
    weights,
    policy: Policy,
    cuts,
    embeddings: np.ndarray,
    emotion: np.ndarray,
    stats: dict | None = None,
    factor_set: str = "paper",
    full: MemoryStore | None = None,
) -> list[MemoryStore]:
    """Replay several prefixes of one history, each with its own budget, from one replay of the longest.

    ``cuts`` holds ``(n_rows, budget)`` pairs; each ``n_rows`` must end a session of
    ``history``. The i-th store returned holds the items, every column equal, that
    ``replay(history[:n_rows], weights, policy, budget, ...)`` (:func:`replay`) holds,
    with its clock; it is a :func:`restricted_store`, for reading.

    Why it is the same: a store annotates each turn from the turns before it, never
    from what it still holds (merging is off), and a session's goal relevance is fixed
    at its end, before anything is dropped; so a turn's columns in a bounded store are
    the ones it has in a store that keeps everything. What a budget changes is only
    which turns are still held, and that is decided here as the store decides it
    (:func:`memlib.store.forget.plan`): at each session end, if the store is over its
    budget, the policy's forget scores of the held turns (read from a store restricted
    to them) go through :func:`~memlib.forgetting.consolidation_drops`. The turns are
    annotated once, not once per prefix and budget; the test
    ``tests/test_stream_realmem.py`` checks the equality against :func:`replay`.

    ``full``, if given, is that replay of the longest prefix with nothing dropped
    (:func:`replay` with a budget of all its turns, the same weights, policy and factor
    set), made once for several budgets; it is not changed.
    """
    cuts = [(int(n), check_int("budget", b, minimum=0)) for n, b in cuts]
    sessions = history["session"].to_numpy()
    n_all = len(history)
    ends = np.flatnonzero(np.r_[sessions[1:] != sessions[:-1], True]) + 1 if n_all else np.zeros(0, np.int64)
    n_max = max((n for n, _ in cuts), default=0)
    for n, _ in cuts:
        if n and n not in set(ends.tolist()):
            raise ParameterError(f"a cut of the history must end a session, got {n} rows")
    times = history["time"].to_numpy(dtype=float)
    if full is None:  # every turn of the longest prefix, consolidated at session ends with a budget that holds them all
        full = replay(
            history.iloc[:n_max], weights, policy, max(n_max, 1), embeddings[:n_max], emotion[:n_max], None, factor_set
        )
    if len(full) != n_max:
        raise ParameterError(f"full must hold every turn of the longest cut ({n_max}), it holds {len(full)}")
    restrict = _Restriction(full)
    expires, pinned, tokens = (restrict.arrays[k] for k in ("expires", "pinned", "tokens"))
    stores, peak = [], 0
    for n, budget in cuts:
        keep = np.zeros(0, dtype=np.int64)
        start = 0
        for end in ends[ends <= n]:
            keep = np.concatenate([keep, np.arange(start, end)])
            start = int(end)
            peak = max(peak, len(keep))
            if not policy.bounded:
                continue
            now = float(times[end - 1])
            expired = expires[keep] <= now
            rule = {  # what the store's consolidation reads (memlib.store.forget.plan), of the held turns
                "budget": budget,
                "budget_tokens": None,
                "tokens": tokens[keep],
                "eligible": ~expired,
                "pinned": pinned[keep].astype(bool),
                "count_pinned": False,
            }
            if not (expired.any() or over_budget(**rule)):
                continue
            scores = np.asarray(policy.forget_scores(restrict(keep, now), now), float)
            dropped, _ = consolidation_drops(scores, **rule)
            keep = keep[~(expired | dropped)]
        stores.append(restrict(keep, float(times[n - 1]) if n else -np.inf))
    if stats is not None:  # as replay: the largest store at a session end, before it consolidated
        stats["peak_items"] = max(stats.get("peak_items", 0), peak)
    return stores


def history_chains(histories, labels) -> list[list[int]]:
    """Group histories into chains, each a list of indices whose sessions are prefixes of its first's (the longest).

    ``histories`` holds each history's sessions (a sequence), ``labels`` one label per
    history; only histories with the same label share a chain. Chains come in the order
    of their longest history's first appearance among the longest first.

    >>> history_chains([("a", "b"), ("a",), ("c",), ("a", "b", "d")], [0, 0, 0, 0])
    [[3, 0, 1], [2]]
    """
    histories = [tuple(h) for h in histories]
    order = sorted(range(len(histories)), key=lambda i: -len(histories[i]))
    heads: dict = {}  # (label, first session) -> chains whose longest starts there
    chains: list[list[int]] = []
    for i in order:
        h = histories[i]
        key = (labels[i], h[:1])
        near = heads.get(key, []) if h else [c for (label, _), cs in heads.items() if label == key[0] for c in cs]
        for chain in near:
            if histories[chain[0]][: len(h)] == h:
                chain.append(i)
                break
        else:
            chains.append([i])
            heads.setdefault(key, []).append(chains[-1])
    return chains


#: Replay a chain of nested histories once (:func:`replay_cuts`) rather than once per history and budget.
#: Exactly equivalent (tests/test_stream_realmem.py); the tests turn it off to compare with the slow path.
SHARE_REPLAYS = True


def two_folds(groups, seed: int = 0) -> np.ndarray:
    """Fold 0 or 1 of every case: its group's place in a seeded permutation of the groups, mod 2."""
    groups = np.asarray(groups)
    uniq_groups = np.random.default_rng(seed).permutation(np.unique(groups))
    fold_of_group = {g: i % 2 for i, g in enumerate(uniq_groups)}
    return np.array([fold_of_group[g] for g in groups])


def fold_weights(blind: CaseSet, fold: np.ndarray, budgets, seed: int = 0, quick: bool = False):
    """Weights learned for each budget and fold on the *other* fold's blind cases.

    The keep fraction of the objective is the budget's share of a history (an
    absolute budget is divided by the mean history length). A single group has
    no other fold and learns on itself.

    Returns
    -------
    weights : dict of (budget, fold) to ndarray (7,)
    table : DataFrame
        ``budget, fold, factor, weight``.
    """
    mean_len = float(np.mean(blind.length))
    wrows, weights = [], {}
    for b in budgets:
        share = b if not isinstance(b, (int, np.integer)) else min(max(b / mean_len, 1e-3), 0.999)
        share = check_fraction("keep_fraction", share)
        for f in (0, 1):
            train_idx = np.flatnonzero(fold != f)
            if len(train_idx) == 0:
                train_idx = np.flatnonzero(fold == f)
            train = blind.subset(train_idx)
            res = hill_climb(
                RetentionEvaluator(train, share).objective, train.live_factors, seed=seed, **learner_settings(quick)
            )
            weights[(b, f)] = res.weights
            wrows += [{"budget": b, "fold": f, "factor": fac, "weight": w} for fac, w in zip(FACTORS, res.weights)]
    return weights, pd.DataFrame(wrows)


def question_scores(store: MemoryStore, query_vec, query_valence: float, gold: set, ks, sessions=None) -> dict:
    """Gold retention of a store for one question, and its ranking's recall and NDCG at each k.

    ``gold`` holds the question's gold item ids over the whole history, so a
    forgotten gold turn counts as missed. With ``sessions`` (the session of each
    item id) the same metrics are also computed at session level, as LongMemEval
    reports them: the ranking keeps each session at its best turn's place, and
    the gold sessions are those holding a gold turn (keys ``session_recall_any@k``, ...).
    """
    ids = np.asarray(store.ids)
    ranking = ids[store.rank(query_vec, query_valence)]
    out = {"retention": len(gold & set(store.ids)) / len(gold)}
    for k in ks:
        ra, rall, nd = retrieval_metrics(ranking, gold, k=k)
        out.update({f"recall_any@{k}": ra, f"recall_all@{k}": rall, f"ndcg@{k}": nd})
    if sessions is not None:
        sess_rank = list(dict.fromkeys(sessions[i] for i in ranking))
        sess_gold = {sessions[i] for i in gold}
        for k in ks:
            ra, rall, nd = retrieval_metrics(sess_rank, sess_gold, k=k)
            out.update({f"session_recall_any@{k}": ra, f"session_recall_all@{k}": rall, f"session_ndcg@{k}": nd})
    return out


def stream_table(per_question: pd.DataFrame, ks) -> pd.DataFrame:
    """Means over questions per policy, budget, level and k: retention, recall_any, recall_all, ndcg, n_questions.

    ``level`` is ``turn``, and ``session`` where the per-question table has session-level metrics.
    """
    long = []
    levels = [("turn", "")] + ([("session", "session_")] if f"session_recall_any@{ks[0]}" in per_question else [])
    for level, prefix in levels:
        for k in ks:
            g = per_question.groupby(["policy", "budget"], sort=False)
            agg = g.agg(
                retention=("retention", "mean"),
                recall_any=(f"{prefix}recall_any@{k}", "mean"),
                recall_all=(f"{prefix}recall_all@{k}", "mean"),
                ndcg=(f"{prefix}ndcg@{k}", "mean"),
                n_questions=("case_id", "count"),
            ).reset_index()
            long.append(agg.assign(k=k, level=level))
    return pd.concat(long, ignore_index=True)[
        ["policy", "budget", "level", "k", "retention", "recall_any", "recall_all", "ndcg", "n_questions"]
    ]


@dataclass
class StreamResult:
    """Result of :func:`stream`.

    Attributes
    ----------
    table : DataFrame
        ``policy, budget, k, retention, recall_any, recall_all, ndcg, n_questions`` (means over questions).
    per_question : DataFrame
        One row per (policy, budget, question) with retention and metrics at each k.
    weights : DataFrame
        Learned weights used for ``learned_V`` per fold and budget (learned on the other fold).
    info : dict
    """

    table: pd.DataFrame
    per_question: pd.DataFrame
    weights: pd.DataFrame
    info: dict = field(default_factory=dict)


def stream(
    data: DataSpec | str = LOCOMO,
    budgets=STREAM_BUDGETS,
    ks=STREAM_KS,
    policies=STREAM_POLICIES,
    seed: int = 0,
    beta: float = 1.0,
    progress: bool = False,
) -> StreamResult:
    """Encode -> forget -> retrieve over time, against published memory policies.

    Every history (a LoCoMo conversation, a LongMemEval question's haystack) is
    replayed session by session into a store with a fixed budget (a share of the
    history's turns, or an absolute count) and consolidated at each session end.
    After the last session each question is asked: gold *retention* is the share
    of its gold turns still stored; *recall_any@k*, *recall_all@k* and *ndcg@k*
    score the store's ranking for the question (LongMemEval's definitions, with
    the whole history's gold as the ideal, so forgotten gold counts as missed).
    Questions are asked on a snapshot (no retrieval-count updates between them).
    A question with a date (LongMemEval's ``question_date``) is asked after
    replaying only the sessions dated before it, and its ranking is also scored at
    session level (LongMemEval's ``recall_any``, ``recall_all`` and ``ndcg_any``
    over sessions). Abstention questions (ids ending in ``_abs``) are left out,
    as LongMemEval's retrieval evaluation leaves them out. A turn without text
    (six of RealMem's, twelve of LongMemEval-S's, none of them gold) is left out of
    the histories, as a store refuses it; ``info["turns_without_text"]`` counts them.

    Histories nested in one another (RealMem's: a persona's questions, each asked
    after the sessions before its own) are replayed once per chain, budget and policy
    (:func:`replay_cuts`), which gives every question exactly the store the replay of
    its own history would (each with its own budget); a history that nests in no other
    (LoCoMo's, LongMemEval's) is replayed alone with :func:`replay`.

    The weights of ``learned_V`` are learned with the blind keep/drop objective on
    the *other* half of the histories (a two-fold split by group), at a keep
    fraction equal to the budget share, so no test question informs them.
    """
    from tqdm import tqdm

    from memlib.embeddings import embed_cached
    from memlib.factors import emotion_and_valence

    data = DataSpec.of(data).reads("stream", "dataset", "quick", "limit", "sample", "factor_set", "embedding_setting")
    seed = check_int("seed", seed, minimum=0)
    ks = [check_int("k", k, minimum=1) for k in ks]
    budgets = list(budgets)
    if not budgets:
        raise ParameterError("budgets must hold at least one budget")
    for b in budgets:  # before any data is loaded
        budget_count(b, 1)
    for p in policies:
        stream_policy(p, beta)
    ds, anns = data.load(progress, regimes=("blind",))
    usable = ds.usable()
    usable = usable.with_cases(usable.cases[~usable.cases["case_id"].astype(str).str.endswith("_abs")])
    cases = usable.cases
    if not len(cases):
        raise ParameterError(f"{ds.name}: no usable question (with gold turns, not an abstention) to stream")

    # embeddings and text-level factors, from the caches the annotation filled
    used_rows = np.unique(np.concatenate([usable.haystack_rows(c) for c in range(len(cases))]))
    text_ids = ds.turns["text_id"].to_numpy()
    uniq = np.unique(text_ids[used_rows])
    E_text = np.zeros((len(ds.texts), 384), np.float32)
    E_text[uniq] = embed_cached([ds.texts[i] for i in uniq], data.embedding_setting, progress=progress)
    E = E_text[text_ids]
    emo_text = np.zeros(len(ds.texts))
    emo_text[uniq] = emotion_and_valence([ds.texts[i] for i in uniq])[0]
    emotion = emo_text[text_ids]
    Q = embed_cached(cases["question"].tolist(), data.embedding_setting, progress=progress)
    q_val = valence(cases["question"].tolist())

    # two folds of groups; learned_V for a history uses weights learned on the other fold
    groups = cases["group"].to_numpy()
    fold = two_folds(groups, seed)
    weights, weight_table = fold_weights(anns["blind"].cases, fold, budgets, seed, data.quick)

    # a history is a haystack cut at its questions' date: questions asked at the same point share a replay
    session_date = dict(zip(ds.sessions["session"], ds.sessions["date"]))
    qdates = cases["question_date"]
    histories: dict = {}
    for c, hay in enumerate(cases["haystack"]):
        cut = len(hay)
        if pd.notna(qdates.iloc[c]):
            cut = sum(session_date[x] <= qdates.iloc[c] for x in hay)
        histories.setdefault((hay, cut), []).append(c)
    stats: dict = {}
    bar = tqdm(total=len(histories) * len(policies) * len(budgets), desc="replay", disable=not progress)
    dated = bool(qdates.notna().any())
    keys = list(histories)
    hist = []  # per history: its rows and its questions' gold positions
    # a turn without text is none a store can hold (MemoryStore.add refuses it): it is left out of the history, and
    # the budget is a share of the turns that remain (RealMem has 6 such turns, LongMemEval-S 12, none of them gold)
    has_text = np.array([bool(str(t).strip()) for t in ds.turns["text"]], dtype=bool)
    no_text: set = set()
    for hay, cut in keys:
        case_list = histories[(hay, cut)]
        n_rows = int(ds.sessions.set_index("session").loc[list(hay[:cut]), "n_turns"].sum())
        hrows = usable.haystack_rows(case_list[0])[:n_rows]
        no_text.update(hrows[~has_text[hrows]].tolist())
        hrows = hrows[has_text[hrows]]
        pos_of_row = {r: i for i, r in enumerate(hrows)}
        golds = [{pos_of_row[g] for g in cases["gold"].iloc[c] if g in pos_of_row} for c in case_list]
        hist.append((hrows, golds))
    # histories nested in one another (RealMem: a persona's questions, each asked at its own date) form a chain,
    # replayed once when it holds more than one; a history alone is replayed as it always was
    chains = (
        history_chains([hay[:cut] for hay, cut in keys], [fold[histories[k][0]] for k in keys])
        if SHARE_REPLAYS
        else [[h] for h in range(len(keys))]
    )
    scored: dict = {}  # (history, budget, policy) -> its questions' rows
    for chain in chains:
        longest = history_frame(ds, hist[chain[0]][0])
        E_chain, emo_chain = E[hist[chain[0]][0]], emotion[hist[chain[0]][0]]
        fulls: dict = {}  # (policy, weights) -> the longest history replayed with nothing dropped
        for bi, b in enumerate(budgets):
            counts = [budget_count(b, len(hist[h][0])) for h in chain]
            for pi, name in enumerate(policies):
                w = (
                    weights[(b, fold[histories[keys[chain[0]]][0]])]
                    if name.startswith("learned_V")
                    else np.ones(len(FACTORS))
                )
                policy = stream_policy(name, beta)
                bounded = stats if policy.bounded else None
                if len(chain) > 1:
                    cuts = [(len(hist[h][0]), c) for h, c in zip(chain, counts)]
                    key = (name, np.asarray(w, float).tobytes())
                    if key not in fulls:
                        n = len(longest)
                        fulls[key] = replay(longest, w, policy, max(n, 1), E_chain, emo_chain, None, data.factor_set)
                    stores = replay_cuts(
                        longest, w, policy, cuts, E_chain, emo_chain, bounded, data.factor_set, full=fulls[key]
                    )
                else:
                    stores = [replay(longest, w, policy, counts[0], E_chain, emo_chain, bounded, data.factor_set)]
                for h, st in zip(chain, stores):
                    hrows, golds = hist[h]
                    sessions = longest["session"].to_numpy()[: len(hrows)] if dated else None
                    rows = scored[(h, bi, pi)] = []
                    for c, gold in zip(histories[keys[h]], golds):
                        if not gold:  # its evidence comes after the question's date: nothing to retain
                            continue
                        scores = question_scores(st, Q[c], q_val[c], gold, ks, sessions)
                        rows.append(
                            {
                                "policy": name,
                                "budget": b,
                                "case_id": cases["case_id"].iloc[c],
                                "group": groups[c],
                                "retention": scores.pop("retention"),
                                "stored": len(st),
                                "history": len(hrows),
                                **scores,
                            }
                        )
                    bar.update()
    rows = [
        row
        for h in range(len(keys))
        for bi in range(len(budgets))
        for pi in range(len(policies))
        for row in scored[(h, bi, pi)]
    ]
    bar.close()
    per_q = pd.DataFrame(rows)
    info = {
        **ds.stats(),
        "histories": len(histories),
        "beta": beta,
        "peak_items": stats.get("peak_items", 0),  # largest bounded store at a session end, before forgetting
        "max_history": int(per_q["history"].max()),
        "turns_without_text": len(no_text),  # left out of the histories they were in
    }
    return StreamResult(stream_table(per_q, ks), per_q, weight_table, info)


def store_demo(data: DataSpec | str = LOCOMO, budget: float = 0.3):
    """Replay the first history of ``data`` into a store with the library's defaults (``MemoryStore()``).

    The default value and policy come from ``memlib/defaults.json``
    (:mod:`memlib.studies.defaults`), which was fitted on histories that include this one; the
    held-out numbers are the defaults study's. Returns ``(ds, store, info)``; ``info`` has the
    budget, the history's length and its questions (rows of ``ds.cases``) with their gold positions.
    """
    from memlib.embeddings import embed_cached
    from memlib.factors import emotional_intensity

    data = DataSpec.of(data).reads("store_demo", "dataset", "quick", "limit", "sample", "embedding_setting")
    ds = data.load_dataset()
    if not ds.cases["usable"].any():
        raise ParameterError(f"{ds.name}: no usable question (none has a gold turn in its history)")
    usable = ds.usable()
    first = usable.cases["group"].iloc[0]
    rows = usable.haystack_rows(0)
    texts = ds.turns["text"].to_numpy()[rows].tolist()
    E = np.asarray(embed_cached(texts, data.embedding_setting, progress=False), dtype=np.float32)
    count = budget_count(budget, len(rows))
    store = replay(  # the store's own defaults, near-duplicate merging included
        history_frame(ds, rows),
        None,
        ValuePolicy(),
        count,
        E,
        emotional_intensity(texts),
        merge_threshold=MERGE_THRESHOLD,
    )
    questions = usable.cases[usable.cases["group"] == first]
    pos = {r: i for i, r in enumerate(rows)}
    questions = questions.assign(gold_positions=[tuple(pos[g] for g in gold) for gold in questions["gold"]])
    return ds, store, {"budget": count, "history": len(rows), "questions": questions}
