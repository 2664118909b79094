"""The learner's path through 02-build.ipynb in a real JupyterLab, in headless Chromium.

Open the release notebook and run all cells: the run stops at the first stub with its
NotImplementedError. Type the answers into the answer cells up to and including the one that
defines reverse_oracle (the first stub first, as a learner meets them), run each answer and
its test cell until the test's report says PASS, then press nbgrader's Validate button and
read its verdict. Along the way: the kernel is the bundle's (no kernel-selection dialog), no
trust warning, and `import remat_lesson` works from the notebook's working directory.

The answers are the solution cells of solutions/02-build.ipynb (same nbgrader grade_id),
without the solution markers.
"""

from __future__ import annotations

import json
import re
import subprocess

import labdriver as lab
import psutil
import pytest
from labdriver import SOLUTIONS, VENV

pytestmark = pytest.mark.browser

NOTEBOOK = "02-build.ipynb"
LAST_ANSWER_DEFINES = "reverse_oracle"  # fill the answer cells up to and including this one


def kernel_process(server, kernel_id: str) -> psutil.Process:
    """The server's child process that runs kernel `kernel_id` (its connection file names it)."""
    for child in psutil.Process(server.process.pid).children(recursive=True):
        try:
            if any(kernel_id in part for part in child.cmdline()):
                return child
        except psutil.Error:
            pass
    raise LookupError(f"no process runs kernel {kernel_id}")


def answers_to_fill(release: dict, solution: dict) -> list[tuple[int, int, str, str]]:
    """(answer index, test index, grade_id, answer text) for each answer cell to fill, in order."""
    last = lab.answer_defining(release, LAST_ANSWER_DEFINES)
    plan = []
    for index in lab.answer_cells(release):
        if index > last:
            break
        grade_id = lab.nbgrader_meta(release["cells"][index])["grade_id"]
        answer = lab.learner_answer(solution, grade_id)
        assert "raise NotImplementedError()" in lab.source(release["cells"][index]), f"{grade_id} is no stub"
        assert answer and "NotImplementedError" not in answer, (
            f"the solution cell {grade_id!r} of solutions/{NOTEBOOK} holds no answer:\n{answer}"
        )
        plan.append((index, lab.graded_cell_after(release, index), grade_id, answer))
    assert f"def {LAST_ANSWER_DEFINES}(" in plan[-1][3]
    return plan


