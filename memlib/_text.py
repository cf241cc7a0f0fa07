"""Text hygiene shared by the loaders, the annotator and the store.

One rule for invalid Unicode everywhere: a lone surrogate (``"\\ud800"``; legal in
JSON, not encodable as UTF-8, so neither the tokenizer, SQLite nor an ``.npz``
header can hold it) is replaced by U+FFFD, the Unicode replacement character.
We replace rather than refuse because a memory store must keep the turn an
agent hands it, and because the loaders then give a turn the same text, and so
the same factors, as the store would. Paired surrogates written as two JSON
escapes (``"\\ud83d\\ude00"``) are already one code point when JSON is decoded, so
they are untouched.

>>> clean_text("caf\\u00e9")
'café'
>>> clean_text("a\\ud800b") == "a\\ufffdb"
True
>>> count_surrogates("a\\ud800\\udfffb")
2
"""

from __future__ import annotations

import re

#: U+FFFD, what a lone surrogate becomes.
REPLACEMENT = "\ufffd"

_SURROGATE = re.compile("[\ud800-\udfff]")


def count_surrogates(text: str) -> int:
    """The number of lone surrogate code points in ``text``."""
    return len(_SURROGATE.findall(text))


def clean_text(text: str) -> str:
    """``text`` with every lone surrogate replaced by U+FFFD (the same object when there is none)."""
    if _SURROGATE.search(text) is None:
        return text
    return _SURROGATE.sub(REPLACEMENT, text)
