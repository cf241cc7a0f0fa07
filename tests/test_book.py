"""The book build must fail loudly when a notebook cell fails, render math offline, load nothing remote,
and print no glue or eval role as text (``memlib book check``)."""

import re
import shutil
from pathlib import Path

import pytest

from memlib import book, cli

NB_HEADER = """---
jupytext:
  text_representation: {extension: .md, format_name: myst}
kernelspec: {display_name: Python 3, language: python, name: python3}
---
"""


def make_book(tmp_path: Path, cell_source: str, prose: str = "") -> Path:
    shutil.copy(book.ROOT / "_config.yml", tmp_path / "_config.yml")
    (tmp_path / "book").mkdir()
    shutil.copy(book.ROOT / "book" / "references.bib", tmp_path / "book" / "references.bib")
    shutil.copytree(book.ROOT / "book" / "_static", tmp_path / "book" / "_static")  # _config.yml lists its CSS
    (tmp_path / "intro.md").write_text("# Tiny book\n")
    (tmp_path / "page.md").write_text(
        NB_HEADER + "# Page\n\n" + prose + "\n\n```{code-cell} ipython3\n" + cell_source + "\n```\n"
    )
    (tmp_path / "_toc.yml").write_text("format: jb-book\nroot: intro\nchapters:\n  - file: page\n")
    return tmp_path


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.parametrize("source, ok", [("print(1 + 1)", True), ("raise RuntimeError('boom')", False)])
def test_build_fails_exactly_when_a_cell_fails(tmp_path, capfd, source, ok):
    root = make_book(tmp_path, source)
    code = book.build_book(root)
    assert (code == 0) is ok
    if not ok:  # the failing cell and its error are printed, not only the page's name
        assert "boom" in "".join(capfd.readouterr())
    if ok:
        page = (root / "_build" / "html" / "page.html").read_text()
        assert "2" in page
        assert book.check_html(root / "_build" / "html") == []
        # the book's CSS (code wraps at the right edge) is copied and linked
        assert re.search(r'<link[^>]*href="_static/memlib\.css', page)
        assert "white-space: pre-wrap" in (root / "_build" / "html" / "_static" / "memlib.css").read_text()


#: A page whose cell prints the process that runs its kernel's parent: the Sphinx process that read it.
READER_CELL = "import os\nprint('read by', os.getppid())"


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.parametrize("fail", [False, True])
def test_a_book_of_many_pages_runs_its_notebooks_in_parallel_and_still_fails_on_a_failing_cell(tmp_path, capfd, fail):
    """Sphinx reads a book of more than five pages on two processes (so two notebooks run at once), with no
    warning under ``-W`` (the numbering extension is declared safe by :mod:`memlib.book_sphinx`); a failing
    cell on any page still fails the build."""
    root = make_book(tmp_path, READER_CELL)
    pages = [f"page{i}" for i in range(6)]
    for i, name in enumerate(pages):
        cell = "raise RuntimeError('boom')" if fail and i == 4 else READER_CELL
        (root / f"{name}.md").write_text(NB_HEADER + f"# Page {i}\n\n```{{code-cell}} ipython3\n{cell}\n```\n")
    chapters = "".join(f"  - file: {p}\n" for p in pages)
    (root / "_toc.yml").write_text("format: jb-book\nroot: intro\nchapters:\n" + chapters)
    code = book.build_book(root, jobs=2)
    out = capfd.readouterr()
    assert "doing serial read" not in out.out + out.err
    if fail:
        assert code != 0 and "boom" in out.out + out.err
        return
    assert code == 0, out.err[-2000:]
    html_dir = root / "_build" / "html"
    readers = {re.search(r"read by (\d+)", (html_dir / f"{p}.html").read_text()).group(1) for p in pages}
    assert len(readers) >= 2  # the pages were read (their notebooks run) by more than one process
    assert book.check_html(html_dir) == []


def test_the_build_refuses_a_bad_jobs_count_and_a_folder_without_a_config(tmp_path, capsys):
    from memlib import book_sphinx

    for bad in ("0", "-2", "two", "1.5"):
        assert book_sphinx.main([str(tmp_path), str(tmp_path), bad]) == 2
        err = capsys.readouterr().err
        assert "usage: python -m memlib.book_sphinx" in err and "JOBS must be an integer >= 1" in err
    assert book_sphinx.main([str(tmp_path)]) == 2
    assert book.build_book(tmp_path, jobs=0) == 2  # refused by the build's process, before anything is read
    assert book_sphinx.build(tmp_path, tmp_path, jobs=2) == 2  # no _config.yml: said, nothing built
    assert "no _config.yml in" in capsys.readouterr().err and not (tmp_path / "_build").exists()


