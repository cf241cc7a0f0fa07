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

>>> emotional_intensity(["The meeting is at noon.", "I LOVE this, it is SO amazing!!!"]).round(2).tolist()
[0.0, 0.93]
>>> reliability(["user", "assistant", "user"], ["I work as a nurse.", "You might like it.", "Where is it?"]).tolist()
[1.0, 0.2, 0.4]
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from memlib import FACTORS
from memlib._cachefiles import safe_name as _safe_name
from memlib._checks import ParameterError, check_choice
from memlib._text import bounded
from memlib.datasets import Dataset, DatasetError
from memlib.embeddings import (
    CORRUPT_ERRORS,
    atomic_savez,
    cache_folder_ok,
    cache_root,
    check_device,
    embed,
    read_npz,
    report_unwritable,
    set_aside,
)
from memlib.metrics import CaseSet
from memlib.rule_emotion import rule_intensity

REGIMES = ("blind", "oracle")
INERT_WITHOUT_INPUT = ("value_alignment", "task_utility", "usage_history")

_HEDGES = re.compile(
    r"\b(maybe|might|perhaps|probably|possibly|i think|i guess|i suppose|not sure|i believe|"
    r"kind of|sort of|i'?m not certain)\b",
    re.IGNORECASE,
)
_FIRST_PERSON = re.compile(r"\b(i|i'm|i've|i'd|i'll|my|mine|me|we|our|we're|we've)\b", re.IGNORECASE)
_CAPS = re.compile(r"\b[A-Z]{2,}\b")
_WORDS = re.compile(r"[a-z']+")

_VADER = None

#: Texts longer than this many characters are scored by VADER in pieces of at most this size
#: (split at sentence ends, else at white space). VADER's cost grows quadratically with length
#: (a 59 KB turn took 20 s); in pieces it grows linearly. Shorter texts are scored exactly as
#: ``SentimentIntensityAnalyzer.polarity_scores`` scores them.
VADER_PIECE_CHARS = 2000
#: Arousal readings of emotional intensity ``|valence| * arousal`` (see :func:`emotion_and_valence`).
AROUSAL_READINGS = ("structural", "constant", "lexical")
#: Factor sets: the paper's Table 1 as stated, and our extension of its reliability heuristic.
#: The factor sets that the store computes online, turn by turn, as well as :func:`annotate` (and the studies).
FACTOR_SETS = ("paper", "extended")
#: Every factor set :func:`annotate` computes: :data:`FACTOR_SETS` and ``released``, the reading of the
#: authors' released experiment (:data:`READINGS`), which reads a whole history at once.
ALL_FACTOR_SETS = (*FACTOR_SETS, "released")
#: Readings of the user centroid of self relevance: the user's strictly earlier turns (causal, the
#: default), earlier turns and the turn itself, or all the user's turns of the history (not causal).
SELF_READINGS = ("earlier", "inclusive", "through_session", "history")
#: Readings of the blind goal anchor (:data:`ANCHORS`): the centroid of the session's user turns with the
#: session's turns as fallback (``session``) or the history's user turns (``session_or_history``), or of
#: the session's strictly earlier user turns (``earlier_in_session``, causal at each turn).
GOAL_READINGS = ("session", "session_or_history", "earlier_in_session")
#: Emotion readings: VADER valence times arousal (Table 1 as memlib reads it), or the released rules.
EMOTION_READINGS = ("vader", "rules")
#: Reliability readings: provenance 0.8 / 0.4 (``paper``), 0.7 / 0.4 (``released``), or with our cues.
RELIABILITY_READINGS = ("paper", "released", "extended")
#: Order of a history's turns: by date (``time``; turn times in days) or as its file lists its sessions
#: (``file``; a turn's time is then its session's index, the only clock the released experiment reads).
HISTORY_ORDERS = ("time", "file")
#: What each factor set reads (a key given to :func:`annotate` overrides its set's).
READINGS = {
    "paper": {"emotion": "vader", "self": "earlier", "goal": "session", "reliability": "paper", "order": "time"},
    "extended": {"emotion": "vader", "self": "earlier", "goal": "session", "reliability": "extended", "order": "time"},
    "released": {
        "emotion": "rules",
        "self": "history",
        "goal": "session_or_history",
        "reliability": "released",
        "order": "file",
    },
}
_READING_CHOICES = {
    "emotion": EMOTION_READINGS,
    "self": SELF_READINGS,
    "goal": GOAL_READINGS,
    "reliability": RELIABILITY_READINGS,
    "order": HISTORY_ORDERS,
}
#: Provenance reliability of a (user, assistant) turn under each reading without cues.
PROVENANCE = {"paper": (0.8, 0.4), "released": (0.7, 0.4)}


