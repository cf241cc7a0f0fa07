"""The book's Sphinx build: what ``jupyter-book build --all -W --keep-going`` does, on several processes.

Most of a book build is its notebooks running, one after another (13 chapters, about 7 s each
with every study cached: a kernel, the imports, the charts). MyST-NB runs notebooks side by side
when Sphinx reads pages in parallel (``sphinx-build -j``), but jupyter-book 1's command line has
no option for it (jupyter-book issue 1735). :func:`build` calls the function that command calls
(``jupyter_book.sphinx.build_sphinx``) with the same arguments and ``jobs`` processes;
``python -m memlib.book_sphinx SOURCE OUTPUT [JOBS]`` runs it in a process of its own
(:func:`memlib.book.build_book`).

Sphinx reads in parallel only when every extension says it may, and otherwise warns (an error
under ``-W``). One does not say: ``sphinx_multitoc_numbering``, which ``sphinx_external_toc``
always loads. All it does is replace ``TocTreeCollector.assign_section_numbers``, which Sphinx
calls once, in the main process, after every page is read; it keeps nothing per page. This
module is also a Sphinx extension (``_config.yml`` lists it) whose :func:`setup` says so for the
version that was read (:data:`CHECKED_MULTITOC`); for any other, :func:`build` reads serially.
"""

from __future__ import annotations

import sys
import traceback
from pathlib import Path

from memlib._checks import ParameterError, check_int
from memlib._cores import usable_cores

#: The version of ``sphinx_multitoc_numbering`` whose source was read and found safe to run beside parallel reading.
CHECKED_MULTITOC = "0.1.3"


def multitoc_checked() -> bool:
    """Whether the installed ``sphinx_multitoc_numbering`` is the version read (:data:`CHECKED_MULTITOC`)."""
    from importlib import metadata

    try:
        return metadata.version("sphinx-multitoc-numbering") == CHECKED_MULTITOC
    except metadata.PackageNotFoundError:  # not installed, so never loaded: nothing undeclared
        return True


def build(source, output, jobs: int | None = None) -> int:
    """Build the book at ``source`` into ``output/_build/html``, every page anew, warnings as errors.

    Parameters
    ----------
    source : str or pathlib.Path
        The book's folder (``_config.yml``, ``_toc.yml``).
    output : str or pathlib.Path
        The folder ``_build/`` is written in (jupyter-book's ``--path-output``).
    jobs : int, optional
        Processes to read pages (and run notebooks) on; default :func:`~memlib._cores.usable_cores`. One when the
        numbering extension is not the version read.

    Returns
    -------
    int
        Sphinx's status: 0, or 1 when a cell failed or the build warned; 2 when ``source`` holds no
        ``_config.yml``.
    """
    from jupyter_book.sphinx import build_sphinx

    source, output = Path(source).resolve(), Path(output).resolve()
    if not (source / "_config.yml").is_file():
        print(f"memlib: error: no _config.yml in {source}: not a book's folder", file=sys.stderr)
        return 2
    jobs = usable_cores() if jobs is None else check_int("jobs", jobs, minimum=1)
    if jobs > 1 and not multitoc_checked():
        print(
            f"memlib: reading the pages serially: sphinx-multitoc-numbering is not {CHECKED_MULTITOC}", file=sys.stderr
        )
        jobs = 1
    result = build_sphinx(
        source,
        output / "_build" / "html",
        use_external_toc=True,
        noconfig=True,
        path_config=str(source / "_config.yml"),
        confoverrides={"external_toc_path": (source / "_toc.yml").as_posix(), "latex_individualpages": False},
        builder="html",
        freshenv=True,
        warningiserror=True,
        keep_going=True,
        jobs=jobs,
    )
    if isinstance(result, BaseException):  # Sphinx printed its last line and frame only: print what caused it
        worker_traceback = getattr(result, "traceback", None)  # a page read in another process (SphinxParallelError)
        if isinstance(worker_traceback, str):
            print(worker_traceback, file=sys.stderr)  # with the cell that failed and its error
        elif isinstance(result, Exception):
            traceback.print_exception(result)  # its chained cause: the cell that failed and its error
        return 1
    return int(result)


def setup(app):
    """Sphinx entry point: say that the numbering extension reads safely in parallel (:data:`CHECKED_MULTITOC`)."""
    ext = app.extensions.get("sphinx_multitoc_numbering")
    if ext is not None and ext.parallel_read_safe is None and multitoc_checked():
        ext.parallel_read_safe = True
    return {"parallel_read_safe": True, "parallel_write_safe": True}


def main(argv=None) -> int:
    """``python -m memlib.book_sphinx SOURCE OUTPUT [JOBS]``: :func:`build`, its status the exit code."""
    args = sys.argv[1:] if argv is None else argv
    usage = "usage: python -m memlib.book_sphinx SOURCE OUTPUT [JOBS]"
    if len(args) not in (2, 3):
        print(usage, file=sys.stderr)
        return 2
    jobs = None
    try:
        if len(args) == 3:
            text = args[2].strip()
            jobs = check_int("JOBS", int(text) if text.lstrip("-").isdigit() else text, minimum=1)
    except ParameterError as err:
        print(f"{usage}\nmemlib: error: {err}", file=sys.stderr)
        return 2
    return build(args[0], args[1], jobs)


if __name__ == "__main__":
    sys.exit(main())
