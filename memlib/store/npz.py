"""The ``.npz`` export of a store: one private file, written atomically, read with every field checked.

:func:`write_npz` writes a store's state (see :mod:`memlib.store.state`) as numpy
arrays plus one JSON header (no pickle), through memlib's one safe writer
(:func:`memlib._safewrite.write_file`): the bytes go to an unnamed temporary file
in the target's folder, are flushed to disk, and only then get a name and are
renamed over the target, so a process killed while saving leaves the old file
whole and no temporary file behind (what a dead process left in the microseconds
of renaming goes at the next save or load of the same file). The target must be
a regular file or absent: a folder, a device, a FIFO or a symbolic link is
refused before anything is written. The file is private to its owner (mode
0600), and an error names the target file, never the temporary one.

>>> import tempfile, pathlib
>>> target = pathlib.Path(tempfile.mkdtemp()) / "notes.bin"
>>> write_private(target, lambda f: f.write(b"hello"))
>>> target.read_bytes(), oct(target.stat().st_mode & 0o777)
(b'hello', '0o600')
>>> write_private(target.parent, lambda f: f.write(b"x"))   # doctest: +ELLIPSIS
Traceback (most recent call last):
...
IsADirectoryError: [Errno 21] cannot save: Is a directory: '/tmp/...'
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from memlib._safewrite import remove_leftovers, write_file
from memlib._text import clean_text
from memlib.store.state import DIM, LEGACY_STATE, check_state, fail, fill_first_in_session, saved_state, state_field

FORMAT = "memlib.MemoryStore"
#: How a zip file (an ``.npz``) starts: a local file header, or the end record of an empty archive.
_ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")
#: Version of the ``.npz`` layout written by :func:`write_npz` (version 1 files still load).
NPZ_VERSION = 2


# --------------------------------------------------------------------------- writing files safely
def write_private(path, write) -> None:
    """Write a file atomically and durably, private to its owner (mode 0600): :func:`memlib._safewrite.write_file`.

    ``write(fileobj)`` writes the content. Errors are raised as :class:`OSError`
    (of the matching subclass) naming ``path``: :class:`IsADirectoryError` for a
    folder at ``path``, :class:`NotADirectoryError` naming the file in the way
    when an ancestor of ``path`` is a file; a device, a FIFO, a socket or a
    symbolic link at ``path`` is refused too, before anything is written.
    """
    try:
        write_file(path, write)
    except OSError as exc:
        raise OSError(exc.errno, f"cannot save: {exc.strerror or exc}", str(path)) from None


# --------------------------------------------------------------------------- the npz layout
def write_npz(path, state: dict, forgotten: list, merges: list) -> None:
    """Write a store's ``state`` and logs to ``path`` (see :mod:`memlib.store.state`)."""
    s, sess, sums, items = state["settings"], state["session"], state["sums"], state["items"]
    header = {
        "format": FORMAT,
        "version": NPZ_VERSION,
        "policy": s["policy"],
        "policy_config": s["policy_config"],
        "factor_set": s["factor_set"],
        "merge_threshold": s["merge_threshold"],
        "value": None if s.get("value") is None else s["value"].to_dict(),
        **{k: items[k] for k in ("texts", "roles", "speakers", "sessions")},
        "current_session": sess["current_session"],
        "next_id": sess["next_id"],
        "now": sess["now"],
        "session_has_user": sess["session_has_user"],
        "need": sess["need"],
        "speakers_with_sums": list(sums["speakers"]),
        "forgotten": forgotten,
        "merges": merges,
    }
    speaker_sums = np.stack(list(sums["speakers"].values())) if sums["speakers"] else np.zeros((0, DIM))
    policy_state = {LEGACY_STATE: np.zeros(len(items["ids"])), **items["state"]}  # every file has a level field
    arrays = {
        "header": np.array(json.dumps(header)),
        "weights": s["weights"],
        "value_profile": np.zeros(0) if s["value_profile"] is None else s["value_profile"],
        "user_sum": sums["user"],
        "session_sum": sums["session"],
        "session_all_sum": sums["session_all"],
        "speaker_sums": speaker_sums,
        **{k: items[k] for k in ("ids", "time", "valence", "retrievals", "last_access")},
        **{state_field(k): v for k, v in policy_state.items()},
        **{k: items[k] for k in ("expires", "pinned", "tokens", "embeddings", "factors", "first_in_session")},
    }
    write_private(path, lambda f: np.savez(f, **arrays))