FORMULA = r"""The value is $V(m) = \sum_{i=1}^{7} w_i f_i(m)$ and a turn is forgotten by

$$
\operatorname{forget}(m) = (\Delta t)^{0.7} \cdot \frac{1}{1 + r} \cdot \frac{1}{1 + \beta V(m)}
$$"""


@pytest.mark.slow
@pytest.mark.integration
def test_math_renders_offline_with_our_config(tmp_path):
    """With the book's _config.yml, $...$ and $$...$$ become MathML in the page; nothing is loaded remotely."""
    root = make_book(tmp_path, "print('ok')", prose=FORMULA)
    assert book.build_book(root) == 0
    html_dir = root / "_build" / "html"
    page = (html_dir / "page.html").read_text()
    assert page.count('<math xmlns="http://www.w3.org/1998/Math/MathML"') == 2
    assert 'display="block"' in page and "<mfrac>" in page and "&#x02211;" in page  # the sum and the fractions
    assert "\\sum" not in page and "\\frac" not in page  # no raw TeX left for a script to typeset
    assert not re.search(r"<script[^>]*mathjax", page, re.IGNORECASE)  # no MathJax, local or remote
    assert book.remote_loads(html_dir) == []


def test_remote_load_detector(tmp_path):
    (tmp_path / "a.html").write_text('<script src="https://cdn.example/x.js"></script>')
    (tmp_path / "b.html").write_text('<script src="_static/x.js"></script><a href="https://doi.org/x">cite</a>')
    (tmp_path / "c.html").write_text('<link rel="stylesheet" href="//fonts.example/css?family=X">')
    (tmp_path / "d.html").write_text('<link rel="canonical" href="https://example.org/book/d.html">')
    (tmp_path / "e.css").write_text("@font-face { font-family: X; src: url('https://fonts.example/x.woff2'); }")
    bad = book.remote_loads(tmp_path)
    assert [b.split(":")[0] for b in bad] == ["a.html", "c.html", "e.css"]


def test_literal_role_detector(tmp_path):
    """A page that shows ``{glue:text}`` or ``{eval}`` as text fails the check, named; a clean page passes."""
    (tmp_path / "sub").mkdir()
    (tmp_path / "clean.html").write_text("<p>On LoCoMo the learned value leads at 30%.</p><code>glue(x)</code>")
    (tmp_path / "sub" / "glued.html").write_text(
        '<p>On <code class="docutils literal notranslate"><span class="pre">{glue:text}</span></code>other_name``'
        " the learned value leads.</p><p>{glue:text}`n` and {glue:text}`m`</p>"
    )
    (tmp_path / "evaled.html").write_text("<p>The mean is {eval}`mean` here.</p>")
    bad = book.literal_roles(tmp_path)
    assert [line.split(":")[0] for line in bad] == ["evaled.html", "sub/glued.html"]
    assert "3 roles printed as text" in bad[1] and "{glue:text}other_name``" in bad[1]
    assert "1 role printed as text" in bad[0] and "{eval}`mean`" in bad[0]
    assert book.check_html(tmp_path) == bad  # no remote load here: only the roles
    (tmp_path / "sub" / "glued.html").unlink()
    (tmp_path / "evaled.html").unlink()
    assert book.literal_roles(tmp_path) == [] and book.check_html(tmp_path) == []


def test_book_check_finds_nan_as_pandas_renders_it_and_passes_a_dash(tmp_path):
    """A table with a missing number, as a chapter displays it: a DataFrame, or a Styler without ``na_rep``."""
    import numpy as np
    import pandas as pd

    frame = pd.DataFrame({"mean": [0.25, np.nan], "n": [3, 4]})
    (tmp_path / "raw.html").write_text(frame.to_html())
    (tmp_path / "styled.html").write_text(frame.style.format(precision=3).to_html())
    (tmp_path / "dash.html").write_text(frame.style.format(precision=3, na_rep="—").to_html())
    assert book.check_html(tmp_path) == ["raw.html: 1 table cell reads nan", "styled.html: 1 table cell reads nan"]


