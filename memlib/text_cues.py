"""What memlib reads of a turn's own text: the word lists, VADER and every per-text cue, each defined once.

The factors (:mod:`memlib.factors`) and the cue library (:mod:`memlib.cues`) both
read a turn's text; this module holds all they read, so that a word list or a
rule has one definition:

* **word lists**: :data:`HEDGE_WORDS` and :data:`HEDGE_PHRASES` (a turn that
  hedges) and :data:`FIRST_PERSON_WORDS` (a first-person statement);
* **VADER** (Hutto & Gilbert 2014): :func:`vader_scores` (its ``polarity_scores``
  with a cost linear in length), :func:`emotion_features` (compound valence,
  sentiment share and the structural arousal cues of each text) and the
  emotional intensity ``|valence| * arousal`` they give
  (:func:`intensity_from_features`, :func:`emotion_and_valence`,
  :func:`emotional_intensity`);
* **reliability** (:func:`reliability`): the provenance heuristic and its
  question, hedge and first-person cues (the ``extended`` factor set);
* **the text cues** of the cue library (:data:`TEXT_CUES`, :func:`text_cues`).

The word lists are read two ways, each kept as the values it has always given
(factor tables and learned cue weights depend on them): :func:`reliability`
searches the text for any word or phrase of a list with one case-insensitive
regular expression, so "maybe" counts inside "maybe's"; :func:`text_cues` looks
up whole words (letters, with one inner apostrophe) and searches the phrases in
the lower-cased text, so "maybe" counts in "maybe_x" but not in "maybe's".

Every reading takes a text's first :data:`~memlib._text.TEXT_BOUND` characters
(:func:`~memlib._text.bounded`). VADER loads on first use, so importing this
module loads numpy only.

>>> emotional_intensity(["The meeting is at noon.", "I LOVE this, it is SO amazing!!!"]).round(2).tolist()
[0.0, 0.93]
>>> reliability(["user", "assistant"], ["Maybe I will.", "Where is it?"]).tolist()
[0.8, 0.2]
>>> text_cues(["Maybe later?"]).astype(float).round(2).tolist()
[[1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.1]]
"""

from __future__ import annotations

import os
import re

import numpy as np

from memlib._checks import check_choice
from memlib._text import bounded

# --------------------------------------------------------------------------- word lists

#: Single words that mark a hedge ("maybe", ...), lower case.
HEDGE_WORDS = ("maybe", "might", "perhaps", "probably", "possibly")
#: Phrases that mark a hedge, lower case, as regular-expression fragments (``i'?m``: "im" or "i'm").
HEDGE_PHRASES = ("i think", "i guess", "i suppose", "not sure", "i believe", "kind of", "sort of", "i'?m not certain")
#: Words of a first-person statement, lower case.
FIRST_PERSON_WORDS = ("i", "i'm", "i've", "i'd", "i'll", "my", "mine", "me", "we", "our", "we're", "we've")

# reliability's reading: any word or phrase of a list, case-insensitively, between word boundaries
_HEDGES = re.compile(r"\b(" + "|".join((*HEDGE_WORDS, *HEDGE_PHRASES)) + r")\b", re.IGNORECASE)
_FIRST_PERSON = re.compile(r"\b(" + "|".join(FIRST_PERSON_WORDS) + r")\b", re.IGNORECASE)
# the text cues' reading: whole-word look-ups, and the phrases in the lower-cased text
_HEDGE_WORDS = frozenset(HEDGE_WORDS)
_HEDGE_PHRASE = re.compile(r"\b(?:" + "|".join(HEDGE_PHRASES) + r")\b")
_FIRST_WORDS = frozenset(FIRST_PERSON_WORDS)

# --------------------------------------------------------------------------- VADER and emotional intensity

