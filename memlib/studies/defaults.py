"""The store's defaults, chosen by measurement: value, forgetting rule and retrieval mix (chapter 06).

A store needs three choices a user should not have to make: what the value is, how
forgetting trades age against value (eq. 3's ``beta``, or dropping by value alone), and
how retrieval mixes query similarity with value and mood. The paper gives eq. 3 with no
``beta`` and no retrieval weights. An agent that ships these choices never has gold labels for
its own conversations, so every choice is measured, blind, on a corpus it was not made on
(issue 20), over LoCoMo (person-person chat), LongMemEval-S and RealMem (user-assistant):

* every history is replayed as the store replays it (:func:`simulate_store`: turns arrive
  in order, the store consolidates to its budget at every session end, dropping the highest
  forget scores), and the gold *retention* of each question is read at the end (a RealMem
  question's history ends at its own session's date);
* leave one corpus out: each corpus is replayed with values learned on every *other* corpus
  (:func:`protocol`; each corpus weighs the same in a fit, whatever its size);
* the candidates are the value models (the paper's seven factors with weights learned by
  Algorithm 1; the store cues of :data:`memlib.cues.STORE_CUES` learned by the pairwise
  surrogate; the same with each cue times ``is_user``), the forgetting rules (eq. 3 with
  ``beta`` in :data:`BETAS`, on the paper's ``V`` or on a cue value's ``V-bar``, which can be
  negative; ``beta = 1`` on the paper's value is the paper's rule; or dropping the lowest
  value first) and the retrieval mixes ``sim + a * V-bar + b * mood`` over
  :data:`VALUE_WEIGHTS` and :data:`MOOD_WEIGHTS`;
* a configuration is chosen by its *worst* held-out corpus, not the mean, which can be the
  best of two corpora and fail on a third. The *shipped* choice looks at every corpus held
  out in turn (so its held-out figures took part in the choice, among
  ``len(configurations())`` candidates); for each corpus, the same choice is also made
  without it (each of the others held out from a value learned on the rest), and the
  headline reports both.

:func:`choose_defaults` takes the shipped configuration, learns its value on every corpus
and returns what ``memlib/defaults.json`` holds (``python -m memlib defaults --write``),
with the held-out headline.

>>> import numpy as np
>>> v = np.array([3.0, 1.0, 2.0, 0.0]); t = np.array([0.0, 0.1, 5.0, 5.1])
>>> keep = simulate_store(v, v, t, np.array([0, 0, 1, 1]), budget=2, rule="value")
>>> keep.tolist()   # the two lowest values went at the session ends
[True, False, True, False]
"""

from __future__ import annotations

import dataclasses
import json
import math
import time as _time
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from memlib import FACTORS
from memlib._checks import ParameterError, check_fraction, check_int, check_positive
from memlib.cases import CaseSet
from memlib.cues import STORE_CUES
from memlib.forgetting import (
    FORGET_RULES,
    RECENCY_EXPONENT,
    consolidation_drops,
    forget_order,
    over_budget,
    rule_forget_scores,
)
from memlib.learning import fit_cue_value, hill_climb, retention_mass
from memlib.metrics import RetentionEvaluator, keep_count
from memlib.studies._common import learner_settings, rank_by_worst_case
from memlib.studies.data_spec import EACH, DataSpec
from memlib.value import LinearValue

#: Corpora the defaults are measured on, each left out in turn (person-person and user-assistant chat).
DATASETS = ("locomo", "longmemeval_s", "realmem")
#: Value models: the paper's factors, the store cues, the store cues with their user interactions.
VALUE_MODELS = ("paper_factors", "cues", "cues_user")
#: ``beta`` of eq. 3 (the paper's rule is ``beta = 1`` on the paper's ``V``).
BETAS = (1.0, 10.0, 100.0, 1000.0)
#: Retrieval mixes: ``sim + a * V-bar + b * mood``.
VALUE_WEIGHTS = (0.0, 0.02, 0.05, 0.1, 0.2, 0.5)
MOOD_WEIGHTS = (0.0, 0.05, 0.1)
#: The paper's configuration: its value, eq. 3 with ``beta = 1``.
PAPER = ("paper_factors", "eq3", 1.0)
#: Recall is scored at this k when choosing the retrieval mix.
K = 10
#: Quick mode keeps at most this many questions of each corpus (of its first groups; RealMem's users ask ~140 each).
QUICK_CASES = 40
#: What the study reads of each dataset's data (:meth:`~.data_spec.DataSpec.reads`).
READS = ("dataset", "quick", "limit", "sample", "embedding_setting")


