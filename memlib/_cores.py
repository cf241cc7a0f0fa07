"""The cores this process may run on: what the main job splits among its runs and the book build reads pages on."""

from __future__ import annotations

import os


def usable_cores() -> int:
    """Return the cores this process may run on (its CPU affinity on Linux, else the machine's count), at least 1.

    >>> usable_cores() >= 1
    True
    """
    if hasattr(os, "sched_getaffinity"):
        return max(len(os.sched_getaffinity(0)), 1)
    return max(os.cpu_count() or 1, 1)


def thread_budget() -> int:
    """Return the threads a numeric library of this process should use: ``OMP_NUM_THREADS`` if set, else every core.

    torch and the BLAS read ``OMP_NUM_THREADS`` themselves; ONNX Runtime does not, so the int8 embedder asks here
    (the main job gives each of its side-by-side runs its share of the cores through that variable). A value that
    is not a whole number of at least 1 is ignored.

    >>> saved = os.environ.pop("OMP_NUM_THREADS", None)
    >>> os.environ["OMP_NUM_THREADS"] = "1"; thread_budget()
    1
    >>> os.environ["OMP_NUM_THREADS"] = "two"; thread_budget() == usable_cores()
    True
    >>> del os.environ["OMP_NUM_THREADS"]; os.environ.update({} if saved is None else {"OMP_NUM_THREADS": saved})
    """
    given = os.environ.get("OMP_NUM_THREADS", "").strip()
    if given.isdigit() and int(given) >= 1:
        return min(int(given), usable_cores())
    return usable_cores()
