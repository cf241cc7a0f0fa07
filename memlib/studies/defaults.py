"""The store's defaults, chosen by measurement: value, forgetting rule and retrieval mix (chapter 06).

A store needs three choices a user should not have to make: what the value is, how
forgetting trades age against value (eq. 3's ``beta``, or dropping by value alone), and
how retrieval mixes query similarity with value and mood. The paper gives eq. 3 with no
``beta`` and no retrieval weights. Here every choice is measured, blind, on LoCoMo and
LongMemEval-S together:

* every history is replayed as the store replays it (:func:`simulate_store`: turns arrive
  in order, the store consolidates to its budget at every session end, dropping the highest
  forget scores), and the gold *retention* of each question is read at the end;
* the histories of each dataset are split in two halves by group; each choice is made on
  one half (the *training* half) and reported on the other (*held out*), then the halves
  swap, so every history is held out once;
* the candidates are the value models (the paper's seven factors with weights learned by
  Algorithm 1 on the training half; the store cues of :data:`memlib.cues.STORE_CUES`
  learned by the pairwise surrogate; the same with each cue times ``is_user``), the
  forgetting rules (eq. 3 with ``beta`` in :data:`BETAS`, on the paper's ``V`` or on a cue
  value's ``V-bar``, which can be negative; ``beta = 1`` on the paper's value is the paper's
  rule; or dropping the lowest value first) and the retrieval mixes
  ``sim + a * V-bar + b * mood`` over :data:`VALUE_WEIGHTS` and :data:`MOOD_WEIGHTS`;
* a configuration is chosen by its mean over the two datasets on the training half, so
  that neither corpus decides alone (each dataset's mass also weighs the same in the fit).

:func:`choose_defaults` makes the choice on all histories and returns what
``memlib/defaults.json`` holds (``python -m memlib defaults --write``); the held-out
numbers it stores are those of the cross-fitted choice.

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
from memlib._checks import ParameterError, check_fraction, check_int
from memlib.cases import CaseSet
from memlib.cues import STORE_CUES
from memlib.forgetting import FORGET_RULES, consolidation_drops, over_budget, rule_forget_scores
from memlib.learning import fit_cue_value, hill_climb, retention_mass
from memlib.metrics import RetentionEvaluator, keep_count
from memlib.studies._common import learner_settings
from memlib.studies.data_spec import EACH, DataSpec
from memlib.studies.stream import two_folds
from memlib.value import LinearValue

#: Datasets the defaults are measured on (two kinds of conversation: person-person and user-assistant).
DATASETS = ("locomo", "longmemeval_s")
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
    return History(
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


# --------------------------------------------------------------------------- values and replays


def learn_values(train: list[History], keep_fraction: float, seed: int = 0, quick: bool = False) -> dict:
    """Every value model learned on ``train``: ``{model: {dataset: (V, V-bar) function}}``.

    The cue values pool the datasets (each weighs the same); the paper's weights are learned
    per dataset by Algorithm 1, the paper's own procedure.
    """
    out = {}
    parts = [(h.cues, h.cases.length, retention_mass(h.cases)) for h in train]
    for model, inter in (("cues", False), ("cues_user", True)):
        cv = fit_cue_value(parts, interactions=inter)
        out[model] = {h.name: _cue_fn(cv) for h in train}
        out[model]["_value"] = cv
    out["paper_factors"] = {}
    for h in train:
        res = hill_climb(
            RetentionEvaluator(h.cases, keep_fraction).objective,
            h.cases.live_factors,
            seed=seed,
            **learner_settings(quick),
        )
        out["paper_factors"][h.name] = _paper_fn(res.weights)
        out["paper_factors"].setdefault("_weights", {})[h.name] = res.weights
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
        kept[g, :n] = simulate_store(v, vb, h.cases.time[g, :n], h.session[g, :n], budget, rule, beta)
        vbar[g, :n] = vb
    return kept, vbar


def retention_per_case(cases: CaseSet, kept: np.ndarray) -> np.ndarray:
    """Share of each case's gold turns in ``kept`` (the masks of its history)."""
    hit = kept[cases.case_haystack[cases.gold_case], cases.gold_pos].astype(float)
    return np.bincount(cases.gold_case, hit, cases.n_cases) / np.maximum(cases.n_gold, 1)


