"""Chapter 06: encode -> forget -> retrieve over time, in a live store against published policies.

Every history is replayed through the store that ships: its turns are added to a
:class:`~memlib.store.MemoryStore` that forgets nothing, and the store's own replay
(:func:`memlib.store.held_after`) shows each policy what a bounded store would hold after
each session end; the questions are then ranked by the store's retrieval rule
(:func:`memlib.store.rank`). :func:`fold_weights` learns the value's weights on a blind
:class:`~memlib.cases.CaseSet` for a two-fold split; :func:`question_scores` scores one
question on a view of the store; :func:`stream_table` averages per-question scores.
:func:`stream` and :func:`store_demo` load their data and compose them.

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

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from memlib import FACTORS
from memlib._checks import ParameterError, check_choice, check_fraction, check_int
from memlib.cases import CaseSet
from memlib.learning import hill_climb
from memlib.metrics import RetentionEvaluator, keep_count, retrieval_metrics
from memlib.store import (
    MERGE_THRESHOLD,
    MemoryStore,
    PaperPolicy,
    Policy,
    ValuePolicy,
    held_after,
    make_policy,
    rank,
    replay_history,
    valence,
)
from memlib.studies._common import learner_settings
from memlib.studies.data_spec import LOCOMO, DataSpec
from memlib.studies.stream_histories import StreamHistories, history_chains, history_frame, stream_histories

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
        mix = {"value_weight": PaperPolicy.VALUE_WEIGHT, "mood_weight": PaperPolicy.MOOD_WEIGHT}
        return make_policy("value", keep_top_value=True, beta=beta, **mix)
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


def replay(
    history: pd.DataFrame,
    weights,
    policy: Policy,
    budget: int,
    embeddings: np.ndarray,
    emotion: np.ndarray,
    factor_set: str = "paper",
    merge_threshold: float | None = None,
) -> MemoryStore:
    """Replay one history into a fresh store, consolidating to ``budget`` items at each session end.

    With ``budget=None`` the store forgets nothing and consolidates once, after the last
    session. It then holds what a store that consolidates at each session end to a budget it
    never reaches holds, column by column: such a consolidation drops nothing, and the goal
    relevance it fixes is fixed again, to the same values, when the next session begins. Only the
    stream's reference counts (:mod:`memlib.references`) are left uncounted: no policy here reads
    them from the store (a replay of one that does counts them itself, :func:`memlib.store.held_after`),
    and counting them at every session end costs each one a pass over every turn held.

    Parameters
    ----------
    history : DataFrame
        ``text, role, speaker, session, time`` (days), one row per turn in time order
        (see :func:`history_frame`); item ids in the store are row positions.
    weights : array_like, shape (7,), or None
        The paper's value with these weights; None: the store's default value.
    policy : Policy
    budget : int or None
        Items to keep at each session end; None: nothing is forgotten.
    embeddings : ndarray, shape (n, 384)
        Unit embedding of each turn.
    emotion : ndarray, shape (n,)
        Emotional intensity of each turn.
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
    replay_history(st, turns, budget)
    if budget is None and turns:  # the last session ends: its goal relevance is fixed
        st.consolidate(len(st), now=turns[-1]["time"])
    return st


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