def resolve_readings(factor_set: str, readings: dict | None = None) -> dict:
    """The readings of ``factor_set`` (:data:`READINGS`) with ``readings`` laid over them, checked.

    >>> resolve_readings("released", {"self": "earlier"})["self"], resolve_readings("paper")["emotion"]
    ('earlier', 'vader')
    >>> resolve_readings("paper", {"colour": "blue"})
    Traceback (most recent call last):
    ...
    memlib._checks.ParameterError: unknown reading 'colour'; known: emotion, self, goal, reliability, order
    """
    check_choice("factor_set", factor_set, ALL_FACTOR_SETS)
    out = dict(READINGS[factor_set])
    for key, value in (readings or {}).items():
        if key not in _READING_CHOICES:
            raise ParameterError(f"unknown reading {key!r}; known: {', '.join(_READING_CHOICES)}")
        out[key] = check_choice(f"{key} reading", value, _READING_CHOICES[key])
    return out


_SENTENCE_END = re.compile(r"(?<=[.!?\n])\s+")


def _vader():
    global _VADER
    if _VADER is None:
        from vaderSentiment.vaderSentiment import SentimentIntensityAnalyzer

        _VADER = SentimentIntensityAnalyzer()
    return _VADER


def _pieces(text: str, size: int) -> list[str]:
    """Split ``text`` into pieces of at most about ``size`` characters at sentence ends (else white space)."""
    out, cur = [], ""
    for sent in _SENTENCE_END.split(text):
        while len(sent) > size:  # one very long "sentence": cut at the last space before the limit
            cut = sent.rfind(" ", 0, size)
            cut = cut if cut > 0 else size
            if cur:
                out.append(cur)
                cur = ""
            out.append(sent[:cut])
            sent = sent[cut:].lstrip()
        if cur and len(cur) + 1 + len(sent) > size:
            out.append(cur)
            cur = sent
        else:
            cur = f"{cur} {sent}" if cur else sent
    if cur:
        out.append(cur)
    return out


def _vader_sentiments(sia, text: str) -> list:
    """VADER's per-word valences of one text (the loop of ``polarity_scores``, without the final sum)."""
    from vaderSentiment.vaderSentiment import BOOSTER_DICT, SentiText

    sentitext = SentiText(text)
    words = sentitext.words_and_emoticons
    sentiments: list = []
    for i, item in enumerate(words):
        low = item.lower()
        if low in BOOSTER_DICT or (low == "kind" and i < len(words) - 1 and words[i + 1].lower() == "of"):
            sentiments.append(0)
            continue
        sentiments = sia.sentiment_valence(0, sentitext, item, i, sentiments)
    return sia._but_check(words, sentiments)


