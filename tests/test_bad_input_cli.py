"""Hostile input, round two (issue 22): commands that printed tracebacks or ran without bound.

Each test names one row of the README's reliability table. A user error is one line
``memlib: error: ...`` naming the file, parameter or folder, and the exit status is 2.
"""

import json
import os
import subprocess
import sys

import pytest

from fixtures import jsonl_records, one_error_line, write_jsonl
from fixtures import run_memlib as run
from memlib import ParameterError
from memlib import datasets as D


def no_gold(tmp_path):
    """A JSON Lines file whose only question has no evidence: nothing to evaluate."""
    rec = jsonl_records()[0]
    rec["questions"] = [{"question_id": "q1", "question": "What is Ana allergic to?", "evidence": []}]
    return write_jsonl(tmp_path / "nogold.jsonl", [rec])


@pytest.mark.slow
@pytest.mark.parametrize("study", ["factors", "oracle-blind", "stream", "cues"])
def test_a_study_on_a_dataset_without_usable_questions_is_one_line(tmp_path, study):
    out = run("study", study, "--dataset", str(no_gold(tmp_path)), MEMLIB_CACHE_DIR=str(tmp_path / "cache"))
    one_error_line(out, "nogold: no usable question (none has a gold turn in its history)")


@pytest.mark.slow
def test_a_transfer_source_without_usable_questions_is_one_line(tmp_path):
    out = run(
        "study",
        "cues",
        "--dataset",
        str(write_jsonl(tmp_path / "c.jsonl")),
        "--quick",
        "--transfer-from",
        str(no_gold(tmp_path)),
        MEMLIB_CACHE_DIR=str(tmp_path / "cache"),
    )
    one_error_line(out, "nogold: no usable question (none has a gold turn in its history)")


@pytest.mark.slow
def test_a_sweep_value_of_the_wrong_type_is_refused_before_any_run(tmp_path):
    out = run("sweep", "synthetic", "-p", "seed", "abc", "--out", str(tmp_path / "sw"), timeout=60)
    one_error_line(out, "01_synthetic_confounds.md: parameter seed takes an integer (its default is 0), got 'abc'")
    assert not (tmp_path / "sw").exists()  # nothing ran, nothing written


@pytest.mark.slow
@pytest.mark.integration
def test_a_sweep_run_that_fails_in_its_notebook_is_one_line_naming_the_run(tmp_path):
    out = run("sweep", "synthetic", "-p", "seed", "-1", "--out", str(tmp_path / "sw"))
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    last = out.stderr.strip().splitlines()[-1]  # above it only the progress bar and the kernel's own notice
    assert last.startswith("memlib: error: 01_synthetic_confounds.md failed with seed=-1 (cell "), last
    assert "ParameterError: seed must be an integer >= 0, got -1" in last
    executed = last.rsplit("the executed notebook is ", 1)[1]
    assert executed.endswith(".ipynb") and os.path.isfile(executed)


def test_sweep_parameter_types_follow_the_defaults():
    from memlib.book import check_parameter_type

    check_parameter_type("n.md", "keep_fraction", 1, 0.3)  # an int is a number
    check_parameter_type("n.md", "dataset", "locomo", "locomo")
    check_parameter_type("n.md", "sample", 3, None)  # a None default takes anything
    with pytest.raises(ParameterError, match="parameter quick takes True or False"):
        check_parameter_type("n.md", "quick", 1, False)
    with pytest.raises(ParameterError, match="parameter seed takes an integer"):
        check_parameter_type("n.md", "seed", True, 0)
    with pytest.raises(ParameterError, match="parameter keep_fraction takes a number"):
        check_parameter_type("n.md", "keep_fraction", "0.3x", 0.3)


@pytest.mark.slow
@pytest.mark.parametrize("device", ["cuda", "bogus"])
def test_annotate_refuses_a_device_it_cannot_use_even_when_cached(tmp_path, device):
    data = str(write_jsonl(tmp_path / "c.jsonl"))
    env = dict(MEMLIB_CACHE_DIR=str(tmp_path / "cache"))
    first = run("annotate", "--dataset", data, "--device", "cpu", "--json", **env)
    assert first.returncode == 0, first.stderr
    out = run("annotate", "--dataset", data, "--device", device, **env)
    if device == "bogus":
        one_error_line(out, "unknown device 'bogus'; choose one of: cpu, cuda, mps")
    else:
        import torch

        if torch.cuda.is_available():
            pytest.skip("this machine has CUDA")
        one_error_line(out, "device 'cuda' is not available: torch")


