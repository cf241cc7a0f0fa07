r"""Text hygiene shared by the loaders, the annotator and the store.

One rule for invalid Unicode everywhere: a lone surrogate (``"\ud800"``; legal in
JSON, not encodable as UTF-8, so neither the tokenizer, SQLite nor an ``.npz``
header can hold it) is replaced by U+FFFD, the Unicode replacement character.
We replace rather than refuse because a memory store must keep the turn an
agent hands it, and because the loaders then give a turn the same text, and so
the same factors, as the store would. Paired surrogates written as two JSON
escapes (``"\ud83d\ude00"``) are already one code point when JSON is decoded, so
they are untouched.

And bounded lengths: a turn may be 200 MB. The text heuristics read at most its first
:data:`TEXT_BOUND` characters (:func:`bounded`), and the embedding model's tokenizer is
handed a prefix that keeps the word pieces the model reads (:func:`cut_to_word_pieces`).

>>> clean_text("caf\u00e9")
'café'
>>> clean_text("a\ud800b") == "a\ufffdb"
True
>>> count_surrogates("a\ud800\udfffb")
2
"""

from __future__ import annotations

import re

#: U+FFFD, what a lone surrogate becomes.
REPLACEMENT = "\ufffd"

_SURROGATE = re.compile("[\ud800-\udfff]")


def count_surrogates(text: str) -> int:
    """Count the lone surrogate code points in ``text``."""
    return len(_SURROGATE.findall(text))


def clean_text(text: str) -> str:
    """``text`` with every lone surrogate replaced by U+FFFD (the same object when there is none)."""
    if _SURROGATE.search(text) is None:
        return text
    return _SURROGATE.sub(REPLACEMENT, text)


# --------------------------------------------------------------------------- bounded lengths

#: The most characters memlib's text heuristics read of one text (VADER valence and arousal in
#: :mod:`memlib.factors`, the reliability cues, the text cues of :mod:`memlib.cues`): a longer text
#: is cut to its first ``TEXT_BOUND`` characters, at white space (:func:`bounded`). The longest turn
#: of the shared datasets is 76,560 characters (LongMemEval-S cleaned; LoCoMo's longest is 488,
#: LongMemEval oracle's 5,425, RealMem's 83,877), so no factor or cue of them changes, while a 200 MB
#: turn is scored in about 1.5 s instead of about 17 minutes of VADER (5 s per million characters).
TEXT_BOUND = 300_000


