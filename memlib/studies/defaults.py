"""The store's defaults, chosen by measurement: value, forgetting rule and retrieval mix (chapter 06).

A store needs three choices a user should not have to make: what the value is, how
forgetting trades age against value (eq. 3's ``beta``, or dropping by value alone), and
how retrieval mixes query similarity with value and mood. The paper gives eq. 3 with no
``beta`` and no retrieval weights. An agent that ships these choices never has gold labels for
its own conversations, so every choice is measured, blind, on a corpus it was not made on
(issue 20), over LoCoMo (person-person chat), LongMemEval-S and RealMem (user-assistant):

* every history is replayed through the store that ships (:func:`memlib.studies.corpora.kept`,
  which calls the store's own replay: turns arrive in order, the store consolidates to its
  budget at every session end under its policy), and the gold *retention* of each question is
  read at the end (a RealMem question's history ends at its own session's date); each question
  is then ranked over what was kept by the store's retrieval rule;
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
  headline reports both;
* an adaptive configuration is a candidate only where it is *safe* (:mod:`memlib.studies.safety`):
  on no corpus the choice reads does the 95% interval of its paired gain over its prior reach
  below ``-SAFETY``.

:func:`memlib.studies.defaults_file.choose_defaults` takes the shipped configuration, learns
its value on every corpus and returns what ``memlib/defaults.json`` holds (``python -m memlib
defaults --write``), with the held-out headline.

>>> policy_of("value", 0.0).keep_top_value, policy_of("eq3", 10.0).beta
(True, 10.0)
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from memlib import FACTORS
from memlib._checks import ParameterError, check_fraction
from memlib.forgetting import FORGET_RULES
from memlib.learning import fit_cue_value, hill_climb, retention_mass
from memlib.metrics import RetentionEvaluator, grouped_summary
from memlib.references import Z
from memlib.store import AdaptivePolicy, PaperPolicy, Policy, ValuePolicy, make_policy
from memlib.studies._common import learner_settings, rank_by_worst_case
from memlib.studies.corpora import (
    READS,
    Corpus,
    answer_retention_per_case,
    kept,
    load_corpus,
    recall_per_case,
    retention_per_case,
)
from memlib.studies.data_spec import EACH, DataSpec
from memlib.studies.safety import FORGET_KEYS, SAFETY, gain_intervals, prior_gains, safe_configurations
from memlib.value import LinearValue

#: Corpora the defaults are measured on, each left out in turn (person-person and user-assistant chat).
DATASETS = ("locomo", "longmemeval_s", "realmem")
#: Value models: the paper's factors, the store cues, the store cues with their user interactions.
VALUE_MODELS = ("paper_factors", "cues", "cues_user")
#: ``beta`` of eq. 3 (the paper's rule is ``beta = 1`` on the paper's ``V``).
BETAS = (1.0, 10.0, 100.0, 1000.0)
#: ``value_scale`` of the adaptive store (:class:`memlib.store.AdaptivePolicy`), the value's weight in log odds
#: of need, largest first: among configurations that tie, the first listed is the closest to dropping by value.
VALUE_SCALES = (4.0, 2.0, 1.0, 0.5)
#: Retrieval mixes: ``sim + a * V-bar + b * mood``.
VALUE_WEIGHTS = (0.0, 0.02, 0.05, 0.1, 0.2, 0.5)
MOOD_WEIGHTS = (0.0, 0.05, 0.1)
#: The paper's configuration: its value, eq. 3 with ``beta = 1``.
PAPER = ("paper_factors", "eq3", 1.0, 0.0)
#: Recall is scored at this k when choosing the retrieval mix.
K = 10
#: The forgetting rules a configuration can use: eq. 3, the lowest value first (``keep_top_value``), or the
#: adaptive store's value and need (:class:`memlib.store.AdaptivePolicy`).
RULES = (*FORGET_RULES, "adaptive")


def policy_of(rule: str, beta: float = 0.0, value_scale: float = 0.0) -> ValuePolicy:
    """Return the store policy of one forgetting configuration.

    ``eq3`` with ``beta``, ``value`` (the lowest value first) or ``adaptive`` with ``value_scale``
    (and :data:`memlib.references.Z`). Its retrieval weights are zero: a configuration is scored for forgetting;
    the retrieval mixes are scored apart (:data:`MIXES`).
    """
    if rule not in RULES:
        raise ParameterError(f"unknown forgetting rule {rule!r}; choose {', '.join(RULES)}")
    if rule == "adaptive":
        return AdaptivePolicy(value_scale=value_scale, z=Z, value_weight=0.0, mood_weight=0.0)
    return ValuePolicy(beta=beta, value_weight=0.0, mood_weight=0.0, keep_top_value=rule == "value")


def mix_policy(value_weight: float, mood_weight: float) -> ValuePolicy:
    """Return the store policy that retrieves by ``sim + value_weight * V-bar + mood_weight * mood``."""
    return ValuePolicy(beta=1.0, value_weight=value_weight, mood_weight=mood_weight)


# --------------------------------------------------------------------------- values and replays


def learn_values(
    train: list[Corpus], keep_fraction: float, seed: int = 0, quick: bool = False, models=VALUE_MODELS
) -> dict:
    """Return the value ``models`` (default: all) learned on the corpora of ``train`` together: ``{model: Value}``.

    Each corpus weighs the same, whatever its size: the cue values pool the corpora's retention
    masses (:func:`memlib.learning.fit_cue_value`); the paper's weights are learned by Algorithm 1
    (the paper's own procedure) on the mean of the corpora's retention objectives.
    """
    out = {}
    parts = [(h.cues, h.cases.length, retention_mass(h.cases)) for h in train]
    for model, inter in (("cues", False), ("cues_user", True)):
        if model in models:
            out[model] = fit_cue_value(parts, interactions=inter)
    if "paper_factors" not in models:
        return out
    objectives = [RetentionEvaluator(h.cases, keep_fraction).objective for h in train]
    live = np.any([h.cases.live_factors for h in train], axis=0)
    res = hill_climb(lambda w: float(np.mean([f(w) for f in objectives])), live, seed=seed, **learner_settings(quick))
    out["paper_factors"] = LinearValue(res.weights)
    return out


def configurations() -> list[tuple[str, str, float, float]]:
    """``(value model, rule, beta, value_scale)`` of every forgetting candidate; :data:`PAPER` is one of them.

    ``beta`` is 0 where the rule reads none (``value``, ``adaptive``), ``value_scale`` where it reads
    none (``eq3``, ``value``).
    """
    out = []
    for m in VALUE_MODELS:
        out += [(m, "eq3", b, 0.0) for b in BETAS] + [(m, "value", 0.0, 0.0)]
        out += [(m, "adaptive", 0.0, s) for s in VALUE_SCALES]
    return out


# --------------------------------------------------------------------------- the study


@dataclass
class DefaultsResult:
    """Result of :func:`defaults_study`.

    Attributes
    ----------
    table : DataFrame
        Every candidate, scored: ``part`` (``forgetting``, ``retrieval`` or ``safety``), ``dataset`` (the corpus
        scored), ``trained_on`` (the corpora the value was learned on, joined by ``+``), ``split``
        (``held_out`` when ``trained_on`` is every other corpus, ``inner`` when it is a part of them,
        used only for a choice made without ``dataset``), ``value_model, rule, beta`` (forgetting) or
        ``value_weight, mood_weight`` (retrieval, for the configurations a choice needs), ``metric``,
        ``mean`` over the corpus's questions, ``ci_low, ci_high`` (95% bootstrap over its groups),
        ``n_questions, n_groups``. Part ``safety``: each adaptive configuration's paired gain over its
        prior (metric ``gain over prior``, :func:`~.safety.prior_gains`), what the choices read.
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
        retrieved); and the :data:`ADAPTATION` rows (retention) of the adaptive configuration
        :func:`best_adaptive` chose (``info["adaptive"]``), beside its prior.
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