#: The forgetting rules a replay can use: eq. 3, or the lowest value first (``keep_top_value``).
RULES = FORGET_RULES


def _check_rule(rule: str) -> str:
    if rule not in RULES:
        raise ParameterError(f"unknown forgetting rule {rule!r}; choose {' or '.join(RULES)}")
    return rule


def forget_scores(v, v_bar, age, rule: str, beta: float = 1.0) -> np.ndarray:
    """Forget scores of one consolidation (higher goes first), as :class:`memlib.store.ValuePolicy` scores.

    Parameters
    ----------
    v, v_bar : ndarray, shape (n,)
        Each turn's value on eq. 3's scale (the paper's ``V``, or a cue value's ``V-bar``)
        and its normalised value ``V-bar``.
    age : ndarray, shape (n,)
        Days since each turn, at the consolidation.
    rule : {'eq3', 'value'}
        ``eq3``: :func:`memlib.forgetting.forget_score` of ``v`` (nothing is retrieved in a
        replay); ``value``: ``-v_bar`` (the lowest value goes first, age aside).
    beta : float
        Eq. 3's value resistance (``eq3`` only).

    Returns
    -------
    ndarray, shape (n,)
    """
    return rule_forget_scores(_check_rule(rule), age, np.zeros(len(age)), value=v, value_bar=v_bar, beta=beta)


def simulate_store(v, v_bar, time, session, budget: int, rule: str, beta: float = 1.0) -> np.ndarray:
    """Which turns of one history a store keeps: consolidate to ``budget`` at every session end.

    Each consolidation drops what :func:`memlib.forgetting.consolidation_drops` selects, the
    rule :meth:`memlib.store.MemoryStore.consolidate` applies, on the scores of
    :func:`forget_scores` at the session's last turn.

    Parameters
    ----------
    v, v_bar : ndarray, shape (n,)
        Each turn's value on eq. 3's scale and its normalised value (fixed once its session
        ends, as in the store; see :func:`forget_scores`).
    time : ndarray, shape (n,)
        Days, non-decreasing.
    session : ndarray, shape (n,)
        Session label of each turn; a session is a run of equal labels.
    budget : int
    rule, beta
        See :func:`forget_scores`.

    Returns
    -------
    ndarray of bool, shape (n,)
        The turns still stored after the last session end. Ties drop the older turn first.
    """
    _check_rule(rule)
    n = len(v)
    kept = np.zeros(n, bool)
    ends = np.flatnonzero(np.r_[session[1:] != session[:-1], True]) if n else []
    start = 0
    for e in ends:
        kept[start : e + 1] = True
        start = e + 1
        if not over_budget(kept, budget):
            continue
        cand = np.flatnonzero(kept)
        s = forget_scores(v[cand], v_bar[cand], np.maximum(time[e] - time[cand], 0.0), rule, beta)
        drop, _ = consolidation_drops(s, budget)
        kept[cand[drop]] = False
    return kept


def replay_kept(v, v_bar, time, session, budget: int, rule: str, beta: float = 1.0) -> np.ndarray:
    """:func:`simulate_store`, computed faster; the same turns, as a test checks on random histories.

    Dropping the lowest value first orders the turns the same way at every consolidation (by
    ``-V-bar``, the older first among ties), and a streaming top-``budget`` over a fixed order
    keeps the top ``budget`` of all turns, so one sort gives the result. Eq. 3's order moves with
    age, so it is replayed session by session, with the score of
    :func:`memlib.forgetting.forget_score` (no retrieval in a replay) and the order of
    :func:`memlib.forgetting.forget_order`, checked once instead of at every session end.
    """
    _check_rule(rule)
    budget = check_int("budget", budget, minimum=0)
    n = len(v)
    kept = np.zeros(n, bool)
    if n <= budget:
        kept[:] = True
        return kept
    if rule == "value":
        order = forget_order(-np.asarray(v_bar, dtype=float))
        kept[order[n - budget :]] = True
        return kept
    resist = 1.0 / (1.0 + check_positive("beta", beta, allow_zero=True) * np.asarray(v, dtype=float))
    if np.any(~np.isfinite(resist)) or np.any(np.asarray(v) < 0):
        raise ParameterError("value must be finite and >= 0")
    time = np.asarray(time, dtype=float)
    ends = np.flatnonzero(np.r_[session[1:] != session[:-1], True])
    cand = np.zeros(0, np.int64)
    start = 0
    for e in ends:
        cand = np.r_[cand, np.arange(start, e + 1)]
        start = e + 1
        excess = len(cand) - budget
        if excess <= 0:
            continue
        s = np.maximum(time[e] - time[cand], 0.0) ** RECENCY_EXPONENT * resist[cand]
        cand = np.sort(cand[forget_order(s)[excess:]])
    kept[cand] = True
    return kept


