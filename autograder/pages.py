"""What a browser is shown of a submission: its text and pictures, never its script.

formgrader renders the autograded notebooks on the instructor's own Jupyter server, and the
feedback pages go to learners; both are nbconvert HTML. A learner writes the notebook's
markdown and everything its cells display, so before any page is made of it the grader
rewrites the autograded notebook (`sanitize_notebook`):

- markdown written by the learner keeps its markdown but no raw HTML: every `<` is written as
  `&lt;`, so `<img onerror=...>` reads as text; links and images keep only http(s), mailto and
  relative targets (`javascript:` and `data:` targets are dropped);
- a cell's outputs keep plain text, PNG, JPEG and GIF images as they are; HTML is cleaned by
  nh3 (an allow-list of tags and attributes: no script, no event handler, no `javascript:`);
  SVG, JavaScript, widget views and every other type are replaced by a line saying they are
  not shown in grading pages;
- the text of the assignment's own cells (locked and test cells, which grading restores, and
  markdown cells whose text is exactly the assignment's) is left as it is: it is the instructor's.

The result is data only: the checks' reports, the learner's printed output and pictures, the
text of the answers, all still there to read. `ForPages`, last of nbgrader's autograde
preprocessors, writes every autograded notebook so: hidden tests out, streams joined, sanitized,
its size bounded.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
from nbformat.notebooknode import NotebookNode
from nbgrader.preprocessors import NbGraderPreprocessor
from traitlets import Integer, Unicode

from .hidden_tests import strip_hidden_tests

#: Output types shown as they are (text is escaped by every template; images are pixels).
SAFE_OUTPUTS = frozenset({"text/plain", "image/png", "image/jpeg", "image/gif"})
#: A link or image target that runs or embeds something instead of pointing somewhere.
_UNSAFE_TARGET = re.compile(r"\]\(\s*<?\s*(?:javascript|data|vbscript|file)\s*:[^)]*\)", re.IGNORECASE)
_UNSAFE_REFERENCE = re.compile(r"^(\s*\[[^\]]+\]:\s*)(?:javascript|data|vbscript|file)\s*:\S*", re.IGNORECASE | re.M)
NOT_SHOWN = "[{kind} output: not shown in grading pages]"
_INLINE_IMAGE = re.compile(r"^\s*data:image/(png|jpeg|gif);base64,", re.IGNORECASE)
_FOREIGN_IMAGE = re.compile(
    r"!\[([^\]]*)\]\(\s*(?!attachment:|data:image/(?:png|jpeg|gif);base64,)[^)]*\)", re.IGNORECASE
)


def _is_the_assignments(cell) -> bool:
    """Cells the assignment's source restores (their text is the instructor's): locked ones and tests."""
    meta = cell.get("metadata", {}).get("nbgrader")
    if not isinstance(meta, dict):
        return False
    return bool(meta.get("locked") or (meta.get("grade") and not meta.get("solution")))


def markdown_without_html(text: str) -> str:
    """Learner markdown with its raw HTML shown as text, its unsafe link targets dropped, and its
    images limited to the notebook's own (attachments and inline PNG, JPEG, GIF)."""
    text = text.replace("<", "&lt;")
    text = _FOREIGN_IMAGE.sub(lambda m: f"![{m.group(1)}](#image-removed)", text)
    text = _UNSAFE_TARGET.sub("](#target-removed)", text)
    return _UNSAFE_REFERENCE.sub(r"\1#target-removed", text)


def _own_image(tag: str, attribute: str, value: str) -> str | None:
    """An image shows only what the notebook holds: a page opened makes no request of a learner's choosing."""
    if tag == "img" and attribute in ("src", "srcset"):
        return value if _INLINE_IMAGE.match(value) else None
    if attribute in ("href", "src", "action", "formaction") and value.strip().lower().startswith("data:"):
        return None
    return value


def clean_html(html: str) -> str:
    import nh3

    return nh3.clean(html, url_schemes={"http", "https", "mailto", "data"}, attribute_filter=_own_image)


def _clean_output(output) -> NotebookNode:
    kind = output.get("output_type")
    if kind in ("stream", "error"):
        return output  # text, escaped when rendered
    data = output.get("data")
    if not isinstance(data, dict):
        return NotebookNode(output_type="stream", name="stdout", text="[an output the grader could not read]\n")
    kept, dropped = {}, []
    for mime, value in data.items():
        if mime in SAFE_OUTPUTS:
            kept[mime] = value
        elif mime == "text/html" and isinstance(value, str | list):
            kept[mime] = clean_html(value if isinstance(value, str) else "".join(value))
        elif mime == "text/markdown" and isinstance(value, str):
            kept[mime] = markdown_without_html(value)
        else:
            dropped.append(mime)
    if dropped and not kept:
        kept["text/plain"] = NOT_SHOWN.format(kind=", ".join(sorted(dropped))[:200])
    output["data"] = kept
    return output


