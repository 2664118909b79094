"""A code cell's source as the Python IPython runs: what the grader parses and its helpers run.

A notebook's code cells are IPython, not Python: `%timeit f(x)`, `!ls`, `%%time` over a cell. The
scan for tampering and the judge's reading of answer cells both need the Python IPython runs for
them: a line magic or a shell line becomes IPython's own call (which a process without IPython's
shell then fails on, alone); a cell magic's body is the cell's Python (`%%time`, `%%capture`
run it). IPython's transformer tokenizes the whole cell again for each line it rewrites: a cell
past TRANSFORMED_SOURCE, or with more than MAGIC_LINES such lines, is left as it is (no Python).
"""

from __future__ import annotations

import ast
import re

TRANSFORMED_SOURCE, MAGIC_LINES = 64 << 10, 64
_MAGIC_LINE = re.compile(r"^[ \t]*[!%]|\?[ \t]*$", re.MULTILINE)


def as_python(source: str) -> str | None:
    """source as Python that ast.parse takes (itself when it already is), or None when it is not
    and IPython's transformer cannot make it so."""
    found = python_tree(source)
    return None if found is None else found[0]


def python_tree(source: str) -> tuple[str, ast.Module] | None:
    """(as_python(source), its syntax tree), parsed once; None as as_python."""
    try:
        return source, ast.parse(source)
    except (SyntaxError, ValueError):
        pass
    except (RecursionError, MemoryError):
        return None
    stripped = source.lstrip()
    if stripped.startswith("%%"):  # a cell magic: its body is the cell's Python
        return python_tree(stripped.partition("\n")[2])
    if len(source) > TRANSFORMED_SOURCE or len(_MAGIC_LINE.findall(source)) > MAGIC_LINES:
        return None
    try:  # IPython syntax (magics, !commands): what IPython would run
        import warnings

        from IPython.core.inputtransformer2 import TransformerManager

        with warnings.catch_warnings():  # odd line endings: IPython warns, and copes
            warnings.simplefilter("ignore")
            python = TransformerManager().transform_cell(source)
        return python, ast.parse(python)
    except Exception:
        return None
