import json
import subprocess
import sys

import pytest


def run(*args):
    return subprocess.run([sys.executable, "-m", "memlib", *args], capture_output=True, text=True)


@pytest.mark.slow
def test_study_synthetic_json_rows():
    out = run("study", "synthetic", "--quick", "--json")
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    assert {r["policy"] for r in rows} >= {"learned_V", "uniform_V", "emotion_only", "self_only", "recency_only"}
    assert all(0 <= r["retention"] <= 1 for r in rows)
    again = json.loads(run("study", "synthetic", "--quick", "--json").stdout)
    assert rows == again


def test_study_list_is_the_registry_the_makefile_reads():
    from pathlib import Path

    from memlib.studies import STUDIES

    out = run("study", "--list")
    assert out.returncode == 0 and out.stdout.split() == list(STUDIES)
    assert "memlib studies --out results" in (Path(__file__).resolve().parent.parent / "Makefile").read_text()


def test_main_job_runs_every_study_with_its_chapters_parameters():
    import re
    from pathlib import Path

    from memlib.studies import (
        BY_FACTOR_SET,
        COMPARED,
        MAIN_HISTORIES,
        MAIN_HISTORIES_STUDIES,
        MAIN_SAMPLE,
        PAPER_EMBED,
        PAPER_LONGEST_FIRST,
        PAPER_ONLY,
        STUDIES,
        main_job,
    )

    for paper in (False, True):
        stages = main_job(paper=paper)
        runs = [r for stage in stages for r in stage]
        assert {study for _, study, _ in runs} == set(STUDIES) - (set() if paper else set(PAPER_ONLY))
        assert len({name for name, _, _ in runs}) == len(runs)  # one output file per run
        if paper:  # every corpus embedded before any study (the runner annotates them), then one pool
            assert len(stages) == 1
            assert {opts[1] for _, opts in PAPER_EMBED} == {"locomo", "realmem", "longmemeval_s"}
            assert ["--factor-set", "released", "--embedding", "reference"] == PAPER_EMBED[-1][1][2:]
            assert [name for name, _, _ in stages[0][: len(PAPER_LONGEST_FIRST)]] == list(PAPER_LONGEST_FIRST)
        else:  # embedding first: LoCoMo and the LongMemEval-S sample side by side
            assert [name for name, _, _ in stages[0]] == ["factors", "paper"]
        compared = {study for name, study, o in runs if name != study and "--factor-set" not in o}
        assert compared == set(COMPARED)
        by_set = {(study, o[1]) for name, study, o in runs if "--factor-set" in o and name != study}
        assert by_set == {(s, fs) for s in BY_FACTOR_SET for fs in ("extended", "released")}
        assert dict((n, o) for n, _, o in runs)["oracle-blind"] == ["--factor-set", "all"]  # chapter 03's spec
        assert any("--sample" in o for _, _, o in runs) != paper
        with_histories = {study for _, study, o in runs if "--histories" in o}
        assert with_histories == (set() if paper else set(MAIN_HISTORIES_STUDIES))
    # the chapters' sample parameters hold the main job's sample, so the book reads its cached results
    notebooks = Path(__file__).resolve().parent.parent / "notebooks"
    found = 0
    for path in sorted(notebooks.glob("*.md")):
        for m in re.finditer(
            r"^(?:compare_sample|sample|defaults_sample|transfer_sample) = (\S+)", path.read_text(), re.M
        ):
            found += 1
            assert m.group(1) == str(MAIN_SAMPLE), (path.name, m.group(0))
            # make paper runs these studies on every history (main_job(paper=True)): the chapter must read them so
            assert 'os.environ.get("MEMLIB_PAPER") == "1"' in path.read_text(), path.name
    assert found >= 6
    # so do their histories parameters, wherever a chapter runs a study that reads every RealMem user
    found = 0
    for path in sorted(notebooks.glob("*.md")):
        text = path.read_text()
        for m in re.finditer(r"^(?:histories|defaults_histories) = (\S+)", text, re.M):
            found += 1
            assert m.group(1) == str(MAIN_HISTORIES), (path.name, m.group(0))
        for study in MAIN_HISTORIES_STUDIES:
            for call in re.findall(rf'STUDIES\["{study}"\]\.data_spec\((.*?)\)\n', text, re.S):
                assert "histories=" in call, (path.name, study)
    assert found >= 3


