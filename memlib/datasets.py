"""Datasets: one resolver for data files and loaders into one normalised form.

Normalised form (:class:`Dataset`)
----------------------------------
``turns``
    One row per unique stored turn: ``session`` (key), ``turn`` (index in the
    session), ``role`` (``user`` or ``assistant``), ``speaker``, ``text``,
    ``timestamp`` (pandas Timestamp; session time plus one second per turn, so
    turns keep their order) and ``text_id`` (index into ``texts``).
``sessions``
    One row per unique session: ``session``, ``label`` (the id in the source
    file), ``date``, ``first_turn`` / ``n_turns`` (its rows in ``turns``).
``cases``
    One row per question: ``case_id``, ``question``, ``question_type``,
    ``haystack`` (tuple of session keys in time order), ``gold`` (tuple of
    row indices into ``turns``), ``group`` (cases that share turns must stay on
    one side of a train/test split), ``usable`` (has at least one gold turn) and
    ``question_date`` (when the question is asked; NaT where the source has none).

Sessions that recur across questions (LongMemEval haystacks) are stored once:
a session key is its source id plus a hash of its content, so the same text is
never embedded twice and a reused id with different content is kept apart.

Loaders: :func:`load_locomo` (``locomo10.json``), :func:`load_longmemeval`
(LongMemEval S, M and oracle files share one schema), :func:`load_realmem`
(RealMem's ten persona files; questions asked inside the stream) and
:func:`load_jsonl` (the generic format documented there). :func:`load` takes a
dataset name or a path.

Resolver: :func:`resolve` looks for a data file in ``$MEMLIB_DATA_DIR`` (and
its sub-folders one level deep), then in ``data/raw/``, then downloads it to
``data/raw/`` when :data:`REGISTRY` pins a checksum for it.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import json
import os
import re
import sys
import tempfile
import threading
import urllib.request
import warnings
import zlib
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import numpy as np
import pandas as pd

from memlib._cachefiles import (
    CORRUPT_ERRORS,
    atomic_savez,
    cache_folder_ok,
    cache_root,
    report_unwritable,
    safe_name,
    set_aside,
)
from memlib._checks import ParameterError
from memlib._text import clean_text, count_surrogates

ROOT = Path(__file__).resolve().parent.parent
RAW_DIR = ROOT / "data" / "raw"


class DatasetError(ValueError):
    """A data file is missing, malformed or fails its checksum."""


class DatasetWarning(UserWarning):
    """A data file held something memlib repaired as it loaded it (invalid Unicode): the file and record are named."""


# --------------------------------------------------------------------------- resolver

#: Where each known file comes from. A file without a pinned sha256 is never downloaded
#: automatically (its checksum could not be verified when the registry was written).
REGISTRY = {
    "locomo10.json": {
        "url": "https://raw.githubusercontent.com/snap-research/LoCoMo/"
        "3eb6f2c585f5e1699204e3c3bdf7adc5c28cb376/data/locomo10.json",
        "sha256": "79fa87e90f04081343b8c8debecb80a9a6842b76a7aa537dc9fdf651ea698ff4",
        "license": "CC BY-NC 4.0",
    },
    "longmemeval_s.json": {
        "url": "https://huggingface.co/datasets/xiaowu0162/longmemeval/resolve/main/longmemeval_s",
        "sha256": None,
        "license": "MIT",
    },
    "longmemeval_m.json": {
        "url": "https://huggingface.co/datasets/xiaowu0162/longmemeval/resolve/main/longmemeval_m",
        "sha256": None,
        "license": "MIT",
    },
    "longmemeval_oracle.json": {
        "url": "https://huggingface.co/datasets/xiaowu0162/longmemeval/resolve/main/longmemeval_oracle",
        "sha256": None,
        "license": "MIT",
    },
}

#: RealMem (``realmem``): ten persona files, from the release at commit 067c486 (Apache-2.0).
_REALMEM_SHA256 = {
    "Adeleke_Okonjo": "9dc2a8bf2777c182108b3859be6987b4203b65bd6df5cbb6e1a02e4e9f871fdb",
    "Ethan_Hunt": "67bd20d962cd0b01c1531cc82a73a0b1a1e58ef17db6e2f743fc9b35273734ac",
    "Kenta_Tanaka": "b8fe2e606db96dbce1ffa0ab7c21b23ce83d4b5d472d80cd4bd23cd8a259d397",
    "Kim_Ji_young": "e3e286120bc5e42d3dbe513d720f969ecebf3518fbe1a4782595e927474356a9",
    "Liam_O_Connor": "2427ab7d7012b28c0da9b2a70b1763cb60630f5198cf6eeed1ee68d0271c551c",
    "Lin_Wanyu": "a7a751066c48e829b3012a94f2b365febd0e6fb6db454a6d5f4ec01f9c55008a",
    "Oliver_Smith": "25a829eb690d7f81bd47141a0cd7c174e1aa98d899111d8b04e9115f0b92e1f3",
    "Pak_Budi": "d35e08ac141e83780b8b7bc3611feef042dbd082d0986812da1d885d028b638a",
    "Sarah_Miller": "2e84cfb4e29bfceebfb4eed09b84e7a2a7cae8a908d8584830e4c94a29819a6d",
    "Sophie_Dubois": "75f71e5ec0d14606debaea409075a6e631faf6a57d74ce7ec49f17476ef44e26",
}
#: The ten persona files of RealMem, in name order.
REALMEM_FILES = tuple(f"{p}_dialogues_256k.json" for p in _REALMEM_SHA256)
REGISTRY.update(
    {
        f"{p}_dialogues_256k.json": {
            "url": f"https://raw.githubusercontent.com/zhiyuan5986/RealMemBench/067c486/dataset/{p}_dialogues_256k.json",
            "sha256": digest,
            "license": "Apache-2.0",
        }
        for p, digest in _REALMEM_SHA256.items()
    }
)

#: Dataset names accepted by :func:`load`, each with the files that can hold it, most preferred
#: first: a user's full release wins over the cleaned 498-question LongMemEval-S that the shared
#: datasets folder holds (see ``data/README.md``). Any file may also be gzip-compressed (``.gz``).
DATASETS = {
    "locomo": ("locomo10.json",),
    "longmemeval_s": ("longmemeval_s_cleaned.json", "longmemeval_s.json", "longmemeval_s_cleaned_498.json"),
    "longmemeval_m": ("longmemeval_m_cleaned.json", "longmemeval_m.json"),
    "longmemeval_oracle": ("longmemeval_oracle.json",),
    "realmem": REALMEM_FILES,  # all ten, not one of them (:func:`resolve_realmem`)
}


def open_text(path):
    """Open a data file for reading text: UTF-8, transparently gunzipped when its name ends in ``.gz``."""
    path = Path(path)
    if path.suffix == ".gz":
        return gzip.open(path, "rt", encoding="utf-8")
    return open(path, encoding="utf-8")


def resolve_dataset(name: str) -> Path:
    """Path of the file behind a dataset name: the first of its :data:`DATASETS` files found.

    Each candidate is looked for as it is and gzip-compressed, in every place
    :func:`resolve` searches; only when none exists locally does the first
    candidate go to :func:`resolve` (which downloads it if its checksum is pinned,
    or says where to put it).
    """
    files = DATASETS[name]
    for filename in files:
        for candidate in (filename, filename + ".gz"):
            for path in _candidates(candidate):
                if path.is_file():
                    return resolve(candidate)
    # none is here: the first file the registry knows says where to get it (with its URL)
    known = [f for f in files if f in REGISTRY] or [files[0]]
    try:
        return resolve(known[0])
    except DatasetError as exc:
        if len(files) == 1:
            raise
        raise DatasetError(f"{exc} (memlib reads any of {', '.join(files)}, or the same name + .gz)") from None


def sha256_file(path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


#: Content hashes of data files, by (resolved path, size, modification time): see :func:`file_sha256`.
_DIGESTS: dict = {}


def file_sha256(path) -> str:
    """The sha256 of a data file, computed once per process while the file is unchanged.

    The parsed-dataset cache and the study result cache key on it (0.15 s for the
    76 MB LongMemEval-S file). Downloads are verified with :func:`sha256_file`, which
    always reads the file.
    """
    path = Path(path)
    stat = path.stat()
    version = (str(path.resolve()), stat.st_size, stat.st_mtime_ns)
    if version not in _DIGESTS:
        _DIGESTS[version] = sha256_file(path)
    return _DIGESTS[version]


def _candidates(filename: str) -> list[Path]:
    out = []
    env = os.environ.get("MEMLIB_DATA_DIR")
    if env:
        base = Path(env)
        out.append(base / filename)
        if base.is_dir():
            out.extend(sorted(p / filename for p in base.iterdir() if p.is_dir()))
    out.append(RAW_DIR / filename)
    return out


def resolve(filename: str, download: bool = True) -> Path:
    """Path of a data file: ``$MEMLIB_DATA_DIR``, then ``data/raw/``, then a checksummed download.

    A local file whose content differs from the pinned checksum is used with a
    warning (it may be a deliberate edit); a downloaded file must match.
    """
    entry = REGISTRY.get(filename, {})
    for path in _candidates(filename):
        if path.is_file():
            if entry.get("sha256") and file_sha256(path) != entry["sha256"]:
                warnings.warn(f"{path}: sha256 differs from the pinned release of {filename}", stacklevel=2)
            return path
    where = ", ".join(dict.fromkeys(str(p.parent) for p in _candidates(filename)))
    if not entry:
        raise DatasetError(f"data file {filename!r} not found; put it in {RAW_DIR} or set MEMLIB_DATA_DIR")
    if not entry.get("sha256"):
        raise DatasetError(
            f"{filename} not found in {where}, and no checksum is pinned for an automatic "
            f"download; download it from {entry['url']} (licence {entry['license']}) and save it as "
            f"{RAW_DIR / filename}, or set MEMLIB_DATA_DIR to its folder"
        )
    if not download:
        raise DatasetError(f"{filename} not found; put it in {RAW_DIR} or set MEMLIB_DATA_DIR to its folder")
    return _download(filename, entry)


def _download(filename: str, entry: dict) -> Path:
    RAW_DIR.mkdir(parents=True, exist_ok=True)
    target = RAW_DIR / filename
    fd, tmp = tempfile.mkstemp(dir=RAW_DIR, prefix=f".{filename}.", suffix=".part")
    os.close(fd)
    try:
        try:
            urllib.request.urlretrieve(entry["url"], tmp)
        except OSError as exc:
            raise DatasetError(
                f"could not download {filename} from {entry['url']} ({exc}); offline, save the file as "
                f"{target} or set MEMLIB_DATA_DIR to its folder"
            ) from None
        digest = sha256_file(tmp)
        if digest != entry["sha256"]:
            raise DatasetError(f"downloaded {filename} has sha256 {digest}, expected {entry['sha256']}")
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return target


# --------------------------------------------------------------------------- normalised form


@dataclass
class Dataset:
    """A loaded dataset in the normalised form (see the module docstring)."""

    name: str
    turns: pd.DataFrame
    sessions: pd.DataFrame
    cases: pd.DataFrame
    texts: list
    source: str = ""
    skipped: dict = field(default_factory=dict)

    def stats(self) -> dict:
        """Counts a loader reports, over the sessions the cases use: cases, usable cases, turns, texts, skips."""
        used = set().union(*self.cases["haystack"]) if len(self.cases) else set()
        sess = self.sessions[self.sessions["session"].isin(used)]
        n_turns = dict(zip(sess["session"], sess["n_turns"]))
        turn_mask = self.turns["session"].isin(used)
        return {
            "dataset": self.name,
            "source": Path(self.source).name,
            "conversations": int(self.cases["group"].nunique()),
            "cases": int(len(self.cases)),
            "usable_cases": int(self.cases["usable"].sum()),
            "sessions": int(len(sess)),
            "turns": int(turn_mask.sum()),
            "turn_occurrences": int(sum(n_turns[x] for h in self.cases["haystack"] for x in h)),
            "unique_texts": int(self.turns.loc[turn_mask, "text_id"].nunique()),
            **{f"skipped_{k}": int(v) for k, v in self.skipped.items()},
        }

    def usable(self) -> Dataset:
        """The same dataset restricted to cases with at least one gold turn."""
        return Dataset(
            self.name,
            self.turns,
            self.sessions,
            self.cases[self.cases["usable"]].reset_index(drop=True),
            self.texts,
            self.source,
            dict(self.skipped),
        )

    def limit(self, n: int) -> Dataset:
        """The first ``n`` groups (conversations or questions), for quick runs."""
        if n < 1:
            raise ParameterError(f"limit must be an integer >= 1, got {n}")
        keep = list(dict.fromkeys(self.cases["group"]))[:n]
        return self.with_cases(self.cases[self.cases["group"].isin(keep)])

    def sample(self, n: int, seed: int = 0) -> Dataset:
        """A seeded random sample of ``n`` groups (conversations or questions), kept in file order.

        All groups when ``n`` is at least their number.
        """
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
            raise ParameterError(f"sample size must be an integer >= 1, got {n!r}")
        groups = list(dict.fromkeys(self.cases["group"]))
        if n >= len(groups):
            return self.with_cases(self.cases)
        pick = np.sort(np.random.default_rng(seed).choice(len(groups), n, replace=False))
        return self.with_cases(self.cases[self.cases["group"].isin({groups[i] for i in pick})])

    def with_cases(self, cases: pd.DataFrame) -> Dataset:
        """A dataset with only these cases (turn and session tables are shared)."""
        return Dataset(
            self.name,
            self.turns,
            self.sessions,
            cases.reset_index(drop=True),
            self.texts,
            self.source,
            dict(self.skipped),
        )

    def used_turns(self) -> tuple[Dataset, np.ndarray]:
        """The same cases over only the turns their haystacks hold, and those turns' rows in :attr:`turns`.

        Returns ``(sub, rows)``: ``sub.turns`` is ``turns.iloc[rows]`` renumbered from 0, its sessions'
        ``first_turn`` and its cases' ``gold`` follow, and ``texts`` is shared. The main job's sample
        of 8 LongMemEval-S questions holds 3,383 of the file's 245,625 turn rows, so work per turn
        done on ``sub`` instead of the whole table (as :func:`memlib.factors.annotate` does) is 70
        times less.

        >>> import pandas as pd
        >>> turns = pd.DataFrame({"session": ["a", "b", "b"], "turn": [0, 0, 1], "text_id": [0, 1, 2]})
        >>> sessions = pd.DataFrame({"session": ["a", "b"], "first_turn": [0, 1], "n_turns": [1, 2]})
        >>> cases = pd.DataFrame({"case_id": ["q"], "haystack": [("b",)], "gold": [(2,)], "usable": [True]})
        >>> sub, rows = Dataset("d", turns, sessions, cases, ["x", "y", "z"]).used_turns()
        >>> rows.tolist(), sub.sessions["first_turn"].tolist(), sub.cases["gold"].tolist()
        ([1, 2], [0], [(1,)])
        """
        used = set().union(*self.cases["haystack"]) if len(self.cases) else set()
        keep = self.turns["session"].isin(used).to_numpy()
        rows = np.flatnonzero(keep)
        if len(rows) == len(self.turns):
            return self, rows
        new_row = np.full(len(self.turns), -1, dtype=np.int64)
        new_row[rows] = np.arange(len(rows))
        sessions = self.sessions[self.sessions["session"].isin(used)].reset_index(drop=True)
        # a session's first row is the number of kept rows before it (also right for an empty session)
        sessions = sessions.assign(first_turn=np.searchsorted(rows, sessions["first_turn"].to_numpy()))
        gold = [tuple(int(new_row[g]) for g in gold) for gold in self.cases["gold"]]
        for case_id, g in zip(self.cases["case_id"], gold):
            if -1 in g:
                raise DatasetError(f"{self.name}: case {case_id!r} has a gold turn outside its haystack")
        cases = self.cases.assign(gold=gold)
        turns = self.turns.iloc[rows].reset_index(drop=True)
        return Dataset(self.name, turns, sessions, cases, self.texts, self.source, dict(self.skipped)), rows

    def haystack_rows(self, case: int) -> np.ndarray:
        """Row indices into ``turns`` of one case's haystack, in time order."""
        s = self.sessions.set_index("session")
        h = self.cases["haystack"].iloc[case]
        return np.concatenate(
            [np.arange(f, f + n) for f, n in zip(s.loc[list(h), "first_turn"], s.loc[list(h), "n_turns"])]
        )


