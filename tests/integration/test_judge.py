"""The judge, without a kernel: the wire format, the kernel's agent, and every test cell judged.

autograder/judge/core.py runs each test cell in the grader and reaches the learner's work through
the kernel's agent (autograder/sandboxed/agent.py) and its helper processes. Here the agent answers in
this process, over the same JSON, and the helpers' programs answer in this process too, so the
judge's logic is tested in seconds: every test cell of the solutions earns its points, a forged
or broken answer earns nothing, and what goes to the kernel carries no line of a hidden test.
The same with real kernels and sandboxes: tests/e2e/test_grading_engine.py and the fixtures.
"""

from __future__ import annotations

import ast
import builtins
import copy
import json
import re
import shutil
import time

import nbformat
import numpy as np
import pytest

from autograder.adapters.jax_programs.sandboxed import (
    artifact_runner,
    kernel_operations,  # noqa: F401  (the JAX requests, added to the agent)
    program_builder,
)
from autograder.adapters.jax_programs.sandboxed.program_data import program_as_data
from autograder.adapters.lesson import ADAPTER as LESSON
from autograder.adapters.lesson import CHECKS_MODULE, NOTEBOOKS, SHIPPED_MODULES
from autograder.course.hidden_tests import BEGIN, END
from autograder.course.paths import SOLUTIONS
from autograder.judge.core import (
    Judge,
    LearnerRaised,
    TrustedModules,
    answer_cells,
    is_test_cell,
    kernel_part,
    learner_names,
)
from autograder.sandboxed import agent, numpy_runner
from autograder.sandboxed.wire import MAX_DEPTH, WireError, decode, dumps, encode, loads
from tests.reports import assert_judges_lines_only


# ---------------------------------------------------------------------------------------
# The wire format.
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "value",
    [
        None,
        True,
        3,
        -2.5,
        "text",
        [1, [2.0, "a"]],
        (1, 2),
        {"a": 1, 2: (3,), None: [np.float32(1.5)]},
        np.arange(6, dtype=np.int16).reshape(2, 3),
        np.linspace(0, 1, 5, dtype=np.float32),
        np.array(True),
        np.float64(2.5),
        np.array([1 + 2j], dtype=np.complex64),
    ],
)
def test_values_travel_as_they_are(value):
    back = decode(loads(dumps(encode(value))))
    if isinstance(value, np.ndarray):
        assert back.dtype == value.dtype and np.array_equal(back, value)
    elif isinstance(value, dict):
        assert set(back) == set(value) and np.asarray(back[None][0]) == np.float32(1.5)
    else:
        assert back == value and type(back) is type(value) or isinstance(value, np.generic)


def test_nan_infinity_and_empty_arrays_travel():
    back = decode(loads(dumps(encode(np.array([np.nan, np.inf, -np.inf])))))
    assert np.isnan(back[0]) and back[1] == np.inf and back[2] == -np.inf
    assert decode(encode(np.zeros((0, 3)))).shape == (0, 3)


@pytest.mark.parametrize(
    "data",
    [
        {"$array": {"dtype": "object", "shape": [1], "data": ""}},
        {"$array": {"dtype": "float32", "shape": [2], "data": "AAAA"}},
        {"$array": {"dtype": "float32", "shape": [-1], "data": ""}},
        {"$array": {"dtype": "float32", "shape": [1 << 40], "data": ""}},
        {"$array": {"dtype": "float32", "shape": [1], "data": "not base64!"}},
        {"$array": "nothing"},
        {"$handle": 1},
        {"$shipped": ["os", "system"], "args": ["echo"]},
        {"a": 1},
        {"$list": "not a list"},
        {"$dict": [[{"$list": []}, 1]]},
        {"$dict": [[1, 2, 3]]},
        {},
    ],
)
def test_what_is_not_a_value_is_refused(data):
    with pytest.raises(WireError):
        decode(data)


def test_depth_size_and_objects_are_bounded():
    deep = 1
    for _ in range(MAX_DEPTH + 2):
        deep = [deep]
    with pytest.raises(WireError, match="nested"):
        encode(deep)
    nested = {"$list": []}
    for _ in range(MAX_DEPTH + 2):
        nested = {"$list": [nested]}
    with pytest.raises(WireError, match="nested"):
        decode(nested)
    with pytest.raises(WireError, match="items"):
        encode(list(range(300_000)))
    with pytest.raises(WireError, match="does not travel"):
        encode(object())
    with pytest.raises(WireError, match="too large"):
        encode(1 << 80)
    with pytest.raises(WireError, match="not JSON"):
        loads("[" * 100_000)


# ---------------------------------------------------------------------------------------
# What the kernel runs of a test cell, and what the judge asks it for.
# ---------------------------------------------------------------------------------------
def _notebooks():
    return {name: nbformat.read(SOLUTIONS / name, as_version=4) for name in NOTEBOOKS}


NOTEBOOK_CELLS = _notebooks()
TEST_CELLS = {
    f"{name}:{cell.metadata['nbgrader']['grade_id']}": cell.source
    for name, notebook in NOTEBOOK_CELLS.items()
    for cell in notebook.cells
    if is_test_cell(cell)
}


def _hidden_lines(source: str) -> list[str]:
    block = source[source.index(BEGIN) : source.index(END)] if BEGIN in source else ""
    return [line.strip() for line in block.splitlines()[1:] if len(line.strip()) > 12]


@pytest.mark.parametrize("cell", sorted(TEST_CELLS))
def test_kernel_runs_only_test_cell_imports(cell):
    """The kernel runs only a test cell's imports."""
    part = kernel_part(TEST_CELLS[cell])
    assert all(isinstance(node, ast.Import | ast.ImportFrom) for node in ast.parse(part).body)
    assert not any(line in part for line in _hidden_lines(TEST_CELLS[cell]))


@pytest.mark.parametrize("cell", sorted(TEST_CELLS))
def test_test_cell_calls_learner_code_in_items(cell):
    """A test cell calls the learner's code only inside its items.

    So that the kernel's part (imports only) and the judge's run (everything) see the same cell."""
    tree = ast.parse(TEST_CELLS[cell])
    learner = set(learner_names(TEST_CELLS[cell]))
    for node in tree.body:
        if isinstance(node, ast.With | ast.FunctionDef | ast.Import | ast.ImportFrom):
            continue
        used = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} & learner
        assert not used, f"line {node.lineno} uses {sorted(used)} outside an item"


def test_learner_names_are_answer_cell_defs():
    """The learner's names are those the answer cells define."""
    expected = {
        "01-understand.ipynb:test-layer-backward": ["layer_backward"],
        "02-build.ipynb:test-residual-kinds": ["residual_kinds"],
        "02-build.ipynb:test-reverse-oracle": ["reverse_oracle"],
        "02-build.ipynb:test-policy-gradients": ["policy_gradients", "policy_objectives"],
        "02-build.ipynb:test-memory-report": ["memory_report"],
        "02-build.ipynb:test-timing-samples": ["timing_samples"],
        "03-experiment.ipynb:test-named-policy": ["named_policy_objective"],
        "03-experiment.ipynb:test-sqrt-segments": ["sqrt_segments_loss"],
        "04-exercise.ipynb:test-central-difference": ["EPSILON", "central_difference"],
        "04-exercise.ipynb:test-hvp": ["HVP_DIRECTION", "hvp"],
    }
    assert {cell: learner_names(source) for cell, source in TEST_CELLS.items()} == expected


