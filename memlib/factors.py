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
are computed over a whole history at once (:mod:`memlib.self_readings`,
:mod:`memlib.goal_anchors`) and replace the annotator's column.

This module computes the table (:func:`annotate`); its parts live in their own modules, and
every public name of them is importable from here too: what is read of a turn's text (VADER,
emotional intensity, reliability) in :mod:`memlib.text_cues`, the goal anchors in
:mod:`memlib.goal_anchors`, the self readings in :mod:`memlib.self_readings`, the factor sets
and their readings in :mod:`memlib.factor_sets`, the tables of a dataset's histories in
:mod:`memlib.history_factors`, and the table (:class:`Annotation`), its cache file and its
cache key in :mod:`memlib.factor_table` and :mod:`memlib.factor_key`.

>>> emotional_intensity(["The meeting is at noon.", "I LOVE this, it is SO amazing!!!"]).round(2).tolist()
[0.0, 0.93]
>>> reliability(["user", "assistant", "user"], ["I work as a nurse.", "You might like it.", "Where is it?"]).tolist()
[1.0, 0.2, 0.4]
"""

from __future__ import annotations

import dataclasses
import hashlib
import time

import numpy as np
import pandas as pd

from memlib import FACTORS
from memlib import factor_key as _factor_key
from memlib import factor_sets as _factor_sets
from memlib import factor_table as _factor_table
from memlib import goal_anchors as _goal_anchors
from memlib import self_readings as _self_readings
from memlib import text_cues as _text_cues
from memlib._checks import ParameterError, check_choice
from memlib.cases import CaseSet
from memlib.datasets import Dataset, DatasetError
from memlib.embeddings import (
    cache_folder_ok,
    check_device,
    embed_cached,
    embed_text_table,
    report_unwritable,
    resolve_setting,
    set_aside,
)

# The parts of the annotator that live in their own modules: their public names are importable from
# here too (studies, the store, tests and notebooks read them as memlib.factors.<name>; see __all__).
from memlib.factor_key import SOURCE_FILES, fingerprint, table_path  # noqa: F401 (re-exported: __all__)
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
from memlib.history_factors import history_factors
from memlib.rule_emotion import rule_intensity
from memlib.self_readings import self_relevance, session_ends  # noqa: F401 (re-exported: __all__)
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
    read = _checked_readings(ds, regime, factor_set, arousal, self_reading, readings, device)
    replayed = _replayed(retrievals)
    embedding = _Embedding(embedding_setting, device, use_cache, progress)
    inputs = _Inputs(value_profile, task_utility, None if replayed else retrievals)
    ann = _annotation(ds, regime, factor_set, arousal, read, embedding, inputs)
    return _with_replayed_usage(ds, ann, embedding) if replayed else ann


@dataclasses.dataclass(frozen=True)
class _Embedding:
    """How :func:`annotate` embeds: the setting, the device, whether through the cache, with a progress bar."""

    setting: object
    device: str | None
    use_cache: bool
    progress: bool

    def texts(self, texts: list, used: np.ndarray) -> np.ndarray:
        """Embed the texts of ``texts`` at ``used`` (the rows of a table by text id; :func:`embed_text_table`)."""
        kw = {"progress": self.progress, "use_cache": self.use_cache, "device": self.device}
        return embed_text_table(texts, used, self.setting, **kw)

    def strings(self, strings: list, progress: bool) -> np.ndarray:
        """Embed a few strings (a value profile, the questions) through :func:`embed_cached`."""
        return embed_cached(strings, self.setting, progress=progress, use_cache=self.use_cache)


@dataclasses.dataclass(frozen=True)
class _Inputs:
    """What :func:`annotate` is given that makes an otherwise inert factor live (see its parameters)."""

    value_profile: str | None
    task_utility: object
    retrievals: object


def _checked_readings(ds, regime, factor_set, arousal, self_reading, readings, device) -> dict:
    """Check :func:`annotate`'s choices of regime, factor set and readings; return the readings it computes."""
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
    return read