#: Texts longer than this many characters are scored by VADER in pieces of at most this size
#: (split at sentence ends, else at white space). VADER's cost grows quadratically with length
#: (a 59 KB turn took 20 s); in pieces it grows linearly. Shorter texts are scored exactly as
#: ``SentimentIntensityAnalyzer.polarity_scores`` scores them.
VADER_PIECE_CHARS = 2000
#: Arousal readings of emotional intensity ``|valence| * arousal`` (see :func:`emotion_and_valence`).
AROUSAL_READINGS = ("structural", "constant", "lexical")
#: Below this many texts :func:`emotion_features` runs in one process.
PARALLEL_MIN_TEXTS = 20000

_CAPS = re.compile(r"\b[A-Z]{2,}\b")
_WORDS = re.compile(r"[a-z']+")
_SENTENCE_END = re.compile(r"(?<=[.!?\n])\s+")
_VADER = None


def _vader():
    global _VADER
    if _VADER is None:
        from vaderSentiment.vaderSentiment import SentimentIntensityAnalyzer

        _VADER = SentimentIntensityAnalyzer()
    return _VADER


def _pieces(text: str, size: int) -> list[str]:
    """Split ``text`` into pieces of at most about ``size`` characters at sentence ends (else white space).

    >>> _pieces("One. Two! Three?", 9)
    ['One. Two!', 'Three?']
    """
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


class _Near:
    """The words around one word of a text, and the text's all-caps test: what VADER's per-word rules read.

    VADER's ``sentiment_valence`` reads the three words before a lexicon word and the two after
    it, but its negation and idiom checks lower-case the whole word list at each of those
    reads, so a long text costs the square of its length. Given this window (and the word's
    place in it) instead of the whole text, every rule reads the same words and gives the same
    valence (:func:`vader_scores` equals ``polarity_scores``; tests/test_factors.py checks it on
    every position of texts built to reach each rule).
    """

    __slots__ = ("words_and_emoticons", "is_cap_diff")

    def __init__(self, words: list, is_cap_diff: bool):
        self.words_and_emoticons = words
        self.is_cap_diff = is_cap_diff


#: Words before and after a lexicon word that VADER's rules read (:class:`_Near`).
_BEFORE, _AFTER = 3, 2


def _vader_sentiments(sia, text: str) -> list:
    """VADER's per-word valences of one text (the loop of ``polarity_scores``, without the final sum).

    A word outside VADER's lexicon has valence 0 (what ``sentiment_valence`` appends for it); a
    lexicon word is scored on its :class:`_Near` window.
    """
    from vaderSentiment.vaderSentiment import BOOSTER_DICT, SentiText

    sentitext = SentiText(text)
    words = sentitext.words_and_emoticons
    cap_diff, lexicon = sentitext.is_cap_diff, sia.lexicon
    sentiments: list = []
    for i, item in enumerate(words):
        low = item.lower()
        if low in BOOSTER_DICT or (low == "kind" and i < len(words) - 1 and words[i + 1].lower() == "of"):
            sentiments.append(0)
            continue
        if low not in lexicon:
            sentiments.append(0)
            continue
        lo = max(0, i - _BEFORE)
        near = _Near(words[lo : i + _AFTER + 1], cap_diff)
        sentiments = sia.sentiment_valence(0, near, item, i - lo, sentiments)
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


def _vader_features(texts, score=None) -> np.ndarray:
    """Per text: VADER compound, its sentiment share ``pos + neg``, and the structural arousal cue count."""
    from vaderSentiment.vaderSentiment import BOOSTER_DICT

    score = vader_scores if score is None else score
    out = np.empty((len(texts), 3))
    for i, t in enumerate(texts):
        t = bounded(t)  # the first TEXT_BOUND characters: more than any real turn holds
        sc = score(t)
        cues = t.count("!") + len(_CAPS.findall(t)) + sum(w in BOOSTER_DICT for w in _WORDS.findall(t.lower()))
        out[i] = sc["compound"], sc["pos"] + sc["neg"], cues
    return out


_WORKER_SCORE = None  # the scorer of a worker process of emotion_features (set as the pool starts)


def _start_worker(score) -> None:
    global _WORKER_SCORE
    _WORKER_SCORE = score