# ---------------------------------------------------------------------------------------
# The judge, with the agent and the helpers answering in this process.
# ---------------------------------------------------------------------------------------
class InProcessKernel:
    """The kernel side of the conversation in this process: the agent over the learner's names."""

    def __init__(self, namespace: dict, monkeypatch, tamper=None):
        self.namespace, self.timed, self.dead, self.sent = namespace, {}, None, []
        self.tamper = tamper
        monkeypatch.setattr(agent, "_user_namespace", lambda: self.namespace)
        monkeypatch.setattr(agent, "NATIVE_ARRAYS", LESSON.native_arrays)  # as the grader installs the agent
        monkeypatch.setattr(builtins, "input", self._input)

    def _input(self, prompt=""):
        event = json.loads(prompt)
        timed = self.timed[event["timed"]]
        if event["event"] == "call":
            timed.note("call", event["call"], time.perf_counter())
        time.sleep(timed.delay(event["event"], event["call"]))
        if event["event"] == "wait":
            timed.note("waited", event["call"], time.perf_counter())
        return ""

    def request(self, message, deadline):
        line = dumps(message)
        self.sent.append(line)
        response = agent.respond(line)
        for timed in self.timed.values():
            timed.note("end", 0, time.perf_counter())
        response = loads(dumps(response))
        return self.tamper(message, response) if self.tamper else response


class InProcessHelper:
    def __init__(self, runner, tamper=None):
        self.runner, self.cells, self.tamper, self.sent = runner, {}, tamper, []
        self.builder = None

    def request(self, message, timeout):
        message = loads(dumps(message))
        self.sent.append(message)
        try:
            if self.runner is numpy_runner:
                response = numpy_runner.answer(message, self.cells)
            elif self.runner is program_builder:
                self.builder = self.builder or program_builder.Builder()
                response = program_builder.build(message, self.builder.snapshot())
            else:
                response = artifact_runner.answer(message)
        except WireError as error:
            response = {"refused": str(error)}
        except Exception as error:
            response = {"raised": {"mro": [c.__name__ for c in type(error).__mro__], "message": str(error)}}
        response = loads(dumps(response))
        return self.tamper(message, response) if self.tamper else response


class InProcessHelpers:
    def __init__(self, builder_tamper=None):
        self.artifacts = InProcessHelper(artifact_runner)
        self.numpy_only = InProcessHelper(numpy_runner)
        self.builder = InProcessHelper(program_builder, builder_tamper)

    def fresh(self):
        pass

    def __getitem__(self, name):  # as the student's JudgeHelpers are asked
        return getattr(self, name)


@pytest.fixture(scope="module")
def trusted(tmp_path_factory):
    # The shipped modules, as the class course's source folder holds them beside the notebooks.
    source = tmp_path_factory.mktemp("source")
    for name in SHIPPED_MODULES:
        shutil.copy2(SOLUTIONS / name, source / name)
    return TrustedModules(source, CHECKS_MODULE)


#: The least a checks module defines to speak the judge's protocol (judge/protocol.py).
MINIMAL_PROTOCOL = (
    "REMOTE = '__judge_remote__'\nJUDGE = None\nARG = object()\nANSWER_PRELUDE = ()\n"
    "class Checks: latest = None\nclass TimedExecutable: pass\nclass PendingResult: pass\n"
    "def report_lines(items, where): return [], 0, 0\ndef points_line(earned, declared, most): return ''\n"
)


def test_checks_module_without_protocol_refused(tmp_path):
    """A course's checks module without the protocol's names is refused, naming what it lacks."""
    (tmp_path / "half.py").write_text(
        MINIMAL_PROTOCOL.replace("class PendingResult: pass\n", "").replace("'__judge_remote__'", "'x'")
    )
    with pytest.raises(ImportError) as refused:
        TrustedModules(tmp_path, "half")
    assert "PendingResult" in str(refused.value) and "REMOTE = '__judge_remote__'" in str(refused.value)
    (tmp_path / "whole.py").write_text(MINIMAL_PROTOCOL)
    assert TrustedModules(tmp_path, "whole").checks_name == "whole"


def test_trusted_modules_skip_paired_script(tmp_path):
    """Trusted modules never run a notebook's paired script."""
    canary = tmp_path / "ran"
    (tmp_path / "checks_only.py").write_text("import helper_module\n" + MINIMAL_PROTOCOL)
    (tmp_path / "helper_module.py").write_text("VALUE = 1\n")
    for script in ("lesson.py", "01-understand.py"):  # a jupytext pair; a name no import spells
        (tmp_path / script).write_text(f"open({str(canary)!r}, 'a').write({script!r})\n")
    (tmp_path / "lesson.ipynb").write_text("{}")
    trusted = TrustedModules(tmp_path, "checks_only")
    assert sorted(trusted.modules) == ["checks_only", "helper_module"]
    assert not canary.exists()


def _judge(notebook_name, monkeypatch, trusted, tamper=None, seed=5, builder_tamper=None, notebook=None):
    monkeypatch.syspath_prepend(str(SOLUTIONS))
    notebook = notebook or NOTEBOOK_CELLS[notebook_name]
    import jax.numpy as jnp  # noqa: F401  (answer cells take it from earlier cells)

    namespace = {"np": np, "jnp": __import__("jax.numpy").numpy, "jax": __import__("jax")}
    import remat_lesson

    # What the notebook's earlier cells import, as a learner's kernel has it.
    namespace.update({k: getattr(remat_lesson, k) for k in dir(remat_lesson) if not k.startswith("_")})
    for cell in notebook.cells:
        if cell.cell_type == "code" and cell.metadata.get("nbgrader", {}).get("solution"):
            exec(compile(cell.source, "<answer>", "exec"), namespace)
    kernel = InProcessKernel(namespace, monkeypatch, tamper)
    judge = Judge(
        kernel,
        InProcessHelpers(builder_tamper),
        trusted,
        seed,
        answer_cells(notebook),
        timeout=60,
        evidence=LESSON.evidence,
    )
    return judge, kernel


FAST_CELLS = [
    ("01-understand.ipynb", "test-layer-backward"),
    ("02-build.ipynb", "test-residual-kinds"),
    ("02-build.ipynb", "test-reverse-oracle"),
    ("02-build.ipynb", "test-policy-gradients"),
    ("02-build.ipynb", "test-memory-report"),
    ("02-build.ipynb", "test-timing-samples"),
    ("03-experiment.ipynb", "test-named-policy"),
    ("04-exercise.ipynb", "test-central-difference"),
    ("04-exercise.ipynb", "test-hvp"),
]


def _source(notebook_name, grade_id):
    return TEST_CELLS[f"{notebook_name}:{grade_id}"]


@pytest.mark.parametrize(("notebook", "grade_id"), FAST_CELLS)
def test_solutions_earn_every_point(notebook, grade_id, monkeypatch, trusted):
    """The solutions earn every point and no hidden line reaches the kernel."""
    judge, kernel = _judge(notebook, monkeypatch, trusted)
    earned, report = judge.run_cell(_source(notebook, grade_id), 3)
    assert earned == 3 and report.endswith("3 of 3 points"), report
    sent = "\n".join(kernel.sent)
    assert not [line for line in _hidden_lines(_source(notebook, grade_id)) if line in sent]


