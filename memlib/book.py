"""Run the book's notebooks: conversion, parameters, execution and the book build.

The MyST Markdown files under ``notebooks/`` are the source of truth. This
module turns them into ``.ipynb`` with parameters injected (for nbval and
papermill), builds the book so that any failing cell fails the build, and
checks the built HTML (:func:`check_html`): it loads nothing (script,
stylesheet, font, image) from another host, and no page shows a ``{glue}`` or
``{eval}`` role as text where its value belongs.

The book's Sphinx extension for math, which renders its formulas to MathML at build time,
is :mod:`memlib.book_math`.
"""

from __future__ import annotations

import html
import re
import subprocess
import sys
from pathlib import Path

from memlib._safewrite import check_target, file_in_the_way, make_folder, write_file

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK_DIR = ROOT / "notebooks"


def notebook_paths(directory: Path = NOTEBOOK_DIR) -> list[Path]:
    """Return the book's notebooks (``NN_topic.md``), in order."""
    return sorted(p for p in Path(directory).glob("[0-9][0-9]_*.md"))


def to_notebook(md_path, parameters: dict | None = None):
    """Read a MyST notebook and inject ``parameters`` after its ``parameters`` cell."""
    import jupytext
    from papermill.parameterize import parameterize_notebook

    nb = jupytext.read(md_path)
    for cell in nb.cells:  # papermill expects every cell to carry a tags list
        cell.metadata.setdefault("tags", [])
    nb.metadata.setdefault("kernelspec", {"name": "python3", "display_name": "Python 3", "language": "python"})
    nb.metadata.setdefault("papermill", {})
    if parameters:
        nb = parameterize_notebook(nb, parameters, kernel_name="python3", language="python")
    return nb


def prepare(out_dir, parameters: dict | None = None, paths=None) -> list[Path]:
    """Write every notebook as ``.ipynb`` into ``out_dir`` with ``parameters`` injected.

    The folder and every target are checked before the first notebook is written
    (:func:`memlib._safewrite.check_target`); each is written by memlib's safe writer.
    A folder that cannot be made is one :class:`~memlib._checks.ParameterError`.
    """
    import nbformat

    out_dir = _notebook_folder(out_dir)
    targets = [(md, check_target(out_dir / (Path(md).stem + ".ipynb"))) for md in paths or notebook_paths()]
    for md, target in targets:
        write_file(target, nbformat.writes(to_notebook(md, parameters)), mode=0o644)
    return [target for _, target in targets]


def _notebook_folder(out_dir) -> Path:
    """``out_dir``, made if it is missing; a :class:`~memlib._checks.ParameterError` in one line if it cannot be."""
    from memlib._checks import ParameterError

    if str(out_dir).strip() == "":
        raise ParameterError("the notebook folder is empty: name a folder to write the notebooks into")
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise ParameterError(f"{out_dir}: is a file, not a folder: notebooks are written into a folder")
    if file_in_the_way(out_dir) is not None:
        raise ParameterError(f"{out_dir}: cannot make this folder: a parent of it is a file")
    try:
        return make_folder(out_dir)
    except OSError as exc:  # e.g. /proc/nb
        raise ParameterError(f"{out_dir}: {exc.strerror}") from None


def execute(md_path, out_path, parameters: dict | None = None, progress: bool = False):
    """Execute one notebook with papermill and write the executed ``.ipynb``.

    ``out_path`` and the input copy beside it are checked first
    (:func:`memlib._safewrite.check_target`): regular files or absent.
    """
    import nbformat
    import papermill as pm

    nb = to_notebook(md_path)
    out_path = check_target(out_path)
    tmp_in = check_target(out_path.with_suffix(".input.ipynb"))
    write_file(tmp_in, nbformat.writes(nb), mode=0o644)
    try:
        return pm.execute_notebook(
            str(tmp_in),
            str(out_path),
            parameters=parameters or {},
            kernel_name="python3",
            progress_bar=progress,
            cwd=str(Path(md_path).resolve().parent),
        )
    finally:
        tmp_in.unlink(missing_ok=True)


