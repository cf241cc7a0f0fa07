"""The API-free factor annotator (Table 1 of the paper).

For every turn of every case it computes the seven factors in ``[0, 1]``:

* **emotional intensity** ``= |valence| * arousal``. Valence is VADER's compound
  score (Hutto & Gilbert 2014): a published lexicon tuned for short, informal
  social text, which is what chat turns are, and it ships with its lexicon on
  PyPI. Arousal is structural: ``0.5 + 0.5 * min(1, cues / 3)`` where the cues
  are exclamation marks, all-capital words and VADER's intensifier ("booster")
  words. So a neutral turn scores 0 and a charged, emphatic one close to 1.
  Long texts are scored by VADER in pieces (:func:`vader_scores`) so the cost
  stays linear in length; other readings of arousal are in
  :func:`emotion_and_valence`.
* **goal relevance** ``= (1 + cos(e_m, e_goal)) / 2`` with a pluggable goal
  anchor (:data:`ANCHORS`). ``blind`` (the paper's choice): the centroid of the
  user turns of the turn's own session, which exists when the session is
  consolidated. ``oracle``: the held-out question (it peeks at the future).
* **self/user relevance** ``= (1 + cos(e_m, mu_user)) / 2`` where ``mu_user`` is
  the running centroid of the user's turns *strictly before* this turn in the
  case's history (causal). A user turn is compared with its own speaker's
  earlier turns (in LoCoMo both speakers are people, so each is "a user"); an
  assistant turn with all earlier user turns. With no earlier turn it is 0.5.
* **reliability**: a provenance heuristic, user-stated above model-stated. Two
  factor sets (:data:`FACTOR_SETS`): ``paper`` (Table 1 as stated, the default)
  is provenance only: 0.8 for a user turn, 0.4 for an assistant turn.
  ``extended`` adds our cues: a question asserts nothing (x 0.5); hedges
  ("maybe", "I think", "not sure", ...) subtract 0.2; a first-person statement
  by a user ("I", "my", "we", ...) adds 0.2; clipped to [0, 1]. In LoCoMo both
  speakers are people, so every turn is user-stated and only the cues of the
  extended set separate them.
* **value alignment** ``= (1 + cos(e_m, e_profile)) / 2`` when a value-profile
  text is given, else 0 (inert).
* **task utility**: a callback ``f(texts) -> values in [0, 1]`` when given, else 0 (inert).
* **usage history** ``= r / (1 + r)`` from retrieval counts when given, else 0 (inert).

Blind factors never read a question: :func:`annotate` touches question text
only through the ``oracle`` anchor, and a test replaces every question to
prove the blind table does not change.

The causal factors of the ``paper`` and ``extended`` sets, self relevance
(``earlier``) and blind goal relevance (``session``), have one definition: the
online annotator of :mod:`memlib.online`, which :func:`annotate` runs over
each history (:func:`memlib.online.annotate_history`, every session ended)
and the store runs turn by turn (:mod:`memlib.store.annotate`). The readings
that are not online by definition, the ``released`` set's whole-history ones
(self ``history``, goal ``session_or_history``), the other readings of
:data:`SELF_READINGS` and :data:`GOAL_READINGS`, and the ``oracle`` anchor,
are computed over a whole history at once (:func:`_self_relevance`,
:mod:`memlib.goal_anchors`) and replace the annotator's column.

This module computes the table (:func:`annotate`) and the non-causal self
relevance; its parts live in their own modules, and every public name of them
is importable from here too: what is read of a turn's text (VADER, emotional intensity,
reliability) in :mod:`memlib.text_cues`, the goal anchors in
:mod:`memlib.goal_anchors`, the factor sets and their readings in
:mod:`memlib.factor_sets`, and the table (:class:`Annotation`) and its cache
file in :mod:`memlib.factor_table`.

>>> emotional_intensity(["The meeting is at noon.", "I LOVE this, it is SO amazing!!!"]).round(2).tolist()
[0.0, 0.93]
>>> reliability(["user", "assistant", "user"], ["I work as a nurse.", "You might like it.", "Where is it?"]).tolist()
[1.0, 0.2, 0.4]
"""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import json
import time
from pathlib import Path

import numpy as np
import pandas as pd