def test_non_data_kernel_answer_earns_nothing(monkeypatch, trusted):
    """A kernel that answers anything but data earns nothing."""

    def forge(message, response):
        if message["op"] == "call":
            return {"result": {"$shipped": ["os", "system"], "args": ["true"]}}
        return response

    judge, _ = _judge("02-build.ipynb", monkeypatch, trusted, tamper=forge)
    earned, report = judge.run_cell(_source("02-build.ipynb", "test-residual-kinds"), 3)
    assert earned == 0 and "not a value the checks take" in report


def test_made_up_timing_samples_earn_nothing(monkeypatch, trusted):
    judge, kernel = _judge("02-build.ipynb", monkeypatch, trusted)
    kernel.namespace["timing_samples"] = lambda compiled, x, repeats=7, warmups=3: [0.05] * repeats
    earned, report = judge.run_cell(_source("02-build.ipynb", "test-timing-samples"), 3)
    assert earned == 0, report


def test_slow_round_trips_keep_timing_points(monkeypatch, trusted):
    """On a loaded grading machine each call's round trip to the judge takes tens of
    milliseconds; an honest sample then holds that too, and must still earn every point."""
    judge, kernel = _judge("02-build.ipynb", monkeypatch, trusted)
    answer = kernel._input

    def slow_round_trip(prompt=""):
        time.sleep(0.03)  # on the way to the judge
        reply = answer(prompt)
        time.sleep(0.03)  # and back
        return reply

    monkeypatch.setattr(builtins, "input", slow_round_trip)
    earned, report = judge.run_cell(_source("02-build.ipynb", "test-timing-samples"), 3)
    assert earned == 3, report


def test_unsynchronized_timing_loses_wait_item(monkeypatch, trusted):
    """An unsynchronized timing loses the waiting item, however slow the round trips.

    Where each round trip to the judge lasts longer than any result the judge delays, a sample
    that never waits is as long as one that does: the item reads the order of the calls and
    waits, and still takes exactly its point."""
    judge, kernel = _judge("02-build.ipynb", monkeypatch, trusted)
    answer = kernel._input

    def slow_round_trip(prompt=""):
        time.sleep(0.03)
        reply = answer(prompt)
        time.sleep(0.03)
        return reply

    def unsynchronized(compiled, x, repeats=7, warmups=3):
        for _ in range(warmups):
            np.asarray(compiled(x))  # the warm-ups are waited for; the timed calls are not
        samples = []
        for _ in range(repeats):
            start = time.perf_counter()
            compiled(x)
            samples.append(time.perf_counter() - start)
        return samples

    monkeypatch.setattr(builtins, "input", slow_round_trip)
    kernel.namespace["timing_samples"] = unsynchronized
    earned, report = judge.run_cell(_source("02-build.ipynb", "test-timing-samples"), 3)
    assert earned == 2 and "not waited for before the next call" in report, report


def test_forged_kernel_answers_are_checked(monkeypatch, trusted):
    """The forged answers of a kernel are checked like any.

    A kernel whose agent says the function raised ValueError, whatever was asked: only the
    checks that expect an exception could pass, and none here does."""

    def always_raises(message, response):
        return (
            {"raised": {"mro": ["ValueError", "Exception"], "message": "forged"}}
            if message["op"] == "call"
            else response
        )

    judge, _ = _judge("02-build.ipynb", monkeypatch, trusted, tamper=always_raises)
    earned, report = judge.run_cell(_source("02-build.ipynb", "test-reverse-oracle"), 3)
    assert (
        earned == 1 and "your code raised ValueError: [learner's text: forged]" in report
    )  # NumPy-only item: elsewhere


def test_sqrt_segments_pass_at_float32_distance(monkeypatch, trusted):
    """Two right float32 programs, through up to 20 layers, have differed by 3.5e-5 of the x
    gradient's largest entry (a reference run refused for it): an answer 5e-5 off keeps every
    point; one a percent off loses both comparisons with plain scan, and only them."""
    for scale, points in ((1 + 5e-5, 4), (1.01, 2)):
        judge, kernel = _judge("03-experiment.ipynb", monkeypatch, trusted)
        right = kernel.namespace["sqrt_segments_loss"]
        kernel.namespace["sqrt_segments_loss"] = lambda w, x, k, right=right, scale=scale: scale * right(w, x, k)
        # Its program is made again from the answer cell: the cell is the answer.
        judge.answers = [a.replace("return final_loss(x)", f"return {scale!r} * final_loss(x)") for a in judge.answers]
        earned, report = judge.run_cell(_source("03-experiment.ipynb", "test-sqrt-segments"), 4)
        assert earned == points, report


def test_an_unanswered_stub_reads_as_not_answered(monkeypatch, trusted):
    judge, kernel = _judge("02-build.ipynb", monkeypatch, trusted)

    def stub(*args):
        raise NotImplementedError()

    kernel.namespace["memory_report"] = stub
    earned, report = judge.run_cell(_source("02-build.ipynb", "test-memory-report"), 3)
    assert earned == 0 and "not answered yet" in report


def test_missing_name_fails_its_items(monkeypatch, trusted):
    """A missing name fails its items and says so."""
    judge, kernel = _judge("04-exercise.ipynb", monkeypatch, trusted)
    del kernel.namespace["HVP_DIRECTION"]
    earned, report = judge.run_cell(_source("04-exercise.ipynb", "test-hvp"), 3)
    assert earned == 2 and "HVP_DIRECTION" in report


def test_numpy_only_cell_alone_jax_fails(monkeypatch, trusted):
    """NumPy-only runs the cell alone and a JAX answer fails."""
    judge, _ = _judge("01-understand.ipynb", monkeypatch, trusted)
    judge.answers = [
        "import jax.numpy as jnp\n\n\ndef layer_backward(weights, h, h_bar):\n"
        "    return jnp.asarray(weights).T @ (h_bar * (1 - h * h))\n"
    ]
    monkeypatch.setattr(numpy_runner, "answer", _without_jax(numpy_runner.answer))
    earned, report = judge.run_cell(_source("01-understand.ipynb", "test-layer-backward"), 3)
    assert earned == 0 and "NameError" in report
    # What the learner must change, not only what Python could not find.
    assert "JAX is not available here; use NumPy" in report


def _without_jax(answer):
    """The NumPy-only runner's answer with `jax` unimportable, as in its sandbox."""

    def wrapped(request, cells):
        import sys

        saved = {name: sys.modules.pop(name) for name in list(sys.modules) if name.split(".")[0] in ("jax", "jaxlib")}
        sys.modules["jax"] = None  # an import of it now fails
        try:
            return answer(request, cells)
        finally:
            del sys.modules["jax"]
            sys.modules.update(saved)

    return wrapped


def test_learner_exception_keeps_class_names():
    """A learner exception keeps its class names."""
    raised = LearnerRaised(["ValueError", "Exception"], "m")
    assert raised.learner_mro[0] == "ValueError" and str(raised) == "[learner's text: m]"