def recall_per_case(h: History, kept, vbar, a: float, b: float, k: int = K) -> tuple[np.ndarray, np.ndarray]:
    """``recall_any@k`` and ``recall_all@k`` of each case over its history's kept turns.

    A forgotten gold turn counts as missed.
    """
    cs = h.cases
    any_, all_ = np.zeros(cs.n_cases), np.zeros(cs.n_cases)
    for c in range(cs.n_cases):
        g = cs.case_haystack[c]
        pos = np.flatnonzero(kept[g])
        ids = h.text_id[g, pos]
        sim = (1.0 + h.embeddings[ids] @ h.questions[c]) / 2.0
        mood = 1.0 - np.abs(h.question_valence[c] - h.valence[ids]) / 2.0
        score = sim + a * vbar[g, pos] + b * mood
        top = set(pos[np.argsort(-score, kind="stable")[:k]].tolist())
        gold = cs.gold_pos[cs.gold_case == c].tolist()
        hits = [p in top for p in gold]
        any_[c], all_[c] = float(any(hits)), float(all(hits))
    return any_, all_


# --------------------------------------------------------------------------- the study


@dataclass
class DefaultsResult:
    """Result of :func:`defaults_study`.

    Attributes
    ----------
    table : DataFrame
        The published table: ``part`` (``forgetting`` or ``retrieval``), ``dataset``, ``value_model,
        rule, beta`` (forgetting) or ``value_weight, mood_weight`` (retrieval), ``split`` (``train``
        or ``held_out``), ``metric`` and ``mean`` (over the questions of both folds), with
        ``ci_low, ci_high`` (95% bootstrap over questions) for held-out rows.
    chosen : DataFrame
        Per fold, the configuration chosen on its training half.
    headline : DataFrame
        Held-out retention and recall of the chosen defaults beside the paper's eq. 3 (``beta = 1``,
        its own value and retrieval weights), per dataset.
    info : dict
    """

    table: pd.DataFrame
    chosen: pd.DataFrame
    headline: pd.DataFrame
    info: dict = field(default_factory=dict)


def _choose(rows: pd.DataFrame, keys: list[str], metric: str) -> dict:
    """Choose the configuration with the best mean over datasets of ``metric`` (ties: the first listed)."""
    m = rows[rows["metric"] == metric].groupby(keys, sort=False, dropna=False)["mean"].mean()
    best = m.idxmax()
    return dict(zip(keys, best if isinstance(best, tuple) else (best,)))