def sanitize_notebook(notebook, assignment_texts: frozenset[str] = frozenset()) -> int:
    """Rewrite, in place, what a learner wrote or displayed so that no page made of this notebook
    runs anything (see the module docstring). assignment_texts: the markdown of the assignment's
    own cells, left as it is. Returns how many cells changed."""
    changed = 0
    for cell in notebook.get("cells", []):
        before = repr(cell)
        if isinstance(cell.get("source"), list):  # as written on disk: lines
            cell["source"] = "".join(str(line) for line in cell["source"])
        if not isinstance(cell.get("source", ""), str):
            cell["source"] = ""
        own = _is_the_assignments(cell) or cell.get("source") in assignment_texts
        if cell.get("cell_type") == "markdown" and not own:
            cell["source"] = markdown_without_html(cell.get("source", ""))
        elif cell.get("cell_type") == "raw":
            cell["source"] = cell.get("source", "").replace("<", "&lt;")
        if cell.get("cell_type") == "code":
            cell["outputs"] = [_clean_output(output) for output in cell.get("outputs", [])]
        for attachment in list((cell.get("attachments") or {}).keys()):
            bundle = cell["attachments"][attachment]
            if isinstance(bundle, dict):
                cell["attachments"][attachment] = {k: v for k, v in bundle.items() if k in SAFE_OUTPUTS}
        changed += repr(cell) != before
    return changed


def assignment_markdown(notebook) -> frozenset[str]:
    """The markdown texts of a notebook of the assignment (its source or release)."""
    return frozenset(
        cell.get("source", "") for cell in notebook.get("cells", []) if cell.get("cell_type") == "markdown"
    )


def _page_size(value) -> int:
    """About how many bytes a value takes in a page: its JSON, with what HTML escapes counted."""
    import json

    text = json.dumps(value, default=str)
    return len(text) + 5 * sum(text.count(ch) for ch in "<>&\"'")


def bound_size(notebook, limit: int) -> int:
    """Cut the largest outputs (each replaced by a line saying so) until the notebook takes at most
    `limit` bytes in a page; the checks' own reports are the last to go. Returns how many were cut."""
    cut = 0
    outputs = [
        (cell_index, output_index)
        for cell_index, cell in enumerate(notebook.get("cells", []))
        if cell.get("cell_type") == "code"
        for output_index in range(len(cell.get("outputs", [])))
    ]
    sizes = {key: _page_size(notebook["cells"][key[0]]["outputs"][key[1]]) for key in outputs}
    total = (
        _page_size({k: v for k, v in notebook.items() if k != "cells"})
        + sum(_page_size({k: v for k, v in cell.items() if k != "outputs"}) for cell in notebook.get("cells", []))
        + sum(sizes.values())
    )
    for key in sorted(sizes, key=sizes.get, reverse=True):
        if total <= limit:
            break
        note = f"[an output of {sizes[key]} bytes: cut, this notebook was past the size limit of grading pages]\n"
        notebook["cells"][key[0]]["outputs"][key[1]] = NotebookNode(output_type="stream", name="stdout", text=note)
        total -= sizes[key] - _page_size(notebook["cells"][key[0]]["outputs"][key[1]])
        cut += 1
    return cut


class ForPages(NbGraderPreprocessor):
    """The autograded notebook as every page will show it, written so by nbgrader itself: no
    hidden test in any cell's source, each cell's stream outputs joined (how the kernel flushed
    them varies from run to run), nothing a browser would run (autograder/pages.py), and its size
    bounded (`max_bytes`, counted as a page would escape it)."""

    source_folder = Unicode("", help="The course's source folder of the assignment (its own markdown)").tag(config=True)
    max_bytes = Integer(8 << 20, help="The most bytes an autograded notebook may hold, as a page escapes it").tag(
        config=True
    )

    def preprocess(self, nb, resources):
        strip_hidden_tests(nb)
        coalesce_streams(nb)
        from .course import assignment_source

        own = frozenset()
        folder = Path(self.source_folder) if self.source_folder else assignment_source(self.config, resources)
        source = folder / f"{resources.get('nbgrader', {}).get('notebook', '')}.ipynb"
        if source.is_file():
            own = assignment_markdown(nbformat.read(source, as_version=4))
        sanitize_notebook(nb, own)
        bound_size(nb, self.max_bytes)
        return nb, resources


def coalesce_streams(notebook) -> None:
    """Join consecutive stdout (or stderr) outputs of each code cell."""
    for cell in notebook.cells:
        if cell.get("cell_type") != "code":
            continue
        merged = []
        for out in cell.get("outputs", []):
            if (
                merged
                and out.get("output_type") == "stream"
                and merged[-1].get("output_type") == "stream"
                and merged[-1].get("name") == out.get("name")
            ):
                merged[-1]["text"] = merged[-1].get("text", "") + out.get("text", "")
            else:
                merged.append(out)
        cell.outputs = merged