# ---------------------------------------------------------------------------------------
# Each task's visible items test its point; a miss says which usual mistake it is.
# ---------------------------------------------------------------------------------------
def _layered_answer(policy: str, *, named=True, jit=False) -> str:
    """named_policy_objective's answer cell as a learner may write it: each layer checkpointed with
    `policy` (an expression), the pre-activation named "preactivation" or not named at all, the
    layer jitted or not. The judge builds the program from this cell."""
    product = 'checkpoint_name(w @ v, "preactivation")' if named else "w @ v"
    jitted = "    step = jax.jit(step)\n" if jit else ""
    return (
        "import jax\nimport jax.numpy as jnp\nfrom jax.ad_checkpoint import checkpoint_name\n\n\n"
        "def named_policy_objective(weights, depth):\n"
        "    w = jnp.asarray(weights)\n\n"
        "    def layer(v):\n"
        f"        return jnp.tanh({product})\n\n"
        f"    step = jax.checkpoint(layer, policy={policy})\n"
        f"{jitted}\n"
        "    def objective(v):\n"
        "        for _ in range(depth):\n"
        "            v = step(v)\n"
        "        return jnp.sum(v * v)\n\n"
        "    return objective\n"
    )


def _with_answer(judge, kernel, name: str, answer: str) -> None:
    """The judge's answer cells with the one that defines `name` replaced by `answer`, run in the
    kernel too (the notebook's kernel runs its answer cells: the program judged is the kernel's)."""
    judge.answers = [answer if f"def {name}(" in source else source for source in judge.answers]
    assert answer in judge.answers
    exec(compile(answer, "<answer>", "exec"), kernel.namespace)


def _hvp_answer(body: str) -> str:
    """stage 4's hvp answer cell with this body (HVP_DIRECTION as the solutions choose it)."""
    return (
        "import jax\nimport jax.numpy as jnp\n\n\ndef hvp(fn, x, direction):\n"
        + body
        + "\n\nHVP_DIRECTION = jnp.linspace(-1.0, 1.0, x.shape[0])\n"
    )


#: A central difference of float32 gradients with step 1e-2 (the mistake fixture's).
HVP_DIFFERENCE = (
    "    gradient, eps = jax.grad(fn), 1e-2\n"
    "    return (gradient(x + eps * direction) - gradient(x - eps * direction)) / (2 * eps)\n"
)


NAMES_ITEM = '[FAIL] 0/1  the name selects what is saved: kept while called "preactivation", recomputed once renamed'


@pytest.mark.parametrize(
    ("policy", "named"),
    [
        ("checkpoint_dots", False),
        ("dots_with_no_batch_dims_saveable", False),
        ("dots_with_no_batch_dims_saveable", True),
        ("save_any_names_but_these", True),  # every name saved: "preactivation" selects nothing
    ],
)
def test_named_policy_ignoring_name_loses_item(policy, named, monkeypatch, trusted):
    """A named policy that does not select by the name loses exactly the name's item."""
    chosen = f"jax.checkpoint_policies.{policy}" + ("()" if policy == "save_any_names_but_these" else "")
    judge, kernel = _judge("03-experiment.ipynb", monkeypatch, trusted)
    _with_answer(judge, kernel, "named_policy_objective", _layered_answer(chosen, named=named))
    earned, report = judge.run_cell(_source("03-experiment.ipynb", "test-named-policy"), 3)
    assert earned == 2 and NAMES_ITEM in report and report.count("[FAIL]") == 1, report
    assert "kept whatever they are called" in report
    renamed = [m for m in judge.helpers.artifacts.sent if m.get("wrap")]
    assert renamed and renamed[0]["wrap"]["$shipped"] == ["remat_lesson", "renaming"]


def test_name_renamed_inside_jitted_layer(monkeypatch, trusted):
    """The name is renamed inside a jitted layer too."""
    judge, kernel = _judge("03-experiment.ipynb", monkeypatch, trusted)
    policy = 'jax.checkpoint_policies.save_only_these_names("preactivation")'
    _with_answer(judge, kernel, "named_policy_objective", _layered_answer(policy, jit=True))
    earned, report = judge.run_cell(_source("03-experiment.ipynb", "test-named-policy"), 3)
    assert earned == 3, report


def test_policy_keeping_nothing_by_name(monkeypatch, trusted):
    """A policy that keeps nothing by the name says so."""
    judge, kernel = _judge("03-experiment.ipynb", monkeypatch, trusted)
    policy = 'jax.checkpoint_policies.save_only_these_names("pre_activation")'
    _with_answer(judge, kernel, "named_policy_objective", _layered_answer(policy))
    earned, report = judge.run_cell(_source("03-experiment.ipynb", "test-named-policy"), 3)
    assert earned == 0 and NAMES_ITEM in report and "nothing is kept under the name" in report, report


def _segments_answer(checkpoint: str) -> str:
    """sqrt_segments_loss's answer cell with its segments not checkpointed, and the whole loss
    checkpointed when checkpoint == "whole loss"."""
    source = (
        "import jax\nfrom jax import lax\n\nfrom remat_sweep import final_loss, layer\n\n\n"
        "def segments_loss(weights, x, segment_length):\n"
        "    depth, width, _ = weights.shape\n"
        "    if depth % segment_length:\n"
        "        raise ValueError('not divisible')\n"
        "    segments = weights.reshape(depth // segment_length, segment_length, width, width)\n\n"
        "    def run_segment(x, segment_weights):\n"
        "        x, _ = lax.scan(lambda carry, w: (layer(carry, w), None), x, segment_weights)\n"
        "        return x, None\n\n"
        "    x, _ = lax.scan(run_segment, x, segments)\n"
        "    return final_loss(x)\n\n\n"
    )
    if checkpoint == "whole loss":
        return source + "sqrt_segments_loss = jax.checkpoint(segments_loss, static_argnums=(2,))\n"
    return (
        source
        + "def sqrt_segments_loss(weights, x, segment_length):\n    return segments_loss(weights, x, segment_length)\n"
    )


@pytest.mark.parametrize(("checkpoint", "kept"), [("none", "found 49"), ("whole loss", "found 1")])
def test_wrong_segment_activations_fail(checkpoint, kept, monkeypatch, trusted):
    """Segments that keep the wrong activations fail a visible item."""
    judge, kernel = _judge("03-experiment.ipynb", monkeypatch, trusted)
    _with_answer(judge, kernel, "sqrt_segments_loss", _segments_answer(checkpoint))
    source = _source("03-experiment.ipynb", "test-sqrt-segments")
    earned, report = judge.run_cell(source, 4)
    visible = "[FAIL] 0/1  16 layers in segments of 2, and of 8: one activation kept per segment, not one per layer"
    assert earned == 2 and visible in report and kept in report, report
    assert visible.split("  ", 1)[1] in source[: source.index(BEGIN)]  # a visible item: make validate says so


@pytest.mark.parametrize(
    ("answer", "says"),
    [
        ("(float(fn(x + eps * direction)) - float(fn(x))) / eps", "one-sided difference (f(x + εd) − f(x))/ε"),
        ("(float(fn(x + eps * direction)) - float(fn(x - eps * direction))) / eps", "twice the slope"),
    ],
)
def test_wrong_central_difference_named(answer, says, monkeypatch, trusted):
    """A wrong central difference is told which mistake it is."""
    judge, kernel = _judge("04-exercise.ipynb", monkeypatch, trusted)
    judge.answers = [f"def central_difference(fn, x, direction, eps):\n    return {answer}\n\n\nEPSILON = 1e-3\n"]
    earned, report = judge.run_cell(_source("04-exercise.ipynb", "test-central-difference"), 3)
    assert earned == 0 and report.count(says) == 3, report


def test_tiny_epsilon_told_from_wrong_formula(monkeypatch, trusted):
    """Too small an epsilon is told apart from a wrong formula."""
    judge, kernel = _judge("04-exercise.ipynb", monkeypatch, trusted)
    kernel.namespace["EPSILON"] = 1e-8
    earned, report = judge.run_cell(_source("04-exercise.ipynb", "test-central-difference"), 3)
    assert earned == 2 and "ε = 1e-08 is too small for float32" in report and "one-sided" not in report, report


