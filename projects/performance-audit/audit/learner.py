"""Loading the learner's model.py and calling into it with messages that say what to do."""

from __future__ import annotations

import contextlib
import importlib.util
import re
from pathlib import Path

from . import spec

PROJECT_ROOT = Path(__file__).resolve().parent.parent


class StageNotReady(Exception):
    """A stage cannot run: a TODO remains or a function returned the wrong kind of value."""

    def __init__(self, stage: int, message: str, hint: str = ""):
        super().__init__(message)
        self.stage = stage
        self.message = message
        self.hint = hint


def model_path(implementation: str) -> Path:
    return PROJECT_ROOT / implementation / "model.py"


def load_model(implementation: str):
    """Import starter/model.py or solution/model.py under a name of its own."""
    path = model_path(implementation)
    module_spec = importlib.util.spec_from_file_location(f"performance_audit_{implementation}", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    module.IMPLEMENTATION = implementation
    return module


@contextlib.contextmanager
def learner_code(stage: int, where: str = "the model file"):
    """Turn an unfinished TODO raised anywhere inside (also under jax.jit) into a stage message."""
    try:
        yield
    except NotImplementedError as unfinished:
        message = str(unfinished) or f"stage {stage}: {where} is not written yet"
        raise StageNotReady(stage, message, next_step(stage, message)) from None


def next_step(stage: int, message: str) -> str:
    """The message names the stage whose TODO is open, which may be earlier than this one."""
    named = re.match(r"stage (\d)", message)
    open_stage = int(named.group(1)) if named else stage
    if open_stage < stage:
        return f"stage {stage} builds on stage {open_stage}: complete that TODO and run stage {open_stage} first"
    return f"complete the TODO, then rerun stage {stage}"


def call(model, stage: int, function_name: str, *args, **kwargs):
    """Call model.<function_name>, turning an unfinished TODO into a stage message."""
    function = getattr(model, function_name, None)
    where = f"{spec.MODEL_FILE.format(implementation=model.IMPLEMENTATION)}: {function_name}"
    if function is None:
        raise StageNotReady(
            stage, f"stage {stage}: {where} is missing", "restore the function from the starter file and complete it"
        )
    with learner_code(stage, where):
        return function(*args, **kwargs)


def require(condition: bool, stage: int, function_name: str, problem: str) -> None:
    """Stop the stage when a learner function returned something the audit cannot use."""
    if not condition:
        raise StageNotReady(
            stage,
            f"stage {stage}: {function_name} {problem}",
            f"fix {function_name} in the model file, then rerun stage {stage}",
        )