def _replayed(retrievals) -> bool:
    """Whether ``retrievals`` asks for the replayed usage (``'replayed'``; another string is refused)."""
    if isinstance(retrievals, str) and retrievals != "replayed":
        msg = f"retrievals must be counts per row of dataset.turns or 'replayed', got {retrievals!r}"
        raise ParameterError(msg)
    return isinstance(retrievals, str)


def _with_replayed_usage(ds, ann: Annotation, embedding: _Embedding) -> Annotation:
    """``ann`` (annotated without retrievals) with the usage column of its replayed retrievals (``'replayed'``)."""
    from memlib.usage import replay_annotation, with_usage

    _, factor = replay_annotation(ds, ann, embedding_setting=embedding.setting, progress=embedding.progress)
    inert = [f for f in ann.inert if f != "usage_history"] if factor.any() else ann.inert
    return dataclasses.replace(ann, cases=with_usage(ann.cases, factor), inert=inert)


def _annotation(ds, regime, factor_set, arousal, read, embedding: _Embedding, inputs: _Inputs) -> Annotation:
    """Return the table of :func:`annotate` for checked arguments: read from its cache, or computed (and cached)."""
    max_seq_length, backend = resolve_setting(embedding.setting)
    t0 = time.perf_counter()
    usable = ds.usable()
    retrievals = inputs.retrievals
    options = {
        "value_profile": inputs.value_profile,
        "task_utility": getattr(inputs.task_utility, "__qualname__", None),
        "retrievals": None if retrievals is None else hashlib.sha1(np.asarray(retrievals).tobytes()).hexdigest(),
        "max_seq_length": max_seq_length,
        "embedding_backend": backend,
        "factor_set": factor_set,
        "arousal": arousal,
        "readings": read,
    }
    path = table_path(ds, usable, regime, options)
    if embedding.use_cache and path.is_file():
        try:
            ann = load_annotation(path)
        except DatasetError as exc:  # a damaged table: say which, move it aside, recompute
            set_aside(path, exc.__cause__ or exc)
        else:
            ann.info.update(cached=True, seconds=time.perf_counter() - t0)
            return ann
    save = embedding.use_cache and cache_folder_ok(path.parent)  # an unusable folder is reported before the work
    ann = _computed(ds, usable, regime, read, embedding, inputs, options, t0)
    if save:
        try:
            save_annotation(ann, path)
        except OSError as exc:  # the folder turned unusable during the run: keep the result, uncached
            report_unwritable(path.parent, exc)
    return ann


def _computed(ds, usable, regime, read, embedding: _Embedding, inputs: _Inputs, options: dict, t0) -> Annotation:
    """Compute the table of :func:`annotate` (``options``: what its cache key hashed, kept in its info)."""
    # only the turns the usable cases' haystacks hold are embedded and scored; `kept` maps them back
    day_zero = ds.turns["timestamp"].min()
    sub, kept = usable.used_turns()
    text_ids = sub.turns["text_id"].to_numpy()
    E = embedding.texts(ds.texts, np.unique(text_ids))[text_ids]
    t_embedded = time.perf_counter()
    columns = _turn_columns(ds, sub.turns, kept, read, options["arousal"], inputs, len(usable.turns))
    value_vec = None
    if inputs.value_profile:
        value_vec = embedding.strings([inputs.value_profile], progress=False)[0]
    # the causal readings of the paper set (self: earlier, blind goal: session) are the online annotator's
    # (memlib.online), history by history; another reading or anchor replaces its column (vectorised)
    online_goal = regime == "blind" and read["goal"] == "session"
    anchor = None if online_goal else BLIND_ANCHORS[read["goal"]]() if regime == "blind" else ANCHORS[regime]()
    qvecs = None
    if anchor is not None:
        anchor.prepare(sub, E)
        if anchor.per_question:
            qvecs = embedding.strings(usable.cases["question"].tolist(), progress=embedding.progress)
    t_days = ((sub.turns["timestamp"] - day_zero) / pd.Timedelta(days=1)).to_numpy()
    # the released code computes in float64, and float32 would merge values it keeps apart (its emotion
    # rules give 0.15 and 0.15000000000000002), which changes its first-come ties
    dtype = np.float64 if options["factor_set"] == "released" else np.float32
    tables = history_factors(sub, E, columns, value_vec, t_days, read, anchor, qvecs, dtype)
    return _annotation_of(ds, usable, kept, regime, tables, dtype, options, t0, t_embedded)