def read_npz(path, merge_threshold_default: float | None) -> tuple[dict, list, list]:
    """Read a file written by :func:`write_npz` (or a version 1 store); return ``(state, forgotten, merges)``."""
    path = Path(path)
    arrays, header, version = _read_file(path)
    need = ["weights", "time", "embeddings", "factors", "valence", "retrievals", "last_access", "level"]
    need += ["user_sum", "speaker_sums", "session_sum", "session_all_sum", "value_profile"]
    missing = [k for k in need if k not in arrays] + [
        k for k in ("policy", "policy_config", "texts", "current_session", "next_id", "now") if k not in header
    ]
    missing += [k for k in ("session_has_user", "speakers_with_sums", "forgotten") if k not in header]
    if missing:
        fail(path, f"missing fields {', '.join(missing)}")
    texts = header["texts"]
    n = len(texts) if isinstance(texts, list) else -1
    items = {k: header.get(k) for k in ("texts", "roles", "speakers", "sessions")}
    items.update({k: arrays[k] for k in ("time", "valence", "retrievals", "last_access")})
    items["state"] = {LEGACY_STATE: arrays[LEGACY_STATE]}
    items["state"].update({k[len("state_") :]: v for k, v in arrays.items() if k.startswith("state_")})
    items.update(embeddings=arrays["embeddings"], factors=arrays["factors"])
    items["first_in_session"] = arrays.get("first_in_session")  # absent in older files: read from the sessions
    fill_first_in_session(items)
    if version == 1:
        items["ids"] = header.get("ids")
        items["expires"] = np.full(max(n, 0), np.inf)
        items["pinned"] = np.zeros(max(n, 0), bool)
        items["tokens"] = np.array([len(t.split()) if isinstance(t, str) else 0 for t in texts or []], np.int64)
        merge_threshold, merges = merge_threshold_default, []
    else:
        missing = [k for k in ("ids", "expires", "pinned", "tokens") if k not in arrays]
        missing += [k for k in ("merge_threshold", "merges") if k not in header]
        if missing:
            fail(path, f"missing fields {', '.join(missing)}")
        items.update({k: arrays[k] for k in ("ids", "expires", "pinned", "tokens")})
        merge_threshold, merges = header["merge_threshold"], header["merges"]
    vp = arrays["value_profile"]
    names, speaker_sums = header["speakers_with_sums"], arrays["speaker_sums"]
    if not isinstance(names, list) or speaker_sums.ndim != 2 or len(names) != len(speaker_sums):
        fail(path, "speakers_with_sums does not match the speaker_sums array")
    settings = {
        "policy": header["policy"],
        "policy_config": header["policy_config"],
        "factor_set": header.get("factor_set", "extended"),  # stores saved before factor sets had cues
        "weights": arrays["weights"],
        "value_profile": vp if vp.size else None,
        "merge_threshold": merge_threshold,
        "value": header.get("value"),  # absent before cue values: the paper's V = f @ w
    }
    sums = (arrays["user_sum"], arrays["session_sum"], arrays["session_all_sum"], dict(zip(names, speaker_sums)))
    state = saved_state(settings, header, sums, items)
    check_state(path, state)
    for name, log in (("forgotten", header["forgotten"]), ("merges", merges)):
        if not isinstance(log, list) or not all(isinstance(e, dict) for e in log):
            fail(path, f"{name} must be a list of records")
    return _cleaned(state), _cleaned_log(header["forgotten"]), _cleaned_log(merges)


def _read_file(path: Path) -> tuple[dict, dict, int]:
    """Open an ``.npz`` export and read its arrays and JSON header; return them and the layout's version.

    Refuses, naming the file, what is not a zip of arrays (no pickle is ever loaded) or not a memlib
    store of a version it reads.
    """
    remove_leftovers(path)
    try:
        with open(path, "rb") as f:
            magic = f.read(6)
    except FileNotFoundError:
        fail(path, "no such store file")
    except IsADirectoryError:
        fail(path, "is a folder, not a store file")
    except OSError as exc:
        fail(path, f"cannot read the store file ({exc.strerror or exc})")
    if not magic.startswith(_ZIP_MAGIC):  # (numpy would then suggest allow_pickle=, an unsafe load)
        what = "an empty file" if not magic else "a single .npy array" if magic == b"\x93NUMPY" else "not a zip file"
        fail(path, f"not a readable store file ({what}, so not a memlib store export: MemoryStore.save writes a zip)")
    try:
        with np.load(path, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
    except Exception as exc:  # zipfile / format errors
        reason = "it holds an object array, which a store never writes" if "pickle" in str(exc) else f"{exc}"
        fail(path, f"not a readable store file ({type(exc).__name__}: {reason})")
    try:
        header = json.loads(str(arrays.pop("header")))
    except RecursionError:
        fail(path, "the store header is nested too deeply to be a memlib store header")
    except (KeyError, ValueError) as exc:
        fail(path, f"the store header is missing or not JSON ({exc})")
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        fail(path, "not a memlib MemoryStore file")
    version = header.get("version")
    if version not in (1, NPZ_VERSION):
        fail(path, f"store format version {version!r} is not one of 1, {NPZ_VERSION}")
    return arrays, header, version


def _cleaned(state: dict) -> dict:
    r"""``state`` with lone surrogates in its strings replaced by U+FFFD (:mod:`memlib._text`).

    JSON escapes them (``"\ud800"``), so an export written before the store
    cleaned its text can hold them; a store must never, since neither the tokenizer
    nor SQLite can take them. Speakers whose names become one have their sums added,
    as the store would have added them had it cleaned the names as they came.
    """
    items, session = state["items"], state["session"]
    for k in ("texts", "speakers", "sessions"):
        items[k] = [clean_text(x) for x in items[k]]
    if session["current_session"] is not None:
        session["current_session"] = clean_text(session["current_session"])
    speakers = {}
    for name, v in state["sums"]["speakers"].items():
        name = clean_text(name)
        speakers[name] = speakers[name] + v if name in speakers else v
    state["sums"]["speakers"] = speakers
    return state


def _cleaned_log(log: list) -> list:
    return [{**e, "text": clean_text(e["text"])} if isinstance(e.get("text"), str) else e for e in log]