@dataclass
class History:
    """What the simulation needs of one dataset: the blind cases and, per history, the turn data."""

    name: str
    cases: CaseSet
    cues: np.ndarray  # (G, N, 11) store cues
    session: np.ndarray  # (G, N) session codes
    text_id: np.ndarray  # (G, N) rows of ``embeddings``
    embeddings: np.ndarray  # (texts, 384) unit rows
    valence: np.ndarray  # (texts,)
    questions: np.ndarray  # (C, 384)
    question_valence: np.ndarray  # (C,)

    def subset(self, cases_idx) -> History:
        cases_idx = np.asarray(cases_idx, dtype=np.int64)
        used = np.unique(self.cases.case_haystack[cases_idx])
        cs = self.cases.subset(cases_idx)
        N = int(cs.length.max()) if len(cs.length) else 0
        return History(
            self.name,
            cs,
            self.cues[used, :N],
            self.session[used, :N],
            self.text_id[used, :N],
            self.embeddings,
            self.valence,
            self.questions[cases_idx],
            self.question_valence[cases_idx],
        )


def load_history(data: DataSpec | str, progress: bool = False) -> History:
    """Load the blind (paper) annotation of ``data``, its store cues, sessions, embeddings and valences."""
    from memlib.cues import compute_cues
    from memlib.embeddings import embed_cached
    from memlib.factors import emotion_features

    data = DataSpec.of(data).reads("defaults", *READS)
    if data.sample is not None:
        check_int("sample", data.sample, minimum=2)  # a smaller dataset is used whole
    ds, anns = data.load(progress, regimes=("blind",))
    ann = anns["blind"]
    embedding = data.embedding_setting
    raw = compute_cues(ds, ann, embedding=embedding, progress=progress).select(STORE_CUES)
    rows = ann.turn_rows
    valid = rows >= 0
    rr = np.where(valid, rows, 0)
    sess_code = pd.factorize(ds.turns["session"])[0]
    text_ids = ds.turns["text_id"].to_numpy()
    used = np.unique(text_ids[rr[valid]])
    E = np.zeros((len(ds.texts), 384), np.float32)
    E[used] = embed_cached([ds.texts[i] for i in used], embedding, progress=progress)
    val = np.zeros(len(ds.texts))
    val[used] = emotion_features([ds.texts[i] for i in used])[:, 0]
    usable = ds.usable()
    qs = usable.cases["question"].tolist()
    h = History(
        ds.name,
        ann.cases,
        raw.values.astype(np.float64),
        np.where(valid, sess_code[rr], -1),
        np.where(valid, text_ids[rr], 0),
        E,
        val,
        np.asarray(embed_cached(qs, embedding, progress=progress), np.float32),
        emotion_features(qs)[:, 0],
    )
    if data.quick and h.cases.n_cases > QUICK_CASES:  # evenly spread, so a stream's later questions stay in
        h = h.subset(np.unique(np.linspace(0, h.cases.n_cases - 1, QUICK_CASES).astype(np.int64)))
    return h


# --------------------------------------------------------------------------- values and replays


