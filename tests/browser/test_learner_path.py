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

import re

import psutil
import pytest

import labdriver as lab
from conftest import SOLUTIONS, VENV

pytestmark = pytest.mark.browser

NOTEBOOK = "02-build.ipynb"
LAST_ANSWER_DEFINES = "reverse_oracle"  # fill the answer cells up to and including this one


def kernel_processes(server) -> list[psutil.Process]:
    """The ipykernel processes the server started."""
    found = []
    for child in psutil.Process(server.process.pid).children(recursive=True):
        try:
            if any("ipykernel" in part for part in child.cmdline()):
                found.append(child)
        except psutil.Error:
            pass
    return found


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
    release = lab.read_notebook(lab_server.root_dir / NOTEBOOK)
    solution = lab.read_notebook(SOLUTIONS / NOTEBOOK)
    plan = answers_to_fill(release, solution)
    first_answer, first_test = plan[0][0], plan[0][1]

    # 1. Open: the kernel starts by itself, with no kernel-selection (or any other) dialog.
    lab.open_notebook(page, lab_server, NOTEBOOK)
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
    kernels = kernel_processes(lab_server)
    assert len(kernels) == 1, [k.cmdline() for k in kernels]
    assert kernels[0].cmdline()[0].startswith(str(VENV)), f"kernel not run by the venv: {kernels[0].cmdline()}"
    # Its working directory holds remat_lesson.py, so `import remat_lesson` works there.
    assert kernels[0].cwd() == str(lab_server.root_dir)
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
    lab.wait_all_executed(page)
    stderr = page.locator(f'{lab.CELLS} .jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]')
    stderr.first.wait_for(state="attached")
    # The first traceback (stderr may also carry warnings, which are not errors).
    first_error = stderr.filter(has_text=re.compile(r"Traceback|\w*(Error|Exception|Failed)\b")).first
    first_error.scroll_into_view_if_needed()
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
        assert not re.search(r"\[\d+\]", lab.cell_prompt(page, index) if release["cells"][index]["cell_type"] == "code" else ""), (
            f"run all went on past the first failing cell (cell {index} ran)"
        )

    # 3. For each answer: type it into the answer cell, run it (Shift+Enter), run its test.
    for step, (answer_index, test_index, grade_id, answer) in enumerate(plan, start=1):
        lab.replace_cell_text(page, answer_index, answer)
        typed = lab.editor_text(page, answer_index)
        shot(f"answer-{step}-typed")
        assert typed == answer, f"the editor of {grade_id} holds\n{typed!r}\nnot\n{answer!r}"
        page.keyboard.press("Shift+Enter")
        lab.wait_cell_executed(page, answer_index)
        assert "Error" not in lab.cell_outputs_text(page, answer_index), lab.cell_outputs_text(page, answer_index)
        lab.cell(page, test_index).locator(".jp-InputArea-prompt").first.click()
        page.keyboard.press("Shift+Enter")
        lab.wait_cell_executed(page, test_index)
        lab.cell(page, test_index).locator(".jp-OutputArea").first.scroll_into_view_if_needed()
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
        assert test_source not in failed_sources, f"Validate still fails the test of {grade_id}:\n{text}"
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
