"""The learner's path through 02-build.ipynb in a real JupyterLab, in headless Chromium.

Open the release notebook, run all cells and meet the first stub's NotImplementedError, type
the answer into the first answer cell, run it and its test cell until the report says PASS,
then press nbgrader's Validate button and read its verdict. Along the way: the kernel is the
bundle's (no kernel-selection dialog), the notebook is not flagged untrusted, and
`import remat_lesson` works from the notebook's working directory.
"""
from __future__ import annotations

import re

import psutil
import pytest

import labdriver as lab
from conftest import SOLUTIONS, VENV

pytestmark = pytest.mark.browser

NOTEBOOK = "02-build.ipynb"
ANSWER_DEFINES = "reverse_oracle"


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


def test_learner_fills_first_answer_and_validates(page, lab_server):
    shot = page.shots
    release = lab.read_notebook(lab_server.root_dir / NOTEBOOK)
    solution = lab.read_notebook(SOLUTIONS / NOTEBOOK)
    answer_index, grade_id = lab.first_answer_cell(release, ANSWER_DEFINES)
    test_index = lab.test_cell_after(release, answer_index)
    test_grade_id = lab.nbgrader_meta(release["cells"][test_index])["grade_id"]
    answer = lab.learner_answer(solution, grade_id)
    assert f"def {ANSWER_DEFINES}(" in answer and "NotImplementedError" not in answer, (
        f"the solution cell {grade_id!r} of solutions/{NOTEBOOK} does not look like an answer:\n{answer}"
    )
    assert "raise NotImplementedError()" in lab.source(release["cells"][answer_index])

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
    specs = lab_server.api("GET", "kernelspecs")["kernelspecs"]
    display_name = specs[wanted]["spec"]["display_name"]
    assert lab.kernel_display_name(page) == display_name
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
    assert page.locator(f"{lab.PANEL} .jp-RenderedHTMLCommon", has_text=re.compile("trust", re.I)).count() == 0
    print("trust indicator on opening:", lab.trust_status(page))

    # 2. Run all: the first stub stops the run with NotImplementedError.
    lab.run_menu(page, "notebook:run-all-cells")
    lab.wait_all_executed(page)
    stderr = page.locator(f'{lab.CELLS} .jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]')
    stderr.first.wait_for(state="attached")
    # The first traceback (stderr may also carry warnings, which are not errors).
    first_error = stderr.filter(has_text=re.compile(r"\w+Error\b")).first
    first_error.scroll_into_view_if_needed()
    shot("run-all-stub-error")
    error_cell = first_error.locator("xpath=ancestor::div[contains(concat(' ', @class, ' '), ' jp-Cell ')][1]")
    error_index = page.locator(lab.CELLS).evaluate_all(
        "(cells, target) => cells.indexOf(target)", error_cell.element_handle()
    )
    error_text = lab.cell_outputs_text(page, error_index)
    assert error_index in (answer_index, test_index), (
        f"the first error is in cell {error_index}, not in the first stub ({answer_index}) or its test "
        f"({test_index}):\n{error_text}"
    )
    assert "NotImplementedError" in error_text, error_text
    assert "ModuleNotFoundError" not in error_text, error_text

    # 3. Type the answer into the answer cell, through the editor.
    lab.replace_cell_text(page, answer_index, answer)
    shot("answer-typed")
    typed = lab.editor_text(page, answer_index)
    assert typed == answer, f"the editor holds\n{typed!r}\nnot\n{answer!r}"

    # 4. Run the answer cell (Shift+Enter), then its test cell: the report says PASS.
    page.keyboard.press("Shift+Enter")
    lab.wait_cell_executed(page, answer_index)
    assert "Error" not in lab.cell_outputs_text(page, answer_index), lab.cell_outputs_text(page, answer_index)
    lab.cell(page, test_index).locator(".jp-InputArea-prompt").first.click()
    page.keyboard.press("Shift+Enter")
    lab.wait_cell_executed(page, test_index)
    lab.cell(page, test_index).scroll_into_view_if_needed()
    shot("test-cell-pass")
    report = lab.cell_outputs_text(page, test_index)
    assert "[PASS]" in report and "[FAIL]" not in report, f"the test cell's report:\n{report}"
    assert "Error" not in report, report

    # 5. Validate (nbgrader's toolbar button saves, then validates on the server).
    button = page.locator(f"{lab.PANEL} .jp-Toolbar .validate-button")
    assert button.count() == 1, "no nbgrader Validate button in the notebook toolbar"
    button.click()
    dialog = page.locator(lab.DIALOG)
    dialog.wait_for(state="visible", timeout=lab.CELL_TIMEOUT_MS)
    page.locator(f"{lab.DIALOG} .jp-Dialog-header", has_text="Validation Results").wait_for(timeout=lab.UI_TIMEOUT_MS)
    shot("validate-dialog")
    body = dialog.locator(".jp-Dialog-body")
    text = body.inner_text()
    assert "error running the validate command" not in text, text
    assert "has changed, but it should not have" not in text, f"the edit changed a locked cell:\n{text}"
    assert "cell type has changed" not in text.lower(), text

    # The answered cell's test is not among the failures; every unanswered stub's test may be.
    saved = lab.read_notebook(lab_server.root_dir / NOTEBOOK)
    assert lab.source(saved["cells"][answer_index]).strip("\n") == answer, "the saved notebook lacks the answer"
    failed_sources = body.locator(".jp-RenderedText pre").all_inner_texts()
    test_source = lab.source(release["cells"][test_index]).strip()
    assert not any(test_source in s or s.strip() == test_source for s in failed_sources), (
        f"Validate still fails the test cell {test_grade_id!r}:\n{text}"
    )
    unanswered = [
        c for c in saved["cells"]
        if lab.nbgrader_meta(c).get("solution") and "raise NotImplementedError()" in lab.source(c)
    ]
    if unanswered:
        assert re.search(r"The following cell failed", text), f"expected failures of the unanswered stubs:\n{text}"
    else:
        assert "Success! Your notebook passes all the tests." in text, text

    page.locator(f"{lab.DIALOG} .jp-Dialog-button", has_text="Ok").click()
    dialog.wait_for(state="hidden")
    shot("validated-closed")
    print("trust indicator after running and saving:", lab.trust_status(page))
    assert lab.open_dialogs(page) == []