def learn_values(train: list[History], keep_fraction: float, seed: int = 0, quick: bool = False) -> dict:
    """Every value model learned on the corpora of ``train`` together: ``{model: (V, V-bar) function}``.

    Each corpus weighs the same, whatever its size: the cue values pool the corpora's retention
    masses (:func:`memlib.learning.fit_cue_value`); the paper's weights are learned by Algorithm 1
    (the paper's own procedure) on the mean of the corpora's retention objectives. ``"_value"``
    maps each model to what was learned (a :class:`~memlib.value.CueValue` or the seven weights).
    """
    out, learned = {}, {}
    parts = [(h.cues, h.cases.length, retention_mass(h.cases)) for h in train]
    for model, inter in (("cues", False), ("cues_user", True)):
        learned[model] = fit_cue_value(parts, interactions=inter)
        out[model] = _cue_fn(learned[model])
    objectives = [RetentionEvaluator(h.cases, keep_fraction).objective for h in train]
    live = np.any([h.cases.live_factors for h in train], axis=0)
    res = hill_climb(lambda w: float(np.mean([f(w) for f in objectives])), live, seed=seed, **learner_settings(quick))
    learned["paper_factors"] = res.weights
    out["paper_factors"] = _paper_fn(res.weights)
    out["_value"] = learned
    return out


def _cue_fn(cv):
    def fn(h: History, g: int, n: int):  # eq. 3 reads what the value says it reads (V-bar for a signed value)
        v = cv.score(h.cues[g, :n])
        return cv.eq3_value(v), cv.normalise(v)

    return fn


def _paper_fn(w):
    lv = LinearValue(w)

    def fn(h: History, g: int, n: int):
        v = lv.score(h.cases.factors[g, :n].astype(np.float64))
        return lv.eq3_value(v), lv.normalise(v)

    return fn


def _fifo_fn(h: History, g: int, n: int):  # the oldest turn has the lowest "value": it goes first
    t = h.cases.time[g, :n].astype(np.float64)
    return t, t


def configurations() -> list[tuple[str, str, float]]:
    """``(value model, rule, beta)`` of every forgetting candidate; :data:`PAPER` is one of them."""
    out = []
    for m in VALUE_MODELS:
        out += [(m, "eq3", b) for b in BETAS] + [(m, "value", 0.0)]  # beta plays no part in "value"
    return out


def replay_all(h: History, fn, rule: str, beta: float, keep_fraction: float):
    """Kept masks (G, N) of every history of ``h`` under one configuration, and each turn's V-bar."""
    G, N = h.session.shape
    kept = np.zeros((G, N), bool)
    vbar = np.zeros((G, N))
    for g in range(G):
        n = int(h.cases.length[g])
        v, vb = fn(h, g, n)
        budget = int(keep_count([n], keep_fraction)[0])
        kept[g, :n] = replay_kept(v, vb, h.cases.time[g, :n], h.session[g, :n], budget, rule, beta)
        vbar[g, :n] = vb
    return kept, vbar


def retention_per_case(cases: CaseSet, kept: np.ndarray) -> np.ndarray:
    """Share of each case's gold turns in ``kept`` (the masks of its history)."""
    hit = kept[cases.case_haystack[cases.gold_case], cases.gold_pos].astype(float)
    return np.bincount(cases.gold_case, hit, cases.n_cases) / np.maximum(cases.n_gold, 1)


def recall_per_case(h: History, kept, vbar, mixes, k: int = K) -> tuple[np.ndarray, np.ndarray]:
    """``recall_any@k`` and ``recall_all@k`` of each case over its history's kept turns, per retrieval mix.

    ``mixes`` is a sequence of ``(a, b)``: the rank is ``sim + a * V-bar + b * mood`` (ties: the
    earlier turn first). A forgotten gold turn counts as missed. Returns two arrays of shape
    ``(len(mixes), cases)``.
    """
    cs = h.cases
    mix = np.asarray(mixes, dtype=float).reshape(-1, 2)
    any_, all_ = np.zeros((len(mix), cs.n_cases)), np.zeros((len(mix), cs.n_cases))
    gold_of = pd.Series(cs.gold_pos).groupby(cs.gold_case).apply(np.asarray)
    for c in range(cs.n_cases):
        g = cs.case_haystack[c]
        pos = np.flatnonzero(kept[g])
        gold = gold_of.get(c, np.zeros(0, np.int64))
        if not len(gold) or not len(pos):
            continue
        ids = h.text_id[g, pos]
        sim = (1.0 + h.embeddings[ids] @ h.questions[c]) / 2.0
        mood = 1.0 - np.abs(h.question_valence[c] - h.valence[ids]) / 2.0
        score = sim[None, :] + mix[:, :1] * vbar[g, pos][None, :] + mix[:, 1:] * mood[None, :]
        top = np.zeros((len(mix), h.session.shape[1]), bool)
        rank = np.argsort(-score, axis=1, kind="stable")[:, :k]
        np.put_along_axis(top, pos[rank], True, axis=1)
        hits = top[:, gold]
        any_[:, c], all_[:, c] = hits.any(axis=1), hits.all(axis=1)
    return any_, all_


