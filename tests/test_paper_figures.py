"""The paper's figures (memlib.paper) may only reach a column labelled as the paper's."""

import ast
from pathlib import Path

import numpy as np
import pandas as pd

from memlib import paper
from memlib.studies import oracle_blind

MEMLIB = Path(__file__).resolve().parent.parent / "memlib"
ALLOWED = {
    ("studies/oracle_blind.py", "table3"),
    ("studies/oracle_blind.py", "mean_weights"),
    ("studies/reproduction.py", "reading_table"),
    ("studies/paper_gaps.py", "paper_comparison"),
    # the released experiment's tables: paper_mean / paper and authors_mean / authors columns
    ("studies/released.py", "released_study"),
    ("studies/released.py", "mlp_released"),
}


def test_only_the_labelled_table_builders_read_paper_figures():
    users = set()
    for path in MEMLIB.rglob("*.py"):
        if path.name == "paper.py":
            continue
        tree = ast.parse(path.read_text())
        for fn in ast.walk(tree):
            if isinstance(fn, (ast.FunctionDef, ast.Module)):
                body = (
                    fn.body
                    if isinstance(fn, ast.FunctionDef)
                    else [n for n in fn.body if not isinstance(n, (ast.FunctionDef, ast.ClassDef))]
                )
                for node in body:
                    for sub in ast.walk(node):
                        if isinstance(sub, ast.ImportFrom) and (
                            sub.module == "memlib.paper" or any(a.name == "paper" for a in sub.names)
                        ):
                            users.add((path.relative_to(MEMLIB).as_posix(), getattr(fn, "name", "<module>")))
    assert users == ALLOWED


def test_paper_figures_only_appear_in_paper_columns():
    summary = pd.DataFrame(
        {"policy": ["learned_V", "learned_V"], "regime": ["oracle", "blind"], "mean": [0.5, 0.4], "std": [0.01, 0.02]}
    )
    for dataset in ("locomo", paper.PAPER_DATASET):
        t = oracle_blind.table3(summary, dataset)
        ours = t[["oracle_mean", "oracle_std", "blind_mean", "blind_std"]].to_numpy()
        np.testing.assert_array_equal(ours, [[0.5, 0.01, 0.4, 0.02]])
        assert all(
            c.startswith("paper_")
            for c in t.columns
            if c not in {"policy", "oracle_mean", "oracle_std", "blind_mean", "blind_std"}
        )