def build_book(source=ROOT, output=None, quick: bool = False, jobs: int | None = None) -> int:
    """Build the Jupyter Book at ``source``; every notebook re-executes; warnings are errors.

    The build is ``jupyter-book build --all -W --keep-going``'s, with the pages read (and so the notebooks
    run) on ``jobs`` processes, in a process of its own (:mod:`memlib.book_sphinx`).

    Parameters
    ----------
    source : str or pathlib.Path
        The book's folder (``_config.yml``, ``_toc.yml``, ``book/``, ``notebooks/``).
    output : str or pathlib.Path, optional
        Where ``_build/`` is written (default: ``source``).
    quick : bool
        Build every chapter in quick mode: the book is staged by :func:`stage_quick` (each chapter as
        ``.ipynb`` with ``quick = True`` injected after its parameters cell) and built from there, with the
        same configuration and the same strictness. CI builds this book; ``make`` builds the full one.
    jobs : int, optional
        Processes to read pages on (default: every core this process may use; Sphinx reads serially a
        book of five pages or fewer).

    Returns
    -------
    int
        The build's exit code: non-zero when any cell fails or the build warns (a glue key glued twice on a
        page, say).
    """
    source = Path(source)
    output = Path(output) if output is not None else source
    if quick:
        source = stage_quick(source, output / "build" / "book-quick")
    cmd = [sys.executable, "-m", "memlib.book_sphinx", str(source), str(output)]
    return subprocess.call(cmd + ([] if jobs is None else [str(jobs)]))


def stage_quick(source, staged) -> Path:
    """Copy the book at ``source`` into ``staged`` with every chapter in quick mode; return ``staged``.

    The configuration, the table of contents and ``book/`` are copied as they are; each
    ``notebooks/NN_topic.md`` becomes ``notebooks/NN_topic.ipynb`` with ``quick = True`` injected
    (:func:`to_notebook`), which the table of contents finds under the same name. ``staged`` is emptied
    first: it is memlib's own staging folder, never a folder of the user's (it must be absent or hold the
    marker file a previous staging left).

    Parameters
    ----------
    source : str or pathlib.Path
        The book's folder.
    staged : str or pathlib.Path
        The staging folder (``build/book-quick`` under the output folder).

    Returns
    -------
    pathlib.Path
        ``staged``, ready for :func:`build_book` (``jupyter-book build`` reads it as well).
    """
    import shutil

    import nbformat

    from memlib._checks import ParameterError

    source, staged = Path(source), Path(staged)
    marker = staged / ".memlib-staged-book"
    if staged.exists() or staged.is_symlink():
        if staged.is_symlink() or not marker.is_file():
            raise ParameterError(f"{staged}: exists and was not staged by memlib; move it away to build the quick book")
        shutil.rmtree(staged)
    (staged / "notebooks").mkdir(parents=True)
    write_file(marker, "the quick-mode copy of the book that memlib book build --quick builds; safe to delete\n", 0o644)
    for name in ("_config.yml", "_toc.yml"):
        shutil.copy2(source / name, staged / name)
    shutil.copytree(source / "book", staged / "book")
    for md in notebook_paths(source / "notebooks"):
        notebook = nbformat.writes(to_notebook(md, {"quick": True}))
        write_file(staged / "notebooks" / (md.stem + ".ipynb"), notebook, mode=0o644)
    return staged


#: Anything a page or a stylesheet makes the browser fetch from another host: a script, a
#: stylesheet, font or icon (``<link href>``), an image or frame (``src``/``srcset``), or a
#: CSS ``url(...)``/``@import``. Plain ``<a href>`` links are navigation, not loads.
_REMOTE_LOAD = re.compile(
    r"<(?:script|img|iframe|source|audio|video|embed|track|input)\b[^>]*\b(?:src|srcset)=[\"']\s*(?:https?:)?//"
    r"|<link\b[^>]*\bhref=[\"']\s*(?:https?:)?//"
    r"|<object\b[^>]*\bdata=[\"']\s*(?:https?:)?//"
    r"|url\(\s*[\"']?\s*(?:https?:)?//"
    r"|@import\s+[\"']\s*(?:https?:)?//",
    re.IGNORECASE,
)
#: ``<link>`` relations that fetch nothing: where the page lives, not what it loads.
_LINK_NO_FETCH = re.compile(r"\brel=[\"'](?:canonical|alternate|author|license|next|prev|search)[\"']", re.I)