from memlib import FACTORS
from memlib import factor_sets as _factor_sets
from memlib import factor_table as _factor_table
from memlib import goal_anchors as _goal_anchors
from memlib import text_cues as _text_cues
from memlib._cachefiles import safe_name as _safe_name
from memlib._checks import ParameterError, check_choice
from memlib.cases import CaseSet
from memlib.datasets import Dataset, DatasetError
from memlib.embeddings import (
    cache_folder_ok,
    cache_root,
    check_device,
    embed_cached,
    embed_text_table,
    report_unwritable,
    set_aside,
)

# The parts of the annotator that live in their own modules: their public names are importable from
# here too (studies, the store, tests and notebooks read them as memlib.factors.<name>; see __all__).
from memlib.factor_sets import (  # noqa: F401 (re-exported: __all__)
    ALL_FACTOR_SETS,
    EMOTION_READINGS,
    FACTOR_SETS,
    GOAL_READINGS,
    HISTORY_ORDERS,
    READINGS,
    RELIABILITY_READINGS,
    SELF_READINGS,
    resolve_readings,
)
from memlib.factor_table import Annotation, load_annotation, save_annotation
from memlib.goal_anchors import (  # noqa: F401 (re-exported: __all__)
    ANCHORS,
    BLIND_ANCHORS,
    EarlierInSessionAnchor,
    QuestionAnchor,
    SessionCentroidAnchor,
    SessionOrHistoryAnchor,
    _cos01,
)
from memlib.online import annotate_history
from memlib.rule_emotion import rule_intensity
from memlib.text_cues import (  # noqa: F401 (re-exported: __all__)
    AROUSAL_READINGS,
    PARALLEL_MIN_TEXTS,
    PROVENANCE,
    VADER_PIECE_CHARS,
    emotion_and_valence,
    emotion_features,
    emotional_intensity,
    intensity_from_features,
    reliability,
    vader_scores,
)

REGIMES = ("blind", "oracle")
INERT_WITHOUT_INPUT = ("value_alignment", "task_utility", "usage_history")


def content_keys(cases: pd.DataFrame) -> list:
    """Return a key per case from its question and date alone (no identifier), which splits order groups by.

    >>> import pandas as pd
    >>> content_keys(pd.DataFrame({"question": ["Where?"], "question_date": [pd.NaT]}))
    ['1cf03dc0c1f05fc453084d3d']
    """
    return [
        hashlib.sha256(f"{q}\x1f{d}".encode("utf-8", "surrogatepass")).hexdigest()[:24]
        for q, d in zip(cases["question"], cases["question_date"])
    ]


#: The source files of memlib/ whose code changes a factor table; the cache key (:func:`fingerprint`)
#: hashes them, so an edit to any of them invalidates the cached tables (``datasets``: that package;
#: ``__init__.py`` holds the column order, :data:`memlib.FACTORS`). Every module this one loads is
#: here but ``_checks.py`` (error messages), ``_cachefiles.py`` (cache paths) and ``_safewrite.py``
#: (how a file is written, not what it holds).
SOURCE_FILES = (
    "__init__.py",
    "factors.py",
    "factor_sets.py",
    "factor_table.py",
    "goal_anchors.py",
    "online.py",
    "text_cues.py",
    "rule_emotion.py",
    "_text.py",
    "cases.py",
    "embeddings.py",
    "embedding_cache.py",
    "embedding_model.py",
    "embedding_onnx.py",
    "datasets",
)


def _source_version() -> str:
    from memlib.datasets import source_files

    here = Path(__file__).resolve().parent
    h = hashlib.sha256()
    for name in SOURCE_FILES:
        # the datasets package: every .py file of memlib/datasets/, sorted by name
        for path in source_files() if name == "datasets" else [here / name]:
            if path.is_file():  # a module not (or no longer) there runs no code
                h.update(path.read_bytes())
    return h.hexdigest()[:16]


def fingerprint(ds: Dataset, regime: str, options: dict) -> str:
    """Cache key: annotator source, regime, options and the dataset's content."""
    h = hashlib.sha256()
    h.update(_source_version().encode())
    h.update(json.dumps([ds.name, regime, options], sort_keys=True, default=str).encode())
    c = ds.cases
    h.update(
        json.dumps(
            [
                list(c["case_id"]),
                list(c["question"]),
                [list(x) for x in c["haystack"]],
                [list(x) for x in c["gold"]],
                list(c["group"]),
            ]
        ).encode()
    )
    used = set().union(*c["haystack"]) if len(c) else set()
    turns = ds.turns[ds.turns["session"].isin(used)]  # only the turns the cases read
    h.update(
        pd.util.hash_pandas_object(turns[["session", "role", "speaker", "text", "timestamp"]], index=False)
        .to_numpy()
        .tobytes()
    )
    return h.hexdigest()[:24]


