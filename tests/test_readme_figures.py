"""The README's figures are the ones the code measured: its held-out table is memlib/defaults.json's."""

from pathlib import Path

from memlib.studies.defaults_file import readme_table
from memlib.value import load_defaults

README = (Path(__file__).resolve().parent.parent / "README.md").read_text()
WORDS = " ".join(README.split())  # the prose, its line breaks as spaces


def test_the_readme_held_out_table_is_the_one_the_defaults_file_measured():
    table = readme_table(load_defaults()["measured"])
    assert table in README, "regenerate it: print(readme_table(load_defaults()['measured']))"
    assert table.count("\n") == 1 + len({r["dataset"] for r in load_defaults()["measured"]})


def test_the_readme_says_when_and_on_how_many_histories_the_defaults_were_measured():
    d = load_defaults()
    assert f"Measured on {d['made_at']}" in WORDS
    counts = {"locomo": "LoCoMo conversations", "longmemeval_s": "LongMemEval-S questions", "realmem": "RealMem"}
    for name, n in d["histories"].items():
        assert f"{n} {counts[name]}" in WORDS, (name, n)
