"""The generic loader: :func:`load_jsonl` reads memlib's own JSON Lines format, one conversation a line.

The format (sessions with ISO 8601 dates, turns, questions whose evidence names
``[session_id, turn_index]`` pairs) is documented in :func:`load_jsonl`; each line is decoded
and checked on its own, so an error names its line.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pandas as pd

from memlib.datasets.normalised import Dataset, DatasetError, _Builder, _cases_frame, _fail, _need, _require, _turn
from memlib.datasets.reading import (
    _decode,
    _has_lone_surrogates,
    _one_line_when_too_deep,
    _read_lines,
    _repair_surrogates,
)


def _iso_date(value, path, where: str) -> pd.Timestamp:
    """Parse an ISO 8601 date string as a Timestamp; refuse a number, null, ``""``, ``"NaT"`` or ``"now"``."""
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
    rows, file_index = [], []
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
        dated, zone = _dated_sessions(path, where, rec["sessions"], zone)
        haystack, index = [], {}
        for date, _k, s, turns in dated:
            items = []
            for j, t in enumerate(turns):
                role, text = _turn(path, f"{where} session {s['session_id']} turn {j}", t, "text")
                items.append((role, str(t.get("speaker", role)), text))
            key, first = b.session(f"{cid}/{s['session_id']}", date, items)
            haystack.append(key)
            index[str(s["session_id"])] = (first, len(items))
        questions = _questions(path, where, cid, rec["questions"], tuple(haystack), index)
        rows += questions
        file_index += [tuple(k for _, k, _, _ in dated)] * len(questions)  # where the file lists each session
    turns, sessions = b.frames()
    return Dataset(
        name or path.stem, turns, sessions, _cases_frame(rows, file_index=file_index), b.texts, str(path), {}
    )


def _dated_sessions(path, where: str, sessions, zone) -> tuple[list, tuple]:
    """Check one conversation's sessions and date them; return them in date order, and the file's time-zone rule.

    Each session comes as ``(date, its place in the file, the session, its turns)``, its date in
    UTC without a zone when the file's dates carry one. ``zone`` is ``(has a time zone, where)`` of
    the file's first date (None before it): every date must agree with it.
    """
    dated, seen_sessions = [], {}
    for k, s in enumerate(_need(path, where, "sessions", sessions, list)):
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
    return sorted(dated, key=lambda x: (x[0], x[1])), zone


def _questions(path, where: str, cid: str, questions, haystack: tuple, index: dict) -> list[tuple]:
    """Return the case rows of one conversation's questions, each over all of its sessions (``haystack``).

    ``index`` maps a session id to its first turn's row and its number of turns, so evidence
    ``[session_id, turn_index]`` resolves to a row.
    """
    rows, seen_questions = [], {}
    for q, qa in enumerate(_need(path, where, "questions", questions, list)):
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
        question_type = str(qa.get("question_type", ""))
        rows.append((f"{cid}:{qid}", qa["question"], question_type, haystack, tuple(sorted(set(gold))), cid))
    return rows