def _with_replayed_usage(ds, regime, args: dict):
    """:func:`annotate` with ``retrievals='replayed'``: the annotation, then its replayed usage column."""
    from memlib.usage import replay_annotation, with_usage

    kw = {k: args[k] for k in inspect.signature(annotate).parameters if k not in ("ds", "regime")}
    ann = annotate(ds, regime, **{**kw, "retrievals": None})
    _, factor = replay_annotation(ds, ann, embedding_setting=kw["embedding_setting"], progress=kw["progress"])
    inert = [f for f in ann.inert if f != "usage_history"] if factor.any() else ann.inert
    return dataclasses.replace(ann, cases=with_usage(ann.cases, factor), inert=inert)


def annotate(
    ds: Dataset,
    regime: str = "blind",
    *,
    factor_set: str = "paper",
    embedding_setting="reference",
    device: str | None = None,
    arousal: str = "structural",
    self_reading: str | None = None,
    readings: dict | None = None,
    value_profile: str | None = None,
    task_utility=None,
    retrievals=None,
    use_cache: bool = True,
    progress: bool = True,
) -> Annotation:
    """Annotate every usable case of ``ds`` with the seven factors in one regime.

    Parameters
    ----------
    ds : Dataset
    regime : {'blind', 'oracle'}
        Which goal anchor to use (:data:`ANCHORS`).
    factor_set : {'paper', 'extended', 'released'}
        ``paper``: Table 1 as stated (reliability is provenance only).
        ``extended``: reliability adds our question, hedge and first-person cues.
        ``released``: the factors of the authors' released experiment (rule-based
        emotion, a whole-history self centroid, reliability 0.7 / 0.4, the
        histories in file order; :data:`READINGS`).
    embedding_setting : {'reference', 'fast', 'int8'} or int
        Embedding setting (:data:`memlib.embeddings.SETTINGS`): 256 or 128 word
        pieces on the torch model, or 128 on its int8 ONNX export.
    device : {'cpu', 'cuda', 'mps'}, optional
        Embedding device; defaults to what the machine has.
    arousal : {'structural', 'constant', 'lexical'}
        Reading of arousal in emotional intensity (:func:`emotion_and_valence`).
    self_reading : {'earlier', 'inclusive', 'through_session', 'history'}, optional
        Which user turns the centroid of self relevance holds: earlier ones
        (the paper set's), earlier ones and the turn, those of the sessions up
        to the turn's own (inclusive), or all of the history's (the released
        set's). The same as ``readings={"self": ...}``.
    readings : dict, optional
        Readings that override the factor set's (:data:`READINGS`): keys
        ``emotion``, ``self``, ``goal``, ``reliability``, ``order``.
    value_profile : str, optional
        Text of the agent's value profile; makes value alignment live.
    task_utility : callable, optional
        ``f(list of texts) -> array in [0, 1]``, called once on the texts of the turns
        the usable cases' haystacks hold (in table order); makes task utility live.
    retrievals : array_like or 'replayed', optional
        Retrieval count per row of ``ds.turns``; makes usage history live. ``'replayed'``:
        the retrievals the agent itself would have made, history by history, up to the
        consolidation point (each user turn retrieves the :data:`memlib.usage.DEFAULT_K`
        most similar earlier turns; :func:`memlib.usage.replay_annotation`). It reads no
        question, so the blind regime stays blind; the counts differ per history, so they
        fill the cases' usage column after the annotation, not a column per turn.
    use_cache : bool
        Load / store the factor table in ``data/cache/factors`` (keyed by
        :func:`fingerprint`) and the embeddings in the embedding cache.
    """
    from memlib.embeddings import resolve_setting

    if isinstance(retrievals, str):
        if retrievals != "replayed":
            msg = f"retrievals must be counts per row of dataset.turns or 'replayed', got {retrievals!r}"
            raise ParameterError(msg)
        return _with_replayed_usage(ds, regime, locals())
    check_choice("regime", regime, REGIMES)
    check_choice("factor_set", factor_set, ALL_FACTOR_SETS)
    check_choice("arousal", arousal, AROUSAL_READINGS)
    if self_reading is not None:
        check_choice("self_reading", self_reading, SELF_READINGS)
        readings = {**(readings or {}), "self": self_reading}
    read = resolve_readings(factor_set, readings)
    if read["order"] == "file" and "session_file_index" not in ds.cases:
        raise ParameterError(
            f"{ds.name}: the file order of its histories is not recorded (only LongMemEval's loader records it); "
            "use readings={'order': 'time'}"
        )
    if device is not None:  # before a cached table makes the device moot
        check_device(device)
    max_seq_length, backend = resolve_setting(embedding_setting)
    t0 = time.perf_counter()
    usable = ds.usable()
    options = {
        "value_profile": value_profile,
        "task_utility": getattr(task_utility, "__qualname__", None),
        "retrievals": None if retrievals is None else hashlib.sha1(np.asarray(retrievals).tobytes()).hexdigest(),
        "max_seq_length": max_seq_length,
        "embedding_backend": backend,
        "factor_set": factor_set,
        "arousal": arousal,
        "readings": read,
    }
    key = fingerprint(usable, regime, options)
    path = cache_root() / "factors" / f"{_safe_name(ds.name)}-{regime}-{key}.npz"
    if use_cache and path.is_file():
        try:
            ann = load_annotation(path)
        except DatasetError as exc:  # a damaged table: say which, move it aside, recompute
            set_aside(path, exc.__cause__ or exc)
        else:
            ann.info.update(cached=True, seconds=time.perf_counter() - t0)
            return ann
    save = use_cache and cache_folder_ok(path.parent)  # an unusable folder is reported before the work

    # only the turns the usable cases' haystacks hold are embedded and scored; `kept` maps them back
    day_zero = ds.turns["timestamp"].min()
    sub, kept = usable.used_turns()
    turns = sub.turns
    text_ids = turns["text_id"].to_numpy()
    used_texts = np.unique(text_ids)
    E_text = embed_text_table(
        ds.texts, used_texts, embedding_setting, progress=progress, use_cache=use_cache, device=device
    )
    t_embedded = time.perf_counter()
    E = E_text[text_ids]
    if read["emotion"] == "rules":
        emotion = _rule_emotion(ds.texts, used_texts)[text_ids]
    else:
        emotion = _text_emotion(ds.texts, used_texts, arousal)[text_ids]
    rel = reliability(
        turns["role"].tolist(),
        turns["text"].tolist(),
        cues=read["reliability"] == "extended",
        provenance=PROVENANCE.get(read["reliability"], PROVENANCE["paper"]),
    )
    value_vec = None
    if value_profile:
        value_vec = embed_cached([value_profile], embedding_setting, progress=False, use_cache=use_cache)[0]
    if task_utility is not None:
        task_col = np.asarray(task_utility(turns["text"].tolist()), dtype=float)
        if (
            task_col.shape != (len(turns),)
            or np.any((task_col < 0) | (task_col > 1))
            or not np.all(np.isfinite(task_col))
        ):
            raise ParameterError("task_utility must return one value in [0, 1] per turn")
    else:
        task_col = np.zeros(len(turns))
    if retrievals is not None:
        r = np.asarray(retrievals, dtype=float)
        if r.shape != (len(usable.turns),) or np.any(r < 0):
            raise ParameterError("retrievals must hold one count >= 0 per row of dataset.turns")
        r = r[kept]
        usage_col = r / (1.0 + r)
    else:
        usage_col = np.zeros(len(turns))

    # the causal readings of the paper set (self: earlier, blind goal: session) are the online annotator's
    # (memlib.online), history by history; another reading or anchor replaces its column (vectorised)
    online_goal = regime == "blind" and read["goal"] == "session"
    anchor = None if online_goal else BLIND_ANCHORS[read["goal"]]() if regime == "blind" else ANCHORS[regime]()
    if anchor is not None:
        anchor.prepare(sub, E)
    per_question, qvecs = anchor is not None and anchor.per_question, None
    if per_question:
        qvecs = embed_cached(
            usable.cases["question"].tolist(), embedding_setting, progress=progress, use_cache=use_cache
        )
    roles = turns["role"].to_numpy()
    speakers = turns["speaker"].to_numpy()
    t_days = ((turns["timestamp"] - day_zero) / pd.Timedelta(days=1)).to_numpy()

    hay_index: dict = {}
    factors, times, rows_list, case_h = [], [], [], []
    base: dict = {}  # per unique history: (rows, factors (goal: the annotator's), position of each row, times)
    first = dict(zip(sub.sessions["session"], sub.sessions["first_turn"]))
    count = dict(zip(sub.sessions["session"], sub.sessions["n_turns"]))
    gold = []
    # the released code computes in float64, and float32 would merge values it keeps apart (its emotion
    # rules give 0.15 and 0.15000000000000002), which changes its first-come ties
    dtype = np.float64 if factor_set == "released" else np.float32
    session_codes = pd.factorize(turns["session"])[0]
    file_index = sub.cases["session_file_index"] if read["order"] == "file" else [None] * len(sub.cases)
    for c, (hay, gold_rows, in_file) in enumerate(zip(sub.cases["haystack"], sub.cases["gold"], file_index)):
        if in_file is not None:  # the history as its file lists it; its clock counts sessions
            hay = tuple(hay[k] for k in np.argsort(in_file, kind="stable"))
        if hay not in base:
            parts = [np.arange(first[s], first[s] + count[s]) for s in hay]
            rows = np.concatenate(parts)
            clock = np.repeat(np.arange(len(parts), dtype=np.float64), [len(p) for p in parts])
            F = annotate_history(
                E[rows],
                roles[rows],
                speakers[rows],
                session_codes[rows],
                value_profile=value_vec,
                emotional_intensity=emotion[rows],
                reliability=rel[rows],
                task_utility=task_col[rows],
                usage_history=usage_col[rows],
            ).astype(dtype)
            if read["self"] != "earlier":  # a reading that is not the online annotator's (not causal)
                F[:, 3] = _self_relevance(E[rows], roles[rows], speakers[rows], read["self"], session_codes[rows])
            base[hay] = (rows, F, {r: i for i, r in enumerate(rows)}, clock if in_file is not None else t_days[rows])
        rows, F0, pos, t_rows = base[hay]
        key_h = (hay, c) if per_question else hay
        if key_h not in hay_index:
            F = F0.copy()
            if anchor is not None:
                F[:, 1] = anchor.goal(sub, c, rows, E, None if qvecs is None else qvecs[c])
            hay_index[key_h] = len(factors)
            factors.append(F)
            times.append(t_rows)
            rows_list.append(rows)
        case_h.append(hay_index[key_h])
        gold.append([pos[g] for g in gold_rows])
    cs = CaseSet.from_haystacks(
        factors,
        times,
        case_h,
        gold,
        case_ids=usable.cases["case_id"],
        groups=usable.cases["group"],
        keys=content_keys(usable.cases),
        dtype=dtype,
    )
    N = cs.factors.shape[1]
    turn_rows = np.full((len(rows_list), N), -1, dtype=np.int64)
    for g, rows in enumerate(rows_list):
        turn_rows[g, : len(rows)] = kept[rows]
    inert = [f for f in FACTORS if not np.any(cs.factors[..., FACTORS.index(f)])]
    info = {
        **ds.stats(),
        "regime": regime,
        "haystacks": cs.n_haystacks,
        "cached": False,
        **options,
        "seconds": time.perf_counter() - t0,
        "seconds_beyond_embedding": time.perf_counter() - t_embedded,
        "peak_rss_gb": peak_rss_gb(),
    }
    ann = Annotation(ds.name, regime, cs, turn_rows, inert, info)
    if save:
        try:
            save_annotation(ann, path)
        except OSError as exc:  # the folder turned unusable during the run: keep the result, uncached
            report_unwritable(path.parent, exc)
    return ann