class _Builder:
    """Accumulates unique sessions and texts while a loader walks a file."""

    def __init__(self):
        self.turn_rows = []
        self.session_rows = []
        self.session_index = {}
        self.text_index = {}
        self.texts = []

    def text_id(self, text: str) -> int:
        i = self.text_index.get(text)
        if i is None:
            i = self.text_index[text] = len(self.texts)
            self.texts.append(text)
        return i

    def session(self, label: str, date: pd.Timestamp, turns: list[tuple[str, str, str]]) -> tuple[str, int]:
        """Register a session (list of (role, speaker, text)); return its key and first turn row."""
        digest = hashlib.sha1(json.dumps([label, str(date), turns]).encode()).hexdigest()[:12]
        key = f"{label}#{digest}"
        if key not in self.session_index:
            first = len(self.turn_rows)
            for i, (role, speaker, text) in enumerate(turns):
                self.turn_rows.append((key, i, role, speaker, text, date + pd.Timedelta(seconds=i), self.text_id(text)))
            self.session_index[key] = first
            self.session_rows.append((key, label, date, first, len(turns)))
        return key, self.session_index[key]

    def frames(self):
        turns = pd.DataFrame(
            self.turn_rows, columns=["session", "turn", "role", "speaker", "text", "timestamp", "text_id"]
        )
        sessions = pd.DataFrame(self.session_rows, columns=["session", "label", "date", "first_turn", "n_turns"])
        if not self.turn_rows:  # typed, so that a dataset without turns annotates to nothing
            turns = turns.astype({"turn": "int64", "timestamp": "datetime64[us]", "text_id": "int64"})
        if not self.session_rows:
            sessions = sessions.astype({"date": "datetime64[us]", "first_turn": "int64", "n_turns": "int64"})
        return turns, sessions


