# %% [markdown]
# # Stage 5 of 5 · Evidence
#
# Everything the earlier stages measured, in one place: `runs/performance-05/evidence.json`
# for machines, `evidence.md` for people, and the figure. Run stages 1 to 4 first; this
# notebook reads their records and says which ones are missing.

# %% [markdown]
# ## Your map
#
# - **This stage:** about 15 minutes.
# - **Needs:** the records stages 1 to 4 wrote to `runs/performance-05/` (run those stages
#   first, in any order); it measures nothing itself.
# - **Points:** 2, read by a person (your written explanation).
# - **Compare with:** `storage-views.png` beside this notebook, the figure of a complete
#   reference run, and `reference-execution.txt` from the line "Stage 5 of 5 · Evidence" on.

# %%
import jax
from IPython.display import Image, display

from remat_evidence import FIGURE_ALT_TEXT, collect, draw_storage_figure, order_effect, outcomes, write_evidence
from remat_lesson import runs_dir

print(f"Stage 5 of 5 · Evidence · JAX {jax.__version__} on {jax.default_backend()}")

evidence = collect(command="05-evidence.ipynb")
if evidence["missing_stages"]:
    print("Not recorded yet:", ", ".join(evidence["missing_stages"]), "- run those notebooks, then rerun this one.")
else:
    print("Records of all four stages found in", runs_dir())

# %% [markdown]
# ## The figure: two storage views, two units
#
# Look before you read. The upper panel counts saved-residual **entries**; the lower panel shows
# the compiler's estimated temporary **bytes**. They are different quantities with different
# units, and they need not tell the same story.

# %%
figure_paths = draw_storage_figure(evidence, runs_dir())
print("saved", *[str(path) for path in figure_paths])

# %% tags=["notebook-only"]
display(Image(filename=str(figure_paths[0]), width=560, metadata={"alt": FIGURE_ALT_TEXT}))

# %% [markdown]
# *Alt text:* stacked charts. Upper, in entries: what autodiff saves per policy. Middle, in
# bytes: the compiler's temporary-buffer estimate per policy, or a hatched box reading "memory
# analysis unavailable on this backend" when the backend gives no estimate. Lower, when stage 3
# ran its sweep, in MiB: the compiler's temporary bytes against depth for each policy.

# %%
entries, memory = evidence["residual_entries"], evidence["memory"]
if None in (entries["plain"], entries["remat"]):
    print("Residual entries were not recorded: run stage 2.")
else:
    print(
        f"Upper panel: plain saves {entries['plain']} entries, per-layer checkpoint {entries['remat']}"
        + (f", whole-objective checkpoint {entries['whole']}." if entries["whole"] is not None else ".")
    )
if memory["plain"] is None or memory["remat"] is None:
    print("Lower panel: memory analysis unavailable, so there is nothing to compare; not zero bytes.")
else:
    temps = {p: memory[p]["temp_size_in_bytes"] for p in ("plain", "remat")}
    verdict = "equal" if temps["plain"] == temps["remat"] else "different"
    print(f"Lower panel: compiled temp bytes plain {temps['plain']}, remat {temps['remat']}: {verdict}.")

# %%
sweep = evidence["sweep_temp_bytes"]
if not sweep:
    print("Lowest panel: stage 3's sweep was not recorded (run stage 3).")
else:
    deepest = max(int(depth) for depth in sweep["plain"])
    at = {policy: by_depth.get(str(deepest)) for policy, by_depth in sweep.items()}
    if at["plain"] is None:
        print("Lowest panel: no memory analysis on this backend.")
    else:
        for policy, temp in at.items():
            if temp is not None and policy != "plain":
                print(f"Lowest panel, L={deepest}: {policy} plans {temp / at['plain']:.2f}x plain's temporary bytes")

# %% [markdown]
# Fewer entries mean autodiff *planned* to keep fewer values, and not all of them cost memory:
# stage 2 found that the constant `W` and the argument `v` are buffers that exist anyway, and
# that `W` appears nowhere in the compiler's estimate. Equal temporary bytes mean the compiler,
# after fusing and reusing buffers, *plans* as many temporary bytes for either program.
# The lowest panel is the lesson's real result: the tie of the small network does not hold as
# the network deepens. There the unrolled per-layer checkpoint plans more than plain (the
# lines above), and the scan with a checkpointed body plans far less than the plain scan,
# its own baseline; stage 3's sqrt(L) segments went further.
# No panel is a measured peak. A claim about training memory needs the full training
# step (optimizer state and input buffers included) at representative shapes, its peak
# measured on the target device; and since the point of saving memory is usually a larger
# batch, that larger batch must then actually run, and the model's quality and the step's
# time must be checked again with it.