def remote_loads(html_dir) -> list[str]:
    """Pages and stylesheets under ``html_dir`` that fetch anything from another host (should be empty).

    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp())
    >>> _ = (d / "a.html").write_text('<link rel="stylesheet" href="https://cdn.example/m.css">')
    >>> _ = (d / "b.html").write_text('<a href="https://doi.org/10.1/x">a link</a><img src="_static/x.svg">')
    >>> _ = (d / "c.css").write_text("@font-face { src: url(//fonts.example/f.woff2) }")
    >>> [line.split(":")[0] for line in remote_loads(d)]
    ['a.html', 'c.css']
    """
    return _matches(html_dir, _REMOTE_LOAD, ("*.html", "*.css"), skip=_LINK_NO_FETCH)


#: A MyST role the build printed as text instead of running it (``{glue:text}`name``` in a code span, or a
#: role MyST did not parse): the reader sees the markup where its value belongs.
_LITERAL_ROLE = re.compile(r"\{(?:glue|eval)(?::[\w-]*)?\}")
_TAG = re.compile(r"<[^>]*>")


def literal_roles(html_dir) -> list[str]:
    """Pages under ``html_dir`` that show a ``{glue...}`` or ``{eval...}`` role as text (should be empty).

    Parameters
    ----------
    html_dir : str or pathlib.Path
        The built book (``_build/html``).

    Returns
    -------
    list of str
        One line per page at fault: the page, how many roles it prints, and the first as the reader
        sees it (tags removed).

    Examples
    --------
    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp())
    >>> _ = (d / "a.html").write_text('<p>On <code><span class="pre">{glue:text}</span></code>name`` it</p>')
    >>> _ = (d / "b.html").write_text("<p>On LoCoMo it leads.</p>")
    >>> literal_roles(d)
    ['a.html: 1 role printed as text instead of its value: {glue:text}name`` it']
    """
    html_dir = Path(html_dir)
    bad = []
    for page in pages(html_dir, ("*.html",)):
        text = page.read_text(encoding="utf-8", errors="replace")
        found = list(_LITERAL_ROLE.finditer(text))
        if found:
            start = found[0].start()
            shown = " ".join(html.unescape(_TAG.sub("", text[start : start + 300])).split())[:80]
            roles = "role" if len(found) == 1 else "roles"
            where = page.relative_to(html_dir)
            bad.append(f"{where}: {len(found)} {roles} printed as text instead of its value: {shown}")
    return bad


#: A missing number shown as pandas prints it: a table cell (or index cell), or a glued value, that reads ``nan``.
_NAN_CELL = re.compile(r"<t([dh])(?:\s[^>]*)?>\s*(?:nan|NaN)\s*</t\1>")
_NAN_GLUED = re.compile(r'<span class="pasted-text">[^<]*\b(?:nan|NaN)\b[^<]*</span>')


def missing_values(html_dir) -> list[str]:
    """Pages under ``html_dir`` that show a missing number as ``nan`` (should be empty).

    A table shows a cell with no number as a dash (``Styler.format(na_rep="—")``), and a glued
    sentence says what is missing in words; ``nan`` is pandas' text, not the reader's.

    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp())
    >>> _ = (d / "a.html").write_text("<table><tr><th>nan</th><td>0.25</td><td class='data'>NaN</td></tr></table>")
    >>> _ = (d / "b.html").write_text('<p>r = <span class="pasted-text">locomo 0.4; realmem nan</span></p>')
    >>> _ = (d / "c.html").write_text('<td>—</td><p>nan in prose, <span class="pasted-text">finance</span></p>')
    >>> missing_values(d)
    ['a.html: 2 table cells read nan', 'b.html: 1 glued value reads nan: locomo 0.4; realmem nan']
    """
    html_dir = Path(html_dir)
    bad = []
    for page in pages(html_dir, ("*.html",)):
        text = page.read_text(encoding="utf-8", errors="replace")
        where = page.relative_to(html_dir)
        cells = len(_NAN_CELL.findall(text))
        if cells:
            bad.append(f"{where}: {cells} table {'cell reads' if cells == 1 else 'cells read'} nan")
        glued = _NAN_GLUED.findall(text)
        if glued:
            shown = " ".join(html.unescape(_TAG.sub("", glued[0])).split())[:80]
            values = "value reads" if len(glued) == 1 else "values read"
            bad.append(f"{where}: {len(glued)} glued {values} nan: {shown}")
    return bad


