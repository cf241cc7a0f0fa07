"""Every chapter can be swept: it publishes its table, and the sweep's results.csv names the parameters.

Each chapter runs twice in quick mode, over two values of its cheapest parameter (the seed; chapter 02
has none and sweeps its conversation limit): 2.5 minutes on two busy cores.
"""

import pandas as pd
import pytest

from memlib import book, datasets
from memlib.studies import STUDIES

#: The parameter each chapter is swept over, when it is not the seed.
SWEPT = {"factors": ("limit", [1, 2])}


#: One study per chapter (its first), so that each chapter is swept once.
CHAPTERS = {s.notebook: name for name, s in reversed(STUDIES.items())}


def test_every_chapter_has_a_study_and_every_study_a_chapter():
    assert sorted(CHAPTERS) == [p.name for p in book.notebook_paths()]
    assert all(s.notebook in CHAPTERS for s in STUDIES.values())


@pytest.mark.parametrize("name", sorted(CHAPTERS.values()))
def test_a_chapter_sweeps_over_two_values(name, tmp_path):
    if name != "synthetic":
        try:
            datasets.resolve("locomo10.json", download=False)
        except datasets.DatasetError as exc:
            pytest.skip(f"LoCoMo not available: {exc}")
    param, values = SWEPT.get(name, ("seed", [0, 1]))
    table, path = book.sweep(
        book.NOTEBOOK_DIR / STUDIES[name].notebook, {param: values, "quick": [True]}, tmp_path, progress=False
    )
    back = pd.read_csv(path)
    assert list(back.columns[-3:]) == ["run", f"param_{param}", "param_quick"]
    assert back["param_quick"].all() and sorted(back[f"param_{param}"].unique()) == values
    runs = back.groupby(f"param_{param}")
    assert runs["run"].nunique().tolist() == [1, 1] and len(set(runs.size())) == 1  # two runs, same table shape
    assert len(back) == len(table) > 0