def _turn_columns(ds, turns: pd.DataFrame, kept, read: dict, arousal: str, inputs: _Inputs, n_rows: int) -> dict:
    """Return the factors of ``turns`` that read no other turn, by :func:`memlib.online.annotate_history`'s names.

    Emotional intensity and reliability from the text and role; task utility and usage history
    from :func:`annotate`'s inputs, zero without them. ``kept`` are the turns' rows of the
    dataset's ``n_rows``, which ``retrievals`` counts.
    """
    text_ids = turns["text_id"].to_numpy()
    used_texts = np.unique(text_ids)
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
    if inputs.task_utility is not None:
        task_col = np.asarray(inputs.task_utility(turns["text"].tolist()), dtype=float)
        if (
            task_col.shape != (len(turns),)
            or np.any((task_col < 0) | (task_col > 1))
            or not np.all(np.isfinite(task_col))
        ):
            raise ParameterError("task_utility must return one value in [0, 1] per turn")
    else:
        task_col = np.zeros(len(turns))
    if inputs.retrievals is not None:
        r = np.asarray(inputs.retrievals, dtype=float)
        if r.shape != (n_rows,) or np.any(r < 0):
            raise ParameterError("retrievals must hold one count >= 0 per row of dataset.turns")
        r = r[kept]
        usage_col = r / (1.0 + r)
    else:
        usage_col = np.zeros(len(turns))
    return {"emotional_intensity": emotion, "reliability": rel, "task_utility": task_col, "usage_history": usage_col}


def _annotation_of(ds, usable, kept, regime: str, tables: tuple, dtype, options: dict, t0, t_embedded) -> Annotation:
    """Return the :class:`Annotation` of the tables of :func:`~memlib.history_factors.history_factors`."""
    factors, times, rows_list, case_h, gold = tables
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
    return Annotation(ds.name, regime, cs, turn_rows, inert, info)


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


def text_valence(texts: list, ids) -> np.ndarray:
    """VADER's compound valence of ``texts[i]`` for each ``i`` in ``ids`` (column 0 of :func:`emotion_features`).

    Read from this process's last VADER pass of :func:`annotate` over the same ``texts`` list where it scored
    every one of ``ids`` (a cold run annotates a corpus and then reads its valences: one pass, not two), else
    scored now; the numbers are the same either way (VADER scores each text alone).

    >>> texts = ["Great!!", "Fine.", "Awful."]
    >>> text_valence(texts, [2, 0]).round(3).tolist()
    [-0.459, 0.689]
    """
    ids = np.asarray(ids, dtype=np.int64)
    if _EMOTION_MEMO and _EMOTION_MEMO[0] is texts and np.isin(ids, _EMOTION_MEMO[1]).all():
        return _EMOTION_MEMO[2][ids, 0]  # fancy indexing: a new array
    return emotion_features([texts[i] for i in ids], score=vader_scores)[:, 0]


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
            "annotate",
            "content_keys",
            "peak_rss_gb",
            "text_valence",
            # the annotator's parts
            *_factor_key.__all__,
            *_factor_sets.__all__,
            *_factor_table.__all__,
            *_goal_anchors.__all__,
            "history_factors",
            *_self_readings.__all__,
            *(name for name in _text_cues.__all__ if name not in _TEXT_CUES_ONLY),
        ]
    )
)