def evaluate_fold(train: list[History], test: list[History], keep_fraction: float, seed: int, quick: bool):
    """Fit on ``train``, choose on ``train``, score every candidate on ``train`` and ``test`` (per-case rows)."""
    values = learn_values(train, keep_fraction, seed, quick)
    per_case, kept_of = [], {}
    for split, hs in (("train", train), ("held_out", test)):
        for h in hs:
            for model, rule, beta in configurations():
                kept, vbar = replay_all(h, values[model][h.name], rule, beta, keep_fraction)
                kept_of[(split, h.name, model, rule, beta)] = (kept, vbar)
                per_case.append(
                    pd.DataFrame(
                        {
                            "part": "forgetting",
                            "dataset": h.name,
                            "value_model": model,
                            "rule": rule,
                            "beta": beta,
                            "split": split,
                            "metric": "retention",
                            "value": retention_per_case(h.cases, kept),
                            "group": h.cases.groups,
                        }
                    )
                )
    forget = pd.concat(per_case, ignore_index=True)
    keys = ["value_model", "rule", "beta"]
    tr = forget[forget["split"] == "train"].groupby(["dataset", *keys], dropna=False)["value"].mean()
    choice = _choose(tr.rename("mean").reset_index().assign(metric="retention"), keys, "retention")
    rows = []
    for split, hs in (("train", train), ("held_out", test)):
        for h in hs:
            kept, vbar = kept_of[(split, h.name, choice["value_model"], choice["rule"], choice["beta"])]
            for a in VALUE_WEIGHTS:
                for b in MOOD_WEIGHTS:
                    ra, rall = recall_per_case(h, kept, vbar, a, b)
                    for metric, vals in ((f"recall_any@{K}", ra), (f"recall_all@{K}", rall)):
                        rows.append(
                            pd.DataFrame(
                                {
                                    "part": "retrieval",
                                    "dataset": h.name,
                                    "value_weight": a,
                                    "mood_weight": b,
                                    "split": split,
                                    "metric": metric,
                                    "value": vals,
                                    "group": h.cases.groups,
                                }
                            )
                        )
    retr = pd.concat(rows, ignore_index=True)
    tr = retr[retr["split"] == "train"].groupby(["dataset", "value_weight", "mood_weight", "metric"])["value"].mean()
    mix = _choose(tr.rename("mean").reset_index(), ["value_weight", "mood_weight"], f"recall_all@{K}")
    # the paper's configuration: eq. 3 with beta = 1 and its retrieval weights, on the same kept sets
    paper_rows = []
    for h in test:
        kept, vbar = kept_of[("held_out", h.name, *PAPER)]
        ra, rall = recall_per_case(h, kept, vbar, 0.5, 0.1)
        for metric, vals in ((f"recall_any@{K}", ra), (f"recall_all@{K}", rall)):
            paper_rows.append(
                pd.DataFrame({"dataset": h.name, "metric": metric, "value": vals, "group": h.cases.groups})
            )
    return forget, retr, {**choice, **mix}, values, pd.concat(paper_rows, ignore_index=True)


def _summ(per_case: pd.DataFrame, keys: list[str], n_boot: int, seed: int) -> pd.DataFrame:
    """Means per ``keys``; held-out rows get a 95% bootstrap interval that resamples whole groups.

    A group is a conversation (LoCoMo: about 200 questions on one history) or a question
    (LongMemEval), so questions that share a history are resampled together.
    """
    rng = np.random.default_rng(seed)
    out = []
    for key, g in per_case.groupby(keys, sort=False, dropna=False):
        x = g["value"].to_numpy()
        row = dict(zip(keys, key))
        row["mean"] = float(x.mean())
        codes, groups = pd.factorize(g["group"])
        if row.get("split", "held_out") == "held_out" and len(groups) > 1:
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