# --------------------------------------------------------------------------- the study


@dataclass
class DefaultsResult:
    """Result of :func:`defaults_study`.

    Attributes
    ----------
    table : DataFrame
        Every candidate, scored: ``part`` (``forgetting`` or ``retrieval``), ``dataset`` (the corpus
        scored), ``trained_on`` (the corpora the value was learned on, joined by ``+``), ``split``
        (``held_out`` when ``trained_on`` is every other corpus, ``inner`` when it is a part of them,
        used only for a choice made without ``dataset``), ``value_model, rule, beta`` (forgetting) or
        ``value_weight, mood_weight`` (retrieval, for the configurations a choice needs), ``metric``,
        ``mean`` over the corpus's questions, ``ci_low, ci_high`` (95% bootstrap over its groups),
        ``n_questions, n_groups``.
    chosen : DataFrame
        One row per choice: ``shipped`` (the worst case over every corpus held out in turn: what
        ``memlib/defaults.json`` holds) and, per corpus, ``without <corpus>`` (the same choice made
        on the other corpora alone, each held out from a value learned on the rest).
    headline : DataFrame
        Per corpus, when it was left out: the held-out retention and recall of ``defaults`` (the
        shipped configuration), of ``chosen without it`` (the choice that never saw it), of the
        paper's ``paper eq. 3`` (its seven factors learned by Algorithm 1 on the other corpora,
        ``beta = 1``, its retrieval weights) and of ``first in, first out`` (the oldest turn goes
        first, retrieval by similarity: MemGPT's eviction, and MemoryBank's when nothing is
        retrieved).
    info : dict
    """

    table: pd.DataFrame
    chosen: pd.DataFrame
    headline: pd.DataFrame
    info: dict = field(default_factory=dict)


def _key(names) -> str:
    return "+".join(names)


def _worst_case(scores: pd.DataFrame, keys: list[str]) -> dict:
    """Return the configuration whose worst corpus (``dataset``) is best (ties: best mean, then first listed).

    >>> s = pd.DataFrame({"c": ["a", "a", "b", "b"], "dataset": ["x", "y", "x", "y"], "mean": [0.9, 0.3, 0.5, 0.5]})
    >>> _worst_case(s, ["c"])
    {'c': 'b'}
    """
    best = rank_by_worst_case(scores, keys).iloc[0]
    return {k: best[k] for k in keys}


def protocol(names: list[str]) -> dict:
    """Return the (training corpora, tested corpus) pairs of leave one corpus out and of its inner choices.

    ``held_out``: each corpus tested on a value learned on every other. ``inner``: for each corpus
    ``T``, each other corpus ``A`` tested on a value learned on the corpora that are neither (or on
    ``A``'s own when only ``T`` and ``A`` are there), so that a choice made without ``T`` holds out
    a corpus too; ``without`` maps each ``T`` to those pairs.

    >>> protocol(["a", "b", "c"])["held_out"]
    [(('b', 'c'), 'a'), (('a', 'c'), 'b'), (('a', 'b'), 'c')]
    >>> sorted(protocol(["a", "b", "c"])["inner"])[:2]
    [(('a',), 'b'), (('a',), 'c')]
    """
    held = [(tuple(n for n in names if n != t), t) for t in names]
    without = {}
    for t in names:
        rest = [n for n in names if n != t]
        without[t] = [(tuple(n for n in rest if n != a) or (a,), a) for a in rest]
    inner = {pair for pairs in without.values() for pair in pairs}
    return {"held_out": held, "inner": sorted(inner - set(held)), "without": without}


