"""The book's studies, one module per chapter, and the one registry of them.

* :mod:`~.synthetic`, ``synthetic``: Table 2 on planted confounds (chapter 01);
* :mod:`~.factor_study`, ``factors``: what the factors measure on real data (02);
* :mod:`~.oracle_blind`, ``oracle-blind``: Table 3, Figure 2 and the bootstrap (03);
* :mod:`~.mlp`, ``mlp``: the MLP ablation (04);
* :mod:`~.sweep`, ``sweep``: Figure 3, retention against the keep fraction (05);
* :mod:`~.stream`, ``stream``: the live store against published policies (06);
* :mod:`~.defaults`, ``defaults``: the store's defaults, chosen leaving one corpus out (06);
* :mod:`~.optimisers`, ``optimisers``: hill-climb against CMA-ES (07);
* :mod:`~.reproduction`, ``paper``: the paper's benchmark, LongMemEval-S, beside the paper (08);
* :mod:`~.released`, ``released``: the authors' released experiment, rebuilt and taken apart (08);
* :mod:`~.reproduction`, ``embedding-check``: the faster embedding settings against the paper's, on a sample of
  LongMemEval-S (08; in paper mode only: :data:`PAPER_ONLY`);
* :mod:`~.cues`, ``cues``: what to remember, learned from many cheap cues (09);
* :mod:`~.transfer`, ``transfer``: learn on some corpora, test on one never seen (10);
* :mod:`~.usage`, ``usage``: usage history made live by replaying the agent's own retrievals (10);
* :mod:`~.need`, ``need``: what a user's own references say about what they will need (11).

Each module separates pure functions over :class:`~memlib.cases.CaseSet` objects or
arrays, unit-tested on planted data (e.g. :func:`~.mlp.mlp_ablation_on_cases`), from a
thin loader that reads its data and calls them (:func:`~.mlp.mlp_ablation`). What a
real-data study reads is one :class:`~.data_spec.DataSpec` (dataset, quick mode, limit,
sample, factor set, embedding setting), with its one quick rule and its one loader;
:mod:`~._common` holds what the studies share beyond it.

:data:`STUDIES` is the registry that the command line (``python -m memlib study``),
the Makefile (``python -m memlib study --list``) and ``python -m memlib sweep`` read.

>>> list(STUDIES)[:6]
['synthetic', 'factors', 'oracle-blind', 'mlp', 'sweep', 'stream']
>>> list(STUDIES)[6:]
['defaults', 'optimisers', 'paper', 'released', 'embedding-check', 'cues', 'transfer', 'usage', 'need']
>>> STUDIES["synthetic"].notebook
'01_synthetic_confounds.md'
>>> STUDIES["stream"].parameters[:3]
('data', 'budgets', 'ks')
>>> STUDIES["oracle-blind"].data_spec(dataset="longmemeval_s", quick=True).resolved()
DataSpec(dataset='longmemeval_s', quick=True, limit=4, sample=None, histories=None, factor_set='both',
         embedding_setting='fast', readings=None, quick_limit=4)
>>> STUDIES["synthetic"].run.uncached is synthetic.synthetic_confounds
True
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from dataclasses import dataclass, field

import pandas as pd

from memlib._checks import ParameterError
from memlib.factor_sets import ALL_FACTOR_SETS
from memlib.learning import LearnResult
from memlib.studies import (
    _cache,
    cues,
    defaults,
    factor_study,
    mlp,
    need,
    optimisers,
    oracle_blind,
    released,
    reproduction,
    stream,
    sweep,
    synthetic,
    transfer,
    usage,
)
from memlib.studies._common import RealDataResult, group_splits, side_by_side
from memlib.studies.data_spec import QUICK_LIMIT, DataSpec


@dataclass(frozen=True)
class Study:
    """One study of the book.

    Attributes
    ----------
    name : str
        Its command-line name.
    run : callable
        The loader: keyword parameters in, a result object out. Registering a
        study wraps it in the result cache (:func:`~._cache.cached`), so the
        command line, ``make studies`` and the book share one computation per
        code version, data file and parameters; ``run.uncached`` is the bare
        loader.
    table : str
        The attribute of the result that holds the published table.
    notebook : str
        Its chapter under ``notebooks/``.
    lists : dict of str to str
        Command-line options that fill a list parameter with one value
        (``keep_fraction`` -> ``budgets`` for the stream study).
    corpora : tuple of str
        The datasets a study reads of its own when its ``data`` names none
        (``transfer``, ``usage``, ``defaults``): the result cache fingerprints every
        file of each, so a change to any of them runs the study again.
    """

    name: str
    run: Callable
    table: str
    notebook: str
    lists: dict = field(default_factory=dict)
    corpora: tuple = ()

    def __post_init__(self):
        if not hasattr(self.run, "uncached"):
            object.__setattr__(self, "run", _cache.cached(self.name, self.run, self.corpora))

    @property
    def parameters(self) -> tuple[str, ...]:
        """The keyword parameters :attr:`run` accepts."""
        return tuple(inspect.signature(self.run).parameters)

    def data_spec(self, **fields) -> DataSpec:
        """Return the data this study reads unless told (its ``data`` default), with ``fields`` changed.

        What the command line and the chapters build from their parameters, so both run, and
        cache, the same :class:`~.data_spec.DataSpec`.
        """
        param = inspect.signature(self.run).parameters.get("data")
        if param is None:
            raise ParameterError(f"the {self.name} study reads no data")
        return dataclasses.replace(DataSpec.of(param.default), **fields)

    def run_table(self, **params):
        """Run the study with ``params`` and return its published table."""
        return getattr(self.run(**params), self.table)

    def each_factor_set(self, data: DataSpec, factor_sets=ALL_FACTOR_SETS, **params) -> pd.DataFrame:
        """Run the study on ``data`` once per factor set and return the published tables, stacked.

        Each run is :attr:`run` on ``data`` with its ``factor_set`` changed (so each is cached
        as the command line would cache it); the table gains a first column ``factor_set``.
        """
        tables = []
        for fs in factor_sets:
            table = self.run_table(data=dataclasses.replace(data, factor_set=fs), **params)
            tables.append(table.assign(factor_set=fs)[["factor_set", *table.columns]])
        return pd.concat(tables, ignore_index=True)


#: Every study by command-line name, in chapter order (a chapter may hold more than one).
STUDIES: dict[str, Study] = {
    s.name: s
    for s in (
        Study("synthetic", synthetic.synthetic_confounds, "table", "01_synthetic_confounds.md"),
        Study("factors", factor_study.factor_overview, "table", "02_factors.md"),
        Study("oracle-blind", oracle_blind.oracle_vs_blind, "summary", "03_oracle_vs_blind.md"),
        Study("mlp", mlp.mlp_ablation, "summary", "04_mlp_ablation.md"),
        Study(
            "sweep", sweep.keep_fraction_sweep, "summary", "05_keep_fraction_sweep.md", {"keep_fraction": "fractions"}
        ),
        Study("stream", stream.stream, "table", "06_memory_store.md", {"keep_fraction": "budgets"}),
        Study("defaults", defaults.defaults_study, "table", "06_memory_store.md", corpora=defaults.DATASETS),
        Study("optimisers", optimisers.optimiser_comparison, "summary", "07_optimisers.md"),
        Study("paper", reproduction.reproduce, "table", "08_longmemeval.md"),
        Study("released", released.released_study, "table", "08_longmemeval.md"),
        Study("embedding-check", reproduction.embedding_check, "table", "08_longmemeval.md"),
        Study("cues", cues.cue_study, "summary", "09_cues.md"),
        Study("transfer", transfer.transfer_study, "summary", "10_transfer.md", corpora=transfer.CORPORA),
        Study("usage", usage.usage_study, "table", "10_transfer.md", corpora=transfer.CORPORA),
        Study("need", need.need_study, "auc", "11_need.md", corpora=need.DATASETS),
    )
}

#: The result cache builds these types and no other (:mod:`._cache`): memlib's own results and what they hold.
_cache.register(
    LearnResult,
    synthetic.SyntheticResult,
    factor_study.FactorOverview,
    RealDataResult,
    stream.StreamResult,
    defaults.DefaultsResult,
    reproduction.ReproductionResult,
    released.ReleasedResult,
    cues.CueStudyResult,
    transfer.TransferResult,
    usage.UsageResult,
    need.NeedResult,
)

#: Questions, users or conversations per corpus the main job (``make``) samples, seeded, wherever a study would
#: read a whole corpus (all 498 LongMemEval-S questions, RealMem's users, LoCoMo's conversations in the studies
#: that read every corpus; the chapters' ``sample`` / ``compare_sample`` parameters hold the same number);
#: ``make paper`` reads them all. 3 since 2026-12-05 (4 before): a fresh clone's ``make`` took 633 s at 4, install
#: and book 90 s of it; at 3 the sampled RealMem users hold 3,538 texts to embed instead of 5,673, the LongMemEval-S
#: questions 1,440 instead of 1,909 (issue 33: ``make`` in 10 minutes).
MAIN_SAMPLE = 3
#: Histories per RealMem user the main job reads (:attr:`~.data_spec.DataSpec.histories`), evenly spread over
#: the user's stream, in the studies that read every corpus (:data:`MAIN_HISTORIES_STUDIES`): a user asks dozens
#: of questions inside one stream, and each is a history the studies replay; ``make paper`` reads them all.
#: 24 of a user's 66 to 88 (at sample 4): the defaults study took 145 s where every history took 302 s, and
#: its RealMem figures stayed inside their intervals on every history but where its sampled choice changed
#: (at 8, 84 s, eq. 3's, FIFO's and the prior's retention left them).
MAIN_HISTORIES = 24
#: The studies that read RealMem beside the other corpora, and so take ``--histories`` in the main job.
MAIN_HISTORIES_STUDIES = ("defaults", "transfer", "usage", "need")
#: The paper's benchmark, shown beside LoCoMo in chapters 03 to 07.
COMPARE_DATASET = "longmemeval_s"
#: Studies whose chapter also runs them on :data:`COMPARE_DATASET`.
COMPARED = ("oracle-blind", "mlp", "sweep", "optimisers")


#: Studies whose chapter also shows them in every factor set (:meth:`Study.each_factor_set`): the main job
#: runs each set, so the book reads them cached instead of computing them one chapter at a time.
BY_FACTOR_SET = ("mlp", "sweep")

#: The main job's slowest runs after the embedding stage (measured on a fresh clone), started first.
LONGEST_FIRST = ("cues", "defaults", "oracle-blind")
#: What ``make paper`` embeds before any study runs, one run at a time on every core (``python -m memlib annotate``,
#: the embeddings and factor tables cached; seconds each when they are): every corpus its studies read whole, at each
#: embedding setting they read it (``released`` reads all of LongMemEval-S at 256 word pieces, the released factors'
#: setting; ``embedding-check`` a sample of it). Then every study runs in one pool, ``--jobs`` at a time, with no
#: core left idle at a stage's end: in stages (``factors``, then ``paper`` alone, then ``released`` alone, then the
#: rest), one core sat idle through ``paper`` and ``released`` (290 s and 319 s of a warm ``make paper``,
#: 2026-12-05), and a study that embeds beside another gets one thread (``released`` embedded about 10 long turns a
#: second so; alone, on both cores, about 17). Not covered: RealMem's questions (a blind annotation does not embed
#: them; the first study that loads the corpus does, a few seconds) and ``embedding-check``'s ``int8`` pass.
PAPER_EMBED = (
    ("locomo", ["--dataset", "locomo"]),
    ("realmem", ["--dataset", "realmem", "--regime", "blind"]),
    ("longmemeval_s", ["--dataset", COMPARE_DATASET]),
    ("longmemeval_s-reference", ["--dataset", COMPARE_DATASET, "--factor-set", "released", "--embedding", "reference"]),
)
#: ``make paper``'s slowest runs (2026-12-05, all data, embeddings cached), started first.
PAPER_LONGEST_FIRST = ("defaults", "transfer", "released", "paper", "embedding-check", "cues", "usage")
#: Studies only ``make paper`` runs: their chapter shows them in paper mode alone (``embedding-check`` embeds a
#: sample of LongMemEval-S in every setting; in the book it took 368 s of a warm ``make paper``, 2026-12-05).
PAPER_ONLY = ("embedding-check",)


def main_job(paper: bool = False) -> list[list[tuple[str, str, list[str]]]]:
    """Every study run of the main job, in stages: ``[(output name, study, command-line options)]``.

    The main job's first stage embeds (LoCoMo through ``factors``, the LongMemEval-S sample through ``paper``, side
    by side: they embed different texts, and a sample's annotation and learning would leave a core idle), so the
    last stage's runs, which run side by side, read warm caches. ``make paper`` embeds before any study
    (:data:`PAPER_EMBED`, run by ``python -m memlib studies --paper``) and then runs every study in one stage. Each
    run has the parameters its chapter passes, so the book reads the cached results. ``paper``: all questions and
    histories instead of :data:`MAIN_SAMPLE` and :data:`MAIN_HISTORIES` (``make paper``).

    >>> [[name for name, _, _ in stage] for stage in main_job()][:1]
    [['factors', 'paper']]
    >>> [name for name, _, _ in main_job(paper=True)[0]][:4]
    ['defaults', 'transfer', 'released', 'paper']
    >>> dict((n, o) for n, _, o in main_job()[-1])["cues"]
    ['--transfer-from', 'longmemeval_s', '--transfer-sample', '3']
    >>> dict((n, o) for n, _, o in main_job()[-1])["defaults"]
    ['--sample', '3', '--histories', '24']
    """
    sample = [] if paper else ["--sample", str(MAIN_SAMPLE)]
    histories = [] if paper else ["--histories", str(MAIN_HISTORIES)]
    special = {
        "oracle-blind": ["--factor-set", "all"],  # chapter 03 shows every factor set of LoCoMo
        "paper": sample,
        "released": sample,
        **{n: [*sample, *histories] for n in MAIN_HISTORIES_STUDIES},
        "cues": ["--transfer-from", COMPARE_DATASET, *([] if paper else ["--transfer-sample", str(MAIN_SAMPLE)])],
    }
    # the longest runs start first, so the workers finish close together (order only: same results)
    if paper:
        order = [*PAPER_LONGEST_FIRST, *(n for n in STUDIES if n not in PAPER_LONGEST_FIRST)]
        stages = [[(n, n, special.get(n, [])) for n in order]]
    else:
        first = ("factors", "paper")
        later = [n for n in STUDIES if n not in (*first, *LONGEST_FIRST, *PAPER_ONLY)]
        stages = [
            [(n, n, special.get(n, [])) for n in first],
            [(n, n, special.get(n, [])) for n in (*LONGEST_FIRST, *later)],
        ]
    for name in COMPARED:
        stages[-1].append((f"{name}-{COMPARE_DATASET}", name, ["--dataset", COMPARE_DATASET, *sample]))
    for name in BY_FACTOR_SET:
        stages[-1] += [(f"{name}-{fs}", name, ["--factor-set", fs]) for fs in ALL_FACTOR_SETS if fs != "paper"]
    return stages


__all__ = [
    "BY_FACTOR_SET",
    "COMPARED",
    "COMPARE_DATASET",
    "MAIN_HISTORIES",
    "MAIN_HISTORIES_STUDIES",
    "MAIN_SAMPLE",
    "PAPER_EMBED",
    "PAPER_LONGEST_FIRST",
    "PAPER_ONLY",
    "QUICK_LIMIT",
    "STUDIES",
    "DataSpec",
    "Study",
    "group_splits",
    "main_job",
    "side_by_side",
]
