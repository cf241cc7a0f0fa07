"""Run the book's notebooks: conversion, parameters, execution and the book build.

The MyST Markdown files under ``notebooks/`` are the source of truth. This
module turns them into ``.ipynb`` with parameters injected (for nbval and
papermill), builds the book so that any failing cell fails the build, and
checks the built HTML loads no script from another host.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK_DIR = ROOT / "notebooks"


def notebook_paths(directory: Path = NOTEBOOK_DIR) -> list[Path]:
    """The book's notebooks (``NN_topic.md``), in order."""
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
    """Write every notebook as ``.ipynb`` into ``out_dir`` with ``parameters`` injected."""
    import nbformat

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for md in paths or notebook_paths():
        target = out_dir / (Path(md).stem + ".ipynb")
        nbformat.write(to_notebook(md, parameters), target)
        written.append(target)
    return written


def execute(md_path, out_path, parameters: dict | None = None, progress: bool = False):
    """Execute one notebook with papermill and write the executed ``.ipynb``."""
    import papermill as pm

    nb = to_notebook(md_path)
    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    tmp_in = out_path.with_suffix(".input.ipynb")
    import nbformat

    nbformat.write(nb, tmp_in)
    try:
        return pm.execute_notebook(
            str(tmp_in), str(out_path), parameters=parameters or {}, kernel_name="python3",
            progress_bar=progress, cwd=str(Path(md_path).resolve().parent),
        )
    finally:
        tmp_in.unlink(missing_ok=True)


def build_book(source=ROOT, output=None) -> int:
    """Build the Jupyter Book at ``source``; every notebook re-executes; warnings are errors.

    Returns the exit code of ``jupyter-book build`` (non-zero when any cell fails).
    """
    cmd = [str(Path(sys.executable).parent / "jupyter-book"), "build", str(source), "--all", "-W", "--keep-going"]
    if output is not None:
        cmd += ["--path-output", str(output)]
    return subprocess.call(cmd)


_REMOTE_SCRIPT = re.compile(r"<script[^>]+src=[\"'](?:https?:)?//", re.IGNORECASE)


def remote_scripts(html_dir) -> list[str]:
    """Pages under ``html_dir`` that load a script from another host (should be empty)."""
    bad = []
    for page in sorted(Path(html_dir).rglob("*.html")):
        for m in _REMOTE_SCRIPT.finditer(page.read_text(encoding="utf-8", errors="replace")):
            bad.append(f"{page.relative_to(html_dir)}: {page.read_text()[m.start(): m.start() + 160]}")
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
    """The records published by :func:`emit_results` in an executed notebook."""
    out = []
    for cell in nb.cells:
        for o in cell.get("outputs", []):
            data = o.get("data", {})
            if RESULTS_MIME in data:
                out.extend(data[RESULTS_MIME])
    return out


def parse_value(text: str):
    """A command-line parameter value: int, float, True/False/None, or the string itself.

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
    """
    import hashlib
    import itertools
    import json

    import pandas as pd
    from tqdm import tqdm

    from memlib._checks import ParameterError

    md_path = Path(md_path)
    if not md_path.is_file():
        raise ParameterError(f"notebook {str(md_path)!r} not found")
    nb = to_notebook(md_path)
    declared = _declared_parameters(nb)
    unknown = sorted(set(grid) - set(declared))
    if unknown:
        raise ParameterError(f"unknown parameter(s) {', '.join(unknown)} for {md_path.name}; "
                             f"its parameters cell declares: {', '.join(declared)}")
    names = list(grid)
    combos = [dict(zip(names, vals)) for vals in itertools.product(*(grid[n] for n in names))] or [{}]
    folder = Path(out_dir) / md_path.stem
    frames = []
    for params in tqdm(combos, desc=f"sweep {md_path.stem}", disable=not progress):
        run = hashlib.sha1(json.dumps(params, sort_keys=True, default=str).encode()).hexdigest()[:10]
        done = execute(md_path, folder / f"{run}.ipynb", parameters=params)
        records = read_results(done)
        if not records:
            raise ParameterError(f"{md_path.name} published no results table (see memlib.notebooks.emit_results)")
        frames.append(pd.DataFrame(records).assign(run=run, **{f"param_{k}": v for k, v in params.items()}))
    table = pd.concat(frames, ignore_index=True)
    path = folder / "results.csv"
    tmp = path.with_suffix(".csv.tmp")
    table.to_csv(tmp, index=False)
    tmp.replace(path)
    return table, path


def _declared_parameters(nb) -> list:
    import ast

    for cell in nb.cells:
        if "parameters" in cell.metadata.get("tags", []):
            tree = ast.parse(cell.source)
            return [t.id for node in tree.body if isinstance(node, ast.Assign) for t in node.targets
                    if isinstance(t, ast.Name)]
    return []
