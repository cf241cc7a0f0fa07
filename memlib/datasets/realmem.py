"""The RealMem loader: :func:`load_realmem` reads RealMem's persona files, questions asked inside the stream.

Each persona file is one group; a question is a turn marked ``is_query``, its history every
session before its own, and its gold turns those its memory points came from.
:func:`resolve_realmem` finds the ten files of the release (:data:`~memlib.datasets.REALMEM_FILES`).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd

from memlib._text import clean_text
from memlib.datasets.normalised import Dataset, DatasetError, _Builder, _cases_frame, _describe, _fail, _need, _require
from memlib.datasets.reading import _read_json
from memlib.datasets.resolver import REALMEM_FILES, resolve

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
    """Return a memory point's content as a key: the string itself, or an object's canonical JSON."""
    return content if isinstance(content, str) else json.dumps(content, sort_keys=True)


def _realmem_persona(path: Path, b: _Builder, skipped: dict) -> tuple[str, list, list]:
    """Read one persona file into ``b``; return its persona's name, its case rows and question dates.

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
    rows, dates = _realmem_questions(path, persona, sessions, (keys, firsts, turn_texts, points, position), b, skipped)
    return persona, rows, dates


def _realmem_questions(path: Path, persona: str, sessions: list, read: tuple, b: _Builder, skipped: dict):
    """Return the case rows and dates of one persona's questions, from what :func:`_realmem_persona` read.

    ``read`` holds, per session of the file: its key, its first turn's row, its turn texts and its
    memory points (content key -> source snapshot), and each session_uuid's place in the file.
    A reference that resolves to no turn, or to a turn of the question's own or a later session,
    is counted in ``skipped``.
    """
    keys, firsts, turn_texts, points, position = read
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
    """Return the ten RealMem persona files (:data:`REALMEM_FILES`), each found (or downloaded) by :func:`resolve`."""
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
    rows, dates, personas = [], [], {}
    for path in files:
        persona, r, d = _realmem_persona(path, b, skipped)
        if persona in personas:
            raise DatasetError(
                f"{path}: persona {persona!r} is already read from {personas[persona]}; a persona is read once "
                "(each of its questions would count twice)"
            )
        personas[persona] = path
        rows += r
        dates += d
    turns, sessions = b.frames()
    source = str(files[0].parent) if len(files) > 1 else str(files[0])
    return Dataset(name, turns, sessions, _cases_frame(rows, dates), b.texts, source, skipped)


def _realmem_files(folder: Path) -> list[Path]:
    """Return the persona files of a RealMem folder, each once (a folder so named, or one file twice, is an error)."""
    files = sorted(p for p in folder.iterdir() if _REALMEM_NAME.fullmatch(p.name))
    if not files:
        raise DatasetError(f"{folder}: holds no RealMem persona file (<Persona>_dialogues_<n>k.json)")
    seen = {}
    for p in files:
        if not p.is_file():
            raise DatasetError(f"{p}: is not a file, so not a RealMem persona file; move it out of the folder")
        plain = p.name.removesuffix(".gz")
        if plain in seen:
            raise DatasetError(
                f"{folder}: holds {seen[plain].name} and {p.name}, the same persona file twice; keep one"
            )
        seen[plain] = p
    return files


_REALMEM_NAME = re.compile(r".+_dialogues_\d+k\.json(\.gz)?")