def _fail(path, where: str, what: str):
    raise DatasetError(f"{path}: {where}: {what}")


def _require(path, where: str, rec, fields) -> None:
    """Fail unless ``rec`` is an object holding every one of ``fields``."""
    if not isinstance(rec, dict):
        _fail(path, where, "expected an object")
    for key in fields:
        if key not in rec:
            _fail(path, where, f"missing required field {key!r}")


def _describe(value) -> str:
    """A value from a JSON file as JSON spells it (``null``, ``"false"``, ``1``), shortened."""
    try:
        text = json.dumps(value, default=str)
    except (RecursionError, ValueError):  # nested too deeply to spell out
        return f"a deeply nested {_KINDS.get(type(value), type(value).__name__)}"
    return text if len(text) <= 60 else text[:57] + "..."


_KINDS = {list: "a list", str: "a string", dict: "an object"}


def _need(path, where: str, name: str, value, kind):
    """``value`` if it is a ``kind`` (list, str or dict); otherwise a :class:`DatasetError` naming the field."""
    if not isinstance(value, kind):
        _fail(path, where, f"{name} must be {_KINDS[kind]}, got {_describe(value)}")
    return value


def _not_utf8(path):
    """Raise a :class:`DatasetError` naming the first line of ``path`` that is not UTF-8."""
    opener = gzip.open if Path(path).suffix == ".gz" else open
    with opener(path, "rb") as f:
        for n, line in enumerate(f, 1):
            try:
                line.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise DatasetError(
                    f"{path}: line {n}: not UTF-8 text (byte 0x{line[exc.start]:02x}); save the file as UTF-8"
                ) from None
    raise DatasetError(f"{path}: not UTF-8 text; save the file as UTF-8")


def _read_lines(path) -> list[str]:
    """The lines of a UTF-8 text file (a leading byte-order mark is dropped), gunzipped when it ends in ``.gz``."""
    try:
        with open_text(path) as f:
            lines = f.readlines()
    except UnicodeDecodeError:
        _not_utf8(path)
    except (gzip.BadGzipFile, EOFError, zlib.error) as exc:
        raise DatasetError(f"{path}: not a readable gzip file ({exc})") from None
    if lines:
        lines[0] = lines[0].removeprefix("\ufeff")
    return lines


def _read_json_list(path) -> list:
    data = _read_json(path)
    if not isinstance(data, list):
        raise DatasetError(f"{path}: expected a JSON list of records at the top level, got {type(data).__name__}")
    if not data:
        raise DatasetError(f"{path}: holds no records (an empty list)")
    return data


def _read_json(path):
    """A whole JSON file, decoded (UTF-8, gunzipped when it ends in ``.gz``); any problem is one line."""
    try:
        with open_text(path) as f:
            text = f.read()
    except UnicodeDecodeError:
        _not_utf8(path)
    except (gzip.BadGzipFile, EOFError, zlib.error) as exc:
        raise DatasetError(f"{path}: not a readable gzip file ({exc})") from None
    text = text.removeprefix("\ufeff")
    data = _decode(path, None, text)
    if _has_lone_surrogates(text):
        data = _repair_surrogates(path, data)
    return data


def _decode(path, where, text: str):
    """``json.loads(text)``, with a :class:`DatasetError` naming ``path`` (and ``where``) when it cannot be read."""
    at = f"{path}: {where}" if where else f"{path}"
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise DatasetError(f"{at}: not valid JSON ({exc})") from None
    except RecursionError:
        raise DatasetError(f"{at}: {_TOO_DEEP}") from None


_TOO_DEEP = (
    f"nested too deeply: lists or objects inside each other more than about {sys.getrecursionlimit()} levels deep"
)


def _one_line_when_too_deep(loader):
    """A loader whose RecursionError on a deeply nested value (an id that is a list in a list ...) is one line."""

    @functools.wraps(loader)
    def load_(path=None, *args, **kwargs):
        try:
            return loader(path, *args, **kwargs)
        except RecursionError:
            raise DatasetError(f"{path if path is not None else loader.__name__}: {_TOO_DEEP}") from None

    return load_


# --------------------------------------------------------------------------- invalid Unicode

# a \uXXXX escape of a surrogate code point, high (D800-DBFF) or low (DC00-DFFF), in JSON source text
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


def _has_lone_surrogates(text: str) -> bool:
    """Whether JSON source ``text`` holds a surrogate escape that decodes to a lone surrogate.

    JSON decoding joins a high and a low escape written next to each other into one
    code point (``"\\ud83d\\ude00"`` is an emoji); any other surrogate escape stays a
    lone surrogate, which UTF-8 cannot encode. An escape preceded by an odd number
    of backslashes is a literal backslash and text, not an escape. Only the files
    that hold one (exactly those) are walked by :func:`_repair_surrogates`, so a
    clean 256 MB file costs one regular-expression scan.

    >>> _has_lone_surrogates(r'["\\ud83d\\ude00", "\\\\ud800"]'), _has_lone_surrogates(r'["a\\ud800b"]')
    (False, True)
    """
    if _SURROGATE_ESCAPE.search(text) is None:  # one scan (0.25 s for LongMemEval-S), as for most files
        return False
    pending = None  # where an unpaired high escape ends
    for m in _SURROGATE_ESCAPE.finditer(text):
        start = before = m.start()
        while before > 0 and text[before - 1] == "\\":
            before -= 1
        if (start - before) % 2:  # an escaped backslash followed by the letters "ud8..": text
            continue
        high = m.group()[3] in "89abAB"
        if pending is not None and not (start == pending and not high):
            return True  # a high escape not followed by a low one
        if high:
            pending = m.end()
        elif pending is None:
            return True  # a low escape without a high one before it
        else:
            pending = None
    return pending is not None


def _repair_surrogates(path, data, where=None):
    """``data`` with every lone surrogate in its strings (and keys) replaced by U+FFFD, and one warning for the file.

    The warning (:class:`DatasetWarning`) names the file, how many were replaced and the
    first place: its record (``record <i> (<id>)``, or ``where`` for one line of JSON Lines)
    and the field inside it. The rule is :func:`memlib._text.clean_text`'s, which the store
    applies too.
    """
    records = list(enumerate(data)) if isinstance(data, list) and where is None else [(None, data)]
    total, first = 0, None
    for i, rec in records:
        rec, n, place = _clean_tree(rec)
        if not n:
            continue
        total += n
        if i is None:
            data = rec
            label = where or "the top level"
        else:
            data[i] = rec
            ident = next((rec[k] for k in _ID_FIELDS if isinstance(rec, dict) and isinstance(rec.get(k), str)), None)
            label = f"record {i}" + (f" ({ident})" if ident is not None else "")
        if first is None:
            first = label + (f" {place}" if place else "")
    if total:
        _note(
            f"{path}: {total} lone surrogate{'s' if total > 1 else ''} (invalid Unicode such as \\ud800, legal in "
            f"JSON) replaced by U+FFFD, the first in {first}"
        )
    return data


_ID_FIELDS = ("question_id", "sample_id", "conversation_id")


def _clean_tree(value) -> tuple:
    """``(value, count, first)``: a decoded JSON value with lone surrogates replaced in every string and key.

    Lists and objects are cleaned in place, without recursion (a value may nest as deep
    as the decoder allows); ``first`` names the first field that held one, like
    ``haystack_sessions[1][0].content``.
    """
    total, first = 0, None
    root = [value]
    stack = [(root, 0, "")]
    while stack:
        holder, key, place = stack.pop()
        item = holder[key]
        if isinstance(item, str):
            n = count_surrogates(item)
            if n:
                holder[key] = clean_text(item)
                total += n
                first = place if first is None else first
        elif isinstance(item, list):
            stack.extend((item, k, f"{place}[{k}]") for k in range(len(item) - 1, -1, -1))
        elif isinstance(item, dict):
            if any(count_surrogates(k) for k in item):
                cleaned = {}
                for k, v in item.items():
                    n = count_surrogates(k)
                    if n and first is None:
                        first = f"{place}.{clean_text(k)}" if place else clean_text(k)
                    total += n
                    cleaned[clean_text(k)] = v
                holder[key] = item = cleaned
            stack.extend((item, k, f"{place}.{k}" if place else k) for k in reversed(list(item)))
    return root[0], total, first or ""


_NOTES = threading.local()


