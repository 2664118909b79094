"""The programs sent into a sandbox are modules' texts, one after the other: no two of the modules
sent together may define the same top-level name (the later one would replace the earlier one's,
which that module's own functions then call)."""

from __future__ import annotations

import ast
from collections import defaultdict

import pytest

from autograder.adapters.jax_programs import ADAPTER as JAX_ADAPTER
from autograder.adapters.jax_programs.helpers import SENT
from autograder.kernel.helpers import CORE_HELPERS, SANDBOXED

#: Each program sent, as the modules it is made of (a name: of autograder/sandboxed/; a path: an adapter's).
PROGRAMS = {
    **{
        str(helper.runner): ("wire.py", "confine.py", *helper.sent, helper.runner)
        for helper in (*CORE_HELPERS.values(), *JAX_ADAPTER.helpers.values())
    },
    "kernel host": ("confine.py", "kernel_host_program.py"),
    "agent": ("wire.py", "agent.py"),
    "agent with the JAX adapter's requests": ("wire.py", "agent.py", *JAX_ADAPTER.kernel_operations),
}


def defined(module) -> set[str]:
    names: set[str] = set()
    for node in ast.parse((SANDBOXED / module if isinstance(module, str) else module).read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(target.id for target in node.targets if isinstance(target, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names


@pytest.mark.parametrize("program", sorted(PROGRAMS))
def test_no_name_defined_twice_in_a_sent_program(program):
    where: dict[str, list[str]] = defaultdict(list)
    for module in PROGRAMS[program]:
        for name in defined(module):
            where[name].append(module)
    assert {name: modules for name, modules in where.items() if len(modules) > 1} == {}


def test_the_check_sees_a_clash():
    """A name two of the modules define is found (the check above can fail)."""
    assert defined(SENT / "program_data.py") & {"_value"} and "main" in defined("numpy_runner.py")
