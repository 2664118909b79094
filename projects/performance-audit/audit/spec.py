"""What the audit runs and what it expects: sizes, conditions, tolerances and file names.

The checker reads its expectations from here, never from the evidence directory, so an
edited evidence file cannot change what counts as correct.
"""

from __future__ import annotations

from dataclasses import dataclass

# A deliberately small MLP: one hidden layer, float32. Small enough that a compile costs far
# more than an execution, which is exactly the gap the audit must keep visible.
BATCH = 16
N_INPUTS = 8
N_HIDDEN = 32
N_OUTPUTS = 4
WEIGHT_DECAY = 0.01
DATA_SEED = 8
PARAMETER_NAMES = ("b1", "b2", "w1", "w2")  # the order JAX flattens a dict: sorted keys
OUTPUT_LEAVES = 1 + len(PARAMETER_NAMES)  # the loss plus one gradient per parameter

# Stage 1: the NumPy reference must agree elementwise: |jax - numpy| <= ATOL + RTOL * |numpy|.
RTOL = 1e-4
ATOL = 1e-6
# Hand-counted matmul FLOPs leave out the elementwise work, so they must be a large share of
# the compiler's count without exceeding it.
MATMUL_SHARE_OF_FLOPS = (0.5, 1.0)
# On CPU a multi-output program also returns a table of one pointer per output leaf.
POINTER_BYTES = 8

# Stage 3: how many samples each timing keeps (all of them are written to timings.json).
WARM_REPEATS = 60
DISPATCH_REPEATS = 60
TRANSFER_REPEATS = 30
# A clock probe: a program that runs for milliseconds, where a correct dispatch-only clock
# reads a small fraction of a synchronized one (measured here: about 1/50). A clock that waits
# for the result, or a synchronized clock that does not, reads about the same on both.
PROBE_SIZE = 512
PROBE_REPEATS = 5
PROBE_MAX_DISPATCH_SHARE = 0.5

REASONS = ("first call", "cache hit", "new shape", "new dtype", "weak type", "static argument")
SIGNATURE_FIELDS = ("params", "inputs", "targets", "weight_decay", "activation")


@dataclass(frozen=True)
class Condition:
    """One call of the jitted step, and what a correct diagnosis of it says."""

    name: str
    what_changed: str
    expect_retrace: bool
    expect_recompile: bool
    expected_reason: str
    changed_fields: tuple[str, ...]  # signature fields that differ from the baseline call


CONDITIONS = (
    Condition(
        "baseline", "first call: float32 batch of 16, strong float32 weight decay, tanh", True, True, "first call", ()
    ),
    Condition("same_shape_again", "new values, same shapes, dtypes and static argument", False, False, "cache hit", ()),
    Condition("new_batch_shape", "batch of 32 instead of 16", True, True, "new shape", ("inputs", "targets")),
    Condition("new_input_dtype", "inputs in float16 instead of float32", True, True, "new dtype", ("inputs",)),
    Condition(
        "weak_python_scalar",
        "weight decay passed as a Python float (weakly typed)",
        True,
        True,
        "weak type",
        ("weight_decay",),
    ),
    Condition(
        "changed_static_argument",
        "static activation 'relu' instead of 'tanh'",
        True,
        True,
        "static argument",
        ("activation",),
    ),
)
BASELINE = CONDITIONS[0].name
DISTINCT_PROGRAMS = sum(condition.expect_recompile for condition in CONDITIONS)

# The evidence directory. Each stage owns the files it writes and removes them before it
# starts, so a failed stage never leaves older evidence behind that looks current.
EVIDENCE_INDEX = "evidence.json"
STAGE_FILES = {
    1: ("stage1-calculations.json",),
    2: ("stage2-conditions.json", "stage2-cache-misses.log"),
    3: ("compiled-summary.json", "compiled-baseline.hlo.txt", "timings.json")
    + tuple(f"jaxpr/{condition.name}.txt" for condition in CONDITIONS),
}
JAXPR_FILE = "jaxpr/{condition}.txt"
JAXPR_SIGNATURE_PREFIX = "# signature: "  # the line of input types at the top of a JAXPR file
PROVENANCE_FIELDS = (
    "utc",
    "python",
    "jax",
    "jaxlib",
    "numpy",
    "platform",
    "devices",
    "environment",
    "jax_environment",
    "command",
    "implementation",
)

MODEL_FILE = "projects/performance-audit/{implementation}/model.py"
RUN_COMMAND = (
    "python projects/performance-audit/run.py --stage {stage} "
    "--implementation {implementation} --evidence-dir {evidence_dir}"
)