def question_scores(view, policy: Policy, query_vec, query_valence: float, gold: set, ks, sessions=None) -> dict:
    """Gold retention of the items of ``view`` for one question, and their ranking's recall and NDCG at each k.

    The ranking is the store's (:func:`memlib.store.rank` under ``policy``, at the view's
    clock). ``gold`` holds the question's gold item ids over the whole history, so a
    forgotten gold turn counts as missed. With ``sessions`` (the session of each
    item id) the same metrics are also computed at session level, as LongMemEval
    reports them: the ranking keeps each session at its best turn's place, and
    the gold sessions are those holding a gold turn (keys ``session_recall_any@k``, ...).
    """
    ids = view.ids
    ranking = ids[rank(view, policy, query_vec, query_valence, view.now)]
    out = {"retention": len(gold & set(ids.tolist())) / len(gold)}
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

    Every history is replayed through the store (:func:`memlib.store.held_after`): its
    turns are added once to a store that forgets nothing, and the store's own consolidation
    rule decides, session end by session end, what a store with the budget would hold.
    Histories nested in one another (RealMem's: a persona's questions, each asked after
    the sessions before its own) share that store and are cut per question, each with its
    own budget (a share of its own history).

    The weights of ``learned_V`` are learned with the blind keep/drop objective on
    the *other* half of the histories (a two-fold split by group), at a keep
    fraction equal to the budget share, so no test question informs them.
    """
    from tqdm import tqdm

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
    hs = stream_histories(ds)
    inputs = _turn_inputs(ds, hs, data.embedding_setting, progress)
    # two folds of groups; learned_V for a history uses weights learned on the other fold
    fold = two_folds(hs.cases["group"].to_numpy(), seed)
    weights, weight_table = fold_weights(anns["blind"].cases, fold, budgets, seed, data.quick)
    replays = _Replays(ds, hs, inputs, weights, fold, budgets, policies, beta, ks, data.factor_set)
    bar = tqdm(total=len(hs.rows) * len(policies) * len(budgets), desc="replay", disable=not progress)
    scored: dict = {}  # (history, budget, policy) -> its questions' rows
    peak = 0
    for chain in history_chains(hs.sessions, [fold[cs[0]] for cs in hs.questions]):
        peak = max(peak, replays.chain(chain, scored, bar))
    bar.close()
    order = [(h, bi, pi) for h in range(len(hs.rows)) for bi in range(len(budgets)) for pi in range(len(policies))]
    per_q = pd.DataFrame([row for key in order for row in scored[key]])
    if per_q.empty:
        raise ParameterError(f"{ds.name}: no question can be scored (each one's gold comes after its own date)")
    info = {
        **ds.stats(),
        "histories": len(hs.rows),
        "beta": beta,
        "peak_items": peak,  # largest bounded store at a session end, before forgetting
        "max_history": int(per_q["history"].max()),
        "turns_without_text": hs.without_text,  # left out of the histories they were in
    }
    return StreamResult(stream_table(per_q, ks), per_q, weight_table, info)


@dataclass(frozen=True)
class _Replays:
    """The replays of one :func:`stream` run: its data, the turns' inputs, the learned weights and the settings."""

    ds: object
    hs: StreamHistories
    inputs: tuple  # per turn of ds: embedding and emotion; per question: embedding and valence (_turn_inputs)
    weights: dict  # (budget, fold) -> the learned_V weights
    fold: np.ndarray
    budgets: list
    policies: tuple
    beta: float
    ks: list
    factor_set: str

    def chain(self, chain: list, scored: dict, bar) -> int:
        """Replay one chain of nested histories under every budget and policy; fill ``scored``, return the peak.

        ``scored`` gets, per (history, budget, policy), the rows of the history's questions; the
        peak is the largest bounded store at a session end (0 when no policy is bounded).
        """
        hs, (E, emotion, Q, q_val) = self.hs, self.inputs
        rows = hs.rows[chain[0]]
        longest = history_frame(self.ds, rows)
        sessions = longest["session"].to_numpy()
        # weights -> a store of every turn of the longest history, nothing forgotten: what it holds is the same
        # under every policy (none drops anything), so one replay serves them all, each policy's own per-item
        # state declared at its start value (no turn is merged or retrieved in a replay)
        fulls: dict = {}
        peak = 0
        for bi, b in enumerate(self.budgets):
            cuts = [(len(hs.rows[h]), budget_count(b, len(hs.rows[h]))) for h in chain]
            for pi, name in enumerate(self.policies):
                policy = stream_policy(name, self.beta)
                fold = self.fold[hs.questions[chain[0]][0]]
                w = self.weights[(b, fold)] if name.startswith("learned_V") else np.ones(7)
                key = np.asarray(w, float).tobytes()
                if key not in fulls:
                    fulls[key] = replay(longest, w, policy, None, E[rows], emotion[rows], self.factor_set)
                fulls[key].policy = policy
                full = fulls[key].view
                replayed = held_after(full, policy, sessions, cuts)
                peak = max(peak, replayed.peak if policy.bounded else 0)
                for h, held in zip(chain, replayed.held):
                    n = len(hs.rows[h])
                    view = full.take(held, float(longest["time"].iloc[n - 1]) if n else -np.inf)
                    at = (hs, n, view, policy, Q, q_val, self.ks, sessions[:n] if hs.dated else None)
                    scored[(h, bi, pi)] = [
                        {"policy": name, "budget": b, **_question_row(c, gold, *at)}
                        for c, gold in zip(hs.questions[h], hs.golds[h])
                        if gold  # an empty gold: its evidence comes after the question's date
                    ]
                    bar.update()
        return peak


def _turn_inputs(ds, hs: StreamHistories, setting: str, progress: bool):
    """Per turn of ``ds``: its embedding and emotion (from the caches the annotation filled); the questions' too."""
    from memlib.embeddings import embed_cached, embed_text_table
    from memlib.factors import emotion_and_valence

    text_ids = ds.turns["text_id"].to_numpy()
    uniq = np.unique(text_ids[np.concatenate(hs.rows)])
    E_text = embed_text_table(ds.texts, uniq, setting, progress=progress)
    emo_text = np.zeros(len(ds.texts))
    emo_text[uniq] = emotion_and_valence([ds.texts[i] for i in uniq])[0]
    questions = hs.cases["question"].tolist()
    return E_text[text_ids], emo_text[text_ids], embed_cached(questions, setting, progress=progress), valence(questions)


def _question_row(c, gold, hs, n, view, policy, Q, q_val, ks, sessions) -> dict:
    """One row of the per-question table: question ``c`` asked of ``view``, the store of its history of ``n`` turns."""
    scores = question_scores(view, policy, Q[c], q_val[c], gold, ks, sessions)
    head = {"case_id": hs.cases["case_id"].iloc[c], "group": hs.cases["group"].iloc[c]}
    return {**head, "retention": scores.pop("retention"), "stored": len(view), "history": n, **scores}


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
