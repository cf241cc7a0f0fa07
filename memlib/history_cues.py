"""The cues of a turn that read its history: novelty, redundancy and self talk (:data:`memlib.cues.CUES`).

Each is computed over one history at a time, in order, from the turns' sentence embeddings
or words, and reads only the turn's past: everything up to the end of its own session (the
horizon of :mod:`memlib.cues`). :func:`memlib.cues.compute_cues` runs them on every history.
"""

from __future__ import annotations

import numpy as np


def novelty(E: np.ndarray) -> np.ndarray:
    """``1 - max cosine`` of each unit row of ``E`` to the rows before it (1 for the first row).

    >>> E = np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]], np.float32)
    >>> novelty(E).tolist()
    [1.0, 0.0, 1.0]
    """
    n = len(E)
    out = np.ones(n, np.float32)
    if n > 1:
        S = E @ E.T
        S[np.triu_indices(n)] = -np.inf
        out[1:] = 1.0 - np.clip(S[1:].max(axis=1), -1.0, 1.0)
    return out


def first_person_words(texts) -> np.ndarray:
    """First-person words and words of each text, shape (n, 2), float64.

    A text is read as :func:`memlib.text_cues.text_cues` reads it: its first :data:`memlib._text.TEXT_BOUND`
    characters, split into words (letters, with one inner apostrophe), a word being first person
    when it is one of :data:`memlib.text_cues.FIRST_PERSON_WORDS` in lower case.

    >>> first_person_words(["I think my sister moved.", "Here is a recipe for you."]).tolist()
    [[2.0, 5.0], [0.0, 6.0]]
    """
    from memlib._text import bounded
    from memlib.text_cues import _FIRST_WORDS, _WORD  # the first_person text cue's word reading

    out = np.zeros((len(texts), 2))
    for i, t in enumerate(texts):
        words = _WORD.findall(bounded(str(t)))
        out[i] = (sum(w.lower() in _FIRST_WORDS for w in words), len(words))
    return out


def self_talk(speaker, first_person, words, session) -> np.ndarray:
    """Each turn's *self talk* in one history: its speaker's rate of first-person words, over the highest rate.

    A speaker's rate is its first-person words per word over its turns from the history's start to
    the end of the turn's session (its past; later sessions change nothing);
    the cue divides it by the highest rate of any speaker over the same turns. So the speaker who,
    so far, talks most about themselves gets 1, whatever the corpus calls the speakers or their
    roles: in user-assistant chat that is (nearly always) the user, in person-person chat each
    speaker gets about 1. While no speaker has said a first-person word, every turn gets 1 (no
    speaker stands out).

    A rate per word, not per turn: the binary ``first_person`` text cue is more common among the
    assistant's turns of LongMemEval-S than among the user's (the user's turns are mostly questions,
    which it does not count, and an assistant's long answers almost always hold an "I"), while the
    assistant's first-person words per word are a fraction of the user's.

    Parameters
    ----------
    speaker : array_like, shape (n,)
        Who says each turn, in history order (any labels).
    first_person, words : array_like, shape (n,)
        First-person words and words of each turn (:func:`first_person_words`).
    session : array_like, shape (n,)
        Each turn's session (any labels; a session's turns are contiguous).

    Returns
    -------
    ndarray, shape (n,), float32
        In [0, 1].

    >>> self_talk(["a", "b", "a", "b"], [2, 0, 1, 1], [4, 5, 4, 5], [0, 0, 1, 1]).astype(float).round(2).tolist()
    [1.0, 0.0, 1.0, 0.27]
    """
    speaker = np.asarray(speaker)
    n = len(speaker)
    if n == 0:
        return np.zeros(0, np.float32)
    _, who = np.unique(speaker, return_inverse=True)
    _, sess = np.unique(np.asarray(session), return_inverse=True)
    end = np.zeros(sess.max() + 1, np.int64)
    np.maximum.at(end, sess, np.arange(n))  # each session's last position
    one = np.zeros((n, who.max() + 1))
    one[np.arange(n), who] = 1.0
    fp = np.cumsum(one * np.asarray(first_person, dtype=np.float64)[:, None], axis=0)[end[sess]]
    wd = np.cumsum(one * np.asarray(words, dtype=np.float64)[:, None], axis=0)[end[sess]]
    rate = np.divide(fp, wd, out=np.zeros_like(fp), where=wd > 0)  # (n, speakers) up to each turn's session end
    top = rate.max(axis=1)
    own = rate[np.arange(n), who]
    return np.where(top > 0, own / np.where(top > 0, top, 1.0), 1.0).astype(np.float32)


def redundancy(E: np.ndarray, session: np.ndarray) -> np.ndarray:
    """Max cosine of each unit row of ``E`` to the other rows of its session (0 when alone).

    >>> E = np.array([[1.0, 0.0], [0.6, 0.8], [0.0, 1.0]], np.float32)
    >>> redundancy(E, np.array([0, 0, 1])).astype(float).round(2).tolist()
    [0.6, 0.6, 0.0]
    """
    n = len(E)
    S = E @ E.T
    same = session[:, None] == session[None, :]
    S[~same | np.eye(n, dtype=bool)] = -np.inf
    m = S.max(axis=1) if n else np.zeros(0, np.float32)
    return np.where(np.isfinite(m), m, 0.0).astype(np.float32)


__all__ = ["first_person_words", "novelty", "redundancy", "self_talk"]
