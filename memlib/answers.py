"""The answer-string measure of forgetting: is a question's answer still in a turn the store kept.

Gold retention (:mod:`memlib.metrics`) reads a corpus's evidence labels. Where a corpus also
gives each question's answer string (LoCoMo's and LongMemEval's ``answer``; RealMem gives
none), a second measure reads no label: find the turns of the question's history that hold the
answer as whole words, and ask whether the store kept one of them. It can only read answers
that appear in the history as written, and only those rare enough to single out their turns.
"""

from __future__ import annotations

import re

import numpy as np

#: An answer found in more turns of its history than this does not single out its evidence (a count
#: like "2", a "yes"): :func:`answer_turns` leaves its question out of the answer metric.
ANSWER_MAX_TURNS = 3


def normalise_answer(text) -> str:
    """Return ``text`` lowercased as words of letters and digits, one space apart, with a space at each end.

    What the answer metric compares, so that "7 May 2023." is found in "on 7 may 2023, we".

    >>> normalise_answer("Psychology, counseling certification!")
    ' psychology counseling certification '
    >>> normalise_answer(2022)
    ' 2022 '
    """
    return " " + " ".join(re.findall(r"[a-z0-9]+", str(text).lower())) + " "


def answer_turns(texts, answer) -> np.ndarray | None:
    """Positions of the turns of a history whose text holds the question's answer string, or None.

    ``texts`` are the history's turns, ``answer`` the answer string a corpus gives (LoCoMo's
    and LongMemEval's ``answer``). The answer must appear as whole words (normalised by
    :func:`normalise_answer`). ``None`` when there is no answer (``None`` or ``""``), when it appears in no turn
    (a paraphrase: the metric cannot read it) or in more than :data:`ANSWER_MAX_TURNS` turns.

    >>> answer_turns(["I moved to Lyon.", "Lyon is lovely.", "ok"], "Lyon").tolist()
    [0, 1]
    >>> answer_turns(["I have 2 dogs."], "a cat") is None, answer_turns(["x 2", "2 y", "2", "z 2"], 2) is None
    (True, True)
    """
    a = "" if answer is None else normalise_answer(answer)
    if not a.strip():
        return None
    hits = np.array([a in normalise_answer(t) for t in texts], dtype=bool)
    return np.flatnonzero(hits) if 1 <= hits.sum() <= ANSWER_MAX_TURNS else None


__all__ = ["ANSWER_MAX_TURNS", "answer_turns", "normalise_answer"]
