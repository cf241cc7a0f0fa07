"""The normalised form every loader produces: :class:`Dataset`, its errors and the checks loaders share.

:class:`Dataset` holds the ``turns``, ``sessions`` and ``cases`` tables described in
:mod:`memlib.datasets`; :class:`DatasetError` is raised for a data file that is missing,
malformed or fails its checksum and :class:`DatasetWarning` warns of one memlib repaired;
``_Builder`` collects unique sessions and texts while a loader walks a file, ``_cases_frame``
makes the cases table, and ``_fail``, ``_require``, ``_need``, ``_describe``, ``_strict_date`` and
``_turn`` are the field checks whose messages name the file, the record and the field.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import numpy as np
import pandas as pd

from memlib._checks import ParameterError


class DatasetError(ValueError):
    """A data file is missing, malformed or fails its checksum."""


class DatasetWarning(UserWarning):
    """A data file held something memlib repaired as it loaded it (invalid Unicode): the file and record are named."""


@dataclass
class Dataset:
    """A loaded dataset in the normalised form (see :mod:`memlib.datasets`)."""

    name: str
    turns: pd.DataFrame
    sessions: pd.DataFrame
    cases: pd.DataFrame
    texts: list
    source: str = ""
    skipped: dict = field(default_factory=dict)

    def stats(self) -> dict:
        """Count what a loader reports, over the sessions the cases use: cases, usable cases, turns, texts, skips."""
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
        """Return the same dataset restricted to cases with at least one gold turn."""
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
        """Keep the first ``n`` groups (conversations or questions), for quick runs."""
        if n < 1:
            raise ParameterError(f"limit must be an integer >= 1, got {n}")
        keep = list(dict.fromkeys(self.cases["group"]))[:n]
        return self.with_cases(self.cases[self.cases["group"].isin(keep)])

    def sample(self, n: int, seed: int = 0) -> Dataset:
        """Draw a seeded random sample of ``n`` groups (conversations or questions), kept in file order.

        All groups when ``n`` is at least their number.
        """
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
            raise ParameterError(f"sample size must be an integer >= 1, got {n!r}")
        groups = list(dict.fromkeys(self.cases["group"]))
        if n >= len(groups):
            return self.with_cases(self.cases)
        pick = np.sort(np.random.default_rng(seed).choice(len(groups), n, replace=False))
        return self.with_cases(self.cases[self.cases["group"].isin({groups[i] for i in pick})])

    def spread_histories(self, n: int) -> Dataset:
        """Keep at most ``n`` histories of each group, evenly spread over it: the shortest, the longest, and between.

        A group of RealMem (a user) asks its questions inside one stream, each over the history up to
        its own date, so a user holds a history per question date, nested in one another; a study replays
        each. This keeps, per group, ``n`` of its distinct histories at evenly spaced ranks by length
        (and every case over them), so the histories kept still reach from the stream's start to its end.
        A group of LoCoMo or LongMemEval holds one history: nothing changes.

        >>> h = [("a",), ("a", "b"), ("a", "b", "c"), ("a", "b", "c", "d"), ("x",)]
        >>> cases = pd.DataFrame({"group": ["u", "u", "u", "u", "v"], "haystack": h})
        >>> d = Dataset("toy", pd.DataFrame(), pd.DataFrame(), cases, [])
        >>> d.spread_histories(2).cases["haystack"].map(len).tolist()
        [1, 4, 1]
        """
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
            raise ParameterError(f"histories per group must be an integer >= 1, got {n!r}")
        history = self.cases["haystack"].map(tuple)
        keep = np.zeros(len(self.cases), bool)
        for _, idx in self.cases.groupby("group", sort=False).indices.items():
            distinct = sorted(set(history.iloc[idx]), key=lambda h: (len(h), h))
            ranks = np.unique(np.linspace(0, len(distinct) - 1, min(n, len(distinct))).round().astype(np.int64))
            chosen = {distinct[i] for i in ranks}
            keep[idx] = history.iloc[idx].isin(chosen).to_numpy()
        return self.with_cases(self.cases[keep])

    def with_cases(self, cases: pd.DataFrame) -> Dataset:
        """Return a dataset with only these cases (turn and session tables are shared)."""
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
        """Return the same cases over only the turns their haystacks hold, and those turns' rows in :attr:`turns`.

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
    """Spell a value from a JSON file as JSON does (``null``, ``"false"``, ``1``), shortened."""
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


def _strict_date(path, where: str, value, fmt: str, example: str, what: str = "date") -> pd.Timestamp:
    """``value`` read as a date of format ``fmt``, strictly; otherwise a :class:`DatasetError` showing ``example``.

    :meth:`datetime.datetime.strptime` reads only what matches ``fmt`` (pandas would read ``"now"``).

    >>> _strict_date("f.json", "record 0", "2023/05/20 (Sat) 02:21", "%Y/%m/%d (%a) %H:%M", "2023/05/20 (Sat) 02:21")
    Timestamp('2023-05-20 02:21:00')
    >>> _strict_date("f.json", "record 0", "now", "%Y/%m/%d", "2023/05/20")
    Traceback (most recent call last):
    memlib.datasets.normalised.DatasetError: f.json: record 0: cannot read date 'now' (expected like '2023/05/20')
    """
    if isinstance(value, str):
        try:
            return pd.Timestamp(datetime.strptime(value, fmt))
        except ValueError:
            pass
    _fail(path, where, f"cannot read {what} {value!r} (expected like {example!r})")


def _turn(path, where: str, turn, text_field: str) -> tuple[str, str]:
    """``(role, text)`` of a turn object: role ``user`` or ``assistant`` and a ``text_field`` string, or a failure.

    >>> _turn("f.json", "turn 0", {"role": "user", "content": "hi"}, "content")
    ('user', 'hi')
    >>> _turn("f.json", "turn 1", {"role": "system", "content": "hi"}, "content")
    Traceback (most recent call last):
    memlib.datasets.normalised.DatasetError: f.json: turn 1: a turn needs role 'user' or 'assistant' and a ...
    """
    if not isinstance(turn, dict) or not isinstance(turn.get(text_field), str) or turn.get("role") not in _ROLES:
        _fail(path, where, f"a turn needs role 'user' or 'assistant' and a {text_field!r} string")
    return turn["role"], turn[text_field]


_ROLES = ("user", "assistant")


def _cases_frame(rows, dates=None, file_index=None, answers=None) -> pd.DataFrame:
    """Build the cases frame of a loader's rows.

    ``file_index`` holds, per case, the position at which its file lists each
    haystack session (default: the haystack is in file order). ``answers`` holds each
    question's answer string where the corpus gives one; the column ``answer`` is ``""`` where
    it gives none (every case of a corpus without answers).
    """
    cases = pd.DataFrame(rows, columns=["case_id", "question", "question_type", "haystack", "gold", "group"])
    cases["usable"] = cases["gold"].map(len) > 0
    cases["question_date"] = pd.to_datetime(
        pd.Series(dates if dates is not None else [pd.NaT] * len(cases), dtype=object)
    )
    if file_index is None:
        file_index = [tuple(range(len(h))) for h in cases["haystack"]]
    cases["session_file_index"] = [tuple(int(k) for k in f) for f in file_index]
    answers = [""] * len(cases) if answers is None else ["" if a is None else str(a) for a in answers]
    cases["answer"] = pd.Series(answers, index=cases.index, dtype=object)
    return cases