@pytest.mark.slow
@pytest.mark.integration
def test_studies_command_writes_each_table_whole_and_stops_at_a_failure(tmp_path, monkeypatch):
    import memlib.studies as S
    from memlib import cli

    ok = ("synthetic", "synthetic", ["--quick"])
    bad = ("broken", "synthetic", ["--quick", "--n-train", "0"])
    monkeypatch.setattr(S, "main_job", lambda paper=False: [[ok], [bad, ("never", "synthetic", ["--quick"])]])
    code = cli.main(["studies", "--out", str(tmp_path), "--jobs", "1"])
    assert code == 2
    rows = json.loads((tmp_path / "synthetic.json").read_text())
    assert {r["policy"] for r in rows} >= {"learned_V", "uniform_V"}
    assert not (tmp_path / "broken.json").exists()
    assert not list(tmp_path.glob(".*.tmp"))  # nothing half-written is left


def test_chapter_08_reads_the_embedding_check_the_paper_job_computes():
    import re
    from pathlib import Path

    from memlib.studies import STUDIES
    from memlib.studies.reproduction import CHECK_SAMPLE

    text = (Path(__file__).resolve().parent.parent / "notebooks" / "08_longmemeval.md").read_text()
    # `python -m memlib study embedding-check` (the paper job) runs the study's own data: the chapter must ask for the
    # same, or make paper's book fails with MEMLIB_EXPECT_CACHED (or computes it again)
    assert re.search(r"^check_sample = (\d+)", text, re.M).group(1) == str(CHECK_SAMPLE)
    assert 'STUDIES["embedding-check"].data_spec(dataset=dataset, sample=check_sample)' in text
    assert STUDIES["embedding-check"].data_spec() == STUDIES["embedding-check"].data_spec(
        dataset="longmemeval_s", sample=CHECK_SAMPLE
    )


@pytest.mark.slow
@pytest.mark.integration
def test_paper_job_embeds_before_any_study_and_a_failed_embedding_stops_it(tmp_path, monkeypatch, capfd):
    import memlib.studies as S
    from memlib import cli

    missing = tmp_path / "missing.jsonl"
    monkeypatch.setattr(S, "PAPER_EMBED", (("nowhere", ["--dataset", str(missing)]),))
    monkeypatch.setattr(S, "main_job", lambda paper=False: [[("synthetic", "synthetic", ["--quick"])]])
    code = cli.main(["studies", "--out", str(tmp_path / "out"), "--jobs", "1", "--paper"])
    out, err = capfd.readouterr()  # the annotate run writes its error output straight to the job's
    assert code != 0
    assert "embed nowhere: failed" in out and "study synthetic" not in out  # no study ran
    assert "memlib: error: embed nowhere failed" in err and "missing.jsonl" in err  # the annotate error, shown
    assert not list((tmp_path / "out").iterdir())  # and no table was written, for the embedding or a study


@pytest.mark.slow
def test_study_synthetic_readable_table():
    out = run("study", "synthetic", "--quick")
    assert out.returncode == 0
    assert "learned_V" in out.stdout and "retention" in out.stdout


@pytest.mark.slow
@pytest.mark.parametrize(
    "args, message",
    [
        (["study", "synthetic", "--keep-fraction", "1.5"], "keep_fraction must be in (0, 1), got 1.5"),
        (["study", "synthetic", "--keep-fraction", "0"], "keep_fraction must be in (0, 1), got 0"),
        (["study", "synthetic", "--n-train", "0"], "n_train must be an integer >= 1, got 0"),
        (["study", "synthetic", "--seed", "-3"], "seed must be an integer >= 0, got -3"),
        (["study", "nosuch"], "unknown study 'nosuch'"),
        (["study", "oracle-blind", "--dataset", "nope"], "unknown dataset 'nope'"),
        (["study", "oracle-blind", "--n-splits", "1"], "n_splits must be an integer >= 2, got 1"),
        (["study", "mlp", "--keep-fraction", "1"], "keep_fraction must be in (0, 1), got 1.0"),
        (["study", "sweep", "--n-train", "3"], "--n-train does not apply to the sweep study"),
        (["study", "synthetic", "--dataset", "locomo"], "--dataset does not apply to the synthetic study"),
        (["study"], "name a study (one of: synthetic, factors, oracle-blind"),
    ],
)
def test_bad_parameters_give_one_clear_line(args, message):
    out = run(*args)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0] and "Traceback" not in out.stderr