def _session_ends(sessions) -> np.ndarray:
    """For each row of a history, the row that ends its session (a history's sessions are contiguous)."""
    sessions = np.asarray(sessions)
    if len(sessions) == 0:
        return np.zeros(0, np.int64)
    starts = np.r_[True, sessions[1:] != sessions[:-1]]
    ends = np.r_[np.flatnonzero(starts)[1:] - 1, len(sessions) - 1]
    return ends[np.cumsum(starts) - 1]


def _self_relevance(
    E: np.ndarray, roles: np.ndarray, speakers: np.ndarray, reading: str = "earlier", sessions=None
) -> np.ndarray:
    """Self/user relevance of each turn of one history (see module docstring).

    ``reading`` (:data:`SELF_READINGS`): ``earlier`` compares a turn with the
    centroid of the user's strictly earlier turns (the online annotator's,
    :func:`memlib.online.annotate_history`); the other readings are not causal,
    so they are computed here, over the whole history at once: ``inclusive`` puts a user turn
    in its own centroid; ``through_session`` uses the user's turns up to the end
    of the turn's session (``sessions``: one session code per row), what an
    agent that consolidates at each session's end knows; ``history`` uses all the
    user's turns of the history, later ones included (it reads no question, but
    it is not causal). An assistant turn is compared with the user turns
    (earlier ones, through its session, or all for ``history``).

    >>> E = np.eye(3)[[0, 1, 0, 2]].astype(float)
    >>> roles = np.array(["user", "assistant", "user", "user"])
    >>> _self_relevance(E, roles, roles, "through_session", [0, 0, 1, 1]).round(3).tolist()
    [1.0, 0.5, 0.947, 0.724]
    """
    if reading == "earlier":
        return annotate_history(E, roles, speakers)[:, FACTORS.index("self_relevance")]
    user = roles == "user"
    out = np.full(len(E), 0.5)
    ends = _session_ends(sessions) if reading == "through_session" else None

    def centroids(X, cum_rows=None):
        if reading == "history":
            return np.broadcast_to(X.sum(axis=0, keepdims=True), X.shape)
        cum = np.cumsum(X, axis=0)
        return cum[cum_rows] if reading == "through_session" else cum  # (inclusive)

    Eu = E * user[:, None]
    asst = ~user
    if asst.any():
        out[asst] = _cos01(E[asst], centroids(Eu, ends)[asst])
    for s in np.unique(speakers[user]):
        m = user & (speakers == s)
        if reading == "through_session":  # the speaker's turns through each row's session end
            cent = np.cumsum(E * m[:, None], axis=0)[ends][m]
        else:
            cent = centroids(E[m])
        out[m] = _cos01(E[m], cent)
    return out