def _forgetting_rows(h: History, fn_of, keep_fraction: float, trained_on: str, split: str) -> pd.DataFrame:
    rows = []
    for model, rule, beta in configurations():
        kept, _ = replay_all(h, fn_of[model], rule, beta, keep_fraction)
        rows.append(
            pd.DataFrame(
                {
                    "part": "forgetting",
                    "dataset": h.name,
                    "trained_on": trained_on,
                    "split": split,
                    "value_model": model,
                    "rule": rule,
                    "beta": beta,
                    "metric": "retention",
                    "value": retention_per_case(h.cases, kept),
                    "group": h.cases.groups,
                }
            )
        )
    return pd.concat(rows, ignore_index=True)


def _retrieval_rows(h: History, fn_of, config: dict, keep_fraction, trained_on, split, mixes) -> pd.DataFrame:
    kept, vbar = replay_all(h, fn_of[config["value_model"]], config["rule"], config["beta"], keep_fraction)
    rows = []
    any_, all_ = recall_per_case(h, kept, vbar, mixes)
    for (a, b), ra, rall in zip(mixes, any_, all_):
        for metric, vals in ((f"recall_any@{K}", ra), (f"recall_all@{K}", rall)):
            rows.append(
                pd.DataFrame(
                    {
                        "part": "retrieval",
                        "dataset": h.name,
                        "trained_on": trained_on,
                        "split": split,
                        **{k: config[k] for k in ("value_model", "rule", "beta")},
                        "value_weight": a,
                        "mood_weight": b,
                        "metric": metric,
                        "value": vals,
                        "group": h.cases.groups,
                    }
                )
            )
    return pd.concat(rows, ignore_index=True)


FORGET_KEYS = ["value_model", "rule", "beta"]
MIX_KEYS = ["value_weight", "mood_weight"]
MIXES = tuple((a, b) for a in VALUE_WEIGHTS for b in MOOD_WEIGHTS)
#: The paper's retrieval weights (``sim + 0.5 V-bar + 0.1 mood``), scored with :data:`PAPER`.
PAPER_MIX = (0.5, 0.1)