# %% [markdown]
# ## Timings: every sample, and what they can rank

# %%
for policy in ("plain", "remat"):
    samples, summary = evidence["timings_s"][policy], evidence["timing_summary_s"][policy]
    if not samples:
        print(f"{policy}: not recorded (run stage 2)")
        continue
    print(
        f"{policy:6s} median {summary['median'] * 1e6:7.1f} µs, spread {summary['min'] * 1e6:.1f}–{summary['max'] * 1e6:.1f} µs, "
        f"all {summary['count']} samples (µs): {[round(s * 1e6, 1) for s in samples]}"
    )
summaries = evidence["timing_summary_s"]
if summaries["plain"] and summaries["remat"]:
    overlap = (
        summaries["plain"]["min"] <= summaries["remat"]["max"]
        and summaries["remat"]["min"] <= summaries["plain"]["max"]
    )
    print(
        "The two ranges "
        + ("overlap: these samples rank neither policy." if overlap else "do not overlap in this run.")
    )
by_order = evidence["timings_by_order_s"]
if by_order:
    print(
        f"\nThe order of timing, measured in stage 2 ({by_order['runs']} run(s) per order, {by_order['repeats']} samples per policy and run):"
    )
    for line in order_effect(by_order["medians"]):
        print(" ", line)
else:
    print("The order of timing was not recorded: run stage 2.")

# %% [markdown]
# ## Your predictions, and what happened

# %%
happened = outcomes(evidence)
predicted = evidence["predictions"] or {}
for question, outcome in happened.items():
    print(f"{question:38s} predicted {str(predicted.get(question, 'not recorded')):6s} happened {outcome}")

# %% [markdown]
# ## Your turn: explain the figure
#
# In `EXPLANATION`, explain in three to five sentences why fewer saved residuals do not
# guarantee lower measured memory. Use what you measured. It goes into your evidence file.

# %% [markdown]
# **How this answer is graded** (2 points, by a person, who reads this cell beside your answer):
#
# - 1 point: entries are not bytes. The residual list is what autodiff plans to keep, counted
#   in values before compilation; the compiler decides the bytes (fusion, recomputation inside
#   its kernels, buffer reuse), and you cite what you measured (entries against temporary
#   bytes, in stage 2 or the sweep).
# - 1 point: bytes are not a peak. The compiler's estimate leaves out what a measured peak
#   includes (arguments, outputs, the runtime, everything else the step holds), or you cite a
#   measured peak beside an estimate.
#
# Any true account in your own words earns the points; a false mechanism stated as the reason
# does not.

# %% nbgrader={"solution": true, "grade": true, "grade_id": "explanation", "points": 2}
### BEGIN SOLUTION
EXPLANATION = """
The residual list is autodiff's plan before compilation: it counts values, not bytes, and
some entries (the weights W, the argument) are buffers that exist anyway. The compiler
decides the bytes: it fuses operations, computes cheap values such as 1 - h again inside its
kernels, and reuses buffers. Here the backward part of each compiled program reads four
16-float vectors (plain: three tanh outputs and a product; remat: three products and a tanh
output), so 9 and 6 entries both became 256 temporary bytes, and in stage 3's unrolled sweep
the per-layer checkpoint even planned 1.83x plain's bytes. A measured peak adds arguments,
outputs, the runtime and everything else the step holds, which no list sees.
"""
### END SOLUTION

# %%
assert EXPLANATION.strip(), "write your explanation in EXPLANATION above"
for path in write_evidence(evidence, EXPLANATION):
    print("wrote", path)

# %% [markdown]
# ## Diagnose the result
#
# - Gradients or HVPs disagree: compare inputs, weights, random keys and hidden effects in the
#   checkpointed function before anything else.
# - Memory did not improve: check where the boundary sits, what shapes are saved, what the
#   compiler estimates, and a measured peak of the full step, before adding more checkpoints.
# - Timings flip between runs: that is the spread; report all samples, and rank policies only
#   where their samples do not overlap.
#
# ## Carry forward
#
# - Recomputation trades kept intermediates for extra work.
# - Verify the derivative independently before judging a policy.
# - Saved entries, estimated bytes and measured peak memory stay three separate numbers.