def _frame(h: Corpus, part: str, labels: dict, metric: str, values) -> pd.DataFrame:
    return pd.DataFrame(
        {"part": part, "dataset": h.name, **labels, "metric": metric, "value": values, "group": h.cases.groups}
    )


def _forgetting_rows(h: Corpus, values: dict, keep_fraction: float, trained_on: str, split: str) -> pd.DataFrame:
    """Gold retention of each case of ``h`` under every configuration, its value learned on ``trained_on``."""
    rows = []
    for model, rule, beta, scale in configurations():
        held = kept(h, values[model], policy_of(rule, beta, scale), keep_fraction)
        labels = {"trained_on": trained_on, "split": split, "value_model": model, "rule": rule, "beta": beta}
        labels["value_scale"] = scale
        rows.append(_frame(h, "forgetting", labels, "retention", retention_per_case(h.cases, held)))
    return pd.concat(rows, ignore_index=True)


def _retrieval_rows(
    h: Corpus, value, forgetting: Policy, labels: dict, keep_fraction, retrieval, answers=False
) -> pd.DataFrame:
    """``recall_any@K`` and ``recall_all@K`` of each case of ``h``, kept by ``forgetting``, per retrieval policy.

    ``retrieval`` maps ``(value_weight, mood_weight)`` labels to the policy that ranks. With
    ``answers``, also ``answer_retention`` (part ``forgetting``) of the questions whose answer
    string it can read (:func:`~.corpora.answer_retention_per_case`).
    """
    masks = kept(h, value, forgetting, keep_fraction)
    any_, all_ = recall_per_case(h, value, masks, list(retrieval.values()), K)
    rows = []
    for (a, b), ra, rall in zip(retrieval, any_, all_):
        for metric, vals in ((f"recall_any@{K}", ra), (f"recall_all@{K}", rall)):
            rows.append(_frame(h, "retrieval", {**labels, "value_weight": a, "mood_weight": b}, metric, vals))
    if answers:
        found = _frame(h, "forgetting", labels, "answer_retention", answer_retention_per_case(h, masks))
        rows.append(found[found["value"].notna()])
    return pd.concat(rows, ignore_index=True)


