"""Every release notebook opens in JupyterLab and renders: headings visible, no error dialog.

And the evidence notebook, once run as the solutions run it (a copy of
solutions/05-evidence.ipynb executed headless with nbconvert, beside the files the release
ships), shows its figure as an image when opened in JupyterLab.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest

import labdriver as lab
from labdriver import RELEASE, SOLUTIONS, VENV

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
def executed_evidence(lab_server, tmp_path_factory):
    """The solution notebooks executed headless in order (stage 5 reads the records of stages
    1-4), in a scratch copy of solutions/; the executed evidence notebook goes into the lab's tree."""
    work = tmp_path_factory.mktemp("solutions-run")
    shutil.copytree(SOLUTIONS, work, dirs_exist_ok=True, ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__"))
    for shipped in lab_server.root_dir.iterdir():  # what ships beside the notebooks (the template)
        if shipped.is_file() and not (work / shipped.name).exists():
            shutil.copy2(shipped, work / shipped.name)
    stages = sorted(p.name for p in work.glob("[0-9][0-9]-*.ipynb"))
    assert EVIDENCE in stages, f"solutions/{EVIDENCE} is missing"
    env = dict(os.environ)
    env.update(
        {
            "PATH": f"{VENV / 'bin'}{os.pathsep}{env.get('PATH', '')}",
            "MPLBACKEND": "Agg",
            "REMAT_LESSON_RUNS_DIR": str(work / "runs" / "performance-05"),
        }
    )
    result = subprocess.run(
        [str(VENV / "bin" / "jupyter"), "nbconvert", "--to", "notebook", "--execute", *stages,
         "--ExecutePreprocessor.timeout=300", "--output-dir", str(work / "executed")],
        cwd=work, env=env, capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 0, f"executing the solution notebooks failed:\n{result.stdout[-3000:]}{result.stderr[-3000:]}"
    target = lab_server.root_dir / "solutions-executed" / EVIDENCE
    target.parent.mkdir(exist_ok=True)
    shutil.copy2(work / "executed" / EVIDENCE, target)
    return f"solutions-executed/{EVIDENCE}"


def test_executed_evidence_shows_figure(page, lab_server, executed_evidence):
    executed = lab.read_notebook(lab_server.root_dir / executed_evidence)
    pngs = [o for c in executed["cells"] for o in c.get("outputs", []) if "image/png" in o.get("data", {})]
    assert pngs, "the executed evidence notebook has no image/png output"
    printed = "".join(lab.source({"source": o.get("text", "")}) for c in executed["cells"] for o in c.get("outputs", []))
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
