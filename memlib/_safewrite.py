"""One safe writer for every file memlib writes on a user's behalf.

Store exports, the defaults file, study results, notebooks, sweep tables and every cache file go
through :func:`write_file`, which

* refuses, before any work, a target that is neither a regular file nor absent: a folder, a device,
  a FIFO, a socket, or a symbolic link (memlib makes none, so it never writes through or over one);
  a target under a file; and a name too long for its temporary file beside it (:func:`check_target`,
  which a caller can also run before a long computation);
* writes the content to a temporary file in the target's folder (an unnamed ``O_TMPFILE`` file on
  Linux, else a named ``.<name>.<pid>.<token>.tmp``), flushes it to disk and renames it over the
  target, so a reader sees the old file or the new one, never part of one; the folder is synced too;
* removes the temporary file on every error; what a killed process left (the microseconds between
  naming and renaming, or a platform without ``O_TMPFILE``) goes at the next write of the same target
  (:func:`remove_leftovers`);
* gives the file ``mode`` (0600, private to its owner, unless told).

A refusal is an :class:`OSError` naming the target (``filename``), never the temporary file.
:func:`make_folder` is the same care for a folder memlib writes into.

>>> import tempfile, pathlib
>>> folder = pathlib.Path(tempfile.mkdtemp())
>>> write_file(folder / "notes.txt", "hello")
>>> (folder / "notes.txt").read_text(), oct((folder / "notes.txt").stat().st_mode & 0o777)
('hello', '0o600')
>>> (folder / "link").symlink_to(folder / "notes.txt")
>>> write_file(folder / "link", "x")  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
OSError: [Errno 40] is a symbolic link; memlib writes only regular files, never through or over a link: '/tmp/...'
>>> sorted(p.name for p in folder.iterdir())
['link', 'notes.txt']
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import secrets
import stat
from pathlib import Path

#: The longest file name most file systems take, in bytes (``NAME_MAX``), where the folder cannot say.
NAME_MAX = 255
#: Bytes a temporary file's name adds to its target's: ``.<name>.<pid, up to 7 digits>.<8 hex>.tmp``.
TMP_EXTRA = 22
_AT_FDCWD, _AT_EMPTY_PATH = -100, 0x1000
#: What a target that is not a regular file is, by its ``stat`` type.
_KINDS = (
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISSOCK, "a socket"),
)


def file_in_the_way(path) -> Path | None:
    """Return the nearest existing ancestor folder of ``path`` if it is a file, not a folder (else None).

    >>> import tempfile, pathlib
    >>> f = pathlib.Path(tempfile.mkdtemp()) / "afile"
    >>> _ = f.write_text("x")
    >>> file_in_the_way(f / "memory.npz") == f, file_in_the_way(f.parent / "new" / "memory.npz")
    (True, None)
    """
    for parent in Path(path).parents:
        if parent.exists():
            return None if parent.is_dir() else parent
    return None


def name_limit(folder) -> int:
    """Return the longest target name, in bytes, that :func:`write_file` takes in ``folder``: NAME_MAX - TMP_EXTRA."""
    for f in (Path(folder), *Path(folder).parents):
        with contextlib.suppress(OSError, ValueError):
            return os.pathconf(f, "PC_NAME_MAX") - TMP_EXTRA
    return NAME_MAX - TMP_EXTRA


def check_target(path) -> Path:
    """Return ``path`` if :func:`write_file` may write it; else raise an :class:`OSError` naming it.

    The target must be a regular file or absent, not under a file, and its name short
    enough for the temporary file beside it (:func:`name_limit`).
    """
    path = Path(path)
    if not path.name:
        _refuse(errno.EINVAL, "names no file", path)
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        mode = None
    except NotADirectoryError:  # an ancestor is a file: named below
        mode = None
    if mode is not None and stat.S_ISLNK(mode):
        _refuse(errno.ELOOP, "is a symbolic link; memlib writes only regular files, never through or over a link", path)
    if mode is not None and stat.S_ISDIR(mode):
        _refuse(errno.EISDIR, os.strerror(errno.EISDIR), path)
    for is_kind, kind in _KINDS:
        if mode is not None and is_kind(mode):
            _refuse(errno.EINVAL, f"is {kind}, not a regular file; memlib writes only regular files", path)
    blocker = file_in_the_way(path)
    if blocker is not None:  # (mkdir would say "File exists")
        _refuse(errno.ENOTDIR, f"{blocker} is a file, not a folder", path)
    size, limit = len(os.fsencode(path.name)), name_limit(path.parent)
    if size > limit:
        _refuse(
            errno.ENAMETOOLONG,
            f"the file name is {size} bytes long; memlib writes names of at most {limit} bytes "
            f"(the file system's limit, {limit + TMP_EXTRA}, less {TMP_EXTRA} for the temporary file beside it)",
            path,
        )
    return path


def _refuse(code: int, reason: str, path):
    raise OSError(code, reason, os.fspath(path))


def write_file(path, content, mode: int = 0o600) -> None:
    """Write ``content`` to ``path`` atomically and durably (see the module docstring).

    Parameters
    ----------
    path : str or pathlib.Path
        The target: a regular file or absent (:func:`check_target`); its folder is created.
    content : bytes, str or callable
        The bytes, a text (written as UTF-8), or ``content(fileobj)`` that writes to a binary file.
    mode : int
        The file's permission bits (0600: private to its owner).

    Raises
    ------
    OSError
        Of the matching subclass, naming ``path`` (``filename``), never the temporary file.
    """
    path = check_target(path)
    write = content if callable(content) else _writer(content)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        remove_leftovers(path)
        if not _write_unnamed(path, write, mode):
            _write_named(path, write, mode)
        _fsync_dir(path.parent)
    except OSError as exc:
        if exc.filename == str(path):
            raise
        raise OSError(exc.errno, exc.strerror or str(exc), str(path)) from None


def _writer(content):
    data = content.encode("utf-8") if isinstance(content, str) else bytes(content)
    return lambda f: f.write(data)


def make_folder(path) -> Path:
    """Create the folder ``path`` (and its parents) for memlib to write into; an :class:`OSError` names it.

    >>> make_folder("")
    Traceback (most recent call last):
    ...
    OSError: [Errno 22] an empty path names no folder: ''
    """
    if str(path) == "":
        _refuse(errno.EINVAL, "an empty path names no folder", "")
    path = Path(path)
    if path.exists() and not path.is_dir():
        _refuse(errno.ENOTDIR, "is a file, not a folder", path)
    blocker = file_in_the_way(path)
    if blocker is not None:
        _refuse(errno.ENOTDIR, f"cannot make this folder: {blocker} is a file, not a folder", path)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        _refuse(exc.errno or errno.EIO, f"cannot make this folder ({exc.strerror or exc})", path)
    return path


# --------------------------------------------------------------------------- temporary files
def _tmp_name(path: Path) -> Path:
    return path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")


def remove_leftovers(path) -> list[Path]:
    """Remove the temporary files that dead processes left beside ``path``; return them."""
    path = Path(path)
    gone = []
    with contextlib.suppress(OSError):
        for tmp in path.parent.glob(f".{_glob_escape(path.name)}.*.tmp"):
            parts = tmp.name[len(path.name) + 2 :].split(".")
            if len(parts) != 3 or not parts[0].isdigit() or _alive(int(parts[0])) or tmp.is_symlink():
                continue
            with contextlib.suppress(OSError):
                tmp.unlink()
                gone.append(tmp)
    return gone


def _glob_escape(name: str) -> str:
    return "".join(f"[{c}]" if c in "*?[" else c for c in name)


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process: alive
        return True
    return True


def _link_unnamed(fd: int, target: Path) -> bool:
    """Give the unnamed file ``fd`` the name ``target`` (False where the platform cannot)."""
    try:
        os.link(f"/proc/self/fd/{fd}", target)
        return True
    except OSError:
        pass
    try:  # linkat(fd, "", AT_EMPTY_PATH) needs CAP_DAC_READ_SEARCH, which root has
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.linkat(fd, b"", _AT_FDCWD, os.fsencode(target), _AT_EMPTY_PATH) == 0
    except (OSError, AttributeError):
        return False


def _fsync_dir(folder: Path) -> None:
    with contextlib.suppress(OSError):  # e.g. Windows cannot open a folder
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _write_unnamed(path: Path, write, mode: int) -> bool:
    """Write through an unnamed ``O_TMPFILE`` file; False if the platform has none."""
    flag = getattr(os, "O_TMPFILE", None)
    if flag is None:
        return False
    try:
        fd = os.open(path.parent, flag | os.O_WRONLY, 0o600)
    except OSError as exc:
        if exc.errno in (errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL, errno.ENOENT):
            return False
        raise
    with os.fdopen(fd, "wb") as f:
        _fill(f, write, mode)
        tmp = _tmp_name(path)
        if not _link_unnamed(f.fileno(), tmp):
            return False
    try:
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
    return True


def _write_named(path: Path, write, mode: int) -> None:
    tmp = _tmp_name(path)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            _fill(f, write, mode)
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


def _fill(f, write, mode: int) -> None:
    write(f)
    f.flush()
    if mode != 0o600:
        os.fchmod(f.fileno(), mode)
    os.fsync(f.fileno())
