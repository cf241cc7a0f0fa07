"""Command line: run any study headlessly and print its table.

Examples
--------
``python -m memlib study synthetic --json`` prints the Table 2 rows as a JSON
list; without ``--json`` a readable table. ``python -m memlib study --list``
prints the names of :data:`memlib.studies.STUDIES`. A bad parameter prints one
line ``memlib: error: ...`` and exits with status 2.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from pathlib import Path

import pandas as pd

from memlib._checks import ParameterError, check_fraction, check_int
from memlib._cores import usable_cores
from memlib._safewrite import check_target, make_folder, write_file
from memlib.datasets import DatasetError
from memlib.studies import STUDIES, DataSpec
from memlib.studies._common import check_n_splits

#: Study options of the command line, by parameter name (``--n-splits`` sets ``n_splits``).
STUDY_OPTIONS = ("seed", "keep_fraction", "n_splits", "n_train", "n_test")
#: Options that say what a study reads: fields of its :class:`~memlib.studies.DataSpec`, by option name.
DATA_OPTIONS = {
    "dataset": "dataset",
    "limit": "limit",
    "sample": "sample",
    "histories": "histories",
    "factor_set": "factor_set",
    "embedding": "embedding_setting",
}


def _option(name: str) -> str:
    return "--" + name.replace("_", "-")


def _table_to_json(table: pd.DataFrame) -> str:
    return json.dumps(json.loads(table.to_json(orient="records", double_precision=15)), indent=1)


def _run_study(args) -> pd.DataFrame:
    """Run the registered study ``args.study`` with the options given on the command line."""
    if args.study not in STUDIES:
        raise ParameterError(f"unknown study {args.study!r}; choose one of: {', '.join(STUDIES)}")
    study = STUDIES[args.study]
    kw = {}
    for name in STUDY_OPTIONS:
        value = getattr(args, name)
        if value is None:
            continue
        if name in study.lists:
            kw[study.lists[name]] = [value]
        elif name in study.parameters:
            kw[name] = value
        else:
            raise ParameterError(f"{_option(name)} does not apply to the {study.name} study")
    given = _data_given(args)
    if "data" in study.parameters:  # one DataSpec from the data options, over the study's own default
        kw["data"] = study.data_spec(quick=args.quick, **given)
    else:
        for name, field in DATA_OPTIONS.items():
            if field in given:
                raise ParameterError(f"{_option(name)} does not apply to the {study.name} study")
        kw["quick"] = args.quick
    if args.transfer_sample is not None and args.transfer_from is None:
        raise ParameterError("--transfer-sample needs --transfer-from")
    if args.transfer_from is not None:
        if "transfer_from" not in study.parameters:
            raise ParameterError(f"--transfer-from does not apply to the {study.name} study")
        embedding = kw["data"].embedding_setting
        kw["transfer_from"] = DataSpec(
            args.transfer_from, args.quick, sample=args.transfer_sample, embedding_setting=embedding
        )
    # bounds checked before any data is loaded or annotated (the studies check them again)
    if args.seed is not None:
        check_int("seed", args.seed, minimum=0)
    if args.keep_fraction is not None:
        check_fraction("keep_fraction", args.keep_fraction)
    if args.n_splits is not None:
        check_n_splits(args.n_splits)
    if "progress" in study.parameters:
        kw["progress"] = not args.json and sys.stderr.isatty()
    return study.run_table(**kw)


def _defaults(args) -> int:
    """Measure the defaults (held out), choose them on all histories, print and optionally write them."""
    from memlib.studies import defaults, defaults_file
    from memlib.value import DEFAULTS_PATH

    path = None
    if args.write is not None:  # checked before the study runs
        path = Path(args.write or DEFAULTS_PATH)
        partial = args.quick or args.sample is not None or args.histories is not None
        if path.resolve() == Path(DEFAULTS_PATH).resolve() and partial:
            raise ParameterError(f"a quick or sampled run does not replace {DEFAULTS_PATH}; pass --write PATH")
        if not path.parent.is_dir():
            raise ParameterError(f"--write {path}: no folder {path.parent}")
        check_target(path)
    data = DataSpec(quick=args.quick, sample=args.sample, histories=args.histories)
    # the study as chapter 06 (and the main job) runs it, through the result cache: one computation for all three
    # progress on the error output when it is a terminal (with or without --json, which prints on standard output)
    progress = sys.stderr.isatty()
    measured = STUDIES["defaults"].run(data, progress=progress)
    hs = [defaults.load_corpus(dataclasses.replace(data, dataset=d), progress) for d in measured.info["datasets"]]
    chosen = defaults_file.choose_defaults(hs, measured=measured, data=data)
    if args.json:
        print(_table_to_json(measured.headline))
    else:
        print(measured.headline.to_string(index=False, float_format=lambda x: f"{x:.3f}"))
        print(json.dumps(chosen["policy"]), chosen["value_model"])
    if path is not None:
        write_file(path, json.dumps(chosen, indent=1) + "\n", mode=0o644)
        print(f"wrote {path}", file=sys.stderr)
    return 0


def _annotate(args) -> int:
    import time

    from memlib import embeddings, factors

    t0 = time.perf_counter()
    if args.device is not None:  # before the data is read or a cached table makes the device moot
        embeddings.check_device(args.device)
    spec = DataSpec(**_data_given(args))
    ds = spec.load_dataset()
    regimes = ["blind", "oracle"] if args.regime == "both" else [args.regime]
    summary = ds.stats()
    for regime in regimes:
        ann = factors.annotate(
            ds,
            regime,
            factor_set=spec.factor_set,
            embedding_setting=spec.embedding_setting,
            device=args.device,
            use_cache=not args.no_cache,
            progress=not args.json or sys.stderr.isatty(),
        )
        summary[f"{regime}_seconds"] = round(ann.info["seconds"], 3)
        summary[f"{regime}_seconds_beyond_embedding"] = round(ann.info.get("seconds_beyond_embedding", 0.0), 3)
        summary[f"{regime}_cached"] = bool(ann.info["cached"])
        summary[f"{regime}_haystacks"] = ann.cases.n_haystacks
        summary["inert_factors"] = ann.inert
    seconds = time.perf_counter() - t0
    summary.update(
        factor_set=spec.factor_set,
        embedding=spec.embedding_setting,
        seconds=round(seconds, 3),
        turns_per_second=round(summary["turns"] / seconds, 1),
        peak_rss_gb=factors.peak_rss_gb(),
    )
    if args.json:
        print(json.dumps(summary, indent=1))
    else:
        width = max(map(len, summary))
        for k, v in summary.items():
            print(f"{k:<{width}}  {v}")
    return 0


def _add_data_options(p, prefix: str, dataset_required: bool = False) -> None:
    """Add the options of a :class:`~memlib.studies.DataSpec` (:data:`DATA_OPTIONS`), for ``study`` and ``annotate``."""
    p.add_argument(
        "--dataset",
        required=dataset_required,
        default=None,
        help=f"{prefix}locomo, longmemeval_s, longmemeval_m, longmemeval_oracle, realmem, or a path to a "
        "LongMemEval-schema / JSONL file" + ("" if dataset_required else " (default: the study's, mostly locomo)"),
    )
    p.add_argument("--limit", type=int, default=None, help=f"{prefix}only the first N conversations / questions")
    p.add_argument(
        "--sample", type=int, default=None, help=f"{prefix}a seeded random sample of N conversations / questions"
    )
    p.add_argument(
        "--histories",
        type=int,
        default=None,
        help=f"{prefix}at most N histories of each group, evenly spread over its stream (RealMem: a user's "
        "questions; LoCoMo and LongMemEval hold one history a group)",
    )
    p.add_argument(
        "--factor-set",
        default=None,
        help=f"{prefix}paper (Table 1 as stated, the default), extended (our reliability cues) or released "
        "(the authors' released experiment; oracle-blind then runs its protocol too); oracle-blind also takes "
        "both (paper and extended), its default, and all (the three)",
    )
    p.add_argument(
        "--embedding",
        default=None,
        help=f"{prefix}fast (128 word pieces, the default; LongMemEval-S cold: 48 min on 2 cores, 1.07x the bare "
        "model), reference (256, the paper's; about twice as long) or int8 (fast on the model's int8 ONNX export, "
        "CPU only; about 2x faster)",
    )


def _data_given(args) -> dict:
    """Return the :class:`~memlib.studies.DataSpec` fields the command line gives (:data:`DATA_OPTIONS`)."""
    return {field: getattr(args, name) for name, field in DATA_OPTIONS.items() if getattr(args, name) is not None}


def _add_defaults_parser(sub) -> None:
    """Add the ``defaults`` subcommand to the subparsers ``sub``."""
    d = sub.add_parser(
        "defaults", help="measure the store's defaults on held-out histories and write memlib/defaults.json"
    )
    d.add_argument(
        "--write",
        nargs="?",
        const="",
        default=None,
        metavar="PATH",
        help="write the defaults file (default: the one the library reads, memlib/defaults.json; "
        "a quick or sampled run must name another PATH)",
    )
    d.add_argument("--quick", action="store_true", help="three conversations / questions per dataset")
    d.add_argument("--sample", type=int, default=None, help="a seeded sample of N groups per dataset")
    d.add_argument("--histories", type=int, default=None, help="at most N histories of each RealMem user")
    d.add_argument("--json", action="store_true", help="print the held-out headline as JSON")


def build_parser() -> argparse.ArgumentParser:
    """Build the ``python -m memlib`` parser with its subcommands."""
    p = argparse.ArgumentParser(prog="python -m memlib", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("study", help="run a study and print its results table")
    s.add_argument("study", nargs="?", help=f"one of: {', '.join(STUDIES)}")
    s.add_argument("--list", action="store_true", help="print the study names, one a line, and stop")
    s.add_argument("--seed", type=int, default=None, help="random seed (>= 0), default 0")
    s.add_argument("--quick", action="store_true", help="cheaper settings for smoke tests")
    s.add_argument(
        "--keep-fraction",
        type=float,
        default=None,
        help="share of turns kept, in (0, 1) (stream: the memory budget as a share of the history)",
    )
    s.add_argument("--n-splits", type=int, default=None, help="real-data studies: resampled splits (>= 2)")
    _add_data_options(s, "real-data studies: ")
    s.add_argument("--transfer-from", default=None, help="cues: also learn on this dataset and test here")
    s.add_argument("--transfer-sample", type=int, default=None, help="cues: a seeded sample of its questions")
    s.add_argument("--n-train", type=int, default=None, help="synthetic: training cases (>= 1)")
    s.add_argument("--n-test", type=int, default=None, help="synthetic: test cases (>= 1)")
    s.add_argument("--json", action="store_true", help="print the table as a JSON list of rows")

    r = sub.add_parser(
        "studies", help="run every study of the main job (make studies), side by side, one JSON table each"
    )
    r.add_argument("--out", default="results", help="folder for the JSON tables (default results/)")
    r.add_argument("--jobs", type=int, default=2, help="studies run at once (>= 1), default 2")
    r.add_argument(
        "--paper",
        action="store_true",
        help="make paper: every corpus annotated first, then every study on all its data (and embedding-check)",
    )

    a = sub.add_parser("annotate", help="annotate a dataset with the seven factors (cached)")
    _add_data_options(a, "", dataset_required=True)
    a.add_argument("--device", default=None, help="cpu, cuda or mps (default: what the machine has)")
    a.add_argument("--regime", choices=["blind", "oracle", "both"], default="both")
    a.add_argument("--no-cache", action="store_true", help="recompute factors and embeddings")
    a.add_argument("--json", action="store_true", help="print the summary as JSON")

    n = sub.add_parser("notebooks", help="convert the MyST notebooks to .ipynb with parameters injected")
    n.add_argument("action", choices=["prepare"])
    n.add_argument("out_dir", help="folder for the .ipynb files")
    n.add_argument("--quick", action="store_true", help="inject quick = True")

    w = sub.add_parser("sweep", help="run a notebook over a parameter grid with papermill")
    w.add_argument(
        "notebook", help=f"a notebooks/NN_topic.md file, or a study's name for its chapter: {', '.join(STUDIES)}"
    )
    w.add_argument(
        "-p",
        "--parameter",
        nargs="+",
        action="append",
        default=[],
        metavar=("NAME", "VALUE"),
        help="a parameter and one or more values (repeat for a grid)",
    )
    w.add_argument("--out", default="results/sweeps", help="folder for executed notebooks and the table")

    _add_defaults_parser(sub)

    b = sub.add_parser("book", help="build the book, or check a built one (no remote load, no role printed as text)")
    b.add_argument("action", choices=["build", "check"])
    b.add_argument("html_dir", nargs="?", default="_build/html", help="check: the built HTML folder")
    b.add_argument(
        "--quick", action="store_true", help="build: every chapter in quick mode (what CI builds), same strictness"
    )
    return p


def main(argv=None) -> int:
    """Run the command ``argv`` names and return its exit status.

    2 on a parameter or dataset error, or a file or folder memlib cannot write (one line
    ``memlib: error: ...``); 141 (as a program killed by SIGPIPE) when the reader of its
    output goes away (``... --json | head``), with nothing printed.
    """
    args = build_parser().parse_args(argv)
    try:
        code = _command(args)
        sys.stdout.flush()
    except BrokenPipeError:  # the reader left: say nothing more, and let nothing flush into the closed pipe
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except (ParameterError, DatasetError) as exc:
        print(f"memlib: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # a file or folder memlib cannot write or read: one line naming it
        where = f"{exc.filename}: " if exc.filename is not None else ""
        print(f"memlib: error: {where}{exc.strerror or exc}", file=sys.stderr)
        return 2
    return code


def _command(args) -> int:
    """Run the parsed command ``args``; return its exit status."""
    if args.command == "study":
        return _study(args)
    commands = {
        "annotate": _annotate,
        "sweep": _sweep,
        "notebooks": _notebooks,
        "book": _book,
        "defaults": _defaults,
        "studies": _run_main_job,
    }
    return commands[args.command](args)


def _study(args) -> int:
    if args.list:
        print("\n".join(STUDIES))
        return 0
    if args.study is None:
        raise ParameterError(f"name a study (one of: {', '.join(STUDIES)}) or pass --list")
    table = _run_study(args)
    if args.json:
        print(_table_to_json(table))
    else:
        with pd.option_context("display.width", 120, "display.max_columns", 20):
            print(table.to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    return 0


def _sweep(args) -> int:
    from memlib import book

    grid = {}
    for item in args.parameter:
        if len(item) < 2:
            raise ParameterError(f"-p {item[0]} needs at least one value")
        grid[item[0]] = [book.parse_value(v) for v in item[1:]]
    notebook = args.notebook
    if notebook in STUDIES:
        notebook = book.NOTEBOOK_DIR / STUDIES[notebook].notebook
    table, path = book.sweep(notebook, grid, args.out)
    print(f"{len(table)} rows from {table['run'].nunique() if len(table) else 0} runs -> {path}")
    return 0


def _notebooks(args) -> int:
    from memlib import book

    for path in book.prepare(args.out_dir, {"quick": True} if args.quick else None):
        print(path)
    return 0


def _book(args) -> int:
    from memlib import book

    if args.action == "build":
        return book.build_book(quick=args.quick)
    bad = book.check_html(args.html_dir)
    for line in bad:  # each line names its page and its fault
        print(line, file=sys.stderr)
    if not book.pages(args.html_dir, ("*.html",)):
        print(f"memlib: error: no HTML pages under {args.html_dir}", file=sys.stderr)
        return 2
    return 1 if bad else 0


def _run_main_job(args) -> int:
    """Run :func:`memlib.studies.main_job` stage by stage, ``--jobs`` runs at a time, each in its own process.

    Each run prints its table as JSON into ``<out>/<name>.json`` (by memlib's safe
    writer, once the run has succeeded, so a failed run leaves no table behind) and a
    line ``study <name>: <seconds> s``. The folder and every table's target are
    checked before the first run. The first failure stops the job after the
    runs in flight end, with its error output and status. With ``--paper``, the corpora
    of :data:`memlib.studies.PAPER_EMBED` are annotated first (``python -m memlib annotate``,
    one at a time on every core, its progress and errors shown as they come, then a line
    ``embed <name>: <seconds> s``), so that every study reads them cached.
    """
    import subprocess
    import time
    from concurrent.futures import ThreadPoolExecutor

    from memlib.studies import PAPER_EMBED, main_job

    jobs = check_int("jobs", args.jobs, minimum=1)
    out = make_folder(args.out)
    stages = main_job(paper=args.paper)
    for stage in stages:
        for name, _, _ in stage:
            check_target(out / f"{name}.json")
    cores = usable_cores()

    def environment(width: int) -> dict:
        # runs side by side share the cores: each gets its part, or torch and BLAS threads fight over them
        # (two 2-thread embedding runs on 2 cores took 1.7x as long as the same runs one after the other)
        env = dict(os.environ)
        if width > 1:
            for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
                env.setdefault(var, str(max(1, cores // width)))
        return env

    def run(item):  # reads ``env``, set for each stage below
        name, study, options = item
        t0 = time.perf_counter()
        if study is None:  # an embedding run, alone: its progress (the longest wait of a cold run) shows as it comes
            done = subprocess.run(
                [sys.executable, "-m", "memlib", "annotate", *options], stdout=subprocess.DEVNULL, env=env
            )
            return f"embed {name}", done.returncode, "", time.perf_counter() - t0
        done = subprocess.run(
            [sys.executable, "-m", "memlib", "study", study, *options, "--json"], capture_output=True, env=env
        )
        if not done.returncode:
            write_file(out / f"{name}.json", done.stdout, mode=0o644)
        return f"study {name}", done.returncode, done.stderr.decode("utf-8", "replace"), time.perf_counter() - t0

    # make paper embeds first, one corpus at a time on every core (PAPER_EMBED); no table is written for these
    embed = [[(name, None, options)] for name, options in PAPER_EMBED] if args.paper else []
    for stage in [*embed, *stages]:
        env = environment(min(jobs, len(stage)))
        failed = None
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            for label, code, err, seconds in pool.map(run, stage):
                if code:
                    failed = failed or (label, code, err)
                    print(f"{label}: failed (exit {code}) after {seconds:.0f} s", flush=True)
                else:
                    print(f"{label}: {seconds:.0f} s", flush=True)
        if failed:
            label, code, err = failed
            sys.stderr.write(err)
            print(f"memlib: error: {label} failed", file=sys.stderr)
            return code
    return 0