@pytest.mark.slow
def test_oracle_blind_on_a_longmemeval_schema_file(tmp_path):
    from fixtures import longmemeval_records, write_longmemeval

    recs = longmemeval_records()
    # more usable questions so a split has cases on both sides
    for i in range(4):
        r = dict(recs[i % 2], question_id=f"extra{i}")
        recs.append(r)
    path = write_longmemeval(tmp_path / "lme.json", recs)
    out = run("study", "oracle-blind", "--dataset", str(path), "--quick", "--n-splits", "2", "--json")
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    got = {(r["policy"], r["regime"]) for r in rows}
    for p in ("learned_V", "uniform_V", "self_only", "reliability_only", "goal_only", "emotion_only"):
        assert (p, "blind") in got and (p, "oracle") in got
    assert ("recency_only", "blind") in got and ("random", "blind") in got
    assert ("recency_only", "oracle") not in got
    assert all({"policy", "regime", "keep_fraction", "mean", "std"} <= set(r) for r in rows)


@pytest.mark.slow
def test_too_few_cases_to_split(tmp_path):
    from fixtures import write_longmemeval

    out = run(
        "study",
        "oracle-blind",
        "--dataset",
        str(write_longmemeval(tmp_path / "lme.json")),
        "--quick",
        "--n-splits",
        "2",
        "--json",
    )
    # 2 usable questions = 2 groups: splittable; one usable question is not
    assert out.returncode == 0, out.stderr
    from fixtures import longmemeval_records

    one = write_longmemeval(tmp_path / "one.json", longmemeval_records()[:1])
    out = run("study", "oracle-blind", "--dataset", str(one), "--quick", "--json")
    assert out.returncode == 2
    assert "too few usable cases to split: 1 cases in 1 group(s)" in out.stderr


@pytest.mark.slow
@pytest.mark.integration
def test_sweep_runs_a_notebook_grid(tmp_path):
    nb = tmp_path / "01_tiny.md"
    nb.write_text(
        "---\njupytext:\n  text_representation: {extension: .md, format_name: myst}\n"
        "kernelspec: {display_name: Python 3, language: python, name: python3}\n---\n"
        "# Tiny\n\n```{code-cell} ipython3\n:tags: [parameters]\nseed = 0\nscale = 1.0\n```\n\n"
        "```{code-cell} ipython3\nimport pandas as pd\nfrom memlib.book import emit_results\n"
        "emit_results(pd.DataFrame({'policy': ['a'], 'retention': [seed * scale]}))\n```\n"
    )
    out = run("sweep", str(nb), "-p", "seed", "1", "2", "-p", "scale", "0.5", "--out", str(tmp_path / "out"))
    assert out.returncode == 0, out.stderr
    import pandas as pd

    table = pd.read_csv(tmp_path / "out" / "01_tiny" / "results.csv")
    assert sorted(table["retention"]) == [0.5, 1.0]
    assert set(table["param_seed"]) == {1, 2}
    assert len(list((tmp_path / "out" / "01_tiny").glob("*.ipynb"))) == 2
    bad = run("sweep", str(nb), "-p", "nosuch", "1", "--out", str(tmp_path / "out"))
    assert bad.returncode == 2 and "unknown parameter(s) nosuch" in bad.stderr


@pytest.mark.slow
def test_study_stream_on_a_longmemeval_schema_file(tmp_path):
    from fixtures import write_longmemeval

    out = run("study", "stream", "--dataset", str(write_longmemeval(tmp_path / "lme.json")), "--quick", "--json")
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    assert {"policy", "budget", "k", "retention", "recall_any", "recall_all", "ndcg"} <= set(rows[0])
    assert {r["k"] for r in rows} == {5, 10, 30}
    assert all(r["retention"] == 1.0 for r in rows if r["policy"] == "rag_unbounded")


@pytest.mark.slow
def test_annotate_command_reports_counts():
    from memlib import datasets

    try:
        datasets.resolve("locomo10.json", download=False)
    except datasets.DatasetError as exc:
        pytest.skip(f"LoCoMo not available: {exc}")
    out = run("annotate", "--dataset", "locomo", "--limit", "1", "--json")
    assert out.returncode == 0, out.stderr
    s = json.loads(out.stdout)
    assert s["conversations"] == 1 and s["usable_cases"] == 197 and s["turns"] == 419 and s["sessions"] == 19
    assert s["blind_haystacks"] == 1 and s["oracle_haystacks"] == 197
    assert s["inert_factors"] == ["value_alignment", "task_utility", "usage_history"]
    again = json.loads(run("annotate", "--dataset", "locomo", "--limit", "1", "--json").stdout)
    assert again["blind_cached"] and again["oracle_cached"]