@pytest.mark.slow
def test_notebooks_prepare_into_a_file_is_one_line(tmp_path):
    target = tmp_path / "afile"
    target.write_text("keep me")
    one_error_line(run("notebooks", "prepare", str(target)), f"{target}: is a file, not a folder")
    one_error_line(run("notebooks", "prepare", str(target / "sub")), "a parent of it is a file")
    assert target.read_text() == "keep me"


@pytest.mark.slow
@pytest.mark.parametrize("option", ["--n-train", "--n-test"])
def test_synthetic_case_counts_have_an_upper_bound(option):
    out = run("study", "synthetic", option, str(10**20), timeout=60)
    one_error_line(out, f"{option[2:].replace('-', '_')} must be at most 100000, got {10**20}")


def test_make_cases_is_bounded_in_the_library():
    from memlib.synthetic import MAX_CASES, make_cases

    with pytest.raises(ParameterError, match=f"n_cases must be at most {MAX_CASES}"):
        make_cases(MAX_CASES + 1)
    with pytest.raises(ParameterError, match="n_distractors must be at most"):
        make_cases(1, n_distractors=10**9)


def test_a_missing_longmemeval_m_names_its_url(tmp_path, monkeypatch):
    monkeypatch.setenv("MEMLIB_DATA_DIR", str(tmp_path))
    monkeypatch.setattr(D, "RAW_DIR", tmp_path / "raw")
    with pytest.raises(D.DatasetError) as err:
        D.resolve_dataset("longmemeval_m")
    message = str(err.value)
    assert D.REGISTRY["longmemeval_m.json"]["url"] in message
    assert "longmemeval_m_cleaned.json" in message  # says which names it would read


def test_a_bad_keep_fraction_is_refused_before_the_data_file_is_read(tmp_path):
    """``study stream --keep-fraction 1.5`` used to read locomo10.json twice for its checksum first."""
    probe = tmp_path / "probe.py"
    probe.write_text(
        "import builtins, sys\n"
        "from memlib import datasets\n"
        "reads = []\n"
        "real = datasets.sha256_file\n"
        "datasets.sha256_file = lambda p: reads.append(str(p)) or real(p)\n"
        "from memlib import cli\n"
        "code = cli.main(['study', 'stream', '--keep-fraction', '1.5'])\n"
        "print(code, len(reads))\n"
    )
    out = subprocess.run([sys.executable, str(probe)], capture_output=True, text=True, timeout=120)
    assert out.stdout.split() == ["2", "0"], out.stdout + out.stderr
    assert "keep_fraction must be in (0, 1), got 1.5" in out.stderr


def test_a_pinned_file_is_hashed_once_per_process(tmp_path, monkeypatch):
    """The resolver's check of a pinned file's checksum reads it once, however often it is resolved."""
    path = tmp_path / "locomo10.json"
    path.write_text(json.dumps([]))
    monkeypatch.setenv("MEMLIB_DATA_DIR", str(tmp_path))
    reads = []
    real = D.sha256_file
    monkeypatch.setattr(D, "sha256_file", lambda p: reads.append(p) or real(p))
    with pytest.warns(UserWarning, match="sha256 differs"):
        D.resolve("locomo10.json")
        D.resolve("locomo10.json")
    assert len(reads) == 1


@pytest.mark.slow
def test_the_library_annotate_refuses_a_bogus_device_before_reading_its_cache(tmp_path, monkeypatch):
    from memlib import factors as Fm

    monkeypatch.setenv("MEMLIB_CACHE_DIR", str(tmp_path / "cache"))
    ds = D.load(write_jsonl(tmp_path / "c.jsonl"))
    Fm.annotate(ds, "blind", progress=False)  # cached now
    with pytest.raises(ParameterError, match="unknown device 'bogus'"):
        Fm.annotate(ds, "blind", device="bogus", progress=False)


@pytest.mark.slow
def test_a_data_file_whose_name_is_not_utf8_loads(tmp_path):
    """The parse cache's key holds the path: a name with a byte that is not UTF-8 still keys (a review found
    a raw UnicodeEncodeError)."""
    path = tmp_path / os.fsdecode(b"caf\xe9.jsonl")
    write_jsonl(path)
    out = run("annotate", "--dataset", str(path), "--json", MEMLIB_CACHE_DIR=str(tmp_path / "cache"))
    assert out.returncode == 0, out.stderr