def defaults_study_on(
    hs: list[History], keep_fraction: float = 0.3, seed: int = 0, quick: bool = False
) -> DefaultsResult:
    """:func:`defaults_study` on loaded histories (two folds per dataset, every history held out once)."""
    keep_fraction = check_fraction("keep_fraction", keep_fraction)
    folds = {h.name: two_folds(h.cases.groups, seed) for h in hs}
    forgets, retrs, chosen, papers = [], [], [], []
    for f in (0, 1):
        train = [h.subset(np.flatnonzero(folds[h.name] != f)) for h in hs]
        test = [h.subset(np.flatnonzero(folds[h.name] == f)) for h in hs]
        fo, re_, choice, _, paper = evaluate_fold(train, test, keep_fraction, seed, quick)
        forgets.append(fo.assign(fold=f))
        retrs.append(re_.assign(fold=f))
        papers.append(paper.assign(fold=f))
        chosen.append({"fold": f, **choice})
    forget = pd.concat(forgets, ignore_index=True)
    retr = pd.concat(retrs, ignore_index=True)
    fkeys = ["part", "dataset", "value_model", "rule", "beta", "split", "metric"]
    rkeys = ["part", "dataset", "value_weight", "mood_weight", "split", "metric"]
    table = pd.concat([_summ(forget, fkeys, 1000, seed), _summ(retr, rkeys, 1000, seed)], ignore_index=True)
    chosen = pd.DataFrame(chosen)
    # held-out numbers of the cross-fitted choice: each fold's questions under its own fold's choice
    head = []
    cols = ["dataset", "config", "metric", "value", "group"]
    for h in hs:
        for f, ch in chosen.set_index("fold").iterrows():
            sel = forget[(forget["fold"] == f) & (forget["split"] == "held_out") & (forget["dataset"] == h.name)]
            ours = sel[(sel["value_model"] == ch["value_model"]) & (sel["rule"] == ch["rule"])]
            ours = ours[ours["beta"] == ch["beta"]]
            paper = sel[(sel["value_model"] == PAPER[0]) & (sel["rule"] == PAPER[1]) & (sel["beta"] == PAPER[2])]
            head += [ours.assign(config="defaults")[cols], paper.assign(config="paper eq. 3")[cols]]
            rsel = retr[(retr["fold"] == f) & (retr["split"] == "held_out") & (retr["dataset"] == h.name)]
            rsel = rsel[(rsel["value_weight"] == ch["value_weight"]) & (rsel["mood_weight"] == ch["mood_weight"])]
            p = papers[f]
            head += [rsel.assign(config="defaults")[cols], p[p["dataset"] == h.name].assign(config="paper eq. 3")[cols]]
    headline = _summ(pd.concat(head, ignore_index=True), ["dataset", "metric", "config"], 1000, seed)
    info = {
        "datasets": [h.name for h in hs],
        "keep_fraction": keep_fraction,
        "k": K,
        "seed": seed,
        "questions": {h.name: int(h.cases.n_cases) for h in hs},
        "histories": {h.name: int(h.cases.n_haystacks) for h in hs},
    }
    return DefaultsResult(table, chosen, headline, info)


def defaults_study(
    data: DataSpec = EACH, datasets: str = ",".join(DATASETS), keep_fraction=0.3, seed=0, progress=False
) -> DefaultsResult:
    """Measure the store's defaults on held-out histories (see the module docstring).

    ``datasets`` is a comma-separated list of dataset names; ``data`` says what to read of each
    (it names no dataset): ``sample`` takes a seeded sample of the conversations or questions of
    each (a dataset with fewer is used whole), ``quick`` the first few (:meth:`~.data_spec.DataSpec.resolved`).
    """
    data = DataSpec.of(data).reads("defaults", *READS[1:])
    names = [d.strip() for d in str(datasets).split(",") if d.strip()]
    if not names:
        raise ParameterError("datasets must name at least one dataset")
    hs = [load_history(dataclasses.replace(data, dataset=d), progress) for d in names]
    return defaults_study_on(hs, keep_fraction, seed, data.quick)


def choose_defaults(
    hs: list[History],
    keep_fraction: float = 0.3,
    seed: int = 0,
    measured: DefaultsResult | None = None,
    data: DataSpec = EACH,
) -> dict:
    """Return the defaults file's content: the choice made on *all* histories, and the held-out numbers.

    The file holds a cue value: if the paper's seven-factor value won, there is no cue value to
    ship and a :class:`~memlib._checks.ParameterError` says so (the store would then need the
    paper's weights as its default, a decision for a person, not for this function).
    """
    data = data.resolved()  # what the histories were read with (``hs`` are loaded already)
    fo, re_, choice, values, _ = evaluate_fold(hs, hs, keep_fraction, seed, quick=False)
    model = choice["value_model"]
    if model not in ("cues", "cues_user"):
        raise ParameterError(
            f"the {model} value kept the most gold; the defaults file holds a cue value, so it was not written"
        )
    rule = choice["rule"]
    return {
        "format": "memlib-defaults",
        "version": 1,
        "made_by": "python -m memlib defaults --write",
        "made_at": _time.strftime("%Y-%m-%d"),
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
        "value": values[model]["_value"].to_dict(),
        "measured": None
        if measured is None
        else json.loads(measured.headline.to_json(orient="records", double_precision=15)),
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
