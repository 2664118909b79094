"""What the browser tests do in JupyterLab, as a learner would: open, run, type, validate.

Selectors are JupyterLab 4's own class names (and Lumino's data-command on menu items), so a
change of JupyterLab's major version is the first suspect when one stops matching.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
VENV = ROOT / ".venv"
# The bundle whose notebooks/ and solutions/ are tested (another checkout, if given).
BUNDLE = Path(os.environ.get("BROWSER_TEST_BUNDLE", ROOT)).resolve()
RELEASE = BUNDLE / "notebooks"
SOLUTIONS = BUNDLE / "solutions"
SHOTS = ROOT / "runs" / "browser"  # screenshots, server log, browser console

UI_TIMEOUT_MS = 60_000  # the longest any single UI wait may take
CELL_TIMEOUT_MS = 180_000  # the longest one cell (or run-all, or Validate) may take

PANEL = ".jp-NotebookPanel:not(.lm-mod-hidden)"  # the notebook tab on show
CELLS = f"{PANEL} .jp-Notebook .jp-Cell"
DIALOG = ".jp-Dialog"
SOLUTION_MARKERS = re.compile(r"^\s*### (BEGIN|END) SOLUTION\s*$")


# --------------------------------------------------------------------------------------
# The notebooks on disk
# --------------------------------------------------------------------------------------
def read_notebook(path: Path) -> dict:
    return json.loads(Path(path).read_text())


def source(cell: dict) -> str:
    text = cell.get("source", "")
    return "".join(text) if isinstance(text, list) else text


def nbgrader_meta(cell: dict) -> dict:
    return cell.get("metadata", {}).get("nbgrader", {})


def cell_index(notebook: dict, grade_id: str) -> int:
    for index, cell in enumerate(notebook["cells"]):
        if nbgrader_meta(cell).get("grade_id") == grade_id:
            return index
    raise LookupError(f"no cell with grade_id {grade_id!r}")


def answer_cells(notebook: dict) -> list[int]:
    """Indices of the nbgrader solution (answer) code cells, in order."""
    return [
        index
        for index, cell in enumerate(notebook["cells"])
        if cell["cell_type"] == "code" and nbgrader_meta(cell).get("solution")
    ]


def answer_defining(notebook: dict, name: str) -> int:
    """Index of the answer cell whose code defines `name()`."""
    pattern = re.compile(rf"^\s*def\s+{re.escape(name)}\s*\(", re.M)
    for index in answer_cells(notebook):
        if pattern.search(source(notebook["cells"][index])):
            return index
    raise LookupError(f"no answer cell defines {name}()")


def graded_cell_after(notebook: dict, index: int) -> int:
    """Index of the first graded (test) code cell after cell `index`."""
    for later in range(index + 1, len(notebook["cells"])):
        cell = notebook["cells"][later]
        meta = nbgrader_meta(cell)
        if cell["cell_type"] == "code" and meta.get("grade") and not meta.get("solution"):
            return later
    raise LookupError(f"no test cell follows cell {index}")


def learner_answer(solution_notebook: dict, grade_id: str) -> str:
    """The solution cell's code as a learner would type it: without the nbgrader markers."""
    text = source(solution_notebook["cells"][cell_index(solution_notebook, grade_id)])
    lines = [line for line in text.splitlines() if not SOLUTION_MARKERS.match(line)]
    return "\n".join(lines).strip("\n")


# --------------------------------------------------------------------------------------
# JupyterLab in the browser
# --------------------------------------------------------------------------------------
def open_notebook(page, server, name: str, cells: int | None = None) -> None:
    """Open a notebook by URL and wait until its cells are there.

    JupyterLab attaches the cells of a long notebook to the page lazily, as they come into
    view. Given `cells` (the notebook's cell count), scroll down as a reader would until all
    of them are attached and every Markdown cell is rendered, then back to the top: from then
    on the n-th .jp-Cell is the notebook's n-th cell.
    """
    page.goto(server.lab_url(name), wait_until="domcontentloaded", timeout=UI_TIMEOUT_MS)
    page.wait_for_selector(f"{PANEL} .jp-Notebook .jp-Cell", state="attached", timeout=UI_TIMEOUT_MS)
    tab = page.locator(".lm-TabBar-tab.jp-mod-current .lm-TabBar-tabLabel")
    tab.filter(has_text=Path(name).name).wait_for(timeout=UI_TIMEOUT_MS)
    if cells is None:
        return
    page.wait_for_function(
        """([panel, n]) => {
            const all = document.querySelectorAll(panel + ' .jp-Notebook .jp-Cell');
            const pending = document.querySelectorAll(panel + ' .jp-MarkdownCell:not(.jp-mod-rendered)');
            if (all.length === n && pending.length === 0) return true;
            (pending.length ? pending[0] : all[all.length - 1]).scrollIntoView({block: 'end'});
            return false;
        }""",
        arg=[PANEL, cells],
        timeout=UI_TIMEOUT_MS,
        polling=250,
    )
    show(page, page.locator(CELLS).first)