def _worker_features(texts) -> np.ndarray:
    return _vader_features(texts, _WORKER_SCORE)


def emotion_features(texts, workers: int | None = None, score=None) -> np.ndarray:
    """VADER features of each text, shape (n, 3): compound valence, sentiment share, arousal cues.

    Each text is read up to its first :data:`~memlib._text.TEXT_BOUND` characters
    (cut at white space: :func:`~memlib._text.bounded`), several times the longest
    turn of LoCoMo and LongMemEval, so a 200 MB turn costs about a second.
    ``workers`` processes share the texts (by default every core for at least
    :data:`PARALLEL_MIN_TEXTS` texts, else one); the result does not depend on it.
    ``score`` is the VADER scorer of one text, :func:`vader_scores` by default
    (:mod:`memlib.factors` hands it its own name for it, which a test may replace).

    >>> emotion_features(["Great!!", "Fine."]).round(3).tolist()
    [[0.689, 1.0, 2.0], [0.202, 1.0, 0.0]]
    """
    texts = list(texts)
    if workers is None:
        workers = (os.cpu_count() or 1) if len(texts) >= PARALLEL_MIN_TEXTS else 1
    if workers <= 1 or len(texts) < 2:
        return _vader_features(texts, score)
    import multiprocessing

    _vader()  # load the lexicon once, before the workers fork
    step = -(-len(texts) // (4 * workers))
    # forked workers inherit the scorer (it is not pickled, so a stand-in for a test works too)
    with multiprocessing.get_context("fork").Pool(workers, initializer=_start_worker, initargs=(score,)) as pool:
        parts = pool.map(_worker_features, [texts[i : i + step] for i in range(0, len(texts), step)])
    return np.concatenate(parts)


def intensity_from_features(features: np.ndarray, arousal: str = "structural") -> np.ndarray:
    """Emotional intensity ``|valence| * arousal`` from :func:`emotion_features` (see :func:`emotion_and_valence`).

    >>> intensity_from_features(np.array([[-0.5, 0.4, 3.0], [0.0, 0.0, 9.0]]), "structural").tolist()
    [0.5, 0.0]
    """
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

    Returns
    -------
    (ndarray, ndarray)
        Intensity in [0, 1] and compound valence in [-1, 1], one per text.
    """
    check_choice("arousal", arousal, AROUSAL_READINGS)
    feats = emotion_features(texts, workers)
    return intensity_from_features(feats, arousal), feats[:, 0]


def emotional_intensity(texts, arousal: str = "structural") -> np.ndarray:
    """``|VADER compound| * arousal`` for each text, in [0, 1] (see :func:`emotion_and_valence`)."""
    return emotion_and_valence(texts, arousal)[0]


# --------------------------------------------------------------------------- reliability

#: Provenance reliability of a (user, assistant) turn: the paper's Table 1 (``paper``) and the
#: authors' released experiment (``released``); the readings of :mod:`memlib.factors` choose one.
PROVENANCE = {"paper": (0.8, 0.4), "released": (0.7, 0.4)}


def reliability(roles, texts, cues: bool = True, provenance=PROVENANCE["paper"]) -> np.ndarray:
    """Provenance heuristic in [0, 1], with the cues of the ``extended`` factor set.

    With ``cues=False`` (the paper's factor set) it is provenance only:
    ``provenance[0]`` (0.8) for a user-stated turn and ``provenance[1]`` (0.4) for
    a model-stated one; the released experiment reads 0.7 and 0.4
    (:data:`PROVENANCE`). With ``cues``: a question asserts nothing (x 0.5); a
    hedge (:data:`HEDGE_WORDS`, :data:`HEDGE_PHRASES`) subtracts 0.2; a
    first-person statement by a user (:data:`FIRST_PERSON_WORDS`) adds 0.2;
    clipped to [0, 1]. The cues read a text's first
    :data:`~memlib._text.TEXT_BOUND` characters, as the emotion factor does.

    >>> texts = ["I work as a nurse.", "You might like it.", "Where is it?"]
    >>> reliability(["user", "assistant", "user"], texts).tolist()
    [1.0, 0.2, 0.4]
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


# --------------------------------------------------------------------------- the text cues of memlib.cues

#: Columns of the text cues, as :func:`text_cues` returns them.
TEXT_CUES = ("is_question", "hedge", "first_person", "numbers", "dates", "names", "length")

# Month and day names count when capitalised (so the verb "may" and the word "march" do not).
_CAPITAL_DATES = frozenset(
    "January February March April May June July August September October November December "
    "Jan Feb Mar Apr Jun Jul Aug Sep Sept Oct Nov Dec "
    "Monday Tuesday Wednesday Thursday Friday Saturday Sunday".split()
)
# relative dates, read on the lower-cased text
_RELATIVE_DATE = re.compile(
    r"\b(?:yesterday|today|tomorrow|tonight|weekend)\b"
    r"|\b(?:last|next|this) (?:week|month|year|summer|winter|spring|fall|autumn)\b"
)
_WORD = re.compile(r"[A-Za-z]+(?:'[A-Za-z]+)?")
_NUMBER = re.compile(r"\d+(?:[.,:/]\d+)*")
# clock times (10:30), years (1990-2039) and numeric dates (3/14, 3/14/2023)
_NUMERIC_DATE = re.compile(r"\b\d{1,2}:\d{2}\b|\b(?:19\d{2}|20[0-3]\d)\b|\b\d{1,2}/\d{1,2}(?:/\d{2,4})?\b")
# a capitalised word that follows a letter, digit or comma and a space (so not the first word of a sentence)
_NAME = re.compile(r"(?<=[\w,;] )[A-Z][a-z]+")


def _text_cue_row(text: str) -> tuple:
    text = bounded(text)  # the first TEXT_BOUND characters, as the emotion factor reads
    words = _WORD.findall(text)
    low = text.lower()
    lowset = {w.lower() for w in words}
    question = text.rstrip().endswith("?")
    hedge = not lowset.isdisjoint(_HEDGE_WORDS) or _HEDGE_PHRASE.search(low) is not None
    first = not question and not lowset.isdisjoint(_FIRST_WORDS)
    dates = (
        sum(map(_CAPITAL_DATES.__contains__, words))
        + len(_RELATIVE_DATE.findall(low))
        + len(_NUMERIC_DATE.findall(text))
    )
    return question, hedge, first, len(_NUMBER.findall(text)), dates, len(_NAME.findall(text)), len(text.split())


def text_cues(texts) -> np.ndarray:
    """Compute the text cues (:data:`TEXT_CUES`) of each text, shape (n, 7), float32.

    One pass per text: a word tokenisation, set look-ups for the lexicons, and three
    case-sensitive regular expressions (numbers, numeric dates, capitalised names).
    Hedges and first person are binary; counts are ``log(1 + count)``. A text is read up to
    its first :data:`memlib._text.TEXT_BOUND` characters (cut at white space), as the
    emotion factor reads it: more than any turn of LoCoMo or LongMemEval holds.

    >>> text_cues(["Maybe.", "My sister Ana visits on Friday at 10:30!"]).astype(float).round(2).tolist()[1]
    [0.0, 0.0, 1.0, 0.69, 1.1, 1.1, 2.2]
    """
    rows = np.array([_text_cue_row(str(t)) for t in texts], dtype=np.float64).reshape(-1, len(TEXT_CUES))
    rows[:, 3:] = np.log1p(rows[:, 3:])
    return rows.astype(np.float32)


__all__ = [
    "AROUSAL_READINGS",
    "FIRST_PERSON_WORDS",
    "HEDGE_PHRASES",
    "HEDGE_WORDS",
    "PARALLEL_MIN_TEXTS",
    "PROVENANCE",
    "TEXT_CUES",
    "VADER_PIECE_CHARS",
    "emotion_and_valence",
    "emotion_features",
    "emotional_intensity",
    "intensity_from_features",
    "reliability",
    "text_cues",
    "vader_scores",
]