def _note(message: str) -> None:
    """Warn (:class:`DatasetWarning`) about something repaired at load, and keep the message for the parse cache."""
    notes = getattr(_NOTES, "current", None)
    if notes is not None:
        notes.append(message)
    warnings.warn(message, DatasetWarning, stacklevel=4)


def _cases_frame(rows, dates=None) -> pd.DataFrame:
    cases = pd.DataFrame(rows, columns=["case_id", "question", "question_type", "haystack", "gold", "group"])
    cases["usable"] = cases["gold"].map(len) > 0
    cases["question_date"] = pd.to_datetime(
        pd.Series(dates if dates is not None else [pd.NaT] * len(cases), dtype=object)
    )
    return cases


# --------------------------------------------------------------------------- LoCoMo

_LOCOMO_ID = re.compile(r"^D:?(\d+):0*(\d+)$")


def normalise_locomo_evidence(raw) -> list[str]:
    """Split and repair LoCoMo evidence strings (see ``shared/datasets/locomo/SOURCE.md``).

    Several ids in one string are split on ``;`` and white space; ``D:11:26``
    becomes ``D11:26`` and ``D30:05`` becomes ``D30:5``. What is not of the form
    ``D<session>:<turn>`` after that (e.g. ``D``) is dropped.

    >>> normalise_locomo_evidence(["D8:6; D9:17", "D:11:26", "D30:05", "D"])
    ['D8:6', 'D9:17', 'D11:26', 'D30:5']
    """
    out = []
    for item in raw:
        for part in re.split(r"[;\s]+", str(item).strip()):
            m = _LOCOMO_ID.match(part)
            if m:
                out.append(f"D{int(m.group(1))}:{int(m.group(2))}")
    return out


def _locomo_date(value, path, where: str) -> pd.Timestamp:
    date = pd.NaT
    if isinstance(value, str):
        try:
            date = pd.Timestamp(datetime.strptime(value, "%I:%M %p on %d %B, %Y"))  # strict: pandas would read "now"
        except ValueError:
            pass
    if pd.isna(date):
        _fail(path, where, f"cannot read session date {value!r} (expected like '1:56 pm on 8 May, 2023')")
    return date


@_one_line_when_too_deep
def load_locomo(path=None) -> Dataset:
    """Load LoCoMo (``locomo10.json``): one case per (conversation, question).

    Both speakers are people, so every turn has role ``user`` and its speaker's
    name. An image-sharing turn's text is its words plus the BLIP caption:
    ``"<text> [shares a photo: <caption>]"``. Evidence ids are normalised by
    :func:`normalise_locomo_evidence`; ids that still point at no turn are
    dropped and counted in ``skipped['evidence_ids']``; a question left without
    gold stays as an unusable case (adversarial questions stay too).

    Sessions are taken in the order of their numbers, and their dates must run
    forward (each session after the last turn of the one before, turns being one
    second apart); a date that runs backwards is an error naming the
    conversation and the session. So is a repeated ``sample_id`` or ``dia_id``.
    """
    path = Path(path) if path is not None else resolve_dataset("locomo")
    data = _read_json_list(path)
    b = _Builder()
    rows = []
    skipped = {"evidence_ids": 0}
    seen_samples: dict = {}
    for i, sample in enumerate(data):
        _require(path, f"record {i}", sample, ("sample_id", "conversation", "qa"))
        sid = str(sample["sample_id"])
        where = f"record {i} ({sid})"
        if sid in seen_samples:
            _fail(path, where, f"sample_id {sid!r} repeats record {seen_samples[sid]}")
        seen_samples[sid] = i
        conv = _need(path, where, "conversation", sample["conversation"], dict)
        qas = _need(path, where, "qa", sample["qa"], list)
        nums = sorted(int(m.group(1)) for k in conv if (m := re.fullmatch(r"session_(\d+)", k)))
        if not nums:
            _fail(path, where, "conversation has no session_<n> lists")
        dia, dia_at = {}, {}
        haystack = []
        previous = None  # (number, date, time of its last turn) of the session before
        for n in nums:
            turns = _need(path, where, f"session_{n}", conv[f"session_{n}"], list)
            if f"session_{n}_date_time" not in conv:
                _fail(path, where, f"session_{n} has no session_{n}_date_time")
            date = _locomo_date(conv[f"session_{n}_date_time"], path, f"{where} session_{n}")
            if previous is not None and date <= previous[2]:
                _fail(
                    path,
                    f"{where} session_{n}",
                    f"date {date} is not after session_{previous[0]} ({previous[1]}, its last turn {previous[2]}); "
                    "LoCoMo sessions run forward in time",
                )
            previous = (n, date, date + pd.Timedelta(seconds=max(len(turns) - 1, 0)))
            items = []
            for j, t in enumerate(turns):
                if not isinstance(t, dict) or not isinstance(t.get("text"), str) or "speaker" not in t:
                    _fail(path, f"{where} session_{n} turn {j}", "a turn needs 'speaker' and a 'text' string")
                text = t["text"]
                if t.get("blip_caption"):
                    text = f"{text} [shares a photo: {t['blip_caption']}]"
                items.append(("user", str(t["speaker"]), text))
            key, first = b.session(f"{sid}/session_{n}", date, items)
            haystack.append(key)
            for j, t in enumerate(turns):
                d = str(t.get("dia_id", f"D{n}:{j + 1}"))
                if d in dia:
                    _fail(path, f"{where} session_{n} turn {j}", f"dia_id {d!r} repeats {dia_at[d]}")
                dia[d], dia_at[d] = first + j, f"session_{n} turn {j}"
        for q, qa in enumerate(qas):
            if not isinstance(qa, dict) or "question" not in qa:
                _fail(path, f"{where} qa {q}", "a QA item needs a 'question'")
            _need(path, f"{where} qa {q}", "question", qa["question"], str)
            raw = _need(path, f"{where} qa {q}", "evidence", qa.get("evidence", []), list)
            ids = normalise_locomo_evidence(raw)
            gold = [dia[x] for x in ids if x in dia]
            tokens = sum(len([p for p in re.split(r"[;\s]+", str(x).strip()) if p]) for x in raw)
            skipped["evidence_ids"] += tokens - len(gold)
            rows.append(
                (
                    f"{sid}:q{q}",
                    qa["question"],
                    f"category_{qa.get('category', '?')}",
                    tuple(haystack),
                    tuple(sorted(set(gold))),
                    sid,
                )
            )
    turns, sessions = b.frames()
    return Dataset("locomo", turns, sessions, _cases_frame(rows), b.texts, str(path), skipped)


# --------------------------------------------------------------------------- LongMemEval

LONGMEMEVAL_FIELDS = (
    "question_id",
    "question_type",
    "question",
    "answer",
    "question_date",
    "haystack_session_ids",
    "haystack_dates",
    "haystack_sessions",
    "answer_session_ids",
)


def _lme_date(value, path, where) -> pd.Timestamp:
    date = pd.NaT
    if isinstance(value, str):
        try:
            date = pd.Timestamp(datetime.strptime(value, "%Y/%m/%d (%a) %H:%M"))  # strict: pandas would read "now"
        except ValueError:
            pass
    if pd.isna(date):
        _fail(path, where, f"cannot read date {value!r} (expected like '2023/05/20 (Sat) 02:21')")
    return date


