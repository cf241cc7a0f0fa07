"""The weights a study learned, read back from its table for a store: :func:`learned_weights`.

The oracle-blind study (:mod:`memlib.studies.oracle_blind`) reports the mean weights it
learned per regime (columns ``w_<factor>``); :func:`learned_weights` reads them from the
study's JSON, its result or its table, checked, for :class:`memlib.store.MemoryStore`
(``MemoryStore(weights=memlib.learned_weights("results/oracle-blind.json"))``).
"""

from __future__ import annotations

import json
import math
import numbers
import os

import numpy as np

from memlib import FACTORS
from memlib._checks import ParameterError
from memlib.value import check_weights


def learned_weights(result_or_json_path, regime: str = "blind", factor_set: str = "paper") -> np.ndarray:
    """Return the mean learned weights of the oracle-blind study, ready for :class:`memlib.store.MemoryStore`.

    Parameters
    ----------
    result_or_json_path : str, path, result, DataFrame or list of dict
        The study's table in any form: the path of the JSON that
        ``python -m memlib study oracle-blind --json`` prints (``make studies``
        writes it to ``results/oracle-blind.json``), the result of
        :func:`memlib.studies.oracle_blind.oracle_vs_blind` (its ``summary``),
        that summary as a DataFrame, or its rows as dicts. The ``learned_V`` row
        of ``regime`` must carry one column ``w_<factor>`` per factor.
    regime : {'blind', 'oracle'}
        ``blind`` (default) is the regime an agent lives in: weights learned
        without seeing the future question.
    factor_set : {'paper', 'extended'}
        Where the table has a ``factor_set`` column, the rows of this set (the
        weights only mean something with the factors they were learned on).

    Returns
    -------
    ndarray, shape (7,)
        Non-negative weights in :data:`memlib.FACTORS` order.

    >>> rows = [{"policy": "learned_V", "regime": "blind", **{f"w_{f}": 0.5 for f in FACTORS}},
    ...         {"policy": "uniform_V", "regime": "blind"}]
    >>> learned_weights(rows).tolist()
    [0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5]
    >>> learned_weights(rows, regime="oracle")
    Traceback (most recent call last):
    ...
    memlib._checks.ParameterError: the table has no learned_V row for regime 'oracle' (regimes with one: blind)
    """
    source = "the table"
    if isinstance(result_or_json_path, (str, os.PathLike)):
        source = str(result_or_json_path)
        try:
            with open(result_or_json_path, encoding="utf-8") as fh:
                rows = json.load(fh)
        except FileNotFoundError:
            raise ParameterError(
                f"{source}: no such file; write it with `python -m memlib study oracle-blind --json > {source}`"
            ) from None
        except (OSError, ValueError) as exc:
            raise ParameterError(f"{source}: not a JSON table of the oracle-blind study ({exc})") from None
    else:
        rows = getattr(result_or_json_path, "summary", result_or_json_path)
        if hasattr(rows, "to_dict"):
            rows = rows.to_dict(orient="records")
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise ParameterError(
            f"{source}: expected the rows of the oracle-blind study's table, got {type(rows).__name__}"
        )
    learned = [
        r for r in rows if r.get("policy") == "learned_V" and r.get("factor_set", factor_set) in (factor_set, None)
    ]
    mine = [r for r in learned if r.get("regime") == regime]
    if not mine:
        have = sorted({str(r.get("regime")) for r in learned})
        raise ParameterError(
            f"{source} has no learned_V row for regime {regime!r} (regimes with one: {', '.join(have) or 'none'})"
        )
    if len(mine) > 1:
        raise ParameterError(
            f"{source} has {len(mine)} learned_V rows for regime {regime!r} "
            "(one per keep fraction?); pass a table with one"
        )
    columns = [f"w_{f}" for f in FACTORS]
    values = [mine[0].get(c) for c in columns]
    missing = [c for c, v in zip(columns, values) if not isinstance(v, numbers.Real) or not math.isfinite(v)]
    if missing:
        raise ParameterError(
            f"{source}: the learned_V row of regime {regime!r} has no {', '.join(missing)}; "
            "re-run `python -m memlib study oracle-blind --json`, whose table carries them"
        )
    return check_weights(values)


__all__ = ["learned_weights"]
