"""What the browser tests do in JupyterLab, as a learner would: open, run, type, validate.

Selectors are JupyterLab 4's own class names (and Lumino's data-command on menu items), so a
change of JupyterLab's major version is the first suspect when one stops matching.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

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
        index for index, cell in enumerate(notebook["cells"])
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
def open_notebook(page, server, name: str) -> None:
    """Open a notebook by URL and wait until its cells are shown."""
    page.goto(server.lab_url(name), wait_until="domcontentloaded", timeout=UI_TIMEOUT_MS)
    page.wait_for_selector(f"{PANEL} .jp-Notebook .jp-Cell", state="attached", timeout=UI_TIMEOUT_MS)
    tab = page.locator(f".lm-TabBar-tab.jp-mod-current .lm-TabBar-tabLabel")
    tab.filter(has_text=Path(name).name).wait_for(timeout=UI_TIMEOUT_MS)


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


def wait_cell_executed(page, index: int, timeout: int = CELL_TIMEOUT_MS) -> str:
    """Wait until cell `index` shows an execution count ([n]:); return its prompt."""
    prompt = cell(page, index).locator(".jp-InputArea-prompt").first
    page.wait_for_function(
        "(el) => /\\[\\d+\\]/.test(el.textContent)", arg=prompt.element_handle(), timeout=timeout
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
