"""The grader's size at a glance (`python -m tests.code_sizes`): lines per module, the longest
functions, and each function over FUNCTION_LINES lines. A reading aid for reviews; no test
asserts on it."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

from autograder.course.paths import ROOT

#: A function longer than this is listed by name.
FUNCTION_LINES = 50


def module_lines(package: Path) -> dict[str, int]:
    """Lines of each module of the package, by path relative to the checkout."""
    return {str(p.relative_to(ROOT)): len(p.read_text().splitlines()) for p in sorted(package.rglob("*.py"))}


def function_lines(package: Path) -> dict[str, int]:
    """Lines of each function and method (its decorators and docstring included), by `path:name`."""
    found = {}
    for path in sorted(package.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                assert node.end_lineno is not None  # parsed from source
                found[f"{path.relative_to(ROOT)}:{node.name}"] = node.end_lineno - node.lineno + 1
    return found


def main(argv: list[str]) -> None:
    package = ROOT / (argv[0] if argv else "autograder")
    modules, functions = module_lines(package), function_lines(package)
    long = {name: lines for name, lines in functions.items() if lines > FUNCTION_LINES}
    sizes = sorted(modules.values())
    print(f"{len(modules)} modules, {sum(sizes)} lines; median {sizes[len(sizes) // 2]}, largest {sizes[-1]}")
    print(f"{len(functions)} functions; {len(long)} over {FUNCTION_LINES} lines")
    for name, lines in sorted(modules.items(), key=lambda kv: -kv[1])[:12]:
        print(f"  {lines:5d}  {name}")
    for name, lines in sorted(long.items(), key=lambda kv: -kv[1]):
        print(f"  {lines:5d}  {name}()")


if __name__ == "__main__":
    main(sys.argv[1:])