def wait_kernel_idle(page, timeout: int = UI_TIMEOUT_MS) -> None:
    """A kernel is attached to the notebook, connected and idle.

    The toolbar's execution indicator also says idle while there is no kernel yet, so wait
    for the kernel's name in the toolbar and for "Idle" in the status bar as well.
    """
    page.wait_for_function(
        r"""(panel) => {
            const root = document.querySelector(panel);
            if (!root) return false;
            const name = root.querySelector('.jp-Toolbar .jp-KernelName');
            const ind = root.querySelector('.jp-Notebook-ExecutionIndicator');
            const bar = document.querySelector('#jp-main-statusbar');
            return !!name && !['', 'No Kernel'].includes(name.textContent.trim())
                && !!ind && ind.getAttribute('data-status') === 'idle'
                && !!bar && /\|\s*Idle/.test(bar.textContent);
        }""",
        arg=PANEL,
        timeout=timeout,
    )


def kernel_display_name(page) -> str:
    return page.locator(f"{PANEL} .jp-Toolbar .jp-KernelName").first.inner_text().strip()


def trust_status(page) -> str:
    """The status bar's trust indicator, e.g. "Notebook trusted" (its tooltip)."""
    item = page.locator(".jp-StatusItem-trust")
    return item.first.get_attribute("title") if item.count() else "(no trust indicator)"


def open_dialogs(page) -> list[str]:
    """Texts of the dialogs on screen (empty when none)."""
    dialogs = page.locator(DIALOG)
    return [dialogs.nth(i).inner_text() for i in range(dialogs.count()) if dialogs.nth(i).is_visible()]


def cell(page, index: int):
    return page.locator(CELLS).nth(index)


def show(page, locator) -> None:
    """Scroll an element into the notebook's view and wait until it stays there, painted.

    Cells above it may still grow (outputs arriving, lazily rendered cells), which moves it
    again; and off-screen cells are not painted (content-visibility), so a screenshot taken
    right after a jump can show an empty notebook. Poll until its position holds.
    """
    page.wait_for_function(
        """(el) => {
            const r = el.getBoundingClientRect();
            const fits = r.height <= window.innerHeight - 160;  // below the menu and toolbars
            // Layout positions are fractional but scroll offsets whole pixels: scrolled to its
            // start, an element's top can stay a fraction of a pixel above the view for good.
            const inView = r.height > 0 && r.top > -1 && (fits ? r.bottom < window.innerHeight + 1 : r.top < 240);
            if (!inView) {
                el.scrollIntoView({block: fits ? 'center' : 'start'});
                el.__lastTop = undefined;
                return false;
            }
            const steady = el.__lastTop === r.top;
            el.__lastTop = r.top;
            return steady;
        }""",
        arg=locator.element_handle(),
        polling=200,
        timeout=UI_TIMEOUT_MS,
    )


def cell_outputs_text(page, index: int) -> str:
    outputs = cell(page, index).locator(".jp-OutputArea-output")
    return "\n".join(outputs.nth(i).inner_text() for i in range(outputs.count()))


def cell_prompt(page, index: int) -> str:
    return cell(page, index).locator(".jp-InputArea-prompt").first.inner_text().strip()


def editor_text(page, index: int) -> str:
    """What the cell's editor shows, line by line (textContent: an empty line holds a <br>)."""
    lines = cell(page, index).locator(".jp-InputArea-editor .cm-content .cm-line")
    return "\n".join(lines.evaluate_all("els => els.map(e => e.textContent)")).replace("\u200b", "")


def run_menu(page, command: str) -> None:
    """Click a Run-menu entry (Lumino menu items carry their command id)."""
    page.locator(".lm-MenuBar-item", has_text=re.compile(r"^Run$")).click()
    item = page.locator(f'.lm-Menu-item[data-command="{command}"]')
    item.wait_for(state="visible")
    item.click()


def wait_all_executed(page, timeout: int = CELL_TIMEOUT_MS) -> None:
    """No cell waits or runs any longer ([*]) and the kernel is idle."""
    page.wait_for_function(
        """(panel) => {
            const prompts = [...document.querySelectorAll(panel + ' .jp-InputArea-prompt')];
            const busy = prompts.some(p => p.textContent.includes('*'));
            const ind = document.querySelector(panel + ' .jp-Notebook-ExecutionIndicator');
            return !busy && ind && ind.getAttribute('data-status') === 'idle';
        }""",
        arg=PANEL,
        timeout=timeout,
    )


