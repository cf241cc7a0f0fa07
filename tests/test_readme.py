"""The README's Python example runs as written."""

import re
from pathlib import Path


def test_readme_store_example_runs(tmp_path, monkeypatch):
    text = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    block = re.search(r"```python\n(.*?)```", text, re.S).group(1)
    monkeypatch.chdir(tmp_path)
    env = {}
    exec(compile(block, "README.md", "exec"), env)
    assert (tmp_path / "memory.npz").is_file()
    assert len(env["store"]) == 2
    assert env["hits"][0]["text"] in {"I am allergic to peanuts.", "Noted, no peanuts."}