_RULE_MEMO: list = []


def _rule_emotion(texts: list, used: np.ndarray) -> np.ndarray:
    """Return the released rule-based intensity per text id (0 where unused), remembered like :func:`_text_emotion`."""
    if _RULE_MEMO and _RULE_MEMO[0] is texts and np.array_equal(_RULE_MEMO[1], used):
        return _RULE_MEMO[2]
    out = np.zeros(len(texts))
    out[used] = rule_intensity([texts[i] for i in used])
    _RULE_MEMO[:] = [texts, used, out]
    return out


_EMOTION_MEMO: list = []


def _text_emotion(texts: list, used: np.ndarray, arousal: str) -> np.ndarray:
    """Emotional intensity per text id (0 where unused), with VADER remembered for the last ``texts`` list.

    The blind and oracle annotations of one dataset (and its readings) score the
    same texts; the memo (which holds the list itself, so identity is a safe
    key) lets them share one VADER pass.
    """
    if _EMOTION_MEMO and _EMOTION_MEMO[0] is texts and np.array_equal(_EMOTION_MEMO[1], used):
        feats = _EMOTION_MEMO[2]
    else:
        feats = np.zeros((len(texts), 3))
        # the scorer is looked up here, so that memlib.factors.vader_scores is the one annotate uses
        feats[used] = emotion_features([texts[i] for i in used], score=vader_scores)
        _EMOTION_MEMO[:] = [texts, used, feats]
    return intensity_from_features(feats, arousal)


def peak_rss_gb() -> float:
    """Peak resident memory of this process so far, in GB (Linux and macOS)."""
    import resource
    import sys

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return round(peak / (1e9 if sys.platform == "darwin" else 1e6), 3)


#: The public names of :mod:`memlib.text_cues` that are not re-exported: its word lists and the store's text cues.
_TEXT_CUES_ONLY = {"FIRST_PERSON_WORDS", "HEDGE_PHRASES", "HEDGE_WORDS", "TEXT_CUES", "text_cues"}

__all__ = list(
    dict.fromkeys(
        [
            # defined here
            "INERT_WITHOUT_INPUT",
            "REGIMES",
            "SOURCE_FILES",
            "annotate",
            "content_keys",
            "fingerprint",
            "peak_rss_gb",
            # the annotator's parts
            *_factor_sets.__all__,
            *_factor_table.__all__,
            *_goal_anchors.__all__,
            *(name for name in _text_cues.__all__ if name not in _TEXT_CUES_ONLY),
        ]
    )
)