def run_cell(page, index: int, key: str = "Shift+Enter", timeout: int = CELL_TIMEOUT_MS) -> str:
    """Press `key` on the selected cell `index` and wait for a new execution count; return it.

    The cell may show a count from an earlier run: wait for a different one (counts only grow),
    so the wait cannot end before the new run has even started.
    """
    prompt = cell(page, index).locator(".jp-InputArea-prompt").first
    before = prompt.inner_text().strip()
    page.keyboard.press(key)
    page.wait_for_function(
        "([el, before]) => /\\[\\d+\\]/.test(el.textContent) && el.textContent.trim() !== before",
        arg=[prompt.element_handle(), before],
        timeout=timeout,
    )
    wait_all_executed(page, timeout)
    return cell_prompt(page, index)


def replace_cell_text(page, index: int, text: str) -> None:
    """Click into the cell's editor, select all of it and put `text` in its place."""
    target = cell(page, index)
    target.scroll_into_view_if_needed()
    editor = target.locator(".jp-InputArea-editor .cm-content")
    editor.click()
    page.wait_for_function(
        "(el) => el.closest('.jp-Cell').classList.contains('jp-mod-active') && el.closest('.cm-editor').classList.contains('cm-focused')",
        arg=editor.element_handle(),
    )
    page.keyboard.press("ControlOrMeta+a")
    page.keyboard.press("Delete")
    # One input event with the whole text, like a paste: no auto-indent or auto-closed brackets.
    page.keyboard.insert_text(text)


# --------------------------------------------------------------------------------------
# formgrader (nbgrader's manual grading pages)
# --------------------------------------------------------------------------------------
# formgrader has fetched the submission's grades and comments and bound its score and comment boxes.
FORMGRADER_LOADED = (
    "() => window.formgrader && formgrader.grades && formgrader.grades.loaded && formgrader.comments.loaded"
    " && formgrader.grade_uis.length > 0 && formgrader.comment_uis.length > 0"
)


def open_formgrader_submission(page, server, assignment: str, notebook: str, student: str, shot=None) -> dict:
    """As the instructor: formgrader's address -> Manual Grading (gradebook) -> the assignment ->
    the notebook -> Show All Names -> the student's submission, loaded. `shot(step)` is called at
    each page. Returns what the list of submissions showed: how many rows (`listed`) and the
    student's row (`row`, its HTML)."""
    shot = shot or (lambda step: None)
    # formgrader's own address, as `make formgrader` opens it: the course's assignment is listed.
    page.goto(f"{server.url}/formgrader?token={server.token}", wait_until="domcontentloaded")
    page.wait_for_url(re.compile(r"/formgrader/manage_assignments"))
    page.locator("#main-table", has_text=assignment).wait_for()
    shot("manage-assignments")
    page.locator('a[href$="/formgrader/gradebook"]').first.click()
    page.locator("#main-table a", has_text=assignment).wait_for()
    shot("gradebook-assignments")
    page.locator("#main-table a", has_text=assignment).click()
    page.locator("#main-table a", has_text=notebook).wait_for()
    shot("gradebook-notebooks")
    page.locator("#main-table a", has_text=notebook).click()
    page.locator("#main-table tr", has_text="Submission #").first.wait_for()
    listed = page.locator("#main-table tr", has_text="Submission #").count()
    # The submission list hides names: show them, open the student's submission.
    page.locator("#toggle_names").click()
    link = page.locator("#main-table a.name-shown", has_text=student)
    link.wait_for(state="visible")
    row = page.locator("#main-table tr", has=page.locator("a.name-shown", has_text=student)).inner_html()
    shot("submissions-names-shown")
    link.click()
    page.wait_for_function(FORMGRADER_LOADED)
    return {"listed": listed, "row": row}


def save_manual_grade(page, grade_id: str, score: float, comment: str) -> tuple[dict, dict]:
    """Type a score and a comment into the boxes of the cell `grade_id` in formgrader's page, each
    saved when the box loses focus (as when the instructor tabs on). Returns the grade and the
    comment as the server answered their PUTs."""
    score_box = page.locator(f"input.score#{grade_id}")
    comment_box = page.locator(f"textarea#{grade_id}-comment")
    with page.expect_response(lambda r: "/formgrader/api/grade/" in r.url and r.request.method == "PUT") as saved:
        score_box.fill(str(score))
        score_box.press("Tab")
    assert saved.value.ok, saved.value.text()
    with page.expect_response(lambda r: "/formgrader/api/comment/" in r.url and r.request.method == "PUT") as said:
        comment_box.fill(comment)
        comment_box.press("Tab")
    assert said.value.ok, said.value.text()
    page.wait_for_function(
        "(id) => !document.querySelector(`input.score#${id}`).classList.contains('needs_manual_grade')", arg=grade_id
    )
    return saved.value.json(), said.value.json()


def wait_until(predicate, what: str, timeout_s: float = 30.0) -> None:
    """Poll `predicate` (outside the page: the server, the gradebook) until it holds."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout_s:g} s")
        time.sleep(0.25)