def defaults_study_on(
    hs: list[History], keep_fraction: float = 0.3, seed: int = 0, quick: bool = False, progress: bool = False
) -> DefaultsResult:
    """:func:`defaults_study` on loaded corpora: leave one corpus out, choices by the worst corpus.

    Every configuration is replayed on each corpus with a value learned on every other corpus
    (and, for the choices that must not see a corpus, on the inner pairs of :func:`protocol`).
    The shipped choice is the configuration whose worst held-out corpus keeps the most gold
    (retention), then the retrieval mix whose worst held-out ``recall_all@10`` is best on it.
    """
    from tqdm import tqdm

    keep_fraction = check_fraction("keep_fraction", keep_fraction)
    if len(hs) < 2:
        raise ParameterError(f"leave one corpus out needs at least two corpora, got {len(hs)}")
    by_name = {h.name: h for h in hs}
    if len(by_name) != len(hs):
        raise ParameterError(f"each corpus may appear once, got {[h.name for h in hs]}")
    names = list(by_name)
    plan = protocol(names)
    pairs = [(src, t, "held_out") for src, t in plan["held_out"]] + [(src, t, "inner") for src, t in plan["inner"]]
    values = {}
    bar = tqdm(total=len(pairs), desc="defaults replays", disable=not progress)
    forget = []
    for src, t, split in pairs:
        if src not in values:
            values[src] = learn_values([by_name[n] for n in src], keep_fraction, seed, quick)
        forget.append(_forgetting_rows(by_name[t], values[src], keep_fraction, _key(src), split))
        bar.update()
    bar.close()
    forget = pd.concat(forget, ignore_index=True)
    means = forget.groupby(["dataset", "trained_on", "split", *FORGET_KEYS], sort=False)["value"].mean()
    means = means.rename("mean").reset_index()

    def scores_of(pairs):
        """Return the means of each configuration on the given (training corpora, tested corpus) pairs."""
        return pd.concat([means[(means["trained_on"] == _key(s)) & (means["dataset"] == a)] for s, a in pairs])

    configs = {"shipped": (_worst_case(scores_of(plan["held_out"]), FORGET_KEYS), plan["held_out"])}
    for t, pairs in plan["without"].items():
        configs[f"without {t}"] = (_worst_case(scores_of(pairs), FORGET_KEYS), pairs)
    retr, chosen = [], []
    for label, (config, choice_pairs) in configs.items():
        split = "held_out" if label == "shipped" else "inner"
        rows = [
            _retrieval_rows(by_name[a], values[s], config, keep_fraction, _key(s), split, MIXES).assign(choice=label)
            for s, a in choice_pairs
        ]
        r = pd.concat(rows, ignore_index=True)
        rmeans = r[r["metric"] == f"recall_all@{K}"].groupby(["dataset", *MIX_KEYS], sort=False)["value"].mean()
        mix = _worst_case(rmeans.rename("mean").reset_index(), MIX_KEYS)
        retr.append(r)
        chosen.append({"choice": label, **config, **mix})
    chosen = pd.DataFrame(chosen)
    retr = pd.concat(retr, ignore_index=True)
    # the headline: each corpus under the shipped configuration, the choice made without it, and the paper's
    head = []
    cols = ["dataset", "config", "metric", "value", "group"]
    ship = chosen.iloc[0]
    for src, t in plan["held_out"]:
        h, fns = by_name[t], values[src]
        for label, ch in (("defaults", ship), ("chosen without it", chosen.set_index("choice").loc[f"without {t}"])):
            cfg = {k: ch[k] for k in FORGET_KEYS}
            sel = forget[(forget["split"] == "held_out") & (forget["dataset"] == t)]
            for k, v in cfg.items():
                sel = sel[sel[k] == v]
            mix = [(ch["value_weight"], ch["mood_weight"])]
            rr = _retrieval_rows(h, fns, cfg, keep_fraction, _key(src), "held_out", mix)
            head += [sel.assign(config=label)[cols], rr.assign(config=label)[cols]]
        cfg = dict(zip(FORGET_KEYS, PAPER))
        sel = forget[(forget["split"] == "held_out") & (forget["dataset"] == t)]
        sel = sel[(sel["value_model"] == PAPER[0]) & (sel["rule"] == PAPER[1]) & (sel["beta"] == PAPER[2])]
        rr = _retrieval_rows(h, fns, cfg, keep_fraction, _key(src), "held_out", [PAPER_MIX])
        head += [sel.assign(config="paper eq. 3")[cols], rr.assign(config="paper eq. 3")[cols]]
        # first in, first out (MemGPT's eviction; with no retrievals MemoryBank's too), by similarity alone
        fifo = {"value_model": "fifo", "rule": "value", "beta": 0.0}
        kept, _ = replay_all(h, _fifo_fn, "value", 0.0, keep_fraction)
        ret = pd.DataFrame({"dataset": t, "metric": "retention", "value": retention_per_case(h.cases, kept)})
        rr = _retrieval_rows(h, {"fifo": _fifo_fn}, fifo, keep_fraction, _key(src), "held_out", [(0.0, 0.0)])
        label = "first in, first out"
        head += [ret.assign(config=label, group=h.cases.groups)[cols], rr.assign(config=label)[cols]]
    headline = _summ(pd.concat(head, ignore_index=True), ["dataset", "metric", "config"], 1000, seed)
    fkeys = ["part", "dataset", "trained_on", "split", *FORGET_KEYS, "metric"]
    rkeys = ["part", "choice", "dataset", "trained_on", "split", *FORGET_KEYS, *MIX_KEYS, "metric"]
    table = pd.concat([_summ(forget, fkeys, 1000, seed), _summ(retr, rkeys, 1000, seed)], ignore_index=True)
    info = {
        "datasets": names,
        "keep_fraction": keep_fraction,
        "k": K,
        "seed": seed,
        "questions": {h.name: int(h.cases.n_cases) for h in hs},
        "histories": {h.name: int(h.cases.n_haystacks) for h in hs},
        "groups": {h.name: int(len(np.unique(h.cases.groups))) for h in hs},
    }
    return DefaultsResult(table, chosen, headline, info)