def test_book_check_names_a_page_that_prints_a_role(tmp_path, capsys):
    (tmp_path / "index.html").write_text("<p>A clean page.</p>")
    assert cli.main(["book", "check", str(tmp_path)]) == 0
    (tmp_path / "08_longmemeval.html").write_text("<p>8 questions from {glue:text}`source``, of which</p>")
    assert cli.main(["book", "check", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "08_longmemeval.html: 1 role printed as text" in err and "index.html" not in err


#: What the chapters' prose looked like (issue 21): a role inside a code span is printed as text.
ROLE_PROSE = """On `{glue:text}`name`` the value leads.

On {glue:text}`name` it leads again."""


@pytest.mark.slow
@pytest.mark.integration
def test_a_role_in_a_code_span_is_printed_and_the_check_finds_it(tmp_path):
    """What ``memlib book check`` looks for is what MyST makes of a role inside backticks."""
    root = make_book(tmp_path, 'from myst_nb import glue\nglue("name", "LoCoMo", display=False)', prose=ROLE_PROSE)
    assert book.build_book(root) == 0
    html_dir = root / "_build" / "html"
    bad = book.check_html(html_dir)
    assert [line.split(":")[0] for line in bad] == ["page.html"] and "1 role printed as text" in bad[0]
    shown = " ".join(re.sub(r"<[^>]*>", "", (html_dir / "page.html").read_text()).split())
    assert "On LoCoMo it leads again." in shown  # the role outside backticks is replaced by its value


#: Code lines longer than this run past the right edge of a rendered chapter.
MAX_CODE_LINE = 100
#: What a reader does not learn from: these calls belong in hidden cells.
BOOKKEEPING = re.compile(r"^\s*(?:glue\(|emit_results\(|import |from \S+ import )", re.M)


#: Chapters being reworked in parallel (issue 10, part 3): drop a name here once its chapter passes.
PENDING: set = set()


@pytest.mark.parametrize(
    "md",
    [
        pytest.param(p, marks=pytest.mark.xfail(reason="chapter still being reworked", strict=False))
        if p.stem in PENDING
        else p
        for p in book.notebook_paths()
    ],
    ids=lambda p: p.stem,
)
def test_chapters_show_no_bookkeeping_and_fit_the_page(md):
    import jupytext

    for cell in jupytext.read(md).cells:
        if cell.cell_type != "code":
            continue
        too_long = [line for line in cell.source.splitlines() if len(line) > MAX_CODE_LINE]
        assert not too_long, f"{md.name}: code lines over {MAX_CODE_LINE} characters: {too_long}"
        tags = set(cell.metadata.get("tags", []))
        if not tags & {"remove-cell", "remove-input"}:
            assert not BOOKKEEPING.search(cell.source), f"{md.name}: a shown cell does bookkeeping:\n{cell.source}"


#: A hidden cell that glues, a second time, a key chapter 01 already glues.
DUPLICATE_GLUE_CELL = """
```{code-cell} ipython3
:tags: [remove-cell]

glue("keep_pct", "twice", display=False)
```
"""


@pytest.mark.slow
@pytest.mark.integration
def test_quick_build_fails_on_a_glue_key_glued_twice(tmp_path, capfd):
    """The quick book build (what CI runs) fails when a chapter glues one key twice, and says which key.

    The same mistake in chapter 04 failed ``make`` for a day while the tests, which execute chapters but
    build no book, stayed green.
    """
    shutil.copy(book.ROOT / "_config.yml", tmp_path / "_config.yml")
    shutil.copytree(book.ROOT / "book", tmp_path / "book")
    (tmp_path / "book" / "intro.md").write_text("# Tiny book\n")
    chapter = book.ROOT / "notebooks" / "01_synthetic_confounds.md"
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "notebooks" / chapter.name).write_text(chapter.read_text() + DUPLICATE_GLUE_CELL)
    (tmp_path / "_toc.yml").write_text(
        "format: jb-book\nroot: book/intro\nchapters:\n  - file: notebooks/01_synthetic_confounds\n"
        "  - file: book/references\n"
    )
    code = book.build_book(tmp_path, quick=True)
    out = capfd.readouterr()
    assert code != 0
    assert "glue key 'keep_pct' duplicate" in out.out + out.err
    staged = tmp_path / "build" / "book-quick" / "notebooks" / "01_synthetic_confounds.ipynb"
    assert "quick = True" in staged.read_text()  # the chapter ran in quick mode