@_one_line_when_too_deep
def load_longmemeval(path, name: str | None = None) -> Dataset:
    """Load a LongMemEval file (S, M or oracle; one schema): one case per question.

    Gold turns are those with ``has_answer: true`` (a JSON boolean; anything
    else but ``false`` or its absence is an error). Haystack sessions are put in
    time order. A session id that recurs with the same content is stored once; one
    that recurs within a record at another date (the cleaned LongMemEval-S does
    this 13 times) is kept at both dates, but the very same session twice in one
    record is an error, as is a repeated ``question_id``. A session dated before
    the previous session's last turn (sessions that share a minute) starts one
    second after it, so a history's turns always run forward in time.
    """
    path = Path(path)
    data = _read_json_list(path)
    b = _Builder()
    rows, qdates = [], []
    seen_questions: dict = {}
    for i, rec in enumerate(data):
        label = f"record {i} ({rec.get('question_id', '?')})" if isinstance(rec, dict) else f"record {i}"
        _require(path, label, rec, LONGMEMEVAL_FIELDS)
        qid = str(rec["question_id"])
        where = f"record {i} ({qid})"
        if qid in seen_questions:
            _fail(path, where, f"question_id {qid!r} repeats record {seen_questions[qid]}")
        seen_questions[qid] = i
        _need(path, where, "question", rec["question"], str)
        ids, dates, sessions = rec["haystack_session_ids"], rec["haystack_dates"], rec["haystack_sessions"]
        if not (isinstance(ids, list) and isinstance(dates, list) and isinstance(sessions, list)):
            _fail(path, where, "haystack_session_ids, haystack_dates and haystack_sessions must be lists")
        if not len(ids) == len(dates) == len(sessions):
            _fail(
                path,
                where,
                f"haystack lists differ in length ({len(ids)} ids, {len(dates)} dates, {len(sessions)} sessions)",
            )
        parsed = [_lme_date(d, path, f"{where} haystack_dates[{k}]") for k, d in enumerate(dates)]
        order = sorted(range(len(ids)), key=lambda k: (parsed[k], k))
        haystack, gold = [], []
        position: dict = {}  # session key -> its index in this record
        next_free = None  # a session starts after the previous one's last turn (LongMemEval-S has sessions
        # that share a minute; their turns, one second apart, would otherwise interleave in time)
        for k in order:
            sess = sessions[k]
            start = parsed[k] if next_free is None or parsed[k] >= next_free else next_free
            next_free = start + pd.Timedelta(seconds=len(sess) if isinstance(sess, list) else 0)
            if not isinstance(sess, list):
                _fail(path, f"{where} haystack_sessions[{k}]", "a session must be a list of turns")
            items, flags = [], []
            for j, t in enumerate(sess):
                if (
                    not isinstance(t, dict)
                    or not isinstance(t.get("content"), str)
                    or t.get("role") not in ("user", "assistant")
                ):
                    _fail(
                        path,
                        f"{where} haystack_sessions[{k}] turn {j}",
                        "a turn needs role 'user' or 'assistant' and a 'content' string",
                    )
                flag = t.get("has_answer", False)
                if not isinstance(flag, bool):
                    _fail(
                        path,
                        f"{where} haystack_sessions[{k}] turn {j}",
                        f"has_answer must be true or false, got {_describe(flag)}",
                    )
                items.append((t["role"], t["role"], t["content"]))
                flags.append(flag)
            same = (str(ids[k]), parsed[k], json.dumps(items))  # the very same session, before any shift
            if same in position:
                _fail(
                    path,
                    f"{where} haystack_session_ids[{k}]",
                    f"session {str(ids[k])!r} repeats haystack_session_ids[{position[same]}] (same date and turns)",
                )
            position[same] = k
            key, first = b.session(str(ids[k]), start, items)
            haystack.append(key)
            gold.extend(first + j for j, f in enumerate(flags) if f)
        rows.append((qid, rec["question"], str(rec["question_type"]), tuple(haystack), tuple(sorted(set(gold))), qid))
        qdates.append(_lme_date(rec["question_date"], path, f"{where} question_date"))
    turns, sessions = b.frames()
    return Dataset(name or path.stem, turns, sessions, _cases_frame(rows, qdates), b.texts, str(path), {})


# --------------------------------------------------------------------------- generic JSON Lines