def test_learner_fills_answers_and_validates(page, lab_server):
    shot = page.shots
    release = lab.read_notebook(lab_server.fresh_copy(NOTEBOOK))
    solution = lab.read_notebook(SOLUTIONS / NOTEBOOK)
    plan = answers_to_fill(release, solution)
    first_answer, first_test = plan[0][0], plan[0][1]

    # 1. Open: the kernel starts by itself, with no kernel-selection (or any other) dialog.
    lab.open_notebook(page, lab_server, NOTEBOOK, cells=len(release["cells"]))
    lab.wait_kernel_idle(page)
    shot("opened")
    assert lab.open_dialogs(page) == [], "a dialog appeared on opening the notebook"

    # The kernel is the bundle's: the notebook's kernelspec, found in the venv, run by the venv.
    wanted = release["metadata"]["kernelspec"]["name"]
    sessions = lab_server.api("GET", "sessions")
    assert [s["kernel"]["name"] for s in sessions] == [wanted], sessions
    assert sessions[0]["path"].endswith(NOTEBOOK)
    spec = lab_server.api("GET", "kernelspecs")["kernelspecs"][wanted]
    assert lab.kernel_display_name(page) == spec["spec"]["display_name"]
    found = json.loads(
        subprocess.run(
            [str(VENV / "bin" / "jupyter"), "kernelspec", "list", "--json"],
            capture_output=True,
            text=True,
            check=True,
            env=lab_server.env,
        ).stdout
    )["kernelspecs"][wanted]["resource_dir"]
    assert found.startswith(str(VENV)), f"kernelspec {wanted!r} comes from {found}, not from the venv"
    kernel = kernel_process(lab_server, sessions[0]["kernel"]["id"])
    assert "ipykernel" in " ".join(kernel.cmdline()), kernel.cmdline()
    assert kernel.cmdline()[0].startswith(str(VENV)), f"kernel not run by the venv's Python: {kernel.cmdline()}"
    # Its working directory holds remat_lesson.py, so `import remat_lesson` works there.
    assert kernel.cwd() == str(lab_server.root_dir)
    assert (lab_server.root_dir / "remat_lesson.py").is_file()

    # No trust warning. An unsigned notebook (every release is: signatures are per user) shows
    # "not trusted" in the status bar, which only hides untrusted HTML/JS outputs; the release
    # has no outputs, so nothing is hidden, and no dialog or banner asks about trust.
    assert all(not c.get("outputs") for c in release["cells"] if c["cell_type"] == "code"), (
        "the release ships outputs, which JupyterLab would sanitize in an untrusted notebook"
    )
    print("trust indicator on opening:", lab.trust_status(page))

    # 2. Run all: the run stops at the first stub, with NotImplementedError in the output.
    lab.run_menu(page, "runmenu:run-all")
    stderr = page.locator(f'{lab.CELLS} .jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]')
    stderr.first.wait_for(state="attached", timeout=lab.CELL_TIMEOUT_MS)
    lab.wait_all_executed(page)
    # The first traceback (stderr may also carry warnings, which are not errors).
    first_error = stderr.filter(has_text=re.compile(r"Traceback|\w*(Error|Exception|Failed)\b")).first
    lab.show(page, first_error)
    shot("run-all-stops-at-first-stub")
    error_cell = first_error.locator("xpath=ancestor::div[contains(concat(' ', @class, ' '), ' jp-Cell ')][1]")
    error_index = page.locator(lab.CELLS).evaluate_all(
        "(cells, target) => cells.indexOf(target)", error_cell.element_handle()
    )
    error_text = lab.cell_outputs_text(page, error_index)
    assert error_index in (first_answer, first_test), (
        f"the first error is in cell {error_index}, not in the first stub (cell {first_answer}) or its "
        f"test (cell {first_test}):\n{error_text}"
    )
    assert "NotImplementedError" in error_text, error_text
    assert "ModuleNotFoundError" not in error_text, error_text
    for index in range(first_test + 1, len(release["cells"])):
        assert not re.search(
            r"\[\d+\]", lab.cell_prompt(page, index) if release["cells"][index]["cell_type"] == "code" else ""
        ), f"run all went on past the first failing cell (cell {index} ran)"

    # 3. For each answer: type it into the answer cell, run it (Shift+Enter), run its test.
    for step, (answer_index, test_index, grade_id, answer) in enumerate(plan, start=1):
        lab.replace_cell_text(page, answer_index, answer)
        typed = lab.editor_text(page, answer_index)
        shot(f"answer-{step}-typed")
        assert typed == answer, f"the editor of {grade_id} holds\n{typed!r}\nnot\n{answer!r}"
        lab.run_cell(page, answer_index, "Shift+Enter")
        assert "Error" not in lab.cell_outputs_text(page, answer_index), lab.cell_outputs_text(page, answer_index)
        lab.cell(page, test_index).locator(".jp-InputArea-prompt").first.click()
        lab.run_cell(page, test_index, "Shift+Enter")
        lab.show(page, lab.cell(page, test_index).locator(".jp-OutputArea").first)
        shot(f"answer-{step}-test-report")
        report = lab.cell_outputs_text(page, test_index)
        assert "[PASS]" in report and "[FAIL]" not in report, f"the test of {grade_id} reports:\n{report}"
        assert "Traceback" not in report and "Error" not in report, report

    # 4. Validate: nbgrader's toolbar button saves the notebook, then validates it on the server.
    button = page.locator(f"{lab.PANEL} .jp-Toolbar .validate-button")
    assert button.count() == 1, "no nbgrader Validate button in the notebook toolbar"
    button.click()
    dialog = page.locator(lab.DIALOG)
    dialog.wait_for(state="visible", timeout=lab.CELL_TIMEOUT_MS)
    page.locator(f"{lab.DIALOG} .jp-Dialog-header", has_text="Validation Results").wait_for(timeout=lab.CELL_TIMEOUT_MS)
    shot("validate-dialog")
    body = dialog.locator(".jp-Dialog-body")
    text = body.inner_text()
    print("Validate dialog:\n" + text[:3000])
    assert "error running the validate command" not in text, text
    assert "has changed, but it should not have" not in text, f"an edit changed a locked cell:\n{text}"
    assert "cell type has changed" not in text.lower(), text

    saved = lab.read_notebook(lab_server.root_dir / NOTEBOOK)
    failed_sources = [s.strip() for s in body.locator(".jp-RenderedText pre").all_inner_texts()]
    for answer_index, test_index, grade_id, answer in plan:
        assert lab.source(saved["cells"][answer_index]).strip("\n") == answer, f"the saved notebook lacks {grade_id}"
        test_source = lab.source(release["cells"][test_index]).strip()
        if test_source in failed_sources:
            verdict = failed_sources[failed_sources.index(test_source) + 1]
            hint = ""
            if "Partial credit" in verdict:
                points = lab.nbgrader_meta(release["cells"][test_index]).get("points")
                hint = (
                    f"\n(The browser showed every visible check PASS, but the cell's value - the points its "
                    f"visible checks earned - is below the cell's nbgrader points ({points}), so Validate "
                    "reads it as partial credit.)"
                )
            pytest.fail(f"Validate fails the test of the answered {grade_id}: {verdict[:300]}{hint}\n\n{text}")
    still_stubs = [i for i in lab.answer_cells(saved) if "raise NotImplementedError()" in lab.source(saved["cells"][i])]
    if still_stubs:
        assert "The following cell failed" in text, f"expected the unanswered stubs to fail:\n{text}"
    else:
        assert "Success! Your notebook passes all the tests." in text, text

    page.locator(f"{lab.DIALOG} .jp-Dialog-button", has_text="Ok").click()
    dialog.wait_for(state="hidden")
    shot("validated-closed")
    print("trust indicator after running and saving:", lab.trust_status(page))
    assert lab.open_dialogs(page) == []