def vader_scores(text: str, piece_chars: int = VADER_PIECE_CHARS) -> dict:
    """VADER's ``polarity_scores`` with a bounded cost.

    Identical to ``SentimentIntensityAnalyzer().polarity_scores(text)`` for a
    text of at most ``piece_chars`` characters. A longer text is split into
    pieces (:data:`VADER_PIECE_CHARS`); the per-word valences of all pieces are
    summed into one compound score, so only VADER's look-back rules (three
    words) and its all-caps test see piece boundaries.

    >>> from vaderSentiment.vaderSentiment import SentimentIntensityAnalyzer
    >>> t = "I really LOVE this, but the ending was awful!!"
    >>> vader_scores(t) == SentimentIntensityAnalyzer().polarity_scores(t)
    True
    """
    sia = _vader()
    if not text.isascii():  # emoji descriptions (VADER's own loop, without its quadratic string growth)
        parts, prev_space = [], True
        for ch in text:
            desc = sia.emojis.get(ch)
            if desc is not None:
                if not prev_space:
                    parts.append(" ")
                parts.append(desc)
                prev_space = False
            else:
                parts.append(ch)
                prev_space = ch == " "
        text = "".join(parts)
    text = text.strip()
    if len(text) <= piece_chars:
        return sia.score_valence(_vader_sentiments(sia, text), text)
    sentiments = []
    for piece in _pieces(text, piece_chars):
        sentiments.extend(_vader_sentiments(sia, piece))
    return sia.score_valence(sentiments, text)


def _vader_features(texts) -> np.ndarray:
    """Per text: VADER compound, its sentiment share ``pos + neg``, and the structural arousal cue count."""
    from vaderSentiment.vaderSentiment import BOOSTER_DICT

    out = np.empty((len(texts), 3))
    for i, t in enumerate(texts):
        t = bounded(t)  # the first TEXT_BOUND characters: more than any real turn holds
        sc = vader_scores(t)
        cues = t.count("!") + len(_CAPS.findall(t)) + sum(w in BOOSTER_DICT for w in _WORDS.findall(t.lower()))
        out[i] = sc["compound"], sc["pos"] + sc["neg"], cues
    return out


#: Below this many texts :func:`emotion_features` runs in one process.
PARALLEL_MIN_TEXTS = 20000


