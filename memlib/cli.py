"""Command line: run any study headlessly and print its table.

Examples
--------
``python -m memlib study synthetic --json`` prints the Table 2 rows as a JSON
list; without ``--json`` a readable table. A bad parameter prints one line
``memlib: error: ...`` and exits with status 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pandas as pd

from memlib._checks import ParameterError
from memlib.datasets import DatasetError

STUDIES = ("synthetic", "oracle-blind", "mlp", "sweep", "stream", "optimisers")


def _table_to_json(table: pd.DataFrame) -> str:
    return json.dumps(json.loads(table.to_json(orient="records", double_precision=15)), indent=1)


def _run_study(args) -> pd.DataFrame:
    from memlib import experiments

    if args.study not in STUDIES:
        raise ParameterError(f"unknown study {args.study!r}; choose one of: {', '.join(STUDIES)}")
    kw = {"seed": args.seed, "quick": args.quick}
    if args.keep_fraction is not None:
        kw["keep_fraction"] = args.keep_fraction
    if args.study == "synthetic":
        for name in ("n_train", "n_test"):
            if getattr(args, name) is not None:
                kw[name] = getattr(args, name)
        return experiments.synthetic_confounds(**kw).table
    for name in ("n_train", "n_test"):
        if getattr(args, name) is not None:
            raise ParameterError(f"--{name.replace('_', '-')} applies to the synthetic study only")
    kw["dataset"] = args.dataset
    kw["progress"] = not args.json and sys.stderr.isatty()
    if args.n_splits is not None:
        kw["n_splits"] = args.n_splits
    if args.limit is not None:
        kw["limit"] = args.limit
    if args.study == "oracle-blind":
        return experiments.oracle_vs_blind(**kw).summary
    if args.study == "mlp":
        return experiments.mlp_ablation(**kw).summary
    if args.study == "optimisers":
        return experiments.optimiser_comparison(**kw).summary
    if args.study == "stream":
        if "n_splits" in kw:
            raise ParameterError("--n-splits does not apply to the stream study")
        if "keep_fraction" in kw:
            kw["budgets"] = [kw.pop("keep_fraction")]
        return experiments.stream(**kw).table
    if "keep_fraction" in kw:
        kw["fractions"] = [kw.pop("keep_fraction")]
    return experiments.keep_fraction_sweep(**kw).summary


def _annotate(args) -> int:
    import time

    from memlib import datasets, factors

    t0 = time.perf_counter()
    ds = datasets.load(args.dataset)
    if args.limit is not None:
        from memlib._checks import check_int

        ds = ds.limit(check_int("limit", args.limit, minimum=1))
    regimes = ["blind", "oracle"] if args.regime == "both" else [args.regime]
    summary = ds.stats()
    for regime in regimes:
        ann = factors.annotate(ds, regime, use_cache=not args.no_cache, progress=True)
        summary[f"{regime}_seconds"] = round(ann.info["seconds"], 3)
        summary[f"{regime}_cached"] = bool(ann.info["cached"])
        summary[f"{regime}_haystacks"] = ann.cases.n_haystacks
        summary["inert_factors"] = ann.inert
    seconds = time.perf_counter() - t0
    summary["seconds"] = round(seconds, 3)
    summary["turns_per_second"] = round(summary["turns"] / seconds, 1)
    if args.json:
        print(json.dumps(summary, indent=1))
    else:
        width = max(map(len, summary))
        for k, v in summary.items():
            print(f"{k:<{width}}  {v}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m memlib", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("study", help="run a study and print its results table")
    s.add_argument("study", help=f"one of: {', '.join(STUDIES)}")
    s.add_argument("--seed", type=int, default=0, help="random seed (>= 0), default 0")
    s.add_argument("--quick", action="store_true", help="cheaper settings for smoke tests")
    s.add_argument("--keep-fraction", type=float, default=None,
                   help="share of turns kept, in (0, 1) (stream: the memory budget as a share of the history)")
    s.add_argument("--dataset", default="locomo",
                   help="real-data studies: a dataset name or a path to a LongMemEval-schema / JSONL file")
    s.add_argument("--n-splits", type=int, default=None, help="real-data studies: resampled splits (>= 2)")
    s.add_argument("--limit", type=int, default=None, help="real-data studies: first N conversations/questions")
    s.add_argument("--n-train", type=int, default=None, help="synthetic: training cases (>= 1)")
    s.add_argument("--n-test", type=int, default=None, help="synthetic: test cases (>= 1)")
    s.add_argument("--json", action="store_true", help="print the table as a JSON list of rows")

    a = sub.add_parser("annotate", help="annotate a dataset with the seven factors (cached)")
    a.add_argument("--dataset", required=True,
                   help="locomo, longmemeval_s, longmemeval_m, longmemeval_oracle, or a path to a data file")
    a.add_argument("--limit", type=int, default=None, help="only the first N conversations / questions")
    a.add_argument("--regime", choices=["blind", "oracle", "both"], default="both")
    a.add_argument("--no-cache", action="store_true", help="recompute factors and embeddings")
    a.add_argument("--json", action="store_true", help="print the summary as JSON")

    n = sub.add_parser("notebooks", help="convert the MyST notebooks to .ipynb with parameters injected")
    n.add_argument("action", choices=["prepare"])
    n.add_argument("out_dir", help="folder for the .ipynb files")
    n.add_argument("--quick", action="store_true", help="inject quick = True")

    w = sub.add_parser("sweep", help="run a notebook over a parameter grid with papermill")
    w.add_argument("notebook", help="a notebooks/NN_topic.md file")
    w.add_argument("-p", "--parameter", nargs="+", action="append", default=[], metavar=("NAME", "VALUE"),
                   help="a parameter and one or more values (repeat for a grid)")
    w.add_argument("--out", default="results/sweeps", help="folder for executed notebooks and the table")

    b = sub.add_parser("book", help="build the book, or check a built book loads no remote script")
    b.add_argument("action", choices=["build", "check"])
    b.add_argument("html_dir", nargs="?", default="_build/html", help="check: the built HTML folder")
    return p


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.command == "annotate":
            return _annotate(args)
        if args.command == "sweep":
            from memlib import notebooks

            grid = {}
            for item in args.parameter:
                if len(item) < 2:
                    raise ParameterError(f"-p {item[0]} needs at least one value")
                grid[item[0]] = [notebooks.parse_value(v) for v in item[1:]]
            table, path = notebooks.sweep(args.notebook, grid, args.out)
            print(f"{len(table)} rows from {table['run'].nunique() if len(table) else 0} runs -> {path}")
            return 0
        if args.command == "notebooks":
            from memlib import notebooks

            for path in notebooks.prepare(args.out_dir, {"quick": True} if args.quick else None):
                print(path)
            return 0
        if args.command == "book":
            from memlib import notebooks

            if args.action == "build":
                return notebooks.build_book()
            bad = notebooks.remote_scripts(args.html_dir)
            for line in bad:
                print(f"remote script: {line}", file=sys.stderr)
            if not any(Path(args.html_dir).rglob("*.html")):
                print(f"memlib: error: no HTML pages under {args.html_dir}", file=sys.stderr)
                return 2
            return 1 if bad else 0
        if args.command == "study":
            table = _run_study(args)
            if args.json:
                print(_table_to_json(table))
            else:
                with pd.option_context("display.width", 120, "display.max_columns", 20):
                    print(table.to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    except (ParameterError, DatasetError) as exc:
        print(f"memlib: error: {exc}", file=sys.stderr)
        return 2
    return 0