def check_html(html_dir) -> list[str]:
    """Every fault of the book built in ``html_dir`` (should be empty), one line a fault naming its page.

    :func:`remote_loads` (anything fetched from another host), then :func:`literal_roles` (roles
    printed as text), then :func:`missing_values` (``nan`` shown to the reader).
    """
    return remote_loads(html_dir) + literal_roles(html_dir) + missing_values(html_dir)


#: The name ``memlib book check`` calls: every check of :func:`check_html` (remote loads of any kind,
#: scripts included, and roles printed as text).
remote_scripts = check_html


def pages(html_dir, globs) -> list[Path]:
    """Return the files under ``html_dir`` whose names match one of ``globs``, sorted (folders are not pages).

    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp())
    >>> (d / "x.html").mkdir()
    >>> _ = (d / "a.html").write_text("<p>a</p>")
    >>> [p.name for p in pages(d, ("*.html",))]
    ['a.html']
    """
    return sorted(p for g in globs for p in Path(html_dir).rglob(g) if p.is_file())


def _matches(html_dir, pattern, globs, skip=None) -> list[str]:
    html_dir = Path(html_dir)
    bad = []
    for page in pages(html_dir, globs):
        text = page.read_text(encoding="utf-8", errors="replace")
        for m in pattern.finditer(text):
            tag = text[m.start() : text.find(">", m.start()) + 1 or m.start() + 160]
            if skip is not None and skip.search(tag):
                continue
            bad.append(f"{page.relative_to(html_dir)}: {text[m.start() : m.start() + 160]}")
    return bad


RESULTS_MIME = "application/vnd.memlib.results+json"


def emit_results(table) -> None:
    """Publish a notebook's results table as a machine-readable output (read by :func:`sweep`).

    It displays nothing visible in the book: the output carries only a JSON
    mimetype that the book ignores.
    """
    import json

    from IPython.display import display

    records = json.loads(table.to_json(orient="records", double_precision=15))
    display({RESULTS_MIME: records}, raw=True)


def read_results(nb) -> list:
    """Return the records published by :func:`emit_results` in an executed notebook."""
    out = []
    for cell in nb.cells:
        for o in cell.get("outputs", []):
            data = o.get("data", {})
            if RESULTS_MIME in data:
                out.extend(data[RESULTS_MIME])
    return out


