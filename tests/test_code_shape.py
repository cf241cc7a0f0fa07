"""memlib's rooms stay small enough to read whole (issue 30): no module over 500 lines, no function over 80.

A function's length is ``end_lineno - lineno + 1`` of its ``def`` (methods and nested functions
included, decorators not): the signature, the docstring and the body. A failure lists every
offender, so one run says all that is left to split.
"""

import ast
from pathlib import Path

MEMLIB = Path(__file__).resolve().parent.parent / "memlib"
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 80


def sources() -> list[Path]:
    return sorted(p for p in MEMLIB.rglob("*.py") if "__pycache__" not in p.parts)


def long_modules() -> list[str]:
    found = []
    for path in sources():
        n = len(path.read_text(encoding="utf-8").splitlines())
        if n > MAX_MODULE_LINES:
            found.append(f"{path.relative_to(MEMLIB.parent)}: {n} lines")
    return found


def long_functions() -> list[str]:
    found = []
    for path in sources():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                n = node.end_lineno - node.lineno + 1
                if n > MAX_FUNCTION_LINES:
                    found.append(f"{path.relative_to(MEMLIB.parent)}:{node.lineno} {node.name}: {n} lines")
    return found


def test_no_module_is_over_500_lines():
    found = long_modules()
    assert not found, f"modules over {MAX_MODULE_LINES} lines:\n" + "\n".join(found)


def test_no_function_is_over_80_lines():
    found = long_functions()
    assert not found, f"functions over {MAX_FUNCTION_LINES} lines (def to end, decorators aside):\n" + "\n".join(found)


def test_the_measure_sees_methods_and_nested_functions():
    source = "class A:\n    @property\n    def f(self):\n        def g():\n            return 1\n\n        return g()\n"
    tree = ast.parse(source)
    spans = {n.name: n.end_lineno - n.lineno + 1 for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
    assert spans == {"f": 5, "g": 2}  # f from its def (line 3, not the decorator's 2) to line 7
