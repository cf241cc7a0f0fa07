"""The rule-based emotion reading of the authors' released experiment.

The paper's Table 1 defines emotional intensity as ``|valence| x arousal``
without naming a valence model; memlib's ``paper`` factor set reads valence
with VADER. The experiment the authors released (``experiments/
lme_blind_forgetting.py`` in ``zhibao-dev/Learning-Multi-Factor-Memory``,
with its extractor ``borge/affective/signal_extractor.py``) reads it instead
from a hand-written rule table that yields a valence change ``dv`` and an
arousal change ``da`` per turn, and scores

    intensity = clip(|dv| x (0.5 + da), 0, 1).

This module computes that reading. Its facts, read from the released files:

* **Rules on one text** (:data:`RULES`): a *keyword* rule fires once when any
  of its phrases occurs anywhere in the lower-cased text (a plain substring
  test, so "again" also fires inside "against"); a *pattern* rule fires
  ``min(matches, 3) / 3`` of its weight, matching case-insensitively (so
  "four or more capitals" matches any run of four letters, which nearly every
  turn holds).
* **Structure**: the released experiment passes an empty conversation history,
  so every turn counts as a "topic continuation" (``+0.05, +0.05``); a text of
  at most two words adds ``-0.05, -0.18``; a request for detail adds
  ``+0.10, +0.12``. The rules that compare a turn with earlier ones never fire.
* **Caps and rounding**: ``dv`` is clipped to ``[-0.4, 0.4]`` and ``da`` to
  ``[-0.3, 0.3]``, each then rounded to 4 decimals.
* It runs on user and assistant turns alike.

So an ordinary turn scores ``0.05 x (0.5 + 0.05 + 0.15) = 0.035`` and no turn
exceeds ``0.4 x 0.8 = 0.32``.

>>> rule_deltas("I have a question about my new job at the bank.")   # three runs of four letters
(0.05, 0.2)
>>> rule_deltas("The meeting is at noon.")   # two runs: two thirds of the weight
(0.05, 0.15)
>>> rule_deltas("ok")   # two words or fewer
(0.0, -0.13)
>>> rule_deltas("Thanks, that is GREAT!!")   # praise; exclamations; the arousal cap
(0.25, 0.3)
"""

from __future__ import annotations

import re

import numpy as np

from memlib._text import bounded

#: Caps on the valence and arousal change of one turn.
MAX_DV, MAX_DA = 0.40, 0.30

# (phrases separated by "|", dv, da): fires once when any phrase is a substring of the lower-cased text
_KEYWORDS = (
    (
        "谢谢|感谢|太好了|棒|完美|厉害|感激|thank|thanks|great|perfect|awesome|excellent|love it|well done|appreciate",
        0.20,
        0.05,
    ),
    ("哈哈|哈哈哈|lol|haha|😄|😊|🎉|👍", 0.15, 0.10),
    ("明白了|清楚了|懂了|理解了|got it|makes sense|understood", 0.10, 0.00),
    ("又|还是|怎么还|为什么还|依然|仍然|again|still not|still wrong|once more", -0.20, 0.10),
    ("烦|讨厌|糟糕|垃圾|废物|不行|terrible|awful|useless|broken|wrong|bad", -0.25, 0.05),
    ("不对|错了|不是这个意思|没有解决|that's not|that's wrong|not what i|didn't fix", -0.15, 0.10),
    ("😠|😤|😡|💢|🤦", -0.20, 0.15),
    ("可能|也许|大概|或许|不确定|不太清楚|maybe|perhaps|not sure|might|could be|i think", 0.00, -0.15),
    ("非常|极其|绝对|肯定|一定|必须|definitely|absolutely|certainly|must|always", 0.00, 0.15),
    ("有个新想法|换个话题|顺便问|另外|还有个问题|new idea|by the way|another thing|also wondering", 0.05, 0.10),
)

# (pattern, dv, da): fires min(matches, 3) / 3 of its weight, case-insensitively; in the released order,
# which interleaves them with the keyword rules (the sum does not depend on the order but for float rounding)
_PATTERNS = (
    (r"[！!]{2,}", 0.00, 0.20),
    (r"[！!]", 0.00, 0.10),
    (r"[？?]{2,}", 0.00, 0.15),
    (r"[A-Z]{4,}", 0.00, 0.15),
)
_ELLIPSIS = (r"\.{3,}", 0.00, -0.10)

#: Every rule in the released order: ``("pattern", regex, dv, da)`` or ``("keywords", "phrase|phrase|...", dv, da)``.
RULES = (
    *(("pattern", *p) for p in _PATTERNS),
    *(("keywords", *k) for k in _KEYWORDS[:8]),
    ("pattern", *_ELLIPSIS),
    *(("keywords", *k) for k in _KEYWORDS[8:]),
)

_COMPILED = tuple(
    (kind, re.compile(arg, re.IGNORECASE) if kind == "pattern" else tuple(arg.split("|")), dv, da)
    for kind, arg, dv, da in RULES
)

#: Phrases that mark a request for more detail (a structural rule: ``+0.10, +0.12``).
DETAIL_PHRASES = tuple(
    "能详细|详细说|举个例子|具体|能展开|more detail|explain more|elaborate|example|can you expand".split("|")
)


def rule_deltas(text: str) -> tuple[float, float]:
    """Return the valence and arousal change ``(dv, da)`` of one text with no conversation history.

    Parameters
    ----------
    text : str

    Returns
    -------
    (float, float)
        Clipped to :data:`MAX_DV` and :data:`MAX_DA` and rounded to 4 decimals.
    """
    text = bounded(text)
    lower = text.lower()
    dv = da = 0.0
    for kind, rule, rdv, rda in _COMPILED:
        if kind == "pattern":
            n = len(rule.findall(text))
            if n:
                share = min(n, 3) / 3.0
                dv += rdv * share
                da += rda * share
        elif any(p in lower for p in rule):
            dv += rdv
            da += rda
    # structure, with an empty history: the length and repetition rules cannot fire
    sdv, sda = 0.05, 0.05  # "topic continuation"
    if any(p in lower for p in DETAIL_PHRASES):
        sdv += 0.10
        sda += 0.12
    if len(text.split()) <= 2:
        sdv -= 0.05
        sda -= 0.18
    dv += sdv
    da += sda
    dv = max(-MAX_DV, min(MAX_DV, dv))
    da = max(-MAX_DA, min(MAX_DA, da))
    return round(dv, 4), round(da, 4)


def rule_intensity(texts) -> np.ndarray:
    """Emotional intensity ``clip(|dv| x (0.5 + da), 0, 1)`` of each text (float64).

    >>> texts = ["I have a question about my new job at the bank.", "Thanks, that is GREAT!!", "Fine."]
    >>> rule_intensity(texts).round(4).tolist()
    [0.035, 0.2, 0.0]
    """
    out = np.empty(len(texts))
    for i, t in enumerate(texts):
        dv, da = rule_deltas(t)
        out[i] = max(0.0, min(1.0, abs(dv) * (0.5 + da)))
    return out
