"""The LongMemEval loader: :func:`load_longmemeval` reads the S, M or oracle file (one schema).

One case per question; gold turns are those marked ``has_answer: true``, haystack sessions
are put in time order, and a session that recurs across questions is stored once.
:data:`LONGMEMEVAL_FIELDS` are the fields every record must hold.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from memlib.datasets.normalised import (
    Dataset,
    _Builder,
    _cases_frame,
    _describe,
    _fail,
    _need,
    _require,
    _strict_date,
    _turn,
)
from memlib.datasets.reading import _one_line_when_too_deep, _read_json_list

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
    """Read a LongMemEval date (``2023/05/20 (Sat) 02:21``) strictly (``_strict_date``)."""
    return _strict_date(path, where, value, "%Y/%m/%d (%a) %H:%M", "2023/05/20 (Sat) 02:21")


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
    rows, qdates, file_index, answers = [], [], [], []
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
                at = f"{where} haystack_sessions[{k}] turn {j}"
                role, text = _turn(path, at, t, "content")
                flag = t.get("has_answer", False)
                if not isinstance(flag, bool):
                    _fail(path, at, f"has_answer must be true or false, got {_describe(flag)}")
                items.append((role, role, text))
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
        file_index.append(tuple(order))
        answers.append(rec["answer"])
        qdates.append(_lme_date(rec["question_date"], path, f"{where} question_date"))
    turns, sessions = b.frames()
    cases = _cases_frame(rows, qdates, file_index, answers)
    return Dataset(name or path.stem, turns, sessions, cases, b.texts, str(path), {})
