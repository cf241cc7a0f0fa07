"""Parameter validation shared by the library and the command line.

Every public entry point validates its parameters here, so a bad value
fails with one line that names the parameter and the allowed range,
instead of a traceback from deep inside numpy.

>>> check_fraction("keep_fraction", 0.3)
0.3
>>> check_fraction("keep_fraction", 1.5)
Traceback (most recent call last):
...
memlib._checks.ParameterError: keep_fraction must be in (0, 1), got 1.5
"""

from __future__ import annotations

import math
import numbers


class ParameterError(ValueError):
    """A parameter is out of its allowed range or of the wrong kind."""


def check_fraction(name: str, value) -> float:
    """Return ``value`` as a float strictly between 0 and 1."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise ParameterError(f"{name} must be a number in (0, 1), got {value!r}")
    if not 0.0 < float(value) < 1.0:
        raise ParameterError(f"{name} must be in (0, 1), got {value}")
    return float(value)


def check_int(name: str, value, minimum: int = 0, maximum: int | None = None) -> int:
    """Return ``value`` as an int that is at least ``minimum`` (and at most ``maximum`` if given).

    >>> check_int("n_train", 0, minimum=1)
    Traceback (most recent call last):
    ...
    memlib._checks.ParameterError: n_train must be an integer >= 1, got 0
    >>> check_int("n_train", 10**20, minimum=1, maximum=100_000)
    Traceback (most recent call last):
    ...
    memlib._checks.ParameterError: n_train must be at most 100000, got 100000000000000000000
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ParameterError(f"{name} must be an integer >= {minimum}, got {value!r}")
    if int(value) < minimum:
        raise ParameterError(f"{name} must be an integer >= {minimum}, got {value}")
    if maximum is not None and int(value) > maximum:
        raise ParameterError(f"{name} must be at most {maximum}, got {value}")
    return int(value)


def check_positive(name: str, value, allow_zero: bool = False) -> float:
    """Return ``value`` as a finite float > 0 (or >= 0 with ``allow_zero``)."""
    bound = ">= 0" if allow_zero else "> 0"
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise ParameterError(f"{name} must be a finite number {bound}, got {value!r}")
    if value < 0 or (value == 0 and not allow_zero):
        raise ParameterError(f"{name} must be a finite number {bound}, got {value}")
    return float(value)


def check_choice(name: str, value, choices) -> str:
    """Return ``value`` if it is one of ``choices``."""
    if value not in choices:
        raise ParameterError(f"unknown {name} {value!r}; choose one of: {', '.join(map(str, choices))}")
    return value