MIX_KEYS = ["value_weight", "mood_weight"]
MIXES = tuple((a, b) for a in VALUE_WEIGHTS for b in MOOD_WEIGHTS)


def _config_rows(h, values, config: dict, keep_fraction, trained_on, split, mixes, answers=False) -> pd.DataFrame:
    """:func:`_retrieval_rows` of one configuration (``value_model, rule, beta``) and the mixes ``mixes``."""
    labels = {"trained_on": trained_on, "split": split, **{k: config[k] for k in FORGET_KEYS}}
    forgetting = policy_of(config["rule"], config["beta"], config["value_scale"])
    retrieval = {m: mix_policy(*m) for m in mixes}
    return _retrieval_rows(h, values[config["value_model"]], forgetting, labels, keep_fraction, retrieval, answers)


def _choices(forget, gains, plan: dict, by_name, values, keep_fraction) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Choose the shipped configuration and one without each corpus: a forgetting rule, then a retrieval mix.

    Each is the configuration whose worst corpus keeps the most gold (on the pairs it may read;
    an adaptive one only where :func:`~.safety.safe_configurations` keeps it, on the ``gains`` of
    :func:`~.safety.prior_gains`), then the mix whose worst
    ``recall_all@K`` is best on it. Returns ``(chosen, retrieval rows)``.
    """
    means = forget.groupby(["dataset", "trained_on", "split", *FORGET_KEYS], sort=False)["value"].mean()
    means = means.rename("mean").reset_index()

    def scores_of(pairs):
        """Return the means of each safe configuration on the given (training corpora, tested corpus) pairs."""
        rows = [means[(means["trained_on"] == _key(s)) & (means["dataset"] == a)] for s, a in pairs]
        return safe_configurations(pd.concat(rows), gains)

    configs = {"shipped": (_worst_case(scores_of(plan["held_out"]), FORGET_KEYS), plan["held_out"])}
    for t, pairs in plan["without"].items():
        configs[f"without {t}"] = (_worst_case(scores_of(pairs), FORGET_KEYS), pairs)
    retr, chosen = [], []
    for label, (config, choice_pairs) in configs.items():
        split = "held_out" if label == "shipped" else "inner"
        r = pd.concat(
            [
                _config_rows(by_name[a], values[s], config, keep_fraction, _key(s), split, MIXES).assign(choice=label)
                for s, a in choice_pairs
            ],
            ignore_index=True,
        )
        rmeans = r[r["metric"] == f"recall_all@{K}"].groupby(["dataset", *MIX_KEYS], sort=False)["value"].mean()
        retr.append(r)
        chosen.append({"choice": label, **config, **_worst_case(rmeans.rename("mean").reset_index(), MIX_KEYS)})
    return pd.DataFrame(chosen), pd.concat(retr, ignore_index=True)


def _headline_rows(h, values, src, forget, chosen, keep_fraction) -> list[pd.DataFrame]:
    """Corpus ``h`` held out: the shipped configuration, the choice made without it, the paper's eq. 3 and FIFO."""
    cols = ["dataset", "config", "metric", "value", "group"]
    held_out = forget[(forget["split"] == "held_out") & (forget["dataset"] == h.name)]
    out = []
    paper = dict(zip(FORGET_KEYS, PAPER), value_weight=PaperPolicy.VALUE_WEIGHT, mood_weight=PaperPolicy.MOOD_WEIGHT)
    mine = chosen.set_index("choice")
    for label, ch in (
        ("defaults", mine.loc["shipped"]),
        ("chosen without it", mine.loc[f"without {h.name}"]),
        ("paper eq. 3", paper),
    ):
        sel = held_out
        for k in FORGET_KEYS:
            sel = sel[sel[k] == ch[k]]
        mix = [(ch["value_weight"], ch["mood_weight"])]
        rr = _config_rows(h, values, ch, keep_fraction, _key(src), "held_out", mix, answers=True)
        out += [sel.assign(config=label)[cols], rr.assign(config=label)[cols]]
    # first in, first out (MemGPT's eviction; with no retrievals MemoryBank's too), by similarity alone
    fifo = make_policy("memgpt_fifo")
    ret = retention_per_case(h.cases, kept(h, values["paper_factors"], fifo, keep_fraction))
    rr = _retrieval_rows(h, values["paper_factors"], fifo, {}, keep_fraction, {(0.0, 0.0): fifo}, answers=True)
    label = "first in, first out"
    out += [_frame(h, "forgetting", {}, "retention", ret).assign(config=label)[cols], rr.assign(config=label)[cols]]
    return out