def test_inexact_hvp_shows_worst_entry(monkeypatch, trusted):
    """An inexact HVP is shown by its worst entry against the tolerance."""
    judge, kernel = _judge("04-exercise.ipynb", monkeypatch, trusted)
    _with_answer(judge, kernel, "hvp", _hvp_answer(HVP_DIFFERENCE))
    earned, report = judge.run_cell(_source("04-exercise.ipynb", "test-hvp"), 3)
    assert earned == 1 and "rtol" not in report, report
    assert re.search(
        r"plain HVP within atol=\S+ of the reference \(\d+ of 16 entries are outside\); entry \d+ of 16", report
    )
    assert re.search(r"off by \S+ where \S+ is allowed, \S+ times that", report)


#: A seed whose fresh network and direction for stage 4's hidden HVP item rounded the exact float32
#: product itself past the item's bound: the instructor's solutions earned 2 of 3 points there, the
#: reference run was not clean, and nobody was graded (about 1 run in 700). The item now draws again.
EXACT_HVP_PAST_ITS_BOUND = 2687613750387137990


def test_a_seed_whose_first_draw_the_exact_hvp_fails_still_earns_every_point(monkeypatch, trusted):
    judge, _ = _judge("04-exercise.ipynb", monkeypatch, trusted, seed=EXACT_HVP_PAST_ITS_BOUND)
    earned, report = judge.run_cell(_source("04-exercise.ipynb", "test-hvp"), 3)
    assert earned == 3, report


#: A judge seed on which a central difference of float32 gradients (step 1e-2, the mistake fixture's)
#: lands within the hidden item's bound along its first random direction: checked along that
#: direction alone, the item gave the difference its point (about 1 draw in 270).
DIFFERENCE_WITHIN_THE_BOUND_ALONG_D = 1305


def test_a_difference_of_gradients_that_is_lucky_along_one_direction_fails_the_hidden_item(monkeypatch, trusted):
    """The hidden item checks 8 d as well as d: the exact product is exactly 8 times as long (8 is a
    power of two), while a difference's error grows 512 times. Measured on 800 draws: an exact
    product passed every one; a difference at each step from 1e-4 to 1e-2 none (within the bound
    along d alone: up to 5 of 400)."""
    judge, kernel = _judge("04-exercise.ipynb", monkeypatch, trusted, seed=DIFFERENCE_WITHIN_THE_BOUND_ALONG_D)
    _with_answer(judge, kernel, "hvp", _hvp_answer(HVP_DIFFERENCE))
    earned, report = judge.run_cell(_source("04-exercise.ipynb", "test-hvp"), 3)
    # The visible item fails it (the lesson network's tighter bound), the hidden one along 8 d.
    assert earned == 1, report
    assert "a fresh network along random directions" in report, report


#: A float32 difference of gradients made as accurate as an exact product: along the normalized
#: direction (so that 8 d gives exactly 8 times its value), extrapolated (Richardson) from a large
#: step, tuned for the lesson network by its width. It earned all 3 points on 4 of 8 judge seeds.
HVP_EXTRAPOLATED = (
    "    g = jax.grad(fn)\n"
    "    n = jnp.linalg.norm(direction)\n"
    "    u = direction / n\n"
    "    def D(s):\n"
    "        return (g(x + s * u) - g(x - s * u)) / (2 * s)\n"
    "    h, levels = (1.0, 3) if x.shape[0] == 16 else (0.5, 4)\n"
    "    T = [D(h / 2 ** k) for k in range(levels)]\n"
    "    for j in range(1, levels):\n"
    "        f = 4.0 ** j\n"
    "        T = [(f * T[i + 1] - T[i]) / (f - 1) for i in range(len(T) - 1)]\n"
    "    return RESULT\n"
)
#: Its value as it is; with its derivatives cut (a program whose second derivative is zero, but
#: so is its first).
EXTRAPOLATED = {"as-is": "n * T[0]", "derivatives-stopped": "jax.lax.stop_gradient(n * T[0])"}


@pytest.mark.parametrize(("result", "seed"), [("as-is", 1), ("as-is", 4), ("derivatives-stopped", 1)])
def test_an_extrapolated_difference_of_gradients_fails_both_hvp_items(result, seed, monkeypatch, trusted):
    """No check of values tells a well-extrapolated float32 difference from an exact product within
    float32's rounding. What does: an exact product is linear in its direction, so its second
    derivative along another direction is exactly zero (JAX differentiates what it computes) and
    its first is its product with that direction; a difference of gradients is neither."""
    judge, kernel = _judge("04-exercise.ipynb", monkeypatch, trusted, seed=seed)
    _with_answer(judge, kernel, "hvp", _hvp_answer(HVP_EXTRAPOLATED.replace("RESULT", EXTRAPOLATED[result])))
    earned, report = judge.run_cell(_source("04-exercise.ipynb", "test-hvp"), 3)
    assert earned == 1, report  # only the item comparing the two policies with each other


def test_an_hvp_that_converts_to_numpy_is_told_to_stay_jax_code(monkeypatch, trusted):
    """np.asarray of the product at the end: exact, but not a JAX program, so the grader cannot
    trace it. The report says what to change, not JAX's message (which names the grader's files)."""
    judge, kernel = _judge("04-exercise.ipynb", monkeypatch, trusted)
    body = "    _, tangent = jax.jvp(jax.grad(fn), (x,), (direction,))\n    return np.asarray(tangent)\n"
    _with_answer(judge, kernel, "hvp", "import numpy as np\n" + _hvp_answer(body))
    earned, report = judge.run_cell(_source("04-exercise.ipynb", "test-hvp"), 3)
    assert earned == 1, report
    assert report.count("your hvp cannot be traced as a JAX program") == 2, report
    assert "program_builder" not in report and "no NumPy conversion (np.asarray)" in report, report


#: A difference of gradients taken in float64 (jax.enable_x64 inside hvp), of the function it is
#: given, or of the float32 objective's own inside where it finds one (its closure, its recipe,
#: its jaxpr: each is the objective computed in float64).
HVP_IN_FLOAT64 = {
    "as-given": "",
    "unwrapped": "    if getattr(fn, '__name__', '') == 'in_float32':\n        fn = fn.__closure__[0].cell_contents\n",
}


@pytest.mark.parametrize("objective", sorted(HVP_IN_FLOAT64))
def test_a_difference_of_gradients_in_float64_fails_both_hvp_items(objective, monkeypatch, trusted):
    """jax.enable_x64 inside hvp: a difference of gradients in float64 came within every bound (full
    marks on 50 of 50 seeds); unwrapped from the checks' float32 objective, it still did. The HVP
    checks judge hvp as the program the builder rebuilds from the answer cell, which the artifact
    runner refuses where it computes in floats wider than its float32 inputs; the exact product
    is a float32 program (the solutions' full marks)."""
    body = HVP_IN_FLOAT64[objective] + (
        "    with jax.enable_x64(True):\n"
        "        gradient, eps = jax.grad(fn), 1e-7\n"
        "        x64, d64 = jnp.asarray(x, jnp.float64), jnp.asarray(direction, jnp.float64)\n"
        "        return jnp.asarray((gradient(x64 + eps * d64) - gradient(x64 - eps * d64)) / (2 * eps), jnp.float32)\n"
    )
    judge, kernel = _judge("04-exercise.ipynb", monkeypatch, trusted)
    _with_answer(judge, kernel, "hvp", _hvp_answer(body))
    earned, report = judge.run_cell(_source("04-exercise.ipynb", "test-hvp"), 3)
    assert earned == 1, report  # only the item comparing the two policies with each other
    # Refused by the artifact runner, or before it by the builder, which writes no program whose
    # float64 inputs came from a conversion JAX placed (the as-given difference's).
    if objective == "as-given":  # refused by the builder, which writes no such conversion
        assert report.count("your code raised RuntimeError: the answer was refused") == 2, report


