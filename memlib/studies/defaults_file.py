"""The defaults file: what ``memlib/defaults.json`` holds, made from the defaults study, and the README's table of it.

:func:`choose_defaults` takes the configuration the defaults study (:mod:`.defaults`) chose by
its worst held-out corpus, learns its value on every corpus and returns the file's content
(``python -m memlib defaults --write``), with the held-out headline it was chosen on;
:func:`readme_table` turns that headline into the README's held-out table, so the README
never types a figure by hand.
"""

from __future__ import annotations

import json
import time as _time

from memlib._checks import ParameterError
from memlib.references import Z
from memlib.studies.corpora import Corpus
from memlib.studies.data_spec import EACH, DataSpec
from memlib.studies.defaults import SAFETY, DefaultsResult, defaults_study_on, learn_values


def choose_defaults(
    hs: list[Corpus],
    keep_fraction: float = 0.3,
    seed: int = 0,
    measured: DefaultsResult | None = None,
    data: DataSpec = EACH,
) -> dict:
    """Return the defaults file's content: the shipped choice of ``measured``, its value learned on every corpus.

    The configuration is the one :func:`defaults_study_on` chose by its worst held-out corpus
    (``measured`` is computed when not given); the value is then learned on all of ``hs``
    together. The file holds a cue value: if the paper's seven-factor value won, there is no cue
    value to ship and a :class:`~memlib._checks.ParameterError` says so (the store would then need
    the paper's weights as its default, a decision for a person, not for this function).
    """
    data = data.resolved()  # what the histories were read with (``hs`` are loaded already)
    if measured is None:
        measured = defaults_study_on(hs, keep_fraction, seed, data.quick)
    choice = measured.chosen.set_index("choice").loc["shipped"]
    model = choice["value_model"]
    if model not in ("cues", "cues_user"):
        raise ParameterError(
            f"the {model} value kept the most gold; the defaults file holds a cue value, so it was not written"
        )
    values = learn_values(hs, keep_fraction, seed, data.quick)
    rule = choice["rule"]
    return {
        "format": "memlib-defaults",
        "version": 2,
        "made_by": "python -m memlib defaults --write",
        "made_at": _time.strftime("%Y-%m-%d"),
        "protocol": "leave one corpus out; configuration and retrieval mix chosen by the worst held-out corpus; "
        f"an adaptive configuration only where, on no corpus, the 95% interval of its paired gain over its prior "
        f"reaches below -{SAFETY:g}",
        "datasets": [h.name for h in hs],
        "histories": {h.name: int(h.cases.n_haystacks) for h in hs},
        "sample": data.sample,  # the histories it was run on: a seeded sample of each dataset, or all (None)
        "quick": data.quick,
        "keep_fraction": keep_fraction,
        "policy": {
            "keep_top_value": rule != "eq3",
            "beta": float(choice["beta"]) if rule == "eq3" else 1.0,
            "value_weight": float(choice["value_weight"]),
            "mood_weight": float(choice["mood_weight"]),
        },
        **({"adaptive": {"value_scale": float(choice["value_scale"]), "z": Z}} if rule == "adaptive" else {}),
        "value_model": model,
        "value": values[model].to_dict(),
        "measured": json.loads(measured.headline.to_json(orient="records", double_precision=15)),
    }


#: The README's held-out table: its columns, each a (config, metric) of the headline.
README_COLUMNS = (
    ("gold held: shipped defaults", "defaults", "retention"),
    ("chosen without it", "chosen without it", "retention"),
    ("prior only", "prior only", "retention"),
    ("paper eq. 3", "paper eq. 3", "retention"),
    ("first in, first out", "first in, first out", "retention"),
    ("defaults recall_any@10", "defaults", "recall_any@10"),
)
_README_NAMES = {"locomo": "LoCoMo", "longmemeval_s": "LongMemEval-S", "realmem": "RealMem"}


def readme_table(measured: list[dict]) -> str:
    """Return the README's held-out table (Markdown) from a defaults file's ``measured`` records.

    The README shows what ``memlib/defaults.json`` measured, never figures typed by hand
    (``tests/test_readme.py`` checks that the two agree). A column the records do not hold is left out.

    >>> rows = [{"dataset": "locomo", "config": c, "metric": "retention", "mean": 0.5, "ci_low": 0.4, "ci_high": 0.6}
    ...         for c in ("defaults", "paper eq. 3")]
    >>> print(readme_table(rows))
    | corpus left out | gold held: shipped defaults | paper eq. 3 |
    |---|---|---|
    | LoCoMo | 0.500 [0.400, 0.600] | 0.500 |
    """
    at = {(r["dataset"], r["config"], r["metric"]): r for r in measured}
    datasets = list(dict.fromkeys(r["dataset"] for r in measured))
    cols = [c for c in README_COLUMNS if any((d, c[1], c[2]) in at for d in datasets)]
    lines = ["| corpus left out | " + " | ".join(c[0] for c in cols) + " |", "|---" * (len(cols) + 1) + "|"]
    for d in datasets:
        cells = []
        for i, (_, config, metric) in enumerate(cols):
            r = at.get((d, config, metric))
            cell = "" if r is None else f"{r['mean']:.3f}"
            if r is not None and i == 0:
                cell += f" [{r['ci_low']:.3f}, {r['ci_high']:.3f}]"
            cells.append(cell)
        lines.append(f"| {_README_NAMES.get(d, d)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


__all__ = ["README_COLUMNS", "choose_defaults", "readme_table"]