#: The headline's rows on what the adaptive store adds (:func:`best_adaptive`, whether or not it is the one
#: shipped): its retention, its prior, the placebo, the value learned in domain, and the paired gains over the prior.
ADAPTATION = ("adaptive store", "prior only", "placebo", "in domain", "gain over prior", "placebo gain over prior")
#: The store cue whose worth the headline measures apart (it was added to the store cues after looking at held-out
#: corpora, :data:`memlib.cues.STORE_CUES`): the adaptive store with its value learned without it, and the paired gain.
ABLATED_CUE = "first_in_session"
ABLATION = (f"without {ABLATED_CUE}", f"gain from {ABLATED_CUE}")


def best_adaptive(forget: pd.DataFrame, gains: pd.DataFrame) -> dict:
    """Return the adaptive configuration whose worst held-out corpus keeps the most gold (rows of ``forget``).

    Among the safe ones (:func:`~.safety.safe_configurations` on ``gains``, :func:`~.safety.prior_gains`
    of ``forget``; all when none is safe). What the headline's
    :data:`ADAPTATION` rows describe: the shipped configuration when the study ships the adaptive
    store, else the best adaptive candidate, so the rows always say what the adaptive store adds.

    >>> f = pd.DataFrame({"split": "held_out", "rule": ["adaptive"] * 4 + ["value"] * 2, "value_model": "cues",
    ...     "beta": 0.0, "value_scale": [1.0, 1.0, 2.0, 2.0, 0.0, 0.0], "dataset": ["x", "y"] * 3,
    ...     "trained_on": "z", "value": [0.9, 0.3, 0.5, 0.5, 0.8, 0.8], "group": "g"})
    >>> best_adaptive(f, prior_gains(f))   # neither is safe: the better worst corpus
    {'value_model': 'cues', 'rule': 'adaptive', 'beta': 0.0, 'value_scale': 2.0}
    """
    held = forget[forget["split"] == "held_out"]
    means = held.groupby(["dataset", *FORGET_KEYS], sort=False)["value"].mean().rename("mean").reset_index()
    safe = safe_configurations(means, gains[gains["split"] == "held_out"]).query("rule == 'adaptive'")
    best = _worst_case(safe if len(safe) else means[means["rule"] == "adaptive"], FORGET_KEYS)
    return {
        "value_model": str(best["value_model"]),
        "rule": "adaptive",
        "beta": float(best["beta"]),
        "value_scale": float(best["value_scale"]),
    }