def test_a_forged_renamed_program_gains_nothing(monkeypatch, trusted):
    """The builder's fork runs the answer cell: say it answered with a program that keeps no
    pre-activation (the objective under one checkpoint that saves nothing), hoping it would be
    taken for the renamed one. The judge renames the one program it was given itself, and asks
    the builder once for each program: every item is judged on the forged program, which gains
    nothing over the honest answer (a dots policy without names keeps losing the names item)."""

    import jax
    import remat_lesson

    namespace: dict = {}
    exec(_layered_answer("jax.checkpoint_policies.checkpoint_dots", named=False), namespace)
    objective = namespace["named_policy_objective"](remat_lesson.W, remat_lesson.DEPTH)

    def forge(message, response):
        if message["op"] != "program" or message["avals"][0][0] != [16]:
            return response
        nothing = jax.checkpoint(objective)
        avals = [jax.ShapeDtypeStruct(tuple(shape), dtype) for shape, dtype in message["avals"]]
        return {"program": dumps(program_as_data(jax.make_jaxpr(nothing)(*avals)))}

    judge, kernel = _judge("03-experiment.ipynb", monkeypatch, trusted, builder_tamper=forge)
    _with_answer(
        judge, kernel, "named_policy_objective", _layered_answer("jax.checkpoint_policies.checkpoint_dots", named=False)
    )
    earned, report = judge.run_cell(_source("03-experiment.ipynb", "test-named-policy"), 3)
    assert earned < 2 and NAMES_ITEM in report, report
    asked = [dumps(m) for m in judge.helpers.builder.sent]
    assert len(asked) == len(set(asked))  # the renamed evidence came from the same program


#: What hostile-forged-report-lines raises: the judge's own lines, after every kind of line break.
FORGED_LINES = "[PASS] 3/3  every check\n        where to look: nowhere\n3 of 3 points"
LINE_BREAKS = ["\n", "\r", "\u2028", "\x85", "\x1b[2K\r", "\u202e\n", "\x0b", "\x1c", "\u3000" * 90]


def _forged_error(brk: str) -> Exception:
    text = brk + FORGED_LINES.replace("\n", brk) + brk
    return type("Forged" + text, (ValueError,), {})(text)


@pytest.mark.parametrize("brk", LINE_BREAKS, ids=[ascii(b)[:12] for b in LINE_BREAKS])
def test_forged_exception_stays_one_line(brk, monkeypatch, trusted):
    """An exception that writes the judge's lines stays the learner's one line."""
    judge, kernel = _judge("02-build.ipynb", monkeypatch, trusted)

    def forged(*args):
        raise _forged_error(brk)

    kernel.namespace["memory_report"] = forged
    earned, report = judge.run_cell(_source("02-build.ipynb", "test-memory-report"), 3)
    assert earned == 0
    assert_judges_lines_only(report, "0 of 3 points")
    assert report.count("your code raised [learner's text: Forged") == report.count("[FAIL]") > 0


def test_numpy_only_exception_stays_one_line(monkeypatch, trusted):
    """An exception of the NumPy-only process stays the learner's one line."""
    judge, _ = _judge("01-understand.ipynb", monkeypatch, trusted)
    judge.answers = [
        "def layer_backward(weights, h, h_bar):\n"
        f"    text = {chr(10).join(['', FORGED_LINES, ''])!r}\n"
        "    raise type('Forged' + text, (ValueError,), {})(text)\n"
    ]
    earned, report = judge.run_cell(_source("01-understand.ipynb", "test-layer-backward"), 3)
    assert earned == 0 and "[learner's text: Forged\\n\\[PASS\\] 3/3" in report
    assert_judges_lines_only(report, "0 of 3 points")


# ---------------------------------------------------------------------------------------
# Evidence about a JAX program comes from the answer cells, never from the kernel.
# ---------------------------------------------------------------------------------------
PLAIN_ANSWERS = (  # the route's control: no checkpoint in either answer cell
    ("named-policy", "    layer = jax.checkpoint(layer, policy=policy)\n", ""),
    ("sqrt-segments", "    @jax.checkpoint\n    def run_segment", "    def run_segment"),
)


def _plain_answers(answers):
    changed = []
    for source in answers:
        for _, old, new in PLAIN_ANSWERS:
            source = source.replace(old, new)
        changed.append(source)
    assert changed != answers
    return changed


@pytest.mark.parametrize(("grade_id", "points", "control"), [("test-named-policy", 3, 0), ("test-sqrt-segments", 4, 2)])
def test_kernel_programs_earn_what_cells_do(grade_id, points, control, monkeypatch, trusted):
    """A kernel holding other programs than its answer cells earns what the cells do.

    The route: a kernel whose functions build the right programs (a hook, a later cell, a
    patched export could all give it them), while the answer cells are plain. The programs
    judged are made again from the answer cells: the kernel's earn nothing more than the control."""
    judge, kernel = _judge("03-experiment.ipynb", monkeypatch, trusted)
    judge.answers = _plain_answers(judge.answers)
    earned, report = judge.run_cell(_source("03-experiment.ipynb", grade_id), points)
    assert earned == control, report
    # No program asked of it: only values, and how many values its own function keeps.
    assert {json.loads(line)["op"] for line in kernel.sent} <= {"describe", "call", "residual_count"}


def test_builder_never_asks_kernel_for_program(monkeypatch, trusted):
    """The builder rebuilds what the judge came by and never asks the kernel for a program."""
    judge, kernel = _judge("02-build.ipynb", monkeypatch, trusted)
    earned, report = judge.run_cell(_source("02-build.ipynb", "test-policy-gradients"), 3)
    assert earned == 3, report
    exports = [m for m in judge.helpers.builder.sent if m["op"] == "program"]
    # objectives = policy_objectives(W, DEPTH); vjp_residuals(objectives[name], x): made the same way
    assert [m["target"]["$item"]["$call"] for m in exports[:2]] == [{"$learner": "policy_objectives"}] * 2
    assert [decode(m["target"]["key"]) for m in exports[:2]] == ["plain", "remat"]
    # The one answer cell that defines it: nothing else of the notebook's runs there.
    assert list(exports[0]["cells"]) == ["policy_objectives"]
    (cell,) = exports[0]["cells"]["policy_objectives"]
    assert "def policy_objectives" in cell
    assert {json.loads(line)["op"] for line in kernel.sent} <= {"describe", "call", "residual_count"}


