"""memlib's imports point one way: data -> embeddings -> factors -> value, learning, metrics -> store ->
studies -> cli/book. The graph is read from the source (every import, at module level or inside a
function), so a lazy import cannot hide a cycle."""

import ast
import re
from pathlib import Path

MEMLIB = Path(__file__).resolve().parent.parent / "memlib"

#: Each module's layer: a module may import its own layer and the layers below, never one above.
LAYERS = [
    {
        "memlib",
        "memlib._checks",
        "memlib._cores",
        "memlib._text",
        "memlib._cachefiles",
        "memlib._safewrite",
        "memlib.cases",
        "memlib.paper",
        "memlib.rule_emotion",
        "memlib.text_cues",
    },
    {"memlib.datasets"},
    {"memlib.embeddings", "memlib.embedding_cache", "memlib.embedding_model", "memlib.embedding_onnx"},
    {
        "memlib.factors",
        "memlib.factor_key",
        "memlib.factor_sets",
        "memlib.factor_table",
        "memlib.goal_anchors",
        "memlib.history_factors",
        "memlib.self_readings",
        "memlib.usage",
        "memlib.online",
        "memlib.references",
    },
    {
        "memlib.value",
        "memlib.study_weights",
        "memlib.forgetting",
        "memlib.learning",
        "memlib.feature_fits",
        "memlib.value_net",
        "memlib.metrics",
        "memlib.padded_rows",
        "memlib.intervals",
        "memlib.answers",
        "memlib.scoring",
        "memlib.synthetic",
        "memlib.cues",
        "memlib.history_cues",
    },
    {"memlib.store"},
    {"memlib.studies", "memlib.plots"},
    {"memlib.book", "memlib.book_math", "memlib.book_sphinx", "memlib.cli", "memlib.__main__"},
]
#: Known upward imports, each with the change that removes it.
EXCEPTIONS: set = set()  # none left: factors now imports CaseSet from memlib.cases
TOP = ("memlib.studies", "memlib.cli", "memlib.book")


def module_name(path: Path) -> str:
    parts = path.relative_to(MEMLIB.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(MEMLIB.rglob("*.py"))}


def imports_of(name: str) -> set[str]:
    """The memlib modules that module ``name`` imports (``from memlib import x`` counts x if it is a module)."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: climb level - 1 packages up from this module's package
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parent + ([base] if base else []))
            for a in node.names:
                out.add(f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base)
    return {m for m in out if m in MODULES and m != name}


GRAPH = {name: imports_of(name) for name in MODULES}


def layer(name: str) -> int:
    for i, group in enumerate(LAYERS):
        if name in group or any(name.startswith(g + ".") for g in group if g != "memlib"):
            return i
    raise AssertionError(f"{name} has no layer in tests/test_layout.py: place it in LAYERS")


def test_every_module_has_a_layer():
    for name in MODULES:
        layer(name)


def test_the_import_graph_has_no_cycle():
    done, path = set(), []

    def visit(name):
        if name in path:
            cycle = path[path.index(name) :] + [name]
            raise AssertionError("import cycle: " + " -> ".join(cycle))
        if name in done:
            return
        path.append(name)
        for dep in sorted(GRAPH[name]):
            visit(dep)
        path.pop()
        done.add(name)

    for name in GRAPH:
        visit(name)


def test_imports_point_down_the_layers():
    upward = {(a, b) for a, deps in GRAPH.items() for b in deps if layer(b) > layer(a)} - EXCEPTIONS
    assert not upward, f"imports of a higher layer: {sorted(upward)}"


def test_lower_layers_do_not_import_studies_cli_or_book():
    for name, deps in GRAPH.items():
        if not name.startswith(TOP) and name != "memlib.__main__":
            assert not {d for d in deps if d.startswith(TOP)}, f"{name} imports {sorted(deps)}"


def test_the_graph_reader_sees_what_it_must():
    assert "memlib.store.baselines" in GRAPH["memlib.store.policies"]  # from ... import, module level
    assert "memlib.factors" in GRAPH["memlib.studies.stream"]  # inside a function
    assert "memlib.paper" in GRAPH["memlib.studies.oracle_blind"]  # from memlib import paper
    assert GRAPH["memlib"] == {"memlib._checks"}  # lazy names are not imports


def private_reaches(source: str) -> list[str]:
    """Every ``x._name`` (not ``self``/``cls``, not a dunder) and every ``from memlib.store... import _name``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            if not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
                found.append(f"line {node.lineno}: {ast.unparse(node)}")
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("memlib.store"):
            found += [f"line {node.lineno}: import {a.name}" for a in node.names if a.name.startswith("_")]
    return found


def test_the_studies_measure_the_store_through_its_public_api():
    """No study reaches into a private attribute (the store's backend, columns, an evaluator's internals)."""
    for path in sorted((MEMLIB / "studies").glob("*.py")):
        assert private_reaches(path.read_text()) == [], path.name
    # the check sees what it must: what the stream study did before the one store
    planted = "out._backend = backend\ncols = store._backend.cols\nfrom memlib.store.memory import _ADD_KEYS\n"
    assert sorted(private_reaches(planted)) == [
        "line 1: out._backend",
        "line 2: store._backend",
        "line 3: import _ADD_KEYS",
    ]


def test_the_readmes_house_names_every_module():
    """The README's floor-by-floor map names every module of memlib (a new module goes on the map)."""
    readme = (MEMLIB.parent / "README.md").read_text()
    house = readme[readme.index("| floor | modules |") : readme.index("Where results land:")]
    named = set(re.findall(r"`([\w.]+)`", house))
    missing = sorted(
        p.relative_to(MEMLIB).as_posix() for p in MEMLIB.rglob("*.py") if p.stem != "__init__" and p.stem not in named
    )
    assert not missing, f"modules the README's house does not name: {missing}"