def _adaptation_rows(h, values, values_in_domain, forget, adaptive, keep_fraction, seed, ablated=None) -> list:
    """Corpus ``h`` held out, the configuration ``adaptive`` beside its prior, a placebo and the in-domain value.

    ``adaptive store`` is ``adaptive`` (:func:`best_adaptive`); ``prior only`` drops the lowest value first
    with the same value (what the adaptive store does until its user's references say otherwise);
    ``placebo`` replays ``adaptive`` on the corpus with its user turns shuffled in time
    (:meth:`~.corpora.Corpus.shuffled_references`); ``in domain`` replays it with the value learned
    on ``h`` itself (a reference, not a held-out figure); the :data:`ABLATION` rows replay it with
    ``ablated``, its value learned on the same corpora without :data:`ABLATED_CUE` (a cue value only).
    The gains are paired differences, case by case.
    """
    cols = ["dataset", "config", "metric", "value", "group"]
    held_out = forget[(forget["split"] == "held_out") & (forget["dataset"] == h.name)]

    prior = held_out[(held_out["value_model"] == adaptive["value_model"]) & (held_out["rule"] == "value")]
    prior = prior["value"].to_numpy()
    mine = held_out
    for k in FORGET_KEYS:
        mine = mine[mine[k] == adaptive[k]]
    policy = policy_of(adaptive["rule"], adaptive["beta"], adaptive["value_scale"])
    value = values[adaptive["value_model"]]
    placebo = retention_per_case(h.cases, kept(h.shuffled_references(seed), value, policy, keep_fraction))
    parts = {"adaptive store": mine["value"].to_numpy(), "prior only": prior, "placebo": placebo}
    if values_in_domain is not None:
        own = values_in_domain[adaptive["value_model"]]
        parts["in domain"] = retention_per_case(h.cases, kept(h, own, policy, keep_fraction))
    parts["gain over prior"] = mine["value"].to_numpy() - prior
    parts["placebo gain over prior"] = placebo - prior
    if ablated is not None:
        without = retention_per_case(h.cases, kept(h.without_cue(ABLATED_CUE), ablated, policy, keep_fraction))
        parts.update(dict(zip(ABLATION, (without, mine["value"].to_numpy() - without))))
    return [_frame(h, "forgetting", {}, "retention", v).assign(config=k)[cols] for k, v in parts.items()]


def defaults_study_on(
    hs: list[Corpus], keep_fraction: float = 0.3, seed: int = 0, quick: bool = False, progress: bool = False
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
    values, forget = {}, []
    for src, t, split in tqdm(pairs, desc="defaults replays", disable=not progress):
        if src not in values:
            values[src] = learn_values([by_name[n] for n in src], keep_fraction, seed, quick)
        forget.append(_forgetting_rows(by_name[t], values[src], keep_fraction, _key(src), split))
    forget = pd.concat(forget, ignore_index=True)
    gains = prior_gains(forget, seed=seed)
    chosen, retr = _choices(forget, gains, plan, by_name, values, keep_fraction)
    head = []
    adaptive = best_adaptive(forget, gains)
    model = adaptive["value_model"]
    for src, t in plan["held_out"]:
        head += _headline_rows(by_name[t], values[src], src, forget, chosen, keep_fraction)
        own = values.get((t,))
        ablated = None
        if model != "paper_factors":
            train = [by_name[n].without_cue(ABLATED_CUE) for n in src]
            ablated = learn_values(train, keep_fraction, seed, quick, models=(model,))[model]
        head += _adaptation_rows(by_name[t], values[src], own, forget, adaptive, keep_fraction, seed, ablated)
    headline = grouped_summary(pd.concat(head, ignore_index=True), ["dataset", "metric", "config"], 1000, seed)
    headline = gain_intervals(headline, gains, adaptive)
    fkeys = ["part", "dataset", "trained_on", "split", *FORGET_KEYS, "metric"]
    rkeys = ["part", "choice", "dataset", "trained_on", "split", *FORGET_KEYS, *MIX_KEYS, "metric"]
    summaries = [grouped_summary(forget, fkeys, 1000, seed), gains.assign(part="safety")]
    table = pd.concat([*summaries, grouped_summary(retr, rkeys, 1000, seed)])
    info = {
        "datasets": names,
        "keep_fraction": keep_fraction,
        "k": K,
        "seed": seed,
        "questions": {h.name: int(h.cases.n_cases) for h in hs},
        "histories": {h.name: int(h.cases.n_haystacks) for h in hs},
        "groups": {h.name: int(len(np.unique(h.cases.groups))) for h in hs},
        "adaptive": adaptive,
    }
    return DefaultsResult(table.reset_index(drop=True), chosen, headline, info)


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
    hs = [load_corpus(dataclasses.replace(data, dataset=d), progress) for d in names]
    return defaults_study_on(hs, keep_fraction, seed, data.quick, progress)


__all__ = [
    "ABLATED_CUE",
    "ABLATION",
    "BETAS",
    "DATASETS",
    "DefaultsResult",
    "FACTORS",
    "PAPER",
    "SAFETY",
    "best_adaptive",
    "defaults_study",
    "defaults_study_on",
    "policy_of",
    "safe_configurations",
]