def emotion_features(texts, workers: int | None = None) -> np.ndarray:
    """VADER features of each text, shape (n, 3): compound valence, sentiment share, arousal cues.

    Each text is read up to its first :data:`~memlib._text.TEXT_BOUND` characters
    (cut at white space: :func:`~memlib._text.bounded`), several times the longest
    turn of LoCoMo and LongMemEval, so a 200 MB turn costs about a second.
    ``workers`` processes share the texts (by default every core for at least
    :data:`PARALLEL_MIN_TEXTS` texts, else one); the result does not depend on it.
    """
    texts = list(texts)
    if workers is None:
        workers = (os.cpu_count() or 1) if len(texts) >= PARALLEL_MIN_TEXTS else 1
    if workers <= 1 or len(texts) < 2:
        return _vader_features(texts)
    import multiprocessing

    _vader()  # load the lexicon once, before the workers fork
    step = -(-len(texts) // (4 * workers))
    with multiprocessing.get_context("fork").Pool(workers) as pool:
        parts = pool.map(_vader_features, [texts[i : i + step] for i in range(0, len(texts), step)])
    return np.concatenate(parts)


def intensity_from_features(features: np.ndarray, arousal: str = "structural") -> np.ndarray:
    """Emotional intensity ``|valence| * arousal`` from :func:`emotion_features` (see :func:`emotion_and_valence`)."""
    check_choice("arousal", arousal, AROUSAL_READINGS)
    compound, share, cues = features[:, 0], features[:, 1], features[:, 2]
    if arousal == "constant":
        a = np.ones(len(features))
    elif arousal == "lexical":
        a = share
    else:
        a = 0.5 + 0.5 * np.minimum(1.0, cues / 3.0)
    return np.where(compound == 0.0, 0.0, np.abs(compound) * a)


def emotion_and_valence(
    texts, arousal: str = "structural", workers: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Emotional intensity and VADER compound valence of each text.

    Parameters
    ----------
    texts : sequence of str
    arousal : {'structural', 'constant', 'lexical'}
        How the arousal ``A`` of ``|valence| * A`` is read. ``structural`` (the
        default): ``0.5 + 0.5 * min(1, cues / 3)`` over exclamation marks,
        all-capital words and VADER's booster words. ``constant``: ``A = 1``, so
        intensity is ``|valence|``. ``lexical``: the share of VADER's words that
        carry sentiment (``pos + neg``).
    workers : int, optional
        Processes to use (see :func:`emotion_features`).
    """
    check_choice("arousal", arousal, AROUSAL_READINGS)
    feats = emotion_features(texts, workers)
    return intensity_from_features(feats, arousal), feats[:, 0]


def emotional_intensity(texts, arousal: str = "structural") -> np.ndarray:
    """``|VADER compound| * arousal`` for each text, in [0, 1] (see module docstring)."""
    return emotion_and_valence(texts, arousal)[0]


def reliability(roles, texts, cues: bool = True, provenance=PROVENANCE["paper"]) -> np.ndarray:
    """Provenance heuristic in [0, 1] (see module docstring).

    With ``cues=False`` (the paper's factor set) it is provenance only:
    ``provenance[0]`` (0.8) for a user-stated turn and ``provenance[1]`` (0.4) for
    a model-stated one; the released experiment reads 0.7 and 0.4
    (:data:`PROVENANCE`). The cues read a text's first
    :data:`~memlib._text.TEXT_BOUND` characters, as the emotion factor does.
    """
    user_value, model_value = provenance
    out = np.empty(len(texts))
    for i, (role, t) in enumerate(zip(roles, texts)):
        r = user_value if role == "user" else model_value
        if cues:
            s = bounded(t).strip()
            if s.endswith("?"):
                r *= 0.5
            if _HEDGES.search(s):
                r -= 0.2
            if role == "user" and not s.endswith("?") and _FIRST_PERSON.search(s):
                r += 0.2
        out[i] = min(1.0, max(0.0, r))
    return out


def _group_sum(X: np.ndarray, codes: np.ndarray, n_groups: int) -> np.ndarray:
    """Row sums of ``X`` per group code (a sorted ``reduceat``; much faster than ``np.add.at``)."""
    out = np.zeros((n_groups, X.shape[1]), dtype=np.float64)
    if len(codes):
        order = np.argsort(codes, kind="stable")
        sc = codes[order]
        starts = np.flatnonzero(np.r_[True, sc[1:] != sc[:-1]])
        out[sc[starts]] = np.add.reduceat(X[order].astype(np.float64), starts, axis=0)
    return out


def _cos01(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``(1 + cos) / 2`` row-wise for unit rows ``a`` and (unnormalised) rows ``b``; 0.5 where b is 0."""
    norm = np.linalg.norm(b, axis=1)
    dot = np.einsum("ij,ij->i", a, b)
    cos = np.divide(dot, norm, out=np.zeros_like(dot), where=norm > 0)
    return np.clip((1.0 + cos) / 2.0, 0.0, 1.0)


# --------------------------------------------------------------------------- goal anchors


class SessionCentroidAnchor:
    """Blind anchor: the centroid of the user turns of the turn's own session.

    It depends on the session only, never on the question (``per_question = False``).
    A session without user turns falls back to the centroid of all its turns.
    """

    name = "blind"
    per_question = False

    def prepare(self, ds: Dataset, E: np.ndarray) -> None:
        sess_codes = pd.factorize(ds.turns["session"])[0]
        user = (ds.turns["role"] == "user").to_numpy()
        S = sess_codes.max() + 1 if len(sess_codes) else 0
        cent_user = _group_sum(E[user], sess_codes[user], S)
        cent_all = _group_sum(E, sess_codes, S)
        has_user = np.bincount(sess_codes[user], minlength=S) > 0
        cent = np.where(has_user[:, None], cent_user, cent_all)
        self._turn_goal = _cos01(E, cent[sess_codes])

    def goal(self, ds: Dataset, case: int, rows: np.ndarray, E: np.ndarray, question_vec) -> np.ndarray:
        return self._turn_goal[rows]


class SessionOrHistoryAnchor(SessionCentroidAnchor):
    """Blind anchor of the released experiment: the session's user-turn centroid, else the history's.

    A session without user turns falls back to the centroid of the user turns
    of the turn's whole history (later sessions included), and to 0.5 when the
    history has none.
    """

    def prepare(self, ds: Dataset, E: np.ndarray) -> None:
        super().prepare(ds, E)
        sess_codes = pd.factorize(ds.turns["session"])[0]
        user = (ds.turns["role"] == "user").to_numpy()
        S = sess_codes.max() + 1 if len(sess_codes) else 0
        self._session_has_user = (np.bincount(sess_codes[user], minlength=S) > 0)[sess_codes]
        self._user = user

    def goal(self, ds: Dataset, case: int, rows: np.ndarray, E: np.ndarray, question_vec) -> np.ndarray:
        out = self._turn_goal[rows].copy()
        lone = ~self._session_has_user[rows]
        if lone.any():
            users = rows[self._user[rows]]
            cent = E[users].astype(np.float64).sum(axis=0, keepdims=True)
            out[lone] = _cos01(E[rows[lone]], np.broadcast_to(cent, (int(lone.sum()), E.shape[1])))
        return out


class EarlierInSessionAnchor(SessionCentroidAnchor):
    """Causal blind anchor: the centroid of the session's user turns strictly before the turn (0.5 for none)."""

    def prepare(self, ds: Dataset, E: np.ndarray) -> None:
        user = (ds.turns["role"] == "user").to_numpy()
        out = np.full(len(E), 0.5)
        for first, n in zip(ds.sessions["first_turn"], ds.sessions["n_turns"]):
            rows = np.arange(first, first + n)
            if n == 0:
                continue
            Eu = E[rows].astype(np.float64) * user[rows, None]
            before = np.cumsum(Eu, axis=0) - Eu
            out[rows] = _cos01(E[rows], before)
        self._turn_goal = out


class QuestionAnchor:
    """Oracle anchor: the held-out evaluation question (peeks at the future query)."""

    name = "oracle"
    per_question = True

    def prepare(self, ds: Dataset, E: np.ndarray) -> None:
        pass

    def goal(self, ds: Dataset, case: int, rows: np.ndarray, E: np.ndarray, question_vec) -> np.ndarray:
        return np.clip((1.0 + E[rows] @ question_vec) / 2.0, 0.0, 1.0)


#: Goal anchors by regime name; add a class with ``prepare`` and ``goal`` to try another blind anchor.
ANCHORS = {"blind": SessionCentroidAnchor, "oracle": QuestionAnchor}
#: Blind anchors by goal reading (:data:`GOAL_READINGS`).
BLIND_ANCHORS = {
    "session": SessionCentroidAnchor,
    "session_or_history": SessionOrHistoryAnchor,
    "earlier_in_session": EarlierInSessionAnchor,
}


# --------------------------------------------------------------------------- annotation


@dataclass
class Annotation:
    """Factor tables of a dataset in one regime.

    Attributes
    ----------
    cases : CaseSet
        Factors per haystack turn, ready for retention and learning.
    turn_rows : ndarray, shape (G, N)
        Row in ``dataset.turns`` of each haystack position (-1 for padding).
    inert : list of str
        Factors that are identically zero because their input was not given.
    info : dict
        Counts and timings of the run.
    """

    dataset: str
    regime: str
    cases: CaseSet
    turn_rows: np.ndarray
    inert: list
    info: dict = field(default_factory=dict)

    def turn_table(self, ds: Dataset, haystack: int = 0) -> pd.DataFrame:
        """One haystack's turns with their factor values (for reading and plotting)."""
        n = int(self.cases.length[haystack])
        rows = self.turn_rows[haystack, :n]
        t = ds.turns.iloc[rows][["session", "turn", "role", "speaker", "text", "timestamp"]].reset_index(drop=True)
        return pd.concat([t, pd.DataFrame(self.cases.factors[haystack, :n], columns=list(FACTORS))], axis=1)


def content_keys(cases: pd.DataFrame) -> list:
    """A key per case from its question and date alone (no identifier), which splits order groups by.

    >>> import pandas as pd
    >>> content_keys(pd.DataFrame({"question": ["Where?"], "question_date": [pd.NaT]}))
    ['1cf03dc0c1f05fc453084d3d']
    """
    return [
        hashlib.sha256(f"{q}\x1f{d}".encode("utf-8", "surrogatepass")).hexdigest()[:24]
        for q, d in zip(cases["question"], cases["question_date"])
    ]


def _source_version() -> str:
    from memlib.datasets import source_files

    here = Path(__file__).resolve().parent
    h = hashlib.sha256()
    for name in ("factors.py", "rule_emotion.py", "embeddings.py", "datasets", "metrics.py"):
        # the datasets package: every .py file of memlib/datasets/, sorted by name
        for path in source_files() if name == "datasets" else [here / name]:
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


def annotate(
    ds: Dataset,
    regime: str = "blind",
    *,
    factor_set: str = "paper",
    embedding="reference",
    device: str | None = None,
    arousal: str = "structural",
    self_reading: str | None = None,
    readings: dict | None = None,
    value_profile: str | None = None,
    task_utility=None,
    retrievals=None,
    use_cache: bool = True,
    progress: bool = True,
    max_seq_length: int | None = None,
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
    embedding : {'reference', 'fast', 'int8'} or int
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
    retrievals : array_like, optional
        Retrieval count per row of ``ds.turns``; makes usage history live.
    use_cache : bool
        Load / store the factor table in ``data/cache/factors`` (keyed by
        :func:`fingerprint`) and the embeddings in the embedding cache.
    max_seq_length : int, optional
        Deprecated spelling of ``embedding`` as a number of word pieces.
    """
    from memlib.embeddings import resolve_setting

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
    setting = max_seq_length if max_seq_length is not None else embedding
    max_seq_length, backend = resolve_setting(setting)
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
    E_text = np.zeros((len(ds.texts), 384), np.float32)
    E_text[used_texts] = embed(
        [ds.texts[i] for i in used_texts],
        max_seq_length=setting,
        progress=progress,
        use_cache=use_cache,
        device=device,
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
    value_col = (
        np.clip(
            (1.0 + E @ embed([value_profile], max_seq_length=setting, progress=False, use_cache=use_cache)[0]) / 2.0,
            0,
            1,
        )
        if value_profile
        else np.zeros(len(turns))
    )
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

    anchor = BLIND_ANCHORS[read["goal"]]() if regime == "blind" else ANCHORS[regime]()
    anchor.prepare(sub, E)
    qvecs = None
    if anchor.per_question:
        qvecs = embed(usable.cases["question"].tolist(), max_seq_length=setting, progress=progress, use_cache=use_cache)
    roles = turns["role"].to_numpy()
    speakers = turns["speaker"].to_numpy()
    t_days = ((turns["timestamp"] - day_zero) / pd.Timedelta(days=1)).to_numpy()

    hay_index: dict = {}
    factors, times, rows_list, case_h = [], [], [], []
    base: dict = {}  # per unique history: (rows, factors without the goal column, position of each row)
    first = dict(zip(sub.sessions["session"], sub.sessions["first_turn"]))
    count = dict(zip(sub.sessions["session"], sub.sessions["n_turns"]))
    gold = []
    session_codes = pd.factorize(turns["session"])[0]
    file_index = sub.cases["session_file_index"] if read["order"] == "file" else [None] * len(sub.cases)
    for c, (hay, gold_rows, in_file) in enumerate(zip(sub.cases["haystack"], sub.cases["gold"], file_index)):
        if in_file is not None:  # the history as its file lists it; its clock counts sessions
            hay = tuple(hay[k] for k in np.argsort(in_file, kind="stable"))
        if hay not in base:
            parts = [np.arange(first[s], first[s] + count[s]) for s in hay]
            rows = np.concatenate(parts)
            clock = np.repeat(np.arange(len(parts), dtype=np.float64), [len(p) for p in parts])
            F = np.zeros((len(rows), len(FACTORS)), np.float32)
            F[:, 0] = emotion[rows]
            F[:, 2] = value_col[rows]
            F[:, 3] = _self_relevance(E[rows], roles[rows], speakers[rows], read["self"], session_codes[rows])
            F[:, 4] = task_col[rows]
            F[:, 5] = rel[rows]
            F[:, 6] = usage_col[rows]
            base[hay] = (rows, F, {r: i for i, r in enumerate(rows)}, clock if in_file is not None else t_days[rows])
        rows, F0, pos, t_rows = base[hay]
        key_h = (hay, c) if anchor.per_question else hay
        if key_h not in hay_index:
            F = F0.copy()
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
    centroid of the user's strictly earlier turns; ``inclusive`` puts a user turn
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
    user = roles == "user"
    out = np.full(len(E), 0.5)
    ends = _session_ends(sessions) if reading == "through_session" else None

    def centroids(X, cum_rows=None):
        if reading == "history":
            return np.broadcast_to(X.sum(axis=0, keepdims=True), X.shape)
        cum = np.cumsum(X, axis=0)
        if reading == "through_session":
            return cum[cum_rows]
        return cum - (0 if reading == "inclusive" else X)

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
    """The released rule-based intensity per text id (0 where unused), remembered like :func:`_text_emotion`."""
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
        feats[used] = emotion_features([texts[i] for i in used])
        _EMOTION_MEMO[:] = [texts, used, feats]
    return intensity_from_features(feats, arousal)


def peak_rss_gb() -> float:
    """Peak resident memory of this process so far, in GB (Linux and macOS)."""
    import resource
    import sys

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return round(peak / (1e9 if sys.platform == "darwin" else 1e6), 3)


def save_annotation(ann: Annotation, path) -> None:
    """Write an annotation as one ``.npz`` (atomic; no pickle)."""
    cs = ann.cases
    atomic_savez(
        path,
        factors=cs.factors,
        time=cs.time,
        length=cs.length,
        case_haystack=cs.case_haystack,
        gold_case=cs.gold_case,
        gold_pos=cs.gold_pos,
        case_ids=cs.case_ids.astype(str),
        groups=cs.groups.astype(str),
        keys=cs.keys.astype(str),
        turn_rows=ann.turn_rows,
        meta=np.array(json.dumps({"dataset": ann.dataset, "regime": ann.regime, "inert": ann.inert, "info": ann.info})),
    )


def load_annotation(path) -> Annotation:
    """Read an annotation written by :func:`save_annotation`.

    A damaged file (truncated, overwritten, missing arrays, or values no annotation
    holds: NaN or out-of-range factors, see :func:`_check_table`) raises a
    :class:`~memlib.datasets.DatasetError` that names it.
    """
    names = ("factors", "time", "length", "case_haystack", "gold_case", "gold_pos", "case_ids", "groups", "keys")
    try:
        z = read_npz(path, (*names, "turn_rows", "meta"))
        meta = json.loads(str(z["meta"]))
        cs = CaseSet(*(z[name] for name in names))
        _check_table(cs, z["turn_rows"])
        return Annotation(meta["dataset"], meta["regime"], cs, z["turn_rows"], meta["inert"], meta["info"])
    except CORRUPT_ERRORS + (TypeError,) as exc:
        raise DatasetError(f"{path}: not a readable factor table ({type(exc).__name__}: {exc})") from exc


def _check_table(cs: CaseSet, turn_rows: np.ndarray) -> None:
    """Raise ValueError unless a factor table read back holds what :func:`annotate` writes.

    Factors are finite and in [0, 1] (each factor is), times finite, and ``turn_rows`` one
    integer row per haystack position (-1 for padding): a table of NaN factors would
    otherwise be read as valid and give NaN retention without a word.
    """
    F = cs.factors
    if F.dtype.kind != "f" or not np.isfinite(F).all():
        raise ValueError(f"{int(np.size(F) - np.isfinite(F).sum())} factor values are not finite (NaN or infinite)")
    if F.size and (F.min() < 0 or F.max() > 1):
        raise ValueError(f"factor values run from {F.min():g} to {F.max():g}, outside [0, 1]")
    if cs.time.dtype.kind != "f" or not np.isfinite(cs.time).all():
        raise ValueError("turn times are not all finite")
    if turn_rows.dtype.kind not in "iu" or turn_rows.shape != F.shape[:2]:
        raise ValueError(f"turn rows of shape {turn_rows.shape} and dtype {turn_rows.dtype} do not match the factors")
