"""The LoCoMo loader: :func:`load_locomo` reads ``locomo10.json`` into a :class:`~memlib.datasets.Dataset`.

One case per (conversation, question); :func:`normalise_locomo_evidence` repairs the
release's evidence ids (see ``shared/datasets/locomo/SOURCE.md``) before they are matched to
turns, and session dates are read strictly and must run forward in time.
"""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

from memlib.datasets.normalised import Dataset, _Builder, _cases_frame, _fail, _need, _require, _strict_date
from memlib.datasets.reading import _one_line_when_too_deep, _read_json_list
from memlib.datasets.resolver import resolve_dataset

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
    """Read a LoCoMo session date (``1:56 pm on 8 May, 2023``) strictly (``_strict_date``)."""
    return _strict_date(path, where, value, "%I:%M %p on %d %B, %Y", "1:56 pm on 8 May, 2023", what="session date")


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
    rows, answers = [], []
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
        haystack, dia = _locomo_sessions(path, where, sid, conv, nums, b)
        rows += _locomo_questions(path, where, sid, qas, tuple(haystack), dia, skipped)
        answers += [qa.get("answer") for qa in qas]  # none for the adversarial questions (category 5)
    turns, sessions = b.frames()
    return Dataset("locomo", turns, sessions, _cases_frame(rows, answers=answers), b.texts, str(path), skipped)


def _locomo_sessions(path, where: str, sid: str, conv: dict, nums: list, b: _Builder) -> tuple[list, dict]:
    """Add one conversation's sessions (``nums``, in order) to ``b``; return their keys and each dia_id's turn.

    Each session's date must come after the last turn of the session before (turns one second apart).
    """
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
    return haystack, dia


def _locomo_questions(path, where: str, sid: str, qas: list, haystack: tuple, dia: dict, skipped: dict) -> list:
    """Return the case rows of one conversation's questions; evidence ids that match no turn count in ``skipped``."""
    rows = []
    for q, qa in enumerate(qas):
        if not isinstance(qa, dict) or "question" not in qa:
            _fail(path, f"{where} qa {q}", "a QA item needs a 'question'")
        _need(path, f"{where} qa {q}", "question", qa["question"], str)
        raw = _need(path, f"{where} qa {q}", "evidence", qa.get("evidence", []), list)
        ids = normalise_locomo_evidence(raw)
        gold = [dia[x] for x in ids if x in dia]
        tokens = sum(len([p for p in re.split(r"[;\s]+", str(x).strip()) if p]) for x in raw)
        skipped["evidence_ids"] += tokens - len(gold)
        category = f"category_{qa.get('category', '?')}"
        rows.append((f"{sid}:q{q}", qa["question"], category, haystack, tuple(sorted(set(gold))), sid))
    return rows
