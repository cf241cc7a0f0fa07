"""Every chapter has a study, and a chapter can be swept: it publishes its table, and the sweep's
results.csv names the parameters.

One chapter (01, the synthetic study: no dataset needed) runs twice in quick mode, over two values of
its seed. Every chapter runs once more under nbval in ``make test``; sweeping each of them as well cost
2.5 minutes on two busy cores and proved nothing the one sweep does not (``memlib.book.sweep`` is the
same code for every chapter).
"""

from pathlib import Path

import pandas as pd
import pytest

from memlib import book
from memlib.studies import STUDIES

#: One study per chapter (its first), so that each chapter is swept once.
CHAPTERS = {s.notebook: name for name, s in reversed(STUDIES.items())}
#: The chapter swept, the parameter and its two values.
SWEPT = ("synthetic", "seed", [0, 1])


def test_every_chapter_has_a_study_and_every_study_a_chapter():
    assert sorted(CHAPTERS) == [p.name for p in book.notebook_paths()]
    assert all(s.notebook in CHAPTERS for s in STUDIES.values())


@pytest.mark.slow
@pytest.mark.integration
def test_a_chapter_sweeps_over_two_values(tmp_path):
    name, param, values = SWEPT
    table, path = book.sweep(
        book.NOTEBOOK_DIR / STUDIES[name].notebook, {param: values, "quick": [True]}, tmp_path, progress=False
    )
    assert path == tmp_path / Path(STUDIES[name].notebook).stem / "results.csv"
    back = pd.read_csv(path)
    assert list(back.columns[-3:]) == ["run", f"param_{param}", "param_quick"]
    assert back["param_quick"].all() and sorted(back[f"param_{param}"].unique()) == values
    runs = back.groupby(f"param_{param}")
    assert runs["run"].nunique().tolist() == [1, 1] and len(set(runs.size())) == 1  # two runs, same table shape
    assert len(back) == len(table) > 0
    # two executed notebooks, one per value, beside the table
    assert len(list(path.parent.glob("*.ipynb"))) == 2
