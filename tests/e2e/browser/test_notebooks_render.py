"""Every release notebook opens in JupyterLab and renders: headings visible, no error dialog.

And the evidence notebook, as the test session's run of the solutions left it (the same
executions the lesson tests read), shows its figure as an image when opened in JupyterLab.
"""

from __future__ import annotations

import re

import labdriver as lab
import nbformat
import pytest
from labdriver import RELEASE

pytestmark = pytest.mark.browser

EVIDENCE = "05-evidence.ipynb"


def release_notebooks() -> list[str]:
    names = sorted(p.name for p in RELEASE.glob("*.ipynb")) if RELEASE.is_dir() else []
    return names or ["01-understand.ipynb"]  # collected even before `make release`: skips then


def headings(notebook: dict) -> list[str]:
    """The Markdown headings (#, ##, ...) of the notebook's cells, as text."""
    found = []
    for cell in notebook["cells"]:
        if cell["cell_type"] == "markdown":
            found += [m.group(1).strip() for m in re.finditer(r"^#{1,6}\s+(.+?)\s*#*\s*$", lab.source(cell), re.M)]
    return found


def plain(text: str) -> str:
    """Heading text as rendered: Markdown emphasis and code marks gone, spaces collapsed."""
    return re.sub(r"\s+", " ", re.sub(r"[`*_]", "", text)).strip()


@pytest.mark.parametrize("name", release_notebooks())
def test_release_notebook_renders(page, lab_server, name):
    notebook = lab.read_notebook(lab_server.fresh_copy(name))
    expected = headings(notebook)
    assert expected, f"{name} has no Markdown heading"

    lab.open_notebook(page, lab_server, name, cells=len(notebook["cells"]))
    lab.wait_kernel_idle(page)
    first = page.locator(f"{lab.PANEL} .jp-RenderedMarkdown :is(h1,h2,h3,h4,h5,h6)").first
    first.wait_for(state="visible")
    page.shots("opened")
    assert lab.open_dialogs(page) == [], f"a dialog appeared on opening {name}"

    rendered = page.locator(f"{lab.PANEL} .jp-RenderedMarkdown :is(h1,h2,h3,h4,h5,h6)")
    texts = [plain(t).rstrip("¶").strip() for t in rendered.all_text_contents()]
    missing = [h for h in expected if plain(h) not in texts]
    assert not missing, f"headings not rendered in {name}: {missing}\nrendered: {texts}"
    assert plain(expected[0]) in plain(first.inner_text()).rstrip("¶"), "the first heading is not shown first"
    # No raw Markdown left unrendered (an unrendered Markdown cell shows its editor).
    assert page.locator(f"{lab.PANEL} .jp-MarkdownCell:not(.jp-mod-rendered)").count() == 0
    assert page.locator(f"{lab.PANEL} .jp-OutputArea-output").count() == 0, "the release shows outputs"


@pytest.fixture(scope="session")
def executed_evidence(lab_server, solution_runs):
    """The evidence notebook as the session's solution run left it (stages 1-4 ran before it,
    so it found their records), put into the lab's tree."""
    assert solution_runs.executions[EVIDENCE].error is None, "the solution notebooks failed: see test_lesson"
    target = lab_server.root_dir / "solutions-executed" / EVIDENCE
    target.parent.mkdir(exist_ok=True)
    nbformat.write(solution_runs.executions[EVIDENCE].notebook, target)
    return f"solutions-executed/{EVIDENCE}"


def test_executed_evidence_shows_figure(page, lab_server, executed_evidence):
    executed = lab.read_notebook(lab_server.root_dir / executed_evidence)
    pngs = [o for c in executed["cells"] for o in c.get("outputs", []) if "image/png" in o.get("data", {})]
    assert pngs, "the executed evidence notebook has no image/png output"
    printed = "".join(
        lab.source({"source": o.get("text", "")}) for c in executed["cells"] for o in c.get("outputs", [])
    )
    assert "Not recorded yet" not in printed and "not recorded" not in printed, f"stages missing:\n{printed[:2000]}"

    lab.open_notebook(page, lab_server, executed_evidence, cells=len(executed["cells"]))
    image = page.locator(f'{lab.PANEL} .jp-OutputArea-output img[src^="data:image/png"]').first
    image.wait_for(state="attached")
    lab.show(page, image)
    page.wait_for_function("(img) => img.complete && img.naturalWidth > 0", arg=image.element_handle())
    page.shots("figure")
    box = image.bounding_box()
    assert box and box["width"] > 100 and box["height"] > 100, f"the figure is shown too small: {box}"
    assert lab.open_dialogs(page) == [], "a dialog appeared on opening the executed evidence notebook"
    errors = page.locator(f'{lab.PANEL} .jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]')
    assert errors.count() == 0, "the executed evidence notebook shows errors:\n" + "\n".join(errors.all_inner_texts())