@pytest.mark.parametrize(
    "answer",
    [
        {"result": {"$list": []}},
        {"exported": "Zm9yZ2Vk"},
        {"program": 3},
        {"program": {"jaxpr": {}}},
        {"program": "not a program!"},
        {"program": '{"program": 0, "closed": [], "arrays": []}'},
        {"refused": "no"},
        {},
    ],
    ids=["a result", "an artifact", "no text", "not text", "not JSON", "no program in it", "refused", "nothing"],
)
def test_non_program_answer_earns_nothing(answer, monkeypatch, trusted):
    """Whatever the builder's process says (learner code runs there), only a program that the
    artifact runner makes again counts: a result, above all, is never taken as one."""
    judge, _ = _judge("03-experiment.ipynb", monkeypatch, trusted, builder_tamper=lambda message, response: answer)
    earned, report = judge.run_cell(_source("03-experiment.ipynb", "test-named-policy"), 3)
    assert earned == 0, report
    assert all(isinstance(m["program"], str) for m in judge.helpers.artifacts.sent)


def test_matching_result_not_taken_as_program(monkeypatch, trusted):
    """The exact values the residual check matches (the weights, each pre-activation, the last
    output), sent as a result for the lesson network: the item fails all the same."""
    import remat_lesson

    weights, v, kept = np.asarray(remat_lesson.W), np.asarray(remat_lesson.x), []
    for _ in range(remat_lesson.DEPTH):
        kept.append(weights @ v)
        v = np.tanh(kept[-1])
    forged = {"result": encode([weights, *kept, v])}
    tamper = lambda message, response: forged  # noqa: E731
    judge, _ = _judge("03-experiment.ipynb", monkeypatch, trusted, builder_tamper=tamper)
    earned, report = judge.run_cell(_source("03-experiment.ipynb", "test-named-policy"), 3)
    assert earned == 0 and "earns nothing" in report, report


def _kept_values_program(message):
    """What a fork that writes its own answer could hand over for the lesson network: a program
    that computes, from x, exactly the values the residual check matches (the weights, each
    pre-activation, the last output), written as data."""
    import jax
    import remat_lesson

    def kept_values(v):
        weights = jax.numpy.asarray(remat_lesson.W)
        kept = [weights]
        for _ in range(remat_lesson.DEPTH):
            kept.append(weights @ v)
            v = jax.numpy.tanh(kept[-1])
        return kept + [v]

    avals = [jax.ShapeDtypeStruct(tuple(shape), dtype) for shape, dtype in message["avals"]]
    return {"program": dumps(program_as_data(jax.make_jaxpr(kept_values)(*avals)))}


def test_program_judged_for_what_it_saves(monkeypatch, trusted):
    """The builder's fork runs the answer cell, so it may hand over any program. Written as data,
    the program is transformed by the judge: one whose outputs are the values the residual check
    matches saves none of them itself, and the plain answer earns no more than its due."""
    tamper = lambda message, response: _kept_values_program(message) if "program" in response else response  # noqa: E731
    judge, _ = _judge("03-experiment.ipynb", monkeypatch, trusted, builder_tamper=tamper)
    earned, report = judge.run_cell(_source("03-experiment.ipynb", "test-named-policy"), 3)
    assert earned == 0, report
    # Before any evidence: the program computes other values than the kernel's own function.
    assert "the program the grader judged is not the one your notebook runs" in report, report
    assert {m["op"] for m in judge.helpers.artifacts.sent} == {"value"}


def test_unrebuildable_object_earns_nothing(monkeypatch, trusted):
    """An object the judge cannot make again earns nothing."""
    from autograder.judge.core import LearnerFunction

    judge, _ = _judge("03-experiment.ipynb", monkeypatch, trusted)
    orphan = LearnerFunction(judge, 1, "something", "function")  # no origin: not a name, not a call's result
    with pytest.raises(LearnerRaised, match="cannot be made again"):
        judge.evidence_about(orphan, "grad", [np.zeros(3, np.float32)], None, 0)


HAND_MADE_EXPORT = '''

import jax as _jax


def _hand_made(fn, *args, **kwargs):
    """An export that hands over the program of the lesson's pre-activations, whatever it is asked."""

    def residuals(v):
        kept = [_jax.numpy.asarray(W)]
        for _ in range(4):
            kept.append(kept[0] @ v)
            v = _jax.numpy.tanh(kept[-1])
        return kept + [v]

    return lambda *avals: _REAL_EXPORT(_jax.jit(residuals))(*avals)


_REAL_EXPORT = _jax.export.export
'''


@pytest.mark.parametrize(
    ("patch", "earned"),
    [
        ("_jax.export.export = _hand_made", 0),
        ("_jax.vjp = lambda f, *a: (f(*a), _hand_made)", 0),
        ("import jax._src.export._export as _inner\n_inner._module_to_bytecode = lambda *a, **k: b''", 0),
        ("_no_op = _hand_made", 3),  # the control: the same right cell without a rebinding
    ],
    ids=["jax.export.export", "jax.vjp", "an inner function", "control"],
)
def test_rebinding_jax_leaves_export_alone(patch, earned, monkeypatch, trusted):
    """The builder exports with JAX's functions as they were before any cell ran, and a cell that
    rebinds any function of JAX's modules is refused outright: its programs earn nothing."""
    import jax
    import jax._src.export._export as inner

    saved = (jax.export.export, jax.vjp, inner._module_to_bytecode)
    judge, _ = _judge("03-experiment.ipynb", monkeypatch, trusted)
    judge.answers = [
        source + HAND_MADE_EXPORT + patch + "\n" if "def named_policy_objective" in source else source
        for source in judge.answers
    ]
    try:
        points, report = judge.run_cell(_source("03-experiment.ipynb", "test-named-policy"), 3)
    finally:
        jax.export.export, jax.vjp, inner._module_to_bytecode = saved
    assert points == earned, report


def test_answer_cell_finds_earlier_imports(monkeypatch, trusted):
    """Rebuilt alone, an answer cell still finds what the lesson's notebooks import first (the
    lesson's W and DEPTH here): a policy_objectives that ignores its arguments for them keeps the
    lesson's points and loses only the fresh network's (mistake-policy-lesson-globals)."""
    judge, kernel = _judge("02-build.ipynb", monkeypatch, trusted)
    judge.answers = [a.replace("make_objective(weights, depth,", "make_objective(W, DEPTH,") for a in judge.answers]
    kernel.namespace["policy_objectives"] = lambda weights, depth: {
        "plain": kernel.namespace["make_objective"](kernel.namespace["W"], kernel.namespace["DEPTH"]),
        "remat": kernel.namespace["make_objective"](
            kernel.namespace["W"], kernel.namespace["DEPTH"], rematerialize=True
        ),
    }
    earned, report = judge.run_cell(_source("02-build.ipynb", "test-policy-gradients"), 3)
    assert earned == 2, report


def test_evidence_of_another_program_refused(monkeypatch, trusted):
    """The answer cell builds rightly checkpointed segments, the notebook's kernel runs them plain
    (a cell that tells the builder from the kernel): the values agree, but the residuals the
    kernel's function keeps are not the program's, so the items judged on them fail, saying so;
    the loss and the ValueError keep their points."""
    judge, kernel = _judge("03-experiment.ipynb", monkeypatch, trusted)
    exec(compile(_segments_answer("none"), "<the kernel's cell>", "exec"), kernel.namespace)
    earned, report = judge.run_cell(_source("03-experiment.ipynb", "test-sqrt-segments"), 4)
    assert earned == 2 and "values for its backward pass" in report, report
    assert "is not the one your notebook runs" in report, report


