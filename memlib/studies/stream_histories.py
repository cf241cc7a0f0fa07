"""The histories of the stream study (chapter 06): each question's haystack cut at its date, and how they nest.

:func:`stream_histories` cuts each usable, non-abstention question's haystack at the
question's date (LongMemEval's ``question_date``; RealMem's questions are asked inside their
persona's stream), so that questions asked at one point share one history;
:func:`history_chains` finds the histories nested in one another, which
:func:`memlib.studies.stream.stream` replays through one store; :func:`history_frame` gives a
history's turns as a store takes them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from memlib._checks import ParameterError


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


@dataclass(frozen=True)
class StreamHistories:
    """The histories of a stream study: a haystack cut at its questions' date, and the questions asked there.

    Attributes
    ----------
    cases : DataFrame
        The usable questions that are not abstentions.
    rows : list of ndarray
        Per history, its turns (rows of ``ds.turns``, in time order, those with text).
    sessions : list of tuple
        Per history, its sessions (so that nested histories can be found).
    questions : list of list of int
        Per history, its questions (rows of ``cases``).
    golds : list of list of set
        Per history and question, the gold positions in the history.
    dated : bool
        Whether the questions have dates (then scored at session level too).
    without_text : int
        Turns without text, left out (a store refuses them; none is gold in our corpora).
    """

    cases: pd.DataFrame
    rows: list
    sessions: list
    questions: list
    golds: list
    dated: bool
    without_text: int


def stream_histories(ds) -> StreamHistories:
    """Cut each usable, non-abstention question's haystack at its date; questions asked at one point share it."""
    usable = ds.usable()
    usable = usable.with_cases(usable.cases[~usable.cases["case_id"].astype(str).str.endswith("_abs")])
    cases = usable.cases
    if not len(cases):
        raise ParameterError(f"{ds.name}: no usable question (with gold turns, not an abstention) to stream")
    session_date = dict(zip(ds.sessions["session"], ds.sessions["date"]))
    n_turns = ds.sessions.set_index("session")["n_turns"]
    qdates = cases["question_date"]
    histories: dict = {}
    for c, hay in enumerate(cases["haystack"]):
        cut = len(hay) if pd.isna(qdates.iloc[c]) else sum(session_date[x] <= qdates.iloc[c] for x in hay)
        histories.setdefault((hay, cut), []).append(c)
    # a turn without text is none a store can hold (MemoryStore.add refuses it): it is left out of the history, and
    # the budget is a share of the turns that remain (RealMem has 6 such turns, LongMemEval-S 12, none of them gold)
    has_text = np.array([bool(str(t).strip()) for t in ds.turns["text"]], dtype=bool)
    rows, golds, no_text = [], [], set()
    for (hay, cut), case_list in histories.items():
        hrows = usable.haystack_rows(case_list[0])[: int(n_turns.loc[list(hay[:cut])].sum())]
        no_text.update(hrows[~has_text[hrows]].tolist())
        hrows = hrows[has_text[hrows]]
        pos_of_row = {r: i for i, r in enumerate(hrows)}
        rows.append(hrows)
        golds.append([{pos_of_row[g] for g in cases["gold"].iloc[c] if g in pos_of_row} for c in case_list])
    sessions = [hay[:cut] for hay, cut in histories]
    return StreamHistories(
        cases, rows, sessions, list(histories.values()), golds, bool(qdates.notna().any()), len(no_text)
    )
