"""pyproject.toml declares what the code imports, requirements.txt pins it, and the version has one source."""

import ast
import importlib.metadata
import re
import sys
import tomllib
from pathlib import Path

import memlib

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
#: memlib modules whose imports may come from an extra rather than the core dependencies.
EXTRA_USERS = {"book.py"}
#: Imports a memlib module makes only for an optional feature, from an extra: the int8 embedding
#: setting needs the `onnx` extra and says so when it is missing.
OPTIONAL_IMPORTS = {"embeddings.py": {"onnx", "onnxruntime"}}
#: First-party and test-local modules.
LOCAL = {"memlib", "fixtures"} | {p.stem for p in (ROOT / "tests").glob("*.py")}


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(req: str) -> str:
    return normalise(re.match(r"[A-Za-z0-9_.\-]+", req).group(0))


def third_party(source: str) -> set[str]:
    """Top-level names of the modules ``source`` imports that are neither standard library nor local."""
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level:
            names.add(node.module.split(".")[0])
    return {n for n in names if n not in sys.stdlib_module_names and n not in LOCAL}


def notebook_code(md: Path) -> str:
    return "\n".join(re.findall(r"```\{code-cell\}[^\n]*\n(?::[^\n]*\n)*(.*?)```", md.read_text(), re.S))


def distributions(modules: set[str]) -> set[str]:
    where = importlib.metadata.packages_distributions()
    missing = sorted(m for m in modules if m not in where)
    assert not missing, f"installed by no distribution: {missing}"
    return {normalise(where[m][0]) for m in modules}


def test_pyproject_declares_what_the_code_imports():
    core = {requirement_name(r) for r in PYPROJECT["project"]["dependencies"]}
    extras = {requirement_name(r) for reqs in PYPROJECT["project"]["optional-dependencies"].values() for r in reqs}
    library, rest = set(), set()
    for path in (ROOT / "memlib").rglob("*.py"):
        imported = third_party(path.read_text())
        optional = imported & OPTIONAL_IMPORTS.get(path.name, set())
        rest.update(optional)
        (rest if path.name in EXTRA_USERS else library).update(imported - optional)
    for path in [*(ROOT / "tests").glob("*.py"), *(ROOT / "benchmarks").glob("*.py")]:
        rest.update(third_party(path.read_text()))
    for md in (ROOT / "notebooks").glob("*.md"):
        rest.update(third_party(notebook_code(md)))
    assert distributions(library) - core == set()
    assert distributions(rest) - core - extras == set()


def test_requirements_pin_every_declared_dependency():
    pins = {
        requirement_name(line)
        for line in (ROOT / "requirements.txt").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    declared = {requirement_name(r) for r in PYPROJECT["project"]["dependencies"]}
    for reqs in PYPROJECT["project"]["optional-dependencies"].values():
        declared |= {requirement_name(r) for r in reqs if not r.startswith("memlib")}
    assert declared - pins == set()


def test_one_version_source():
    assert PYPROJECT["project"]["dynamic"] == ["version"]
    assert PYPROJECT["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "memlib.__version__"}
    assert importlib.metadata.version("memlib") == memlib.__version__
    assert not re.search(r"^version:", (ROOT / "CITATION.cff").read_text(), re.M)


def test_licence_and_citation():
    assert (ROOT / "LICENSE").read_text().startswith("MIT License\n\nCopyright (c) 2026 memlib authors")
    assert PYPROJECT["project"]["license"] == {"text": "MIT"}
    cff = (ROOT / "CITATION.cff").read_text()
    assert "Learning What to Remember: A Cognitively Grounded Multi-Factor Value Model for Agentic Memory" in cff
    assert "license: MIT" in cff and "preferred-citation:" in cff
