import json
import subprocess
import sys

import pytest


def run(*args):
    return subprocess.run([sys.executable, "-m", "memlib", *args], capture_output=True, text=True)


def test_study_synthetic_json_rows():
    out = run("study", "synthetic", "--quick", "--json")
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    assert {r["policy"] for r in rows} >= {"learned_V", "uniform_V", "emotion_only", "self_only", "recency_only"}
    assert all(0 <= r["retention"] <= 1 for r in rows)
    again = json.loads(run("study", "synthetic", "--quick", "--json").stdout)
    assert rows == again


def test_study_synthetic_readable_table():
    out = run("study", "synthetic", "--quick")
    assert out.returncode == 0
    assert "learned_V" in out.stdout and "retention" in out.stdout


@pytest.mark.parametrize(
    "args, message",
    [
        (["study", "synthetic", "--keep-fraction", "1.5"], "keep_fraction must be in (0, 1), got 1.5"),
        (["study", "synthetic", "--keep-fraction", "0"], "keep_fraction must be in (0, 1), got 0"),
        (["study", "synthetic", "--n-train", "0"], "n_train must be an integer >= 1, got 0"),
        (["study", "synthetic", "--seed", "-3"], "seed must be an integer >= 0, got -3"),
        (["study", "nosuch"], "unknown study 'nosuch'"),
    ],
)
def test_bad_parameters_give_one_clear_line(args, message):
    out = run(*args)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0] and "Traceback" not in out.stderr
