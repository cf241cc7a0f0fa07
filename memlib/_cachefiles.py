"""Cache files: where memlib keeps them, and how it writes and reads them safely.

Every cache (embeddings, parsed datasets, factor tables, study results) lives under
:func:`cache_root` and is written by memlib's one safe writer (:func:`atomic_savez`, or
the compressed writer of :mod:`memlib.studies._cache`, both through
:func:`memlib._safewrite.write_file`: a temporary file, flushed, then renamed), so a
reader sees a whole file or none. A damaged file is set aside
(:func:`set_aside`) and recomputed; a folder that cannot be written is reported once
(:func:`cache_folder_ok`) and the work goes on uncached. This module sits below
:mod:`memlib.datasets`, so every layer can use it.
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
import warnings
import zipfile
import zlib
from pathlib import Path

import numpy as np

from memlib._safewrite import write_file

ROOT = Path(__file__).resolve().parent.parent


#: The longest part of a cache file's name that comes from a dataset's name: a longer name is cut and
#: keeps a hash of the whole, so a legal 245-character data file name still makes a legal cache file name.
SAFE_NAME_MAX = 80


def safe_name(name) -> str:
    """Return ``name`` made safe for a cache file name (no folders, no dots leading out of the cache root, short).

    >>> safe_name("../../x y.json")
    '_.._x_y.json'
    >>> long = safe_name("a" * 245 + ".jsonl")
    >>> len(long), long[:4], long[-13:] == "-" + long[-12:]
    (80, 'aaaa', True)
    """
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", str(name)).lstrip(".") or "dataset"
    if len(safe) > SAFE_NAME_MAX:
        digest = hashlib.sha256(str(name).encode("utf-8", "surrogateescape")).hexdigest()[:12]
        safe = f"{safe[: SAFE_NAME_MAX - 13]}-{digest}"
    return safe


def cache_root() -> Path:
    """Return the folder every memlib cache lives under: one per user, shared by every clone and install.

    Returns
    -------
    pathlib.Path
        ``$MEMLIB_CACHE_DIR`` when it is set; else the user's cache folder:
        ``$XDG_CACHE_HOME/memlib`` when ``XDG_CACHE_HOME`` is an absolute path (the XDG rule),
        else ``~/.cache/memlib``. Never a folder inside the repository or the installed package.
    """
    if "MEMLIB_CACHE_DIR" in os.environ:
        return Path(os.environ["MEMLIB_CACHE_DIR"])
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    base = Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".cache"
    return base / "memlib"


def atomic_savez(path, **arrays) -> None:
    """Write an ``.npz`` file atomically and durably, private to its owner: :func:`memlib._safewrite.write_file`.

    So after a crash or a power cut the file is either whole or absent, and a target that
    is not a regular file (a folder, a device, a symbolic link) is refused, naming it.
    """
    write_file(path, lambda f: np.savez(f, **arrays))


class CacheWarning(UserWarning):
    """A cache file could not be read, or a cache folder cannot be written: memlib recomputes and carries on."""


#: What reading a damaged ``.npz`` can raise (truncated, random bytes, empty, missing arrays, wrong shapes,
#: and RecursionError for a manifest nested too deeply to decode).
CORRUPT_ERRORS = (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile, zlib.error, RecursionError)

_REPORTED: set = set()


def read_npz(path, names=None) -> dict:
    """Read the arrays ``names`` (all, by default) of an ``.npz`` file, whole and without pickle.

    A damaged file raises one of :data:`CORRUPT_ERRORS`; the file is closed either way.
    """
    with open(path, "rb") as f:
        if f.read(4) != b"PK\x03\x04":
            raise ValueError("not an .npz archive")
        f.seek(0)
        with np.load(f, allow_pickle=False) as z:
            return {name: z[name] for name in (z.files if names is None else names)}


def cache_folder_ok(folder) -> bool:
    """Whether cache files can be written in ``folder`` (created if missing), checked before any work.

    It writes and removes a probe file. When that fails (read-only, not a
    folder, no space...) a :class:`CacheWarning` names the folder and the reason,
    once per folder and process, and the caller computes without caching: what
    the folder already holds is still read, and nothing computed is lost to a
    late ``PermissionError``.
    """
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=folder, prefix=".probe-", suffix=".tmp")
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        report_unwritable(folder, exc)
        return False
    return True


def report_unwritable(folder, exc: OSError) -> None:
    """Warn (once per folder) that ``folder`` cannot take cache files, and why."""
    if str(folder) in _REPORTED:
        return
    _REPORTED.add(str(folder))
    warnings.warn(
        f"cache folder {folder} is not writable ({type(exc).__name__}: {exc.strerror or exc}); results of this run "
        "are not cached: set MEMLIB_CACHE_DIR to a writable folder to keep them",
        CacheWarning,
        stacklevel=3,
    )


def set_aside(path, exc: BaseException) -> None:
    """Warn that a cache file is unreadable and rename it to ``<name>.corrupt``, so that it is recomputed."""
    path = Path(path)
    target = path.with_name(path.name + ".corrupt")
    try:
        os.replace(path, target)
        fate = f"moved to {target.name}"
    except OSError as err:
        fate = f"left in place ({err.strerror or err}) and skipped"
    warnings.warn(
        f"{path}: unreadable cache file ({type(exc).__name__}: {exc}); {fate}; what it held is recomputed",
        CacheWarning,
        stacklevel=3,
    )