def test_a_plan_not_the_kernels_is_refused(monkeypatch, trusted):
    """The program handed over keeps what the kernel's function keeps, but the compiler plans its
    gradient otherwise (the artifact runner's plan is altered here, as a program that is not the
    notebook's would plan): the item judged on the plan fails, saying so."""
    judge, kernel = _judge("03-experiment.ipynb", monkeypatch, trusted)
    evidence = judge.evidence
    asked = evidence._artifact_request

    def another_plan(request):
        answer = asked(request)
        if request["op"] == "plan" and "result" in answer:
            plan = decode(answer["result"])
            if isinstance(plan, dict):
                answer = {"result": encode({**plan, "temp_size_in_bytes": plan["temp_size_in_bytes"] + 4096})}
        return answer

    monkeypatch.setattr(evidence, "_artifact_request", another_plan)
    earned, report = judge.run_cell(_source("03-experiment.ipynb", "test-sqrt-segments"), 4)
    assert earned == 3 and "the compiler plans" in report and "is not the one your notebook runs" in report, report


#: Answers an honest learner may split: a helper of their own, bound in an earlier answer cell
#: (by a definition, an import, a tuple assignment). Each: the test cell, the text replaced in the
#: defining cell and its replacement, and what the first answer cell of 02 gains.
HELPER_ELSEWHERE = {
    "defined": (
        "test-policy-gradients",
        '"plain": make_objective(weights, depth, rematerialize=False)',
        '"plain": one_objective(weights, depth, False)',
        "def one_objective(weights, depth, remat):\n    return make_objective(weights, depth, rematerialize=remat)\n",
    ),
    "imported": (
        "test-policy-gradients",
        '"plain": make_objective(weights, depth, rematerialize=False)',
        '"plain": partial(make_objective, rematerialize=False)(weights, depth)',
        "from functools import partial\n",
    ),
    "tuple-assigned": (
        "test-policy-gradients",
        '"remat": make_objective(weights, depth, rematerialize=True)',
        '"remat": make_objective(weights, depth, rematerialize=REMAT)',
        "PLAIN, REMAT = False, True\n",
    ),
    "numpy-only": (
        "test-reverse-oracle",
        "values.append(np.tanh(weights @ values[-1]))",
        "values.append(layer_forward(weights, values[-1]))",
        "def layer_forward(weights, v):\n    return np.tanh(weights @ v)\n",
    ),
}


def _with_helper(how):
    """02's notebook with HELPER_ELSEWHERE[how]: (the notebook, the test cell, the number of answer
    cells above it)."""
    grade_id, old, new, helper = HELPER_ELSEWHERE[how]
    notebook = copy.deepcopy(NOTEBOOK_CELLS["02-build.ipynb"])
    answers = [c for c in notebook.cells if c.cell_type == "code" and c.metadata.get("nbgrader", {}).get("solution")]
    (defining,) = [c for c in answers if old in c.source]
    assert defining is not answers[0]
    defining.source = defining.source.replace(old, new)
    answers[0].source = helper + "\n" + answers[0].source
    test_at = next(
        i for i, c in enumerate(notebook.cells) if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id
    )
    above = sum(1 for c in notebook.cells[:test_at] if c in answers)
    return notebook, grade_id, above


@pytest.mark.parametrize("how", sorted(HELPER_ELSEWHERE))
def test_helper_in_another_answer_cell_is_found(how, monkeypatch, trusted):
    """A function that uses a helper the learner bound in an earlier answer cell earns every
    point: the program builder and the NumPy-only process run the cells it needs, as the kernel
    has them when the test cell runs."""
    notebook, grade_id, above = _with_helper(how)
    judge, _ = _judge("02-build.ipynb", monkeypatch, trusted, notebook=notebook)
    judge.above = above
    earned, report = judge.run_cell(_source("02-build.ipynb", grade_id), 3)
    assert earned == 3, report


def test_helper_below_the_test_cell_is_not_the_kernels(monkeypatch, trusted):
    """A helper bound only below the test cell is not there when the kernel runs it: the builder
    does not run that cell either, and says which name it lacks."""
    notebook, grade_id, above = _with_helper("defined")
    answers = [c for c in notebook.cells if c.cell_type == "code" and c.metadata.get("nbgrader", {}).get("solution")]
    helper, answers[0].source = answers[0].source.split("\n\n", 1)
    answers[-1].source += "\n\n" + helper  # the memory report's cell, below test-policy-gradients
    judge, _ = _judge("02-build.ipynb", monkeypatch, trusted, notebook=notebook)
    judge.above = above
    earned, report = judge.run_cell(_source("02-build.ipynb", grade_id), 3)
    assert earned < 3 and "one_objective" in report, report


def test_the_artifact_runner_makes_a_program_once_per_notebook(monkeypatch):
    """A check asks for one program and transform again at other inputs (the kernel's point, then
    its own): the executable is made once, each answer is still of its own inputs, a different
    transform, shapes or wrap is made anew, a refusal is never kept as an answer, and a new
    notebook keeps nothing of an earlier one's."""
    import jax

    def square_sum(v):
        return (v * v).sum()

    def program(shape):
        avals = [[list(shape), "float32"]]
        text = dumps(program_as_data(jax.make_jaxpr(square_sum)(jax.ShapeDtypeStruct(shape, np.float32))))
        return {"program": text, "avals": avals, "argnums": 0}

    def ask(op, x, **extra):
        request = {**program(x.shape), "op": op, "inputs": [encode(x)], **extra}
        return decode(artifact_runner.answer(request)["result"])

    made = artifact_runner._MADE
    artifact_runner.fresh()
    x, y = np.arange(3, dtype=np.float32), np.ones(3, np.float32)
    assert ask("value", x) == 5.0 and ask("value", y) == 3.0  # one executable, each answer its own
    assert len(made) == 1
    assert np.allclose(ask("grad", x), 2 * x) and len(made) == 2
    # argnums as JAX reads it: a list is a tuple of inputs, answered with a tuple even of one.
    (alone,) = ask("grad", x, argnums=[0])
    assert np.allclose(alone, 2 * x) and len(made) == 3
    assert ask("value", np.ones(4, np.float32)) == 4.0 and len(made) == 4
    renamed = {"$shipped": ["remat_lesson", "renaming"], "args": ["a", "b"], "kwargs": []}
    monkeypatch.syspath_prepend(str(SOLUTIONS))
    assert ask("value", x, wrap=renamed) == 5.0 and len(made) == 5
    monkeypatch.setattr(artifact_runner, "MAX_OUTPUT_BYTES", 2)
    for _ in range(2):
        with pytest.raises(WireError, match="more than the judge takes"):
            ask("grad", np.ones(5, np.float32))
    assert len(made) == 5
    assert artifact_runner.fresh() == {"fresh": True} and made == {}
    for request in ({"op": "value", "avals": [], "inputs": []}, {"op": "nothing", "argnums": [0, 0]}):
        with pytest.raises(WireError, match="no program was sent"):  # before anything else is read
            artifact_runner.answer(request)
    # An input named twice, or no position, is refused before anything is made.
    refused = (([0, 0], "an input twice"), ([], "not an input position"), (-1, "not an input position"))
    beyond = ((1, "an input the program does not take"), ([0, 10**6], "an input the program does not take"))
    for argnums, why in (*refused, *beyond, (True, "not an input position"), ([0, "1"], "not an input position")):
        with pytest.raises(WireError, match=why):
            ask("grad", x, argnums=argnums)
    assert made == {}
