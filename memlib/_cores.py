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