def _iso_date(value, path, where: str) -> pd.Timestamp:
    """An ISO 8601 date string as a Timestamp; a number, null, ``""``, ``"NaT"`` or ``"now"`` is an error."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        reason = "a number is not a date (seconds? nanoseconds?): write an ISO 8601 string like '2024-01-05T10:00:00'"
    else:
        reason = "ISO 8601 expected, like '2024-01-05T10:00:00'"
        if isinstance(value, str):
            try:
                return pd.Timestamp(datetime.fromisoformat(value))
            except ValueError:
                pass
    _fail(path, where, f"cannot read date {value!r}: {reason}")


@_one_line_when_too_deep
def load_jsonl(path, name: str | None = None) -> Dataset:
    """Load conversations in memlib's generic JSON Lines format.

    One conversation per line::

        {"conversation_id": "c1",
         "sessions": [{"session_id": "s1", "date": "2024-01-05T10:00:00",
                       "turns": [{"role": "user", "speaker": "Ana", "text": "I am allergic to nuts."},
                                 {"role": "assistant", "text": "Noted."}]}],
         "questions": [{"question_id": "q1", "question": "What is Ana allergic to?",
                        "evidence": [["s1", 0]], "question_type": "fact"}]}

    ``role`` is ``user`` or ``assistant``; ``speaker`` defaults to the role;
    ``date`` is an ISO 8601 string: all dates of a file carry a time zone (they
    are read as UTC) or none do. ``evidence`` lists ``[session_id, turn_index]``
    pairs. ``question_type`` is optional. Every question is a case over all of
    its conversation's sessions, in date order. Evidence that points at no turn,
    and a repeated conversation, session or question id, are errors.
    """
    path = Path(path)
    b = _Builder()
    rows = []
    lines = [(n, line) for n, line in enumerate(_read_lines(path), 1) if line.strip()]
    if not lines:
        raise DatasetError(f"{path}: holds no records (no conversation lines)")
    seen_conversations: dict = {}
    zone = None  # (has a time zone, where) of the file's first date
    for n, line in lines:
        where = f"line {n}"
        rec = _decode(path, where, line)
        if _has_lone_surrogates(line):
            rec = _repair_surrogates(path, rec, where)
        _require(path, where, rec, ("conversation_id", "sessions", "questions"))
        cid = str(rec["conversation_id"])
        if cid in seen_conversations:
            _fail(path, where, f"conversation_id {cid!r} repeats line {seen_conversations[cid]}")
        seen_conversations[cid] = n
        haystack, index, seen_sessions = [], {}, {}
        dated = []
        for k, s in enumerate(_need(path, where, "sessions", rec["sessions"], list)):
            if not isinstance(s, dict) or "session_id" not in s or "turns" not in s or "date" not in s:
                _fail(path, f"{where} session {k}", "a session needs 'session_id', 'date' and 'turns'")
            sid = str(s["session_id"])
            if sid in seen_sessions:
                _fail(path, f"{where} session {k}", f"session_id {sid!r} repeats session {seen_sessions[sid]}")
            seen_sessions[sid] = k
            at = f"{where} session {k} ({sid})"
            date = _iso_date(s["date"], path, at)
            if zone is None:
                zone = (date.tzinfo is not None, at)
            elif (date.tzinfo is not None) != zone[0]:
                has = "has a time zone" if date.tzinfo is not None else "has no time zone"
                _fail(path, at, f"date {s['date']!r} {has} but {zone[1]} has {'none' if zone[0] is False else 'one'}")
            if date.tzinfo is not None:
                date = date.tz_convert("UTC").tz_localize(None)
            dated.append((date, k, s, _need(path, at, "turns", s["turns"], list)))
        for date, _k, s, turns in sorted(dated, key=lambda x: (x[0], x[1])):
            items = []
            for j, t in enumerate(turns):
                if (
                    not isinstance(t, dict)
                    or not isinstance(t.get("text"), str)
                    or t.get("role") not in ("user", "assistant")
                ):
                    _fail(
                        path,
                        f"{where} session {s['session_id']} turn {j}",
                        "a turn needs role 'user' or 'assistant' and a 'text' string",
                    )
                items.append((t["role"], str(t.get("speaker", t["role"])), t["text"]))
            key, first = b.session(f"{cid}/{s['session_id']}", date, items)
            haystack.append(key)
            index[str(s["session_id"])] = (first, len(items))
        seen_questions: dict = {}
        for q, qa in enumerate(_need(path, where, "questions", rec["questions"], list)):
            at = f"{where} question {q}"
            if not isinstance(qa, dict) or "question" not in qa:
                _fail(path, at, "a question needs a 'question' string")
            _need(path, at, "question", qa["question"], str)
            qid = str(qa.get("question_id", q))
            if qid in seen_questions:
                _fail(path, at, f"question_id {qid!r} repeats question {seen_questions[qid]}")
            seen_questions[qid] = q
            gold = []
            for ev in _need(path, at, "evidence", qa.get("evidence", []), list):
                if not (
                    isinstance(ev, list)
                    and len(ev) == 2
                    and str(ev[0]) in index
                    and isinstance(ev[1], int)
                    and not isinstance(ev[1], bool)
                    and 0 <= ev[1] < index[str(ev[0])][1]
                ):
                    boolean = isinstance(ev, list) and len(ev) == 2 and isinstance(ev[1], bool)
                    why = ": a turn index is an integer, not true or false" if boolean else ""
                    _fail(path, at, f"evidence {ev!r} does not resolve to a turn{why}")
                gold.append(index[str(ev[0])][0] + ev[1])
            rows.append(
                (
                    f"{cid}:{qid}",
                    qa["question"],
                    str(qa.get("question_type", "")),
                    tuple(haystack),
                    tuple(sorted(set(gold))),
                    cid,
                )
            )
    turns, sessions = b.frames()
    return Dataset(name or path.stem, turns, sessions, _cases_frame(rows), b.texts, str(path), {})


# --------------------------------------------------------------------------- RealMem

_REALMEM_DATE = re.compile(r"^(\d{4}-\d{2}-\d{2})(?: \([A-Za-z]+\))?$")
_REALMEM_ROLES = {"User": "user", "Assistant": "assistant"}


def _realmem_date(value, path, where: str) -> pd.Timestamp:
    m = _REALMEM_DATE.match(value) if isinstance(value, str) else None
    if m is None:
        _fail(path, where, f"cannot read date {_describe(value)} (expected like '2025-12-15 (Monday)')")
    try:
        return pd.Timestamp(m.group(1))
    except ValueError as exc:
        _fail(path, where, f"cannot read date {value!r} ({exc})")


def _point_key(content) -> str:
    """A memory point's content as a key: the string itself, or an object's canonical JSON."""
    return content if isinstance(content, str) else json.dumps(content, sort_keys=True)


def _realmem_persona(path: Path, b: _Builder, skipped: dict) -> tuple[list, list]:
    """Read one persona file into ``b``; return its case rows and question dates.

    A question is a turn with ``is_query: true``; its history is every session
    before its own, in the file's order; its gold turns are those its memory
    points came from (see :func:`load_realmem`).
    """
    data = _read_json(path)
    if not isinstance(data, dict) or not isinstance(data.get("dialogues"), list):
        _fail(path, "top level", "a RealMem file is an object with a 'dialogues' list")
    meta = data.get("_metadata") if isinstance(data.get("_metadata"), dict) else {}
    persona = str(meta.get("person_name") or path.name.split("_dialogues")[0])
    sessions = data["dialogues"]
    keys, firsts, turn_texts, points = [], [], [], []
    position = {}  # session_uuid -> its index in the file
    next_free = None
    for k, s in enumerate(sessions):
        where = f"dialogues[{k}]"
        _require(path, where, s, ("session_uuid", "current_time", "dialogue_turns"))
        uuid = str(s["session_uuid"])
        if uuid in position:
            _fail(path, where, f"session_uuid {uuid!r} repeats dialogues[{position[uuid]}]")
        position[uuid] = k
        date = _realmem_date(s["current_time"], path, f"{where} current_time")
        turns = _need(path, where, "dialogue_turns", s["dialogue_turns"], list)
        items = []
        for j, t in enumerate(turns):
            speaker = t.get("speaker") if isinstance(t, dict) else None
            if speaker not in _REALMEM_ROLES or not isinstance(t.get("content"), str):
                _fail(path, f"{where} turn {j}", "a turn needs speaker 'User' or 'Assistant' and a 'content' string")
            role = _REALMEM_ROLES[t["speaker"]]
            items.append((role, persona if role == "user" else role, clean_text(t["content"])))
        # the file's order is the order of events: 111 sessions of three personas carry a date a day
        # earlier than the session before; like LongMemEval's, such a session starts after the last turn
        start = date if next_free is None or date >= next_free else next_free
        next_free = start + pd.Timedelta(seconds=len(items))
        # the label is the opaque uuid, never session_identifier: its 'Enhanced:' prefix marks sessions
        # that hold no gold (SOURCE.md)
        key, first = b.session(f"{persona}/{uuid}", start, items)
        keys.append(key)
        firsts.append(first)
        turn_texts.append([t["content"] for t in turns])
        memory = s.get("extracted_memory") or []
        found = {}
        for p in memory:
            if isinstance(p, dict):  # the first point of a content wins; some contents are objects
                found.setdefault(_point_key(p.get("content")), p.get("source_content_snapshot"))
        points.append(found)
    rows, dates = [], []
    seen_questions: dict = {}
    for k, s in enumerate(sessions):
        turns = s["dialogue_turns"]
        for j, t in enumerate(turns):
            if t.get("is_query") is not True:  # one turn of the release has no is_query: not a question
                continue
            qid = f"{persona}/{t.get('query_id')}"
            where = f"dialogues[{k}] turn {j} ({t.get('query_id')})"
            if qid in seen_questions:
                _fail(path, where, f"query_id {t.get('query_id')!r} repeats {seen_questions[qid]}")
            seen_questions[qid] = where
            reply = turns[j + 1] if j + 1 < len(turns) and isinstance(turns[j + 1], dict) else {}
            used = reply.get("memory_used") or []
            if not isinstance(used, list):
                _fail(path, f"dialogues[{k}] turn {j + 1}", f"memory_used must be a list, got {_describe(used)}")
            gold = set()
            for ref in used:
                src = position.get(str(ref.get("session_uuid"))) if isinstance(ref, dict) else None
                snapshot = points[src].get(_point_key(ref.get("content"))) if src is not None else None
                hits = [i for i, text in enumerate(turn_texts[src]) if text == snapshot] if snapshot else []
                if not hits:
                    skipped["references_unresolved"] = skipped.get("references_unresolved", 0) + 1
                elif src >= k:
                    skipped["references_forward"] = skipped.get("references_forward", 0) + 1
                else:
                    gold.add(firsts[src] + hits[0])
            rows.append(
                (
                    qid,
                    clean_text(t["content"]),
                    str(t.get("category_name", "")),
                    tuple(keys[:k]),
                    tuple(sorted(gold)),
                    persona,
                )
            )
            dates.append(b.turn_rows[firsts[k] + j][5])  # asked at its own turn's time
    return rows, dates


def resolve_realmem() -> list[Path]:
    """The ten RealMem persona files (:data:`REALMEM_FILES`), each found (or downloaded) by :func:`resolve`."""
    return [resolve(f) for f in REALMEM_FILES]


def load_realmem(paths=None, name: str = "realmem") -> Dataset:
    """Load RealMem: one case per question, asked inside its persona's stream of sessions.

    ``paths`` is a folder (every ``*_dialogues_*.json`` in it), one persona file or
    a list of them; by default the ten files of :data:`REALMEM_FILES`. Each persona
    is one group. A question is a turn with ``is_query: true``; its history is every
    session before its own, in the file's order (the order of events: a session
    dated before the previous session's last turn starts one second after it, as
    in LongMemEval), and it is asked at its own turn's time. Its gold turns are
    those its memory points came from: each entry of the next turn's
    ``memory_used`` names a point of an earlier session's ``extracted_memory`` by
    (``session_uuid``, ``content``), and the point's ``source_content_snapshot`` is
    matched to that session's turn texts (``source_turn`` is not reliable).
    References that resolve to no turn are counted in
    ``skipped['references_unresolved']``, those to the question's own or a later
    session in ``skipped['references_forward']``; a question left without gold
    stays as an unusable case. Session labels are ``<persona>/<session_uuid>``:
    ``session_identifier`` is never read, since its ``Enhanced:`` prefix marks the
    sessions that hold no gold (``SOURCE.md``).
    """
    if paths is None:
        files = resolve_realmem()
    elif isinstance(paths, (str, Path)) and Path(paths).is_dir():
        files = _realmem_files(Path(paths))
    elif isinstance(paths, (str, Path)):
        files = [Path(paths)]
    else:
        files = [Path(p) for p in paths]
    b = _Builder()
    skipped = {"references_unresolved": 0, "references_forward": 0}
    rows, dates = [], []
    for path in files:
        r, d = _realmem_persona(path, b, skipped)
        rows += r
        dates += d
    turns, sessions = b.frames()
    source = str(files[0].parent) if len(files) > 1 else str(files[0])
    return Dataset(name, turns, sessions, _cases_frame(rows, dates), b.texts, source, skipped)


def _realmem_files(folder: Path) -> list[Path]:
    files = sorted(p for p in folder.iterdir() if _REALMEM_NAME.fullmatch(p.name))
    if not files:
        raise DatasetError(f"{folder}: holds no RealMem persona file (<Persona>_dialogues_<n>k.json)")
    return files


_REALMEM_NAME = re.compile(r".+_dialogues_\d+k\.json(\.gz)?")


def load(dataset) -> Dataset:
    """Load a dataset by name (:data:`DATASETS`) or by path.

    A path ending in ``.jsonl`` (or ``.jsonl.gz``) is read by :func:`load_jsonl`,
    ``locomo10.json`` by :func:`load_locomo`, and any other ``.json`` (or
    ``.json.gz``) as LongMemEval's schema. ``Dataset.source`` names the file read.
    The same file is parsed once per process while it is unchanged (the result is
    shared: treat it as read-only; ``with_cases``, ``limit`` and ``sample`` copy),
    and across processes its parse is read back from the parsed-dataset cache
    (:func:`_parsed`; ``MEMLIB_DATASET_CACHE=0`` turns that off).
    """
    if dataset == "realmem":
        files = resolve_realmem()
        return _load_files(dataset, files, files[0].parent, lambda _: load_realmem(files))
    if isinstance(dataset, str) and dataset in DATASETS:
        path = resolve_dataset(dataset)
        reader = load_locomo if dataset == "locomo" else lambda p: load_longmemeval(p, name=dataset)
    else:
        path = Path(dataset)
        if path.is_dir():  # a folder of RealMem persona files
            files = _realmem_files(path)
            return _load_files(dataset, files, path, lambda p: load_realmem(files, name=p.name))
        if not path.is_file():
            raise ParameterError(f"unknown dataset {str(dataset)!r}: not one of {', '.join(DATASETS)} and not a file")
        name = path.name[:-3] if path.name.endswith(".gz") else path.name
        if _REALMEM_NAME.fullmatch(path.name):
            reader = lambda p: load_realmem([p], name=name.split("_dialogues_")[0])  # noqa: E731
        elif name.endswith(".jsonl"):
            reader = lambda p: load_jsonl(p, name=name[:-6])  # noqa: E731
        elif name == DATASETS["locomo"][0]:
            reader = load_locomo
        else:
            reader = lambda p: load_longmemeval(p, name=name[:-5] if name.endswith(".json") else name)  # noqa: E731
    return _load_files(dataset, [Path(path)], Path(path), reader)


def _load_files(dataset, files: list, path: Path, reader) -> Dataset:
    """``reader(path)`` over the data ``files``, once per process while they are unchanged (:func:`load`)."""
    versions = []
    for f in files:
        stat = Path(f).stat()
        versions.append((str(Path(f).resolve()), stat.st_mtime_ns, stat.st_size))
    key = (str(dataset), str(Path(path).resolve()), tuple(versions))
    if key not in _LOADED:
        if len(_LOADED) >= 2:
            _LOADED.pop(next(iter(_LOADED)))
        _LOADED[key] = _parsed(path, str(dataset), reader, files)
    return _LOADED[key]


# --------------------------------------------------------------------------- parsed-dataset cache


def parsed_cache_enabled() -> bool:
    """False when ``$MEMLIB_DATASET_CACHE`` is ``0``, ``false``, ``off`` or ``no``."""
    return os.environ.get("MEMLIB_DATASET_CACHE", "1").strip().lower() not in ("0", "false", "off", "no")


def _parsed(path: Path, name: str, reader, files=None) -> Dataset:
    """``reader(path)``, or the same dataset read back from the parsed-dataset cache.

    Parsing LongMemEval-S takes about 10 s, and every study process and notebook kernel
    that reads it paid that; the cached form loads in about 1 s. The cache file, one
    ``.npz`` of plain arrays (no pickle) under ``cache_root() / "datasets"``, is keyed by
    the file's sha256 and path, the name it was loaded under, this module's source and the
    numpy and pandas versions, so an edited file or loader never reads a stale parse. It is
    written atomically, and only when it reads back equal to the parse (a dataset with a
    column it cannot store as plain arrays is not cached); a damaged one (unreadable, or
    whose manifest disagrees with its arrays: :func:`_dataset_from_arrays`) is set aside and
    the file parsed again. The warnings of the parse (:class:`DatasetWarning`) are kept in
    the manifest and given again whenever the cached parse is read.
    """
    if not parsed_cache_enabled():
        return reader(path)
    h = hashlib.sha256(f"format {PARSED_FORMAT}\0numpy {np.__version__}\0pandas {pd.__version__}\0".encode())
    h.update(Path(__file__).read_bytes())
    # surrogateescape: a file name that is not UTF-8 (bytes os.fsdecode could not decode) still keys
    h.update(f"\0{name}\0{path}\0{Path(path).resolve()}".encode("utf-8", "surrogateescape"))
    for f in files or [path]:  # a folder (RealMem) is keyed by the content of each of its files
        h.update(f"\0{Path(f).name}\0{file_sha256(f)}".encode("utf-8", "surrogateescape"))
    folder = cache_root() / "datasets"
    prefix = safe_name(Path(name).name)
    cached = folder / f"{prefix}-{h.hexdigest()[:24]}.npz"
    try:
        ds, notes = _dataset_from_npz(cached, str(path))
    except (FileNotFoundError, NotADirectoryError):  # not cached, pruned a moment ago, or no cache folder
        pass
    except CORRUPT_ERRORS + (TypeError, IndexError, UnicodeDecodeError, AttributeError) as exc:
        set_aside(cached, exc)
    else:
        for message in notes:  # what the parse warned about, said again as it did then
            warnings.warn(message, DatasetWarning, stacklevel=4)
        return ds
    ds, notes = _read_noting(reader, path)
    try:
        arrays = _dataset_arrays(ds, notes)
    except _NotStorable:
        return ds
    try:
        same = _same_dataset(ds, _dataset_from_arrays(arrays, str(path)))
    except CORRUPT_ERRORS + (TypeError, IndexError):  # a dataset that breaks the cache's own checks: not cached
        same = False
    if not same or not cache_folder_ok(folder):
        return ds
    try:
        atomic_savez(cached, **arrays)
    except OSError as exc:
        report_unwritable(folder, exc)
        return ds
    # earlier parses under this name (another content, loader or library version); a clone that reads
    # another file under the same name parses again rather than letting the folder grow
    stale = re.compile(re.escape(prefix) + r"-[0-9a-f]{24}\.npz")
    for old in folder.iterdir():
        if old != cached and stale.fullmatch(old.name):
            try:
                old.unlink(missing_ok=True)
            except OSError:  # e.g. a shared folder whose files belong to someone else
                pass
    return ds


#: The layout of a parsed-dataset cache file; bump it when :func:`_dataset_arrays` changes.
PARSED_FORMAT = 2


def _read_noting(reader, path) -> tuple:
    """``(reader(path), the messages of the DatasetWarnings it gave)``."""
    previous = getattr(_NOTES, "current", None)
    _NOTES.current = notes = []
    try:
        return reader(path), notes
    finally:
        _NOTES.current = previous


#: The columns of each frame of a parsed dataset and how the cache stores them (:func:`_frame_arrays`):
#: ``str``, ``tuple-str``, ``tuple-int``, or ``array`` with the numpy kinds it may have.
_SCHEMA = {
    "turns": {"session": "str", "turn": "iu", "role": "str", "speaker": "str", "timestamp": "M", "text_id": "iu"},
    "sessions": {"session": "str", "label": "str", "date": "M", "first_turn": "iu", "n_turns": "iu"},
    "cases": {
        "case_id": "str",
        "question": "str",
        "question_type": "str",
        "haystack": "tuple-str",
        "gold": "tuple-int",
        "group": "str",
        "usable": "b",
        "question_date": "M",
    },
}
#: The columns of ``Dataset.turns`` (``text`` is rebuilt from ``texts``, not stored).
_TURN_COLUMNS = ["session", "turn", "role", "speaker", "text", "timestamp", "text_id"]
_MANIFEST_KEYS = {"name", "source", "skipped", "notes", "turns", "turn_columns", "text_dtype", "sessions", "cases"}


class _NotStorable(TypeError):
    """A dataset column holds values the parsed-dataset cache does not store (it is then not cached)."""


def _pack(strings) -> dict:
    """A list of str as one UTF-8 byte array and character offsets (no object arrays, no pickle)."""
    joined = "".join(strings)
    offsets = np.zeros(len(strings) + 1, np.int64)
    np.cumsum([len(x) for x in strings], out=offsets[1:])
    return {"utf8": np.frombuffer(joined.encode("utf-8", "surrogatepass"), np.uint8), "offsets": offsets}


def _unpack(utf8: np.ndarray, offsets: np.ndarray) -> list:
    joined = utf8.tobytes().decode("utf-8", "surrogatepass")
    o = offsets.tolist()
    if not o or o[0] != 0 or o[-1] != len(joined) or any(b < a for a, b in zip(o[:-1], o[1:])):
        raise ValueError(f"string offsets do not cut {len(joined)} characters into pieces")
    return [joined[a:b] for a, b in zip(o[:-1], o[1:])]


def _frame_arrays(prefix: str, frame: pd.DataFrame, out: dict, skip=()) -> list:
    """Store each column of ``frame`` as plain arrays in ``out``; return the column specs for the manifest."""
    specs = []
    for col in frame.columns:
        if col in skip:
            continue
        series, key = frame[col], f"{prefix}.{col}"
        spec = {"name": col, "dtype": str(series.dtype)}
        values = series.tolist()
        if series.dtype.kind in "biufmM":
            out[key] = series.to_numpy()
            if out[key].dtype.hasobject:  # e.g. time-zone aware or nullable columns: never pickled
                raise _NotStorable(f"column {col!r} of dtype {series.dtype}")
            spec["kind"] = "array"
        elif all(isinstance(v, str) for v in values):
            codes, uniques = pd.factorize(series)
            packed = _pack(list(uniques))
            out[key + ".codes"], out[key + ".utf8"], out[key + ".offsets"] = codes, packed["utf8"], packed["offsets"]
            spec["kind"] = "str"
        elif all(isinstance(v, tuple) for v in values):
            flat = [x for v in values for x in v]
            out[key + ".lengths"] = np.array([len(v) for v in values], np.int64)
            if all(isinstance(x, str) for x in flat):
                packed = _pack(flat)
                out[key + ".utf8"], out[key + ".offsets"] = packed["utf8"], packed["offsets"]
                spec["kind"] = "tuple-str"
            elif all(isinstance(x, int | np.integer) and not isinstance(x, bool) for x in flat):
                out[key + ".items"] = np.array(flat, np.int64)
                spec["kind"] = "tuple-int"
            else:
                raise _NotStorable(f"column {col!r}: tuples of mixed items")
        else:
            raise _NotStorable(f"column {col!r} of dtype {series.dtype}")
        specs.append(spec)
    return specs


class _ManifestError(ValueError):
    """A parsed-dataset cache file whose manifest disagrees with its arrays (or with the loaders' schema)."""


def _frame_from_arrays(prefix: str, specs: list, z, used: set | None = None) -> pd.DataFrame:
    """One frame of a parsed dataset, checked against :data:`_SCHEMA` (a mismatch raises :class:`_ManifestError`)."""
    used = set() if used is None else used
    schema = _SCHEMA.get(prefix)
    names = [spec.get("name") if isinstance(spec, dict) else None for spec in specs]
    if schema is not None and names != list(schema):
        raise _ManifestError(f"{prefix} columns {names} are not {list(schema)}")

    def get(key, kinds="iu"):
        array = z[key]
        used.add(key)
        if not isinstance(array, np.ndarray) or array.ndim != 1 or array.dtype.kind not in kinds:
            raise _ManifestError(f"array {key} is not a list of {kinds!r} numbers")
        return array

    data, rows = {}, None
    for spec in specs:
        key, kind = f"{prefix}.{spec['name']}", spec["kind"]
        want = schema[spec["name"]] if schema is not None else None
        stored = want if want in ("str", "tuple-str", "tuple-int") else "array"
        if want is not None and kind != stored and not (want == "tuple-int" and kind == "tuple-str"):
            raise _ManifestError(f"column {key} is stored as {kind!r}, not {stored!r}")  # (no gold at all: tuple-str)
        if kind == "array":
            values = get(key, want if want is not None else "biufmM")
            if str(values.dtype) != spec["dtype"]:
                raise _ManifestError(f"column {key} is said to be {spec['dtype']}, but its array is {values.dtype}")
        elif kind == "str":
            uniques = _unpack(get(key + ".utf8", "u"), get(key + ".offsets"))
            codes = get(key + ".codes")
            if len(codes) and (codes.min() < 0 or codes.max() >= len(uniques)):
                raise _ManifestError(f"codes of column {key} point outside its {len(uniques)} values")
            values = np.array(uniques, dtype=object)[codes]
        elif kind in ("tuple-str", "tuple-int"):
            lengths = get(key + ".lengths")
            if kind == "tuple-str":
                flat = _unpack(get(key + ".utf8", "u"), get(key + ".offsets"))
            else:
                flat = get(key + ".items").tolist()
            if (lengths < 0).any() or int(lengths.sum()) != len(flat):
                raise _ManifestError(f"lengths of column {key} do not add up to its {len(flat)} items")
            if want == "tuple-int" and kind == "tuple-str" and flat:
                raise _ManifestError(f"column {key} holds strings, not turn indices")
            ends = np.cumsum(lengths).tolist()
            values = [tuple(flat[e - n : e]) for e, n in zip(ends, lengths.tolist())]
        else:
            raise _ManifestError(f"column {key} has an unknown kind {kind!r}")
        if rows is not None and len(values) != rows:
            raise _ManifestError(f"column {key} has {len(values)} rows, the columns before it {rows}")
        rows = len(values)
        dtype = object if spec["dtype"] == "object" else spec["dtype"]
        data[spec["name"]] = pd.Series(values, dtype=dtype)
    return pd.DataFrame(data)


def _dataset_arrays(ds: Dataset, notes=()) -> dict:
    """A :class:`Dataset` as named plain arrays plus a JSON manifest (``turns.text`` is rebuilt from ``texts``).

    ``notes`` are the messages of the warnings its parse gave, kept to be given again.
    """
    out: dict = {}
    packed = _pack(list(ds.texts))
    out["texts.utf8"], out["texts.offsets"] = packed["utf8"], packed["offsets"]
    manifest = {
        "name": ds.name,
        "source": ds.source,
        "skipped": ds.skipped,
        "notes": list(notes),
        "turns": _frame_arrays("turns", ds.turns, out, skip=("text",)),
        "turn_columns": list(ds.turns.columns),
        "text_dtype": str(ds.turns["text"].dtype) if "text" in ds.turns else None,
        "sessions": _frame_arrays("sessions", ds.sessions, out),
        "cases": _frame_arrays("cases", ds.cases, out),
    }
    out["manifest"] = np.frombuffer(json.dumps(manifest).encode(), np.uint8)
    return out


def _dataset_from_arrays(z, source=None) -> Dataset:
    """The dataset of :func:`_dataset_arrays`'s arrays, checked: a manifest that disagrees raises.

    The manifest must hold exactly its fields, each frame the loaders' columns in the kinds
    the cache stores them (:data:`_SCHEMA`), every array it names and no other, columns of
    one length, and indices that point inside the dataset (text ids, sessions' turns,
    haystacks, gold turns); ``source``, when given, is the file the cache key was made from.
    Otherwise :class:`_ManifestError` (a ValueError) names what disagrees, and the caller sets
    the file aside (a hand-edited manifest once failed with a KeyError on every run).
    """
    m = json.loads(z["manifest"].tobytes().decode())
    if not isinstance(m, dict) or set(m) != _MANIFEST_KEYS:
        keys = sorted(m) if isinstance(m, dict) else type(m).__name__
        raise _ManifestError(f"manifest fields {keys} are not {sorted(_MANIFEST_KEYS)}")
    if not isinstance(m["name"], str) or not isinstance(m["source"], str) or source not in (None, m["source"]):
        raise _ManifestError(f"manifest names source {_describe(m['source'])}, not {source!r}")
    if not isinstance(m["skipped"], dict) or not all(
        isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool) for k, v in m["skipped"].items()
    ):
        raise _ManifestError(f"manifest skipped {_describe(m['skipped'])} is not counts by name")
    if not isinstance(m["notes"], list) or not all(isinstance(x, str) for x in m["notes"]):
        raise _ManifestError("manifest notes are not a list of messages")
    if m["turn_columns"] != _TURN_COLUMNS or m["text_dtype"] not in ("object", "str"):
        raise _ManifestError(f"turn columns {_describe(m['turn_columns'])} are not {_TURN_COLUMNS}")
    used = {"manifest", "texts.utf8", "texts.offsets"}
    texts = _unpack(z["texts.utf8"], z["texts.offsets"])
    turns = _frame_from_arrays("turns", m["turns"], z, used)
    ids = turns["text_id"].to_numpy()
    if len(ids) and (ids.min() < 0 or ids.max() >= len(texts)):
        raise _ManifestError(f"turn text ids point outside the {len(texts)} texts")
    text_dtype = m["text_dtype"] if m["text_dtype"] != "object" else object
    turns["text"] = pd.Series(np.array(texts, dtype=object)[ids], dtype=text_dtype)
    turns = turns[m["turn_columns"]]
    sessions = _frame_from_arrays("sessions", m["sessions"], z, used)
    cases = _frame_from_arrays("cases", m["cases"], z, used)
    extra = sorted(set(z) - used)
    if extra:
        raise _ManifestError(f"arrays {extra} are not in the manifest")
    first, count = sessions["first_turn"].to_numpy(), sessions["n_turns"].to_numpy()
    if len(first) and (first.min() < 0 or count.min() < 0 or (first + count).max() > len(turns)):
        raise _ManifestError(f"sessions' turns point outside the {len(turns)} turns")
    known = set(sessions["session"])
    if any(key not in known for hay in cases["haystack"] for key in hay):
        raise _ManifestError("a case's haystack names a session the dataset does not hold")
    if any(g < 0 or g >= len(turns) for gold in cases["gold"] for g in gold):
        raise _ManifestError(f"a case's gold turn points outside the {len(turns)} turns")
    return Dataset(m["name"], turns, sessions, cases, texts, m["source"], m["skipped"])


def _dataset_from_npz(path, source=None) -> tuple:
    """``(Dataset, notes)`` read back from a parsed-dataset cache file (:func:`_dataset_from_arrays`)."""
    with open(path, "rb") as f, np.load(f, allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    ds = _dataset_from_arrays(arrays, source)
    return ds, json.loads(arrays["manifest"].tobytes().decode())["notes"]


def _same_dataset(a: Dataset, b: Dataset) -> bool:
    """Whether two datasets are equal, value for value and dtype for dtype."""
    if (a.name, a.source, a.skipped, list(a.texts)) != (b.name, b.source, b.skipped, list(b.texts)):
        return False
    try:
        for x, y in ((a.turns, b.turns), (a.sessions, b.sessions), (a.cases, b.cases)):
            pd.testing.assert_frame_equal(x, y, check_exact=True)
    except AssertionError:
        return False
    return True


#: The last datasets :func:`load` read, by name, file, modification time and size: the studies of
#: one process (a notebook runs several) parse a 256 MB file once. Treat a loaded Dataset as read-only.
_LOADED: dict = {}