@pytest.mark.slow
@pytest.mark.integration
def test_defaults_command_measures_and_writes_a_defaults_file(tmp_path):
    from memlib import datasets
    from memlib.value import load_defaults

    try:
        datasets.resolve("locomo10.json", download=False)
        datasets.load("longmemeval_s")
        datasets.resolve_realmem()
    except datasets.DatasetError as exc:
        pytest.skip(f"a dataset is not available: {exc}")
    path = tmp_path / "defaults.json"
    # chapter 06's quick parameters (24 histories a RealMem user): the study is then one cached computation for both
    out = run("defaults", "--quick", "--histories", "24", "--json", "--write", str(path))
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    from memlib.studies.defaults import ABLATION, ADAPTATION

    configs = {r["config"] for r in rows}
    assert configs - set(ABLATION) == {"defaults", "chosen without it", "paper eq. 3", "first in, first out"} | set(
        ADAPTATION
    )
    assert set(ABLATION) <= configs or not set(ABLATION) & configs  # both rows, or none (a paper-factors adaptive)
    assert {r["dataset"] for r in rows} == {"locomo", "longmemeval_s", "realmem"}
    assert {r["metric"] for r in rows} == {"retention", "recall_any@10", "recall_all@10", "answer_retention"}
    # the answer metric reads the corpora that give answer strings, and only where it can read them
    answered = [r for r in rows if r["metric"] == "answer_retention"]
    assert {r["dataset"] for r in answered} <= {"locomo", "longmemeval_s"} and "locomo" in {
        r["dataset"] for r in answered
    }
    assert all(0 <= r["mean"] <= 1 and r["n_questions"] >= 1 for r in answered)
    d = load_defaults(path)
    assert set(d["policy"]) == {"keep_top_value", "beta", "value_weight", "mood_weight"}
    if "adaptive" in d:  # the adaptive store was chosen: its value scale and interval width go with it
        assert set(d["adaptive"]) == {"value_scale", "z"} and d["adaptive"]["value_scale"] > 0
    assert d["measured"] == rows  # the file carries the held-out numbers it printed
    assert not [p for p in tmp_path.iterdir() if p.name != "defaults.json"]  # written whole, no leftovers


def test_the_command_line_builds_one_data_spec_as_the_chapters_do(monkeypatch):
    from memlib import ParameterError, cli
    from memlib.studies import COMPARE_DATASET, MAIN_SAMPLE, STUDIES, DataSpec, Study, main_job

    seen = {}
    monkeypatch.setattr(Study, "run_table", lambda self, **kw: seen.setdefault(self.name, kw) and None)

    def spec(*argv):
        seen.clear()
        cli._run_study(cli.build_parser().parse_args(["study", *argv]))
        return next(iter(seen.values()))

    # the main job's runs read what the chapters build from their parameters (so the book reads them cached)
    for name, study, options in main_job()[-1]:
        kw = spec(study, *options)
        if name.endswith(COMPARE_DATASET):
            assert kw["data"] == STUDIES[study].data_spec(dataset=COMPARE_DATASET, sample=MAIN_SAMPLE), name
        if "--factor-set" in options:  # what Study.each_factor_set runs for the chapter's table of the three sets
            assert kw["data"] == STUDIES[study].data_spec(factor_set=options[1]), name
    options = ["--dataset", "longmemeval_s", "--factor-set", "released", "--embedding", "int8"]
    kw = spec("oracle-blind", "--quick", *options)
    assert kw["data"] == DataSpec("longmemeval_s", quick=True, factor_set="released", embedding_setting="int8")
    kw = spec("cues", "--quick", "--transfer-from", "longmemeval_s", "--transfer-sample", "4")
    assert kw["transfer_from"] == DataSpec("longmemeval_s", quick=True, sample=4)
    assert spec("synthetic", "--quick") == {"quick": True}
    with pytest.raises(ParameterError, match="--transfer-sample needs --transfer-from"):
        spec("cues", "--transfer-sample", "4")
    with pytest.raises(ParameterError, match="--limit does not apply to the synthetic study"):
        spec("synthetic", "--limit", "2")
    with pytest.raises(ParameterError, match="pass limit or sample, not both"):
        spec("mlp", "--limit", "2", "--sample", "3")