def _summ(per_case: pd.DataFrame, keys: list[str], n_boot: int, seed: int) -> pd.DataFrame:
    """Means per ``keys``, with a 95% bootstrap interval that resamples whole groups.

    A group is a conversation (LoCoMo: about 200 questions on one history), a question
    (LongMemEval) or a user (RealMem), so questions that share a history are resampled together.
    """
    rng = np.random.default_rng(seed)
    out = []
    for key, g in per_case.groupby(keys, sort=False, dropna=False):
        x = g["value"].to_numpy()
        row = dict(zip(keys, key))
        row["mean"] = float(x.mean())
        codes, groups = pd.factorize(g["group"])
        if len(groups) > 1:
            sums, counts = np.bincount(codes, x), np.bincount(codes)
            pick = rng.integers(0, len(groups), (n_boot, len(groups)))
            boots = sums[pick].sum(axis=1) / counts[pick].sum(axis=1)
            row["ci_low"], row["ci_high"] = np.percentile(boots, [2.5, 97.5])
        else:
            row["ci_low"] = row["ci_high"] = math.nan
        row["n_questions"] = len(x)
        row["n_groups"] = len(groups)
        out.append(row)
    return pd.DataFrame(out)


def defaults_study(
    data: DataSpec = EACH, datasets: str = ",".join(DATASETS), keep_fraction=0.3, seed=0, progress=False
) -> DefaultsResult:
    """Measure the store's defaults, each corpus left out in turn (see the module docstring).

    ``datasets`` is a comma-separated list of at least two dataset names; ``data`` says what to
    read of each (it names no dataset): ``sample`` takes a seeded sample of the conversations,
    questions or users of each (a dataset with fewer is used whole), ``quick`` the first few
    (:meth:`~.data_spec.DataSpec.resolved`).
    """
    data = DataSpec.of(data).reads("defaults", *READS[1:])
    names = [d.strip() for d in str(datasets).split(",") if d.strip()]
    if len(names) < 2:
        raise ParameterError(f"datasets must name at least two datasets (one is left out at a time), got {datasets!r}")
    hs = [load_history(dataclasses.replace(data, dataset=d), progress) for d in names]
    return defaults_study_on(hs, keep_fraction, seed, data.quick, progress)


def choose_defaults(
    hs: list[History],
    keep_fraction: float = 0.3,
    seed: int = 0,
    measured: DefaultsResult | None = None,
    data: DataSpec = EACH,
) -> dict:
    """Return the defaults file's content: the shipped choice of ``measured``, its value learned on every corpus.

    The configuration is the one :func:`defaults_study_on` chose by its worst held-out corpus
    (``measured`` is computed when not given); the value is then learned on all of ``hs``
    together. The file holds a cue value: if the paper's seven-factor value won, there is no cue
    value to ship and a :class:`~memlib._checks.ParameterError` says so (the store would then need
    the paper's weights as its default, a decision for a person, not for this function).
    """
    data = data.resolved()  # what the histories were read with (``hs`` are loaded already)
    if measured is None:
        measured = defaults_study_on(hs, keep_fraction, seed, data.quick)
    choice = measured.chosen.set_index("choice").loc["shipped"]
    model = choice["value_model"]
    if model not in ("cues", "cues_user"):
        raise ParameterError(
            f"the {model} value kept the most gold; the defaults file holds a cue value, so it was not written"
        )
    values = learn_values(hs, keep_fraction, seed, data.quick)
    rule = choice["rule"]
    return {
        "format": "memlib-defaults",
        "version": 2,
        "made_by": "python -m memlib defaults --write",
        "made_at": _time.strftime("%Y-%m-%d"),
        "protocol": "leave one corpus out; configuration and retrieval mix chosen by the worst held-out corpus",
        "datasets": [h.name for h in hs],
        "histories": {h.name: int(h.cases.n_haystacks) for h in hs},
        "sample": data.sample,  # the histories it was run on: a seeded sample of each dataset, or all (None)
        "quick": data.quick,
        "keep_fraction": keep_fraction,
        "policy": {
            "keep_top_value": rule == "value",
            "beta": 1.0 if rule == "value" else float(choice["beta"]),
            "value_weight": float(choice["value_weight"]),
            "mood_weight": float(choice["mood_weight"]),
        },
        "value_model": model,
        "value": values["_value"][model].to_dict(),
        "measured": json.loads(measured.headline.to_json(orient="records", double_precision=15)),
    }


__all__ = [
    "BETAS",
    "DATASETS",
    "DefaultsResult",
    "FACTORS",
    "PAPER",
    "choose_defaults",
    "defaults_study",
    "defaults_study_on",
    "simulate_store",
]
