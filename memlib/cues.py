"""A library of cheap, blind cues that refine the paper's factors.

The paper fixes seven factors and learns their mixture. Each heuristic inside a
factor (provenance, "a question asserts nothing", hedges, ...) is a choice of
constants made by looking at data. Here every such heuristic is broken into a
primitive *cue* that a learner can weigh, with a sign, from the retention
objective itself.

Every cue is a function of a turn and its past, never of a question:

* **text cues** read the turn's own text (regular expressions; no model;
  :data:`TEXT_CUES`, defined with the factors' word lists in :mod:`memlib.text_cues`);
* **turn cues** read its role, speaker and place in its session;
* **history cues** read the sentence embeddings (:mod:`memlib.embeddings`, the
  cache the factors use) of the turn and of earlier turns of the history;
* **the role cue** ``self_talk`` reads who, in this history, talks about
  themselves (:func:`~memlib.history_cues.self_talk`): a role relative to the conversation, so that it
  means the same in person-person chat, where every turn's role is ``user``, and
  in user-assistant chat;
* **paper cues** are the paper's blind goal, self and emotion factors, read from
  the factor annotation (:func:`memlib.factors.annotate`).

*The past* of a turn is everything up to the end of its own session: the agent
consolidates a session when it ends, the horizon at which the paper's blind
goal anchor (the session's user centroid) exists too. Only ``age`` reads the
end of the history, the moment the keep/drop decision is taken; the paper's
recency factor reads the same.

:data:`CUES` lists every cue with its *group* (the unit of the ablation), the
paper factor it refines (its cognitive grounding) and what it computes.
:func:`compute_cues` returns a :class:`CueTable` aligned with a factor
annotation's :class:`~memlib.cases.CaseSet`: values of shape ``(G, N, K)``.
:meth:`CueTable.calibrated` maps each cue to its percentile rank within its
history, so that weights on different cues are comparable.

>>> [c.name for c in CUES][:4]
['is_user', 'opens_session', 'self_talk', 'is_question']
>>> text_cues(["I moved to Lisbon on 3 May 2023.", "Maybe later?"]).astype(float).round(2).tolist()[1]
[1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.1]
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from memlib import FACTORS
from memlib._checks import ParameterError
from memlib.history_cues import first_person_words, novelty, redundancy, self_talk
from memlib.online import session_starts
from memlib.text_cues import TEXT_CUES, text_cues


@dataclass(frozen=True)
class Cue:
    """One cue: its name, ablation group, the paper factor it refines, and what it computes."""

    name: str
    group: str
    factor: str
    description: str


#: Every cue, in column order. ``factor`` names the paper factor (Table 1) the cue refines, or
#: ``recency (eq. 3)`` for the time and position cues, which belong to the forgetting dynamics.
CUES: tuple[Cue, ...] = (
    Cue("is_user", "provenance", "reliability", "1 for a user's turn, 0 for an assistant's (user-stated first)"),
    Cue(
        "opens_session",
        "provenance",
        "reliability",
        "1 if the turn's speaker is the one who opened its session (person-person chat: who started talking)",
    ),
    Cue(
        "self_talk",
        "role",
        "self_relevance",
        "the speaker's first-person words per word so far, over the highest such rate of any speaker so far "
        "(1: the one who talks most about themselves, whatever the corpus calls them)",
    ),
    Cue("is_question", "assertion", "reliability", "1 if the turn ends with a question mark: it asks, asserts nothing"),
    Cue("hedge", "assertion", "reliability", "1 if the turn hedges (maybe, I think, not sure, ...)"),
    Cue(
        "first_person",
        "assertion",
        "self_relevance",
        "1 if the turn is a first-person statement (I, my, we, ...; not a question)",
    ),
    Cue("numbers", "density", "task_utility", "log(1 + count of numbers)"),
    Cue("dates", "density", "task_utility", "log(1 + count of dates and times: month and day names, 10:30, 2023, ...)"),
    Cue("names", "density", "task_utility", "log(1 + count of capitalised words that do not open a sentence)"),
    Cue("length", "density", "task_utility", "log(1 + length in white-space tokens)"),
    Cue(
        "novelty",
        "novelty",
        "task_utility",
        "1 - max cosine to the earlier turns of the history (surprise; 1 for the first turn)",
    ),
    Cue("redundancy", "novelty", "task_utility", "max cosine to the other turns of its session (0 when alone)"),
    Cue(
        "first_in_session",
        "position",
        "recency (eq. 3)",
        "1 for the first turn of its session (a store knows it when the turn arrives)",
    ),
    Cue("position_in_session", "position", "recency (eq. 3)", "turn index / (session turns - 1): 0 first, 1 last"),
    Cue("age", "time", "recency (eq. 3)", "log(1 + days from the turn to the end of its history)"),
    Cue("goal", "paper", "goal_relevance", "the paper's blind goal relevance (cosine to its session's user centroid)"),
    Cue("self", "paper", "self_relevance", "the paper's self relevance (cosine to the user's earlier turns)"),
    Cue("emotion", "paper", "emotional_intensity", "the paper's emotional intensity (|VADER valence| x arousal)"),
)
CUE_NAMES = tuple(c.name for c in CUES)
#: Ablation groups in column order.
CUE_GROUPS = tuple(dict.fromkeys(c.group for c in CUES))
#: Cue groups that can reflect how a benchmark placed its evidence rather than what a turn says.
POSITION_GROUP = "position"
#: The relative role cue (:func:`self_talk`): the factor of the role products of the ``cues_relative`` model.
#: It is one of :data:`CUES`, so the ``cues`` model (every cue) reads it too: it is blind and causal
#: like the other history cues, and it is the only role cue that varies in every corpus
#: (``is_user`` is constant in person-person chat).
ROLE_CUE = "self_talk"
_PAPER_COLUMNS = {"goal": FACTORS.index("goal_relevance"), "self": FACTORS.index("self_relevance"), "emotion": 0}
#: The cues a live store computes for every item (:func:`store_cues`): each is a function of the
#: item's own text, its role, whether it opened its session and the store's paper factors, all known
#: when the turn arrives, so a store reopened from its file computes the same values. The history cues
#: (novelty, redundancy) would need the turns a store has already forgotten; ``position_in_session``
#: needs the session's length, known only when it ends, and ``age`` the moment of the decision, so they
#: are left out. ``first_in_session`` is in: a store sees a session open (see :mod:`memlib.studies.defaults`
#: for what it is worth on each corpus held out, and why it was added).
STORE_CUES = ("is_user", *TEXT_CUES, "first_in_session", "goal", "self", "emotion")
#: The store cues a store holds per item beside its factors (:func:`item_cues`): the first of :data:`STORE_CUES`.
ITEM_CUES = STORE_CUES[: 2 + len(TEXT_CUES)]
#: Columns of :data:`memlib.FACTORS` that hold the last three store cues (goal, self, emotion).
STORE_FACTOR_COLUMNS = [_PAPER_COLUMNS[k] for k in ("goal", "self", "emotion")]


@dataclass
class CueTable:
    """Cue values of every turn of every history, aligned with a :class:`~memlib.cases.CaseSet`.

    Attributes
    ----------
    values : ndarray, shape (G, N, K), float32
        Cue ``k`` of the turn at position ``n`` of history ``g``; padding is 0.
    names : tuple of str
        The ``K`` cue names (a subset of :data:`CUE_NAMES`, in its order).
    length : ndarray, shape (G,)
        Real turns per history.
    calibrated_ : bool
        Whether values are percentile ranks within each history.
    seconds : dict
        Seconds spent per cue kind (``text``, ``turn``, ``history``, ``paper``) when computed.
    n_turns : int
        Turn occurrences the computation covered (for costs per 1,000 turns).
    """

    values: np.ndarray
    names: tuple
    length: np.ndarray
    calibrated_: bool = False
    seconds: dict = field(default_factory=dict)
    n_turns: int = 0

    def __post_init__(self):
        if self.values.ndim != 3 or self.values.shape[2] != len(self.names):
            raise ParameterError("cue values must be (G, N, K) with one name per column")

    @property
    def valid(self) -> np.ndarray:
        """(G, N) mask of real turns."""
        return np.arange(self.values.shape[1])[None, :] < self.length[:, None]

    def select(self, names=None, drop_groups=()) -> CueTable:
        """Return the table restricted to ``names`` (default: all) minus every cue of ``drop_groups``."""
        names = self.names if names is None else tuple(names)
        unknown = set(names) - set(self.names)
        if unknown:
            raise ParameterError(f"unknown cues: {', '.join(sorted(unknown))}")
        bad = set(drop_groups) - set(CUE_GROUPS)
        if bad:
            raise ParameterError(f"unknown cue groups: {', '.join(sorted(bad))}")
        group = {c.name: c.group for c in CUES}
        keep = [n for n in names if group[n] not in drop_groups]
        idx = [self.names.index(n) for n in keep]
        return CueTable(self.values[..., idx], tuple(keep), self.length, self.calibrated_, self.seconds, self.n_turns)

    def subset(self, haystacks) -> CueTable:
        """Return the histories at the given indices, padded to their longest (as :meth:`CaseSet.subset`)."""
        haystacks = np.asarray(haystacks, dtype=np.int64)
        length = self.length[haystacks]
        N = int(length.max()) if len(length) else 0
        return CueTable(
            np.ascontiguousarray(self.values[haystacks, :N]),
            self.names,
            length,
            self.calibrated_,
            self.seconds,
            self.n_turns,
        )

    def calibrated(self) -> CueTable:
        """Each cue as its percentile rank within its history, in [0, 1] (ties share their mean rank).

        A constant cue maps to 0.5. Padding stays 0.

        >>> t = CueTable(np.array([[[3.0], [1.0], [1.0], [0.0]]], np.float32), ("length",), np.array([3]))
        >>> t.calibrated().values[0, :, 0].tolist()
        [1.0, 0.25, 0.25, 0.0]
        """
        from scipy.stats import rankdata

        out = np.zeros_like(self.values)
        for g, n in enumerate(self.length):
            if n == 1:
                out[g, 0] = 0.5
            elif n > 1:
                out[g, :n] = (rankdata(self.values[g, :n], axis=0) - 1.0) / (n - 1)
        return CueTable(out, self.names, self.length, True, self.seconds, self.n_turns)

    def cost_table(self) -> pd.DataFrame:
        """Return the cue table: group, the factor it refines, description and milliseconds per 1,000 turns.

        The cost of a kind of cue (text, turn, history, paper) is shared equally by its cues;
        the paper cues cost what reading them from the annotation costs (their own cost is the
        annotation's).
        """
        kind = _kinds()
        per = {k: sum(1 for c in CUES if kind[c.name] == k) for k in set(kind.values())}
        rows = []
        for c in CUES:
            if c.name not in self.names:
                continue
            sec = self.seconds.get(kind[c.name], np.nan) / per[kind[c.name]]
            rows.append(
                {
                    "cue": c.name,
                    "group": c.group,
                    "refines": c.factor,
                    "kind": kind[c.name],
                    "what": c.description,
                    "ms_per_1000_turns": 1e6 * sec / max(self.n_turns, 1),
                }
            )
        return pd.DataFrame(rows)


def _kinds() -> dict:
    kind = {n: "text" for n in TEXT_CUES}
    kind.update({n: "turn" for n in ("is_user", "opens_session", "first_in_session", "position_in_session", "age")})
    kind.update({n: "history" for n in ("novelty", "redundancy", ROLE_CUE)})
    kind.update({n: "paper" for n in _PAPER_COLUMNS})
    return kind


def compute_cues(ds, annotation, embedding_setting: str = "fast", progress: bool = False) -> CueTable:
    """Every cue of :data:`CUES` for every history of a blind factor annotation.

    Parameters
    ----------
    ds : memlib.datasets.Dataset
        The dataset that was annotated.
    annotation : memlib.factors.Annotation
        Its **blind** annotation (the paper cues are read from it; the oracle one reads the question).
    embedding_setting : {'fast', 'reference', 'int8'}
        The embedding setting of the history cues (served from the cache the annotation filled).
    progress : bool
        Show the embedding progress bar when texts are missing from the cache.

    Returns
    -------
    CueTable
        Aligned with ``annotation.cases``: history ``g``, position ``n`` is row
        ``annotation.turn_rows[g, n]`` of ``ds.turns``.
    """
    from memlib.embeddings import embed_text_table

    if annotation.regime != "blind":
        raise ParameterError(f"cues are blind: pass the blind annotation, not the {annotation.regime!r} one")
    cs = annotation.cases
    rows_gn = annotation.turn_rows
    valid = rows_gn >= 0
    turns = ds.turns
    seconds = {}

    t0 = time.perf_counter()
    text_ids = turns["text_id"].to_numpy()
    used_texts = np.unique(text_ids[np.unique(rows_gn[valid])])
    T = np.zeros((len(ds.texts), len(TEXT_CUES)), np.float32)
    T[used_texts] = text_cues([ds.texts[i] for i in used_texts])
    seconds["text"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    sess_code, _ = pd.factorize(turns["session"])
    cols = _turn_cues(turns, sess_code)
    last_t = np.array([cs.time[g, n - 1] if n else 0.0 for g, n in enumerate(cs.length)])
    age = np.where(valid, np.log1p(np.maximum(last_t[:, None] - cs.time, 0.0)), 0.0)
    seconds["turn"] = time.perf_counter() - t0

    t_embed = time.perf_counter()
    E_text = embed_text_table(ds.texts, used_texts, embedding_setting, progress=progress)
    t0 = time.perf_counter()
    seconds["embeddings_from_cache"] = t0 - t_embed
    history = _history_cues(ds, rows_gn, cs.length, E_text, used_texts, sess_code)
    seconds["history"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    rr = np.where(valid, rows_gn, 0)
    cols = {k: v[rr] for k, v in cols.items()}
    cols.update(history, age=age)
    first = np.zeros(rr.shape, np.float32)
    for g, n in enumerate(cs.length):  # as a store sees it: each turn against the one before it in the history
        first[g, :n] = first_in_session(sess_code[rows_gn[g, :n]])
    cols["first_in_session"] = first
    cols.update({name: T[text_ids[rr], j] for j, name in enumerate(TEXT_CUES)})
    cols.update({name: cs.factors[..., j] for name, j in _PAPER_COLUMNS.items()})
    V = np.stack([cols[name] for name in CUE_NAMES], axis=-1).astype(np.float32)
    V[~valid] = 0.0
    seconds["paper"] = time.perf_counter() - t0
    return CueTable(V, CUE_NAMES, cs.length.copy(), False, seconds, int(cs.length.sum()))


def _turn_cues(turns: pd.DataFrame, sess_code: np.ndarray) -> dict:
    """Return the turn cues that read a turn's role, speaker and place in its session, per row of ``turns``."""
    turn_idx = turns["turn"].to_numpy()
    n_sess = np.bincount(sess_code)[sess_code]
    opener = turns.groupby(sess_code, sort=False)["speaker"].transform("first").to_numpy()
    return {
        "is_user": (turns["role"].to_numpy() == "user").astype(np.float32),
        "opens_session": (turns["speaker"].to_numpy() == opener).astype(np.float32),
        "position_in_session": np.where(n_sess > 1, turn_idx / np.maximum(n_sess - 1, 1), 0.0).astype(np.float32),
    }


def _history_cues(ds, rows_gn: np.ndarray, length: np.ndarray, E_text: np.ndarray, used_texts, sess_code) -> dict:
    """Return the history cues (:mod:`memlib.history_cues`) of every history, shape (G, N) each, padding 0.

    ``rows_gn`` maps each history's positions to rows of ``ds.turns``; ``E_text`` holds the
    embeddings of the texts at ``used_texts``; ``sess_code`` codes each row's session.
    """
    turns = ds.turns
    text_ids = turns["text_id"].to_numpy()
    FP = np.zeros((len(ds.texts), 2))
    FP[used_texts] = first_person_words([ds.texts[i] for i in used_texts])
    speaker_code, _ = pd.factorize(turns["speaker"])
    out = {name: np.zeros(rows_gn.shape, np.float32) for name in ("novelty", "redundancy", ROLE_CUE)}
    for g in range(rows_gn.shape[0]):
        n = int(length[g])
        r = rows_gn[g, :n]
        E = E_text[text_ids[r]]
        out["novelty"][g, :n] = novelty(E)
        out["redundancy"][g, :n] = redundancy(E, sess_code[r])
        out[ROLE_CUE][g, :n] = self_talk(speaker_code[r], FP[text_ids[r], 0], FP[text_ids[r], 1], sess_code[r])
    return out


def store_cues(texts, roles, first, factors) -> np.ndarray:
    """Return the :data:`STORE_CUES` of items with these texts, roles, session openings and (n, 7) factors: (n, 12).

    The same definitions as :func:`compute_cues`: ``is_user`` from the role, the text cues
    from :func:`text_cues`, ``first_in_session`` as given (1 for an item that opened its
    session, :func:`first_in_session`), and the paper's goal, self and emotion factors from
    ``factors`` (columns of :data:`memlib.FACTORS`).

    >>> F = np.zeros((1, 7)); F[0, 1], F[0, 3] = 0.9, 0.6
    >>> store_cues(["My sister Ana visits on Friday."], ["user"], [True], F).round(2).tolist()
    [[1.0, 0.0, 0.0, 1.0, 0.0, 0.69, 1.1, 1.95, 1.0, 0.9, 0.6, 0.0]]
    """
    factors = np.asarray(factors, dtype=np.float64).reshape(-1, len(FACTORS))
    n = len(factors)
    if len(texts) != n or len(roles) != n or len(first) != n:
        raise ParameterError(
            f"store_cues needs one text, one role and one session opening per factor row ({n}), "
            f"got {len(texts)}, {len(roles)}, {len(first)}"
        )
    return join_store_cues(item_cues(texts, roles, first), factors)


def join_store_cues(item_cue_rows, factors) -> np.ndarray:
    """Join the cues a store holds per item (:func:`item_cues`) with the paper factors the store cues read.

    The one assembly of :data:`STORE_CUES` from what a store holds per item: rows of
    ``(n, 9)`` and ``(n, 7)`` give ``(n, 12)``; a single item's ``(9,)`` and ``(7,)`` give ``(12,)``.

    >>> join_store_cues(np.arange(9.0), np.arange(7.0) / 10).tolist()[-4:]
    [8.0, 0.1, 0.3, 0.0]
    """
    item_cue_rows, factors = np.asarray(item_cue_rows, dtype=np.float64), np.asarray(factors, dtype=np.float64)
    return np.concatenate([item_cue_rows, factors[..., STORE_FACTOR_COLUMNS]], axis=-1)


def item_cues(texts, roles, first) -> np.ndarray:
    """``is_user``, the text cues and ``first_in_session`` of each item, shape (n, 9): :data:`ITEM_CUES`.

    The part of the store cues the factors do not hold (:func:`store_cues` adds the rest);
    ``first`` says, per item, whether it opened its session (:func:`first_in_session`).
    """
    user = np.array([r == "user" for r in roles], dtype=np.float64).reshape(-1, 1)
    first = np.asarray(first, dtype=np.float64).reshape(-1, 1)
    if len(first) != len(user):
        raise ParameterError(f"item_cues needs one session opening per item ({len(user)}), got {len(first)}")
    return np.hstack([user, text_cues(texts).astype(np.float64).reshape(len(user), len(TEXT_CUES)), first])


def first_in_session(sessions, previous=None) -> np.ndarray:
    """1.0 for each turn that opens its session: its session differs from the turn's before it.

    ``sessions`` are the sessions of consecutive turns (labels or codes); ``previous`` is the
    session of the turn before the first (None: the first turn opens one). What a store sees
    when a turn arrives (:meth:`memlib.store.MemoryStore.add` passes its current session), and
    what :func:`compute_cues` reads of a history.

    >>> first_in_session(["mon", "mon", "tue", "tue"]).tolist()
    [1.0, 0.0, 1.0, 0.0]
    >>> first_in_session(["mon", "tue"], previous="mon").tolist()
    [0.0, 1.0]
    """
    s = list(sessions)
    out = np.zeros(len(s))
    if s:
        out[session_starts(s)] = 1.0  # the online annotator's rule: a new label starts a session
        out[0] = float(s[0] != previous)
    return out


def cue_table(seconds: dict | None = None, n_turns: int = 0) -> pd.DataFrame:
    """Return the documented cue list (:data:`CUES`) as a table, with costs when ``seconds`` are given.

    >>> cue_table().groupby("group", sort=False).size().to_dict()["density"]
    4
    """
    return CueTable(
        np.zeros((0, 0, len(CUES)), np.float32), CUE_NAMES, np.zeros(0, np.int64), False, seconds or {}, n_turns
    ).cost_table()


__all__ = [
    "CUES",
    "CUE_GROUPS",
    "CUE_NAMES",
    "Cue",
    "CueTable",
    "compute_cues",
    "cue_table",
    "first_in_session",
    "first_person_words",
    "item_cues",
    "join_store_cues",
    "novelty",
    "redundancy",
    "self_talk",
    "text_cues",
]
