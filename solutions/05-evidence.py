# %% [markdown]
# # Stage 5 of 5 · Evidence
#
# What stages 1 to 4 measured, in one place: `evidence.json`, `evidence.md` and a figure in
# `runs/performance-05/`.

# %% [markdown]
# ## Your map
#
# - **This stage:** about 10 minutes.
# - **Needs:** the records of stages 1 to 4 (run them first).
# - **Points:** 2, read by a person (your written explanation).
# - **Compare with:** `storage-views.png`, the reference run's figure.

# %%
import jax
from IPython import get_ipython
from IPython.display import Image, display

from remat_evidence import FIGURE_ALT_TEXT, collect, draw_storage_figure, outcomes, write_evidence
from remat_lesson import runs_dir

print(f"Stage 5 of 5 · Evidence · JAX {jax.__version__} on {jax.default_backend()}")
evidence = collect(command="05-evidence.ipynb")
if evidence["missing_stages"]:
    print("Not recorded yet:", ", ".join(evidence["missing_stages"]), "- run those notebooks, then rerun this one.")
figure_paths = draw_storage_figure(evidence, runs_dir())
entries, memory = evidence["residual_entries"], evidence["memory"]
print("Entries (upper panel):", entries)
print(
    "Planned temporary bytes (middle panel):",
    {policy: "unavailable" if report is None else report["temp_size_in_bytes"] for policy, report in memory.items()},
)
for policy in ("plain", "remat"):
    summary = evidence["timing_summary_s"][policy]
    if summary:
        print(
            f"{policy} timings: median {summary['median'] * 1e6:.1f} µs, quartiles {summary['q25'] * 1e6:.1f} to "
            f"{summary['q75'] * 1e6:.1f} µs over {summary['count']} samples"
        )
for question, outcome in outcomes(evidence).items():
    predicted = (evidence["predictions"] or {}).get(question, "not recorded")
    print(f"{question:38s} predicted {predicted!s:6s} happened {outcome}")
if get_ipython() is not None:  # in a notebook, the figure; a script has written it to runs/ above
    display(Image(filename=str(figure_paths[0]), width=560, metadata={"alt": FIGURE_ALT_TEXT}))

# %% [markdown]
# Three panels, three units: entries, planned bytes (hatched where unavailable), stage 3's
# planned MiB against depth. Entries fell while the small network's bytes stayed equal; deeper,
# the unrolled per-layer checkpoint planned more, a checkpointed scan body far less than a plain
# scan. No panel is a peak: a training-memory claim needs the whole step measured on the target
# device, and the larger batch it buys run, with quality and time checked again.
#
# **Diagnose the result.** Gradients disagree: compare inputs, weights, keys and hidden effects
# first. Memory did not drop: check the boundary, the saved shapes, the plan and a measured peak
# before adding checkpoints.
#
# ## Your turn: explain the figure
#
# In `EXPLANATION`, three to five sentences: why do fewer saved residuals not guarantee lower
# measured memory? Cite your measurements. One point for how entries relate to planned bytes,
# one for how planned bytes relate to a peak; graded by a person.

# %% nbgrader={"solution": true, "grade": true, "grade_id": "explanation", "points": 2}
### BEGIN SOLUTION
EXPLANATION = """
The residual list is autodiff's plan before compilation: it counts values, not bytes, and
some entries (the weights W, the argument) are buffers that exist anyway. The compiler
decides the bytes: it fuses operations, recomputes cheap values inside its kernels, merges
duplicates and reuses buffers. Here plain's 9 entries and remat's 6 both became 256 temporary
bytes, and in stage 3's unrolled sweep the per-layer checkpoint even planned 1.83x plain's
bytes. A measured peak adds arguments, outputs, the runtime and everything else the step
holds, which neither view sees.
"""
# Rubric for the grader: 1 point, entries are not bytes (values counted before compilation; the
# compiler's fusion, recomputation and buffer reuse decide the bytes), with a measurement cited;
# 1 point, bytes are not a peak (the estimate leaves out what a measured peak includes), or a
# measured peak cited beside an estimate. A false mechanism given as the reason earns nothing.
### END SOLUTION

# %%
assert EXPLANATION.strip(), "write your explanation in EXPLANATION above"
for path in write_evidence(evidence, EXPLANATION):
    print("wrote", path)

# %% [markdown]
# ## Carry forward
#
# - Recomputation trades kept intermediates for extra work.
# - Verify the derivative independently before judging a policy.
# - Saved entries, estimated bytes and measured peak memory stay three separate numbers.
