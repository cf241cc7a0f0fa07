"""The book build must fail loudly when a notebook cell fails, and must not load remote scripts."""

import shutil
from pathlib import Path

import pytest

from memlib import notebooks

NB_HEADER = """---
jupytext:
  text_representation: {extension: .md, format_name: myst}
kernelspec: {display_name: Python 3, language: python, name: python3}
---
"""


def make_book(tmp_path: Path, cell_source: str) -> Path:
    shutil.copy(notebooks.ROOT / "_config.yml", tmp_path / "_config.yml")
    (tmp_path / "book").mkdir()
    shutil.copy(notebooks.ROOT / "book" / "references.bib", tmp_path / "book" / "references.bib")
    (tmp_path / "intro.md").write_text("# Tiny book\n")
    (tmp_path / "page.md").write_text(NB_HEADER + "# Page\n\n```{code-cell} ipython3\n" + cell_source + "\n```\n")
    (tmp_path / "_toc.yml").write_text("format: jb-book\nroot: intro\nchapters:\n  - file: page\n")
    return tmp_path


@pytest.mark.parametrize("source, ok", [("print(1 + 1)", True), ("raise RuntimeError('boom')", False)])
def test_build_fails_exactly_when_a_cell_fails(tmp_path, source, ok):
    root = make_book(tmp_path, source)
    code = notebooks.build_book(root)
    assert (code == 0) is ok
    if ok:
        assert "2" in (root / "_build" / "html" / "page.html").read_text()
        assert notebooks.remote_scripts(root / "_build" / "html") == []


def test_remote_script_detector(tmp_path):
    (tmp_path / "a.html").write_text('<script src="https://cdn.example/x.js"></script>')
    (tmp_path / "b.html").write_text('<script src="_static/x.js"></script>')
    bad = notebooks.remote_scripts(tmp_path)
    assert len(bad) == 1 and bad[0].startswith("a.html")