def parse_value(text: str):
    """Parse a command-line parameter value: an int, float, True/False/None, or the string itself.

    >>> [parse_value(v) for v in ["3", "0.3", "True", "None", "locomo"]]
    [3, 0.3, True, None, 'locomo']
    """
    import ast

    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def sweep(md_path, grid: dict, out_dir="results/sweeps", progress: bool = True):
    """Execute a notebook for every combination of ``grid`` and combine its results tables.

    Each run is written to ``out_dir/<notebook>/<hash of parameters>.ipynb``; the
    combined table (one row per result record, with the run's parameters as
    columns) goes to ``out_dir/<notebook>/results.csv``. Returns ``(table, path)``.
    The folder and every file it writes are checked before the first run: a folder
    that cannot be made, or a target that is not a regular file, is an :class:`OSError`
    naming it.
    """
    import hashlib
    import itertools
    import json

    import pandas as pd
    from papermill.exceptions import PapermillExecutionError
    from tqdm import tqdm

    from memlib._checks import ParameterError

    md_path = Path(md_path)
    if not md_path.is_file():
        raise ParameterError(f"notebook {str(md_path)!r} not found")
    if md_path.suffix not in (".md", ".ipynb"):
        raise ParameterError(f"{md_path}: not a notebook: sweep runs a notebooks/NN_topic.md (MyST) or .ipynb file")
    try:
        nb = to_notebook(md_path)
    except (ValueError, UnicodeDecodeError) as exc:  # jupytext and nbformat raise ValueError subclasses
        reason = " ".join(str(exc).split())[:200]  # one line
        raise ParameterError(f"{md_path}: cannot be read as a notebook ({type(exc).__name__}: {reason})") from None
    if not any("parameters" in cell.metadata.get("tags", []) for cell in nb.cells):
        raise ParameterError(f"{md_path}: not a memlib notebook: no cell is tagged 'parameters'")
    declared = _declared_parameters(nb)
    unknown = sorted(set(grid) - set(declared))
    if unknown:
        raise ParameterError(
            f"unknown parameter(s) {', '.join(unknown)} for {md_path.name}; "
            f"its parameters cell declares: {', '.join(declared)}"
        )
    for name, values in grid.items():  # before any run
        for value in values:
            check_parameter_type(md_path.name, name, value, declared[name])
    names = list(grid)
    combos = [dict(zip(names, vals)) for vals in itertools.product(*(grid[n] for n in names))] or [{}]
    folder = make_folder(Path(out_dir) / md_path.stem)  # and every target checked, before any run
    path = check_target(folder / "results.csv")
    runs = [hashlib.sha1(json.dumps(p, sort_keys=True, default=str).encode()).hexdigest()[:10] for p in combos]
    for run in runs:
        check_target(folder / f"{run}.ipynb")
        check_target(folder / f"{run}.input.ipynb")
    frames = []
    for params, run in tqdm(list(zip(combos, runs)), desc=f"sweep {md_path.stem}", disable=not progress):
        try:
            done = execute(md_path, folder / f"{run}.ipynb", parameters=params)
        except PapermillExecutionError as exc:  # one line: the run, and the cell's own error
            shown = ", ".join(f"{k}={v!r}" for k, v in params.items()) or "its defaults"
            reason = " ".join(str(exc.evalue).split())[:300]
            raise ParameterError(
                f"{md_path.name} failed with {shown} (cell {exc.exec_count}: {exc.ename}: {reason}); "
                f"the executed notebook is {folder / f'{run}.ipynb'}"
            ) from None
        records = read_results(done)
        if not records:
            raise ParameterError(f"{md_path.name} published no results table (see memlib.book.emit_results)")
        frames.append(pd.DataFrame(records).assign(run=run, **{f"param_{k}": v for k, v in params.items()}))
    table = pd.concat(frames, ignore_index=True)
    write_file(path, table.to_csv(index=False), mode=0o644)
    return table, path


#: Stands for a default of the parameters cell that is not a literal (any value is taken).
_NOT_LITERAL = object()


def _declared_parameters(nb) -> dict:
    """Return the names the ``parameters`` cell assigns, each with its literal default (or :data:`_NOT_LITERAL`)."""
    import ast

    for cell in nb.cells:
        if "parameters" in cell.metadata.get("tags", []):
            out = {}
            for node in ast.parse(cell.source).body:
                if not isinstance(node, ast.Assign):
                    continue
                try:
                    default = ast.literal_eval(node.value)
                except ValueError:
                    default = _NOT_LITERAL
                for t in node.targets:
                    if isinstance(t, ast.Name):
                        out[t.id] = default
            return out
    return {}


def check_parameter_type(notebook: str, name: str, value, default) -> None:
    """Refuse a swept value whose type does not fit the parameter's default.

    An int default takes an int; a float default an int or a float; a bool
    default a bool; a string default a string; a ``None`` or non-literal default
    anything. Checked before any run, so a typo fails in one line instead of as
    a kernel's traceback.

    >>> check_parameter_type("05.md", "seed", 3, 0)
    >>> check_parameter_type("05.md", "seed", "abc", 0)
    Traceback (most recent call last):
    ...
    memlib._checks.ParameterError: 05.md: parameter seed takes an integer (its default is 0), got 'abc'
    """
    from memlib._checks import ParameterError

    if default is None or default is _NOT_LITERAL:
        return
    if isinstance(default, bool):
        ok, kind = isinstance(value, bool), "True or False"
    elif isinstance(default, int):
        ok, kind = isinstance(value, int) and not isinstance(value, bool), "an integer"
    elif isinstance(default, float):
        ok, kind = isinstance(value, (int, float)) and not isinstance(value, bool), "a number"
    elif isinstance(default, str):
        ok, kind = isinstance(value, str), "a string"
    else:
        ok, kind = isinstance(value, type(default)), f"a {type(default).__name__}"
    if not ok:
        raise ParameterError(f"{notebook}: parameter {name} takes {kind} (its default is {default!r}), got {value!r}")