def bounded(text: str, limit: int = TEXT_BOUND) -> str:
    """``text`` itself when it has at most ``limit`` characters, else its first ``limit``, cut back to white space.

    >>> bounded("one two three", 9), bounded("one two three", 13)
    ('one two', 'one two three')
    >>> bounded("x" * 20, 9)
    'xxxxxxxxx'
    """
    if len(text) <= limit:
        return text
    space = max(text.rfind(c, limit // 2, limit + 1) for c in " \n\t\r")
    return text[:space] if space > 0 else text[:limit]


# The word pieces of the embedding model (all-MiniLM-L6-v2: a BERT WordPiece tokenizer: BertNormalizer
# with clean_text, handle_chinese_chars, lowercase and strip_accents; BertPreTokenizer; WordPiece with
# max_input_chars_per_word 100). Only the first ``max_seq_length - 2`` pieces of a text are used, so
# cut_to_word_pieces hands the tokenizer a bounded text with the same first pieces.

#: cut_to_word_pieces first tries a cut at 8 characters per word piece kept, then at 4 times more
#: (32, 128, 512), up to 2,048 characters per piece (:data:`CUT_LIMIT_CHARS_PER_PIECE`).
CUT_CHARS_PER_PIECE = 8
CUT_LIMIT_CHARS_PER_PIECE = 2048
#: WordPiece reads a pre-token (a word) longer than this many characters as one ``[UNK]``.
MAX_WORD_CHARS = 100

# Letters and digits that the normaliser keeps as one or more letters (lower-cased, accents stripped),
# that are no white space, punctuation or CJK ideograph, and that every Unicode table since 2.0 has
# so: ASCII letters and digits, the letters of Latin-1, basic Greek and Cyrillic, kana and Hangul
# syllables. A word that holds more than MAX_WORD_CHARS of them in a row is one [UNK], however long.
_SOLID = (
    "A-Za-z0-9\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u00ff\u0391-\u03a1\u03a3-\u03a9\u03b1-\u03c9\u0410-\u044f"
    "\u3041-\u3094\u30a1-\u30fa\uac00-\ud7a3"
)
# A position p is a *safe cut* when the words (pre-tokens) of text[:p] are exactly the words of text
# that start before p, each whole or, if cut, still one [UNK]: text[p] is ASCII white space (the
# normaliser keeps it as a space and the pre-tokenizer splits there); or text[p - 1] is ASCII
# punctuation or a CJK ideograph of Unicode 1.1 (each is a word of its own, whatever follows); or
# text[p - 101:p] are _SOLID (the word holding them is longer than MAX_WORD_CHARS, so it is one [UNK]
# cut or whole). The normaliser works character by character (NFD reorders only combining marks,
# never across these characters), so the word pieces of text[:p] are then the first word pieces of
# text.
# Not after "[": the tokenizer reads "[MASK]", "[CLS]", "[SEP]", "[PAD]" and "[UNK]" in the raw text
# as one token each, so a cut just after their "[" would turn the token into the piece "[".
_SAFE_CUT = re.compile(f"[ \t\n\r]|(?<=[!-/:-@\\\\-`{{-~\u4e00-\u9fa5])|(?<=[{_SOLID}]{{{MAX_WORD_CHARS + 1}}})")
# Each run between ASCII white space that holds a printable ASCII character gives at least one word
# piece of its own (that character survives the normaliser), so counting them bounds the pieces from
# below without the tokenizer.
_COUNTED_RUN = re.compile("[!-~][^ \t\n\r]*")
# What the normaliser deletes outright (clean_text: C0 and C1 controls but tab, newline and carriage
# return; U+FFFD; and format characters that have been so since Unicode 5.1 or earlier), runs of what
# it turns into a space (all white space of Unicode 3.2), and runs of more than MAX_WORD_CHARS _SOLID
# characters (one [UNK]): deleting the first, collapsing each run of the second to one space and
# shortening each run of the third to MAX_WORD_CHARS + 1 characters change no word piece.
_DELETED = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ufffd\u200b-\u200f\u202a-\u202e\u2060-\u2064\ufeff]+")
_SPACES = re.compile("[ \t\n\r\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]+")
_LONG_RUN = re.compile(f"([{_SOLID}]{{{MAX_WORD_CHARS + 1}}})[{_SOLID}]+")
_REDUCE_CHUNK = 1 << 20


def cut_to_word_pieces(text: str, pieces: int, count) -> str:
    r"""Cut ``text`` to a bounded length that keeps its first ``pieces`` word pieces.

    ``count(s)`` is the number of word pieces of ``s`` (at least ``min(pieces, true count)``:
    it may stop counting at ``pieces``), by the model's own tokenizer. A text of at most
    ``8 * pieces`` characters is returned as it is. A longer one is cut before the first
    safe cut point (see the comments above ``_SAFE_CUT``) at or after ``8 * pieces``
    characters, if the cut text has at least ``pieces`` word pieces (counted cheaply from
    below, else by ``count``); if not, at or after 4 times as many characters, and so on
    up to ``2048 * pieces`` characters. Each candidate is a prefix of ``text`` that ends at a
    safe cut, so its word pieces are the first word pieces of ``text``: once it holds
    ``pieces`` of them, the model sees exactly what it would have seen of ``text``.

    Runs of white space or of control characters (which hold no word piece), and words of
    hundreds of thousands of letters (one ``[UNK]`` each), are handled by a second pass over
    the text with controls deleted, white-space runs collapsed to one space and long runs of
    letters shortened to 101 (``_DELETED``, ``_SPACES`` and ``_LONG_RUN``), which the tokenizer
    reads alike; that pass reads the text in pieces of 1 MiB until it has enough. Only a text
    whose first ``2048 * pieces`` characters after that hold no safe cut with ``pieces`` word
    pieces before it (more than 2,048 characters per word piece: a run of hundreds of thousands
    of combining marks, emoji or symbols in one word, say) is cut at that length without that
    guarantee, so that memory stays bounded.

    >>> count = lambda s: len(re.findall(r"\w+", s))  # a stand-in tokenizer: one piece per word
    >>> cut_to_word_pieces("a b c", 2, count)
    'a b c'
    >>> cut_to_word_pieces("word " * 20, 2, count)
    'word word word word'
    >>> cut_to_word_pieces("\x00" * 5000 + " hello" * 3, 1, count)  # 5,000 deleted characters, then words
    ' hello hello'
    """
    if len(text) <= CUT_CHARS_PER_PIECE * pieces:
        return text
    limit = CUT_LIMIT_CHARS_PER_PIECE * pieces
    found = _cut_at_safe_point(text, pieces, count, limit)
    if found is not None:
        return found
    reduced = _reduced_prefix(text, limit + 1)
    if reduced != text[: len(reduced)]:
        found = _cut_at_safe_point(reduced, pieces, count, limit)
        if found is not None:
            return found
    return reduced[:limit]


def _cut_at_safe_point(text: str, pieces: int, count, limit: int) -> str | None:
    """``text`` cut at its first safe point after which it has ``pieces`` word pieces, searched up to ``limit``."""
    n = CUT_CHARS_PER_PIECE * pieces
    while n <= limit:
        if len(text) <= n:
            return text
        m = _SAFE_CUT.search(text, n, min(len(text), limit))
        if m is None:  # no safe cut between n and the limit
            return text if len(text) <= limit else None
        head = text[: m.start()]
        if sum(1 for _ in _COUNTED_RUN.finditer(head)) >= pieces or count(head) >= pieces:
            return head
        n = max(4 * n, m.start() + 1)
    return None


def _reduced_prefix(text: str, size: int) -> str:
    r"""About the first ``size`` characters of ``text``, ``_DELETED`` removed, ``_SPACES`` and ``_LONG_RUN`` shortened.

    It is read in pieces, so a 200 MB run of spaces costs no 200 MB copy, and it is an exact
    prefix of the whole text reduced (a run of spaces across two pieces is one space).

    >>> _reduced_prefix("a \x00\t b\u200b c", 100)
    'a b c'
    """
    out, total, space = [], 0, False
    for start in range(0, len(text), _REDUCE_CHUNK):
        part = _LONG_RUN.sub(r"\1", _SPACES.sub(" ", _DELETED.sub("", text[start : start + _REDUCE_CHUNK])))
        if space and part.startswith(" "):
            part = part[1:]
        if part:
            space = part.endswith(" ")
            out.append(part)
            total += len(part)
            if total >= size:
                break
    return "".join(out)
