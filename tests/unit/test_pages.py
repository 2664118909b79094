"""The grader's pages: `PageExporter` writes the document nbconvert's HTMLExporter writes.

HTMLExporter renders a page, then reads it back through BeautifulSoup's pure-Python parser to
add an alt text to every image without one and a tab stop to each cell's input and output
inside `.jp-Notebook`; `with_alt_text_and_tab_stops` adds the same to the start tags. Two pages
are the same document when BeautifulSoup reads them the same, so each comparison here reads the
grader's page through it and compares the result with HTMLExporter's, byte for byte, once the
one element the grader adds is taken out: its script policy, first in the head.
"""

from __future__ import annotations

import base64
import copy
import re
from pathlib import Path

import nbformat
import pytest
from bs4 import BeautifulSoup
from nbconvert.exporters import HTMLExporter
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from autograder.course.paths import SOLUTIONS
from autograder.notebook.pages import MISSING_ALT, PageExporter, sanitize_notebook, with_alt_text_and_tab_stops
from tests.fixtures.build import TEX_COMMAND_SPELLINGS, TEX_MATH, script_html_spellings, script_link_spellings
from tests.reports import live_tex

PIXEL = base64.b64encode(
    bytes.fromhex(
        "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
        "1f15c4890000000d49444154789c6360000002000154a24f5d0000000049454e44ae426082"
    )
).decode()


def _read_back(page: str) -> str:
    """The page as BeautifulSoup reads it, without the script policy the grader adds (checked there)."""
    policy = re.search(r'\n<meta http-equiv="Content-Security-Policy" content="[^"]*">', page)
    assert policy is not None, "the page carries no script policy"
    return str(BeautifulSoup(page[: policy.start()] + page[policy.end() :], features="html.parser"))


def _notebook_with_every_kind_of_output():
    html = (
        '<div class="jp-OutputArea-output" title="a > b">cell-like</div>'
        "<img src='data:image/png;base64,AAAA'><img alt src=\"x.png\"/>"
        '<div class="other" tabindex="-1">kept</div>'
    )
    return new_notebook(
        cells=[
            new_markdown_cell(
                "# A title\n\nSome *text* and an image: ![](attachment:pixel.png)",
                attachments={"pixel.png": {"image/png": PIXEL}},
            ),
            new_code_cell(
                "print('<img src=x>')",
                outputs=[
                    new_output("stream", name="stdout", text="<img src=x> as text\n"),
                    new_output("display_data", data={"image/png": PIXEL, "text/plain": "<Figure>"}),
                    new_output("display_data", data={"image/png": PIXEL}, metadata={"image/png": {"alt": "a dot"}}),
                    new_output("display_data", data={"text/html": html}),
                    new_output("error", ename="ValueError", evalue="no <b>bold</b>", traceback=["ValueError: x"]),
                ],
            ),
        ],
        metadata={"language_info": {"name": "python", "pygments_lexer": "ipython3"}},
    )


@pytest.mark.parametrize("template", ["lab", "classic"])
def test_page_is_html_exporter_document(template):
    """A page is the document HTMLExporter writes."""
    notebook = _notebook_with_every_kind_of_output()
    expected, _ = HTMLExporter(template_name=template).from_notebook_node(notebook)
    page, _ = PageExporter(template_name=template).from_notebook_node(notebook)
    assert _read_back(page) == expected
    assert MISSING_ALT in page
    if template == "lab":  # the lab template's cells sit inside .jp-Notebook: they get tab stops
        assert 'tabindex="0"' in page


@pytest.mark.parametrize("name", ["02-build.ipynb", "05-evidence.ipynb"])
def test_a_lesson_notebook_makes_the_same_page(name):
    notebook = nbformat.read(SOLUTIONS / name, as_version=4)
    notebook.cells.append(new_code_cell("x", outputs=[new_output("display_data", data={"image/png": PIXEL})]))
    expected, _ = HTMLExporter(template_name="lab").from_notebook_node(notebook)
    page, _ = PageExporter(template_name="lab").from_notebook_node(notebook)
    assert _read_back(page) == expected


def test_only_plain_start_tags_change():
    """Only start tags outside scripts, styles and comments change."""
    page = (
        '<html><body class="jp-Notebook"><style>img { x: "<img>" }</style>'
        "<script>var s = '<img src=a>'; var d = '<div class=\"jp-OutputArea-output\">';</script>"
        "<!-- <img src=comment> -->"
        '<p><img src="a.png" title="x > y"><img ALT="given" src="b.png"><img alt src="c.png"></p>'
        '<div class="jp-Cell-inputWrapper" tabindex="-1">in</div>'
        '<div class="jp-Cell-inputWrapperX">not a class token</div>'
        "</body></html>"
        '<div class="jp-OutputArea-output">after the notebook ended</div>'
    )
    written, missing = with_alt_text_and_tab_stops(page)
    assert missing == 1
    assert '<style>img { x: "<img>" }</style>' in written and "var s = '<img src=a>'" in written
    assert "<!-- <img src=comment> -->" in written
    assert f'<img src="a.png" title="x > y" alt="{MISSING_ALT}">' in written
    assert '<img ALT="given" src="b.png">' in written and '<img alt src="c.png">' in written
    assert '<div class="jp-Cell-inputWrapper" tabindex="0">in</div>' in written
    assert '<div class="jp-Cell-inputWrapperX">' in written
    assert '<div class="jp-OutputArea-output">after the notebook ended</div>' in written


def test_plain_page_left_as_is():
    """A page without images or a notebook element is left as it is."""
    page = '<html><body><div class="jp-OutputArea-output">x</div><br/><p>text &amp; more</p></body></html>'
    assert with_alt_text_and_tab_stops(page) == (page, 0)


def test_highlight_cache_stays_bounded(monkeypatch):
    """Code highlighted once per process is kept only while small: a class of submissions with
    long cells of their own cannot fill a worker's memory through it."""
    from nbconvert.filters.highlight import Highlight2HTML

    from autograder.notebook import pages

    monkeypatch.setattr(pages, "_HIGHLIGHTED", {})
    monkeypatch.setattr(pages, "_highlighted_size", 0)
    monkeypatch.setattr(pages, "REMEMBERED_TOTAL", 20_000)
    highlight = pages._RememberedHighlight(Highlight2HTML(pygments_lexer="ipython3"))
    long_source = "x = 1\n" * (pages.REMEMBERED_SOURCE // 6 + 1)
    assert highlight(long_source) == Highlight2HTML(pygments_lexer="ipython3")(long_source)
    assert pages._HIGHLIGHTED == {}
    for index in range(200):
        source = f"value_{index} = {index}\n"
        assert highlight(source) == Highlight2HTML(pygments_lexer="ipython3")(source)
        kept = sum(len(key[0]) + len(value) for key, value in pages._HIGHLIGHTED.items())
        assert kept == pages._highlighted_size <= pages.REMEMBERED_TOTAL
    assert 0 < len(pages._HIGHLIGHTED) < 200


# ---------------------------------------------------------------------------------------
# Sanitized after rendering: what formgrader and the feedback page make of a learner's markup.
# ---------------------------------------------------------------------------------------
MARK = "PWNED"
SCRIPT = f"alert('{MARK}')"
#: Every spelling of a link to script found so far (tests/fixtures/build.py), each holding SCRIPT.
LINK_SPELLINGS = script_link_spellings(SCRIPT)
HTML_SPELLINGS = script_html_spellings(SCRIPT)
#: The spellings the text check before markdown let through: live links on an unsanitized page.
LIVE_BEFORE = ("entity-s", "entity-colon", "escaped-colon", "reference-entity", "files-prefix")
_SCHEME = re.compile(r"^([a-z][a-z0-9+.\-]*):")


def _scheme(address: str) -> str | None:
    """An address's scheme as a browser reads it (tabs and newlines out, controls trimmed)."""
    address = re.sub(r"[\t\n\r]", "", address).strip("".join(map(chr, range(33)))).lower()
    match = _SCHEME.match(address)
    return match.group(1) if match else None


def script_routes(page: str) -> list[str]:
    """What on a page could run the learner's script (anything carrying MARK): a link or address
    to script or to a page of its own, an event handler, a script, an embedded document."""
    found = []
    for element in BeautifulSoup(page, features="html.parser").find_all(True):
        for name, value in element.attrs.items():
            value = " ".join(value) if isinstance(value, list) else str(value)
            if name.lower().startswith("on") and MARK in value:
                found.append(f"<{element.name} {name}>")
            if name.lower() in ("href", "src", "action", "formaction", "xlink:href", "srcdoc", "data"):
                scheme = _scheme(value)
                if (
                    name.lower() == "srcdoc"
                    or scheme in ("javascript", "vbscript")
                    or (scheme == "data" and not re.match(r"data:image/(png|jpeg|gif);", value.strip(), re.I))
                ):
                    found.append(f"<{element.name} {name}={value[:60]!r}>")
                elif element.name == "a" and scheme is None and MARK in value:
                    found.append(f"<a href={value[:60]!r}> (a page of the instructor's server)")
        if element.name in ("script", "svg", "math", "iframe", "object", "embed") and MARK in str(element):
            found.append(f"<{element.name}>")
    return found


def _answer_notebook(markdown: str, outputs=()) -> nbformat.NotebookNode:
    """A notebook with a graded written answer and a code cell showing `outputs`, as autograded."""
    answer = new_markdown_cell(markdown)
    answer.metadata["nbgrader"] = {
        "grade": True,
        "solution": True,
        "locked": False,
        "points": 2,
        "grade_id": "answer",
        "schema_version": 3,
        "score": 0.0,
        "comment": None,
    }
    code = new_code_cell("show()", outputs=list(outputs), execution_count=1)
    return new_notebook(
        cells=[answer, code], metadata={"language_info": {"name": "python", "pygments_lexer": "ipython3"}}
    )


def _pages(notebook) -> dict[str, str]:
    """The notebook as formgrader renders it (nbgrader's formgrade template) and as a feedback page."""
    from nbgrader.server_extensions.formgrader import handlers

    resources = {
        "assignment_id": "a",
        "notebook_id": "n",
        "submission_id": "s",
        "index": 0,
        "total": 1,
        "base_url": "",
        "student": "st",
        "last_name": "L",
        "first_name": "F",
        "notebook_path": "/n.ipynb",
    }
    formgrade = HTMLExporter(template_name="formgrade", extra_template_basedirs=[handlers.template_path])
    bootstrap = Path(handlers.template_path).parent / "static" / "node_modules" / "bootstrap" / "dist" / "css"
    feedback = PageExporter(
        template_name="feedback",
        extra_template_basedirs=[handlers.template_path],
        extra_template_paths=[str(bootstrap)],
    )
    return {
        "formgrader": formgrade.from_notebook_node(copy.deepcopy(notebook), resources=dict(resources))[0],
        "feedback": feedback.from_notebook_node(
            copy.deepcopy(notebook),
            resources={"nbgrader": {"notebook": "n", "score": 0.0, "max_score": 2.0, "late_penalty": 0}},
        )[0],
    }


@pytest.mark.parametrize("spelling", sorted(LINK_SPELLINGS))
def test_no_script_link_survives_rendering(spelling):
    """Each spelling, in a written answer and in a Markdown output, is sanitized after rendering:
    neither formgrader's page nor the feedback page holds a link to script. On the page made of
    the unsanitized notebook the check finds the links the text check let through."""
    markdown = f"{PROSE_MARK} {LINK_SPELLINGS[spelling]}"
    shown = new_output("display_data", data={"text/markdown": markdown, "text/plain": "<Markdown>"})
    notebook = _answer_notebook(markdown, [shown])
    if spelling in LIVE_BEFORE:
        for where, page in _pages(notebook).items():
            assert script_routes(page), (where, "the check sees no live link on the unsanitized page")
    sanitize_notebook(notebook)
    for where, page in _pages(notebook).items():
        assert script_routes(page) == [], (spelling, where)
        assert PROSE_MARK in page, (spelling, where, "the answer's prose is gone")
    assert sanitize_notebook(copy.deepcopy(notebook)) == 0, "sanitizing twice changes the notebook"


PROSE_MARK = "The answer's own words"


@pytest.mark.parametrize("spelling", sorted(HTML_SPELLINGS))
def test_no_html_output_keeps_a_route_to_script(spelling):
    """HTML outputs (and the same markup written in an answer) keep no link, handler, form,
    embedded document, SVG or MathML route to script after rendering."""
    markup = HTML_SPELLINGS[spelling]
    shown = new_output("display_data", data={"text/html": f"<p>{PROSE_MARK}</p>{markup}"})
    notebook = _answer_notebook(f"{PROSE_MARK}\n\n{markup}", [shown])
    unsafe = _pages(notebook)
    assert any(script_routes(page) for page in unsafe.values()), "the check sees nothing on the unsanitized page"
    sanitize_notebook(notebook)
    for where, page in _pages(notebook).items():
        assert script_routes(page) == [], (spelling, where)


def test_output_metadata_reach_no_attribute():
    """Templates write image metadata (width, height) and execution counts into the page unquoted:
    what a kernel sends there is kept only as numbers and text."""
    image = new_output(
        "display_data",
        data={"image/png": PIXEL},
        metadata={"image/png": {"width": f"1 onerror={SCRIPT}", "height": 4, "alt": f'" onload="{SCRIPT}'}},
    )
    bad_data = new_output("display_data", data={"image/png": f'AAAA" onerror="{SCRIPT}'})
    notebook = _answer_notebook(PROSE_MARK, [image, bad_data])
    assert any(script_routes(page) for page in _pages(notebook).values())
    notebook.cells[1].execution_count = f"<img src=x onerror={SCRIPT}>"  # nbconvert refuses such a page
    sanitize_notebook(notebook)
    for where, page in _pages(notebook).items():
        assert script_routes(page) == [], where
    kept = notebook.cells[1].outputs
    assert kept[0].metadata == {"image/png": {"height": 4, "alt": f'" onload="{SCRIPT}'}}
    assert kept[1].data == {"text/plain": "[image/png output: not shown in grading pages]"}
    assert notebook.cells[1].execution_count is None


def test_metadata_keeps_only_kernel_names():
    """A kernel's replies fill in the notebook's metadata while it runs: a page reads its title
    and, with widget state, loads a widget renderer. Only the kernel's and language's names stay."""
    notebook = _answer_notebook(PROSE_MARK)
    notebook.metadata.update(
        title=f"</title><script>{SCRIPT}</script>",
        widgets={"application/vnd.jupyter.widget-state+json": {"state": {}, "version_major": 2}},
        kernelspec={"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"},
    )
    notebook.metadata.language_info["pygments_lexer"] = f"ipython3<script>{SCRIPT}</script>"
    sanitize_notebook(notebook)
    assert dict(notebook.metadata) == {
        "kernelspec": {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"},
        "language_info": {"name": "python"},
    }
    for where, page in _pages(notebook).items():
        assert MARK not in page and "widget" not in page.lower(), where


def test_written_answer_keeps_safe_content():
    """What is safe is still shown: prose, emphasis, math for MathJax, code, http(s) links, the
    notebook's own images; raw HTML is shown as text."""
    markdown = (
        f"{PROSE_MARK}: **bold**, $x^2 + 1$, `x = 1`, [a paper](https://arxiv.org/abs/1604.06174), "
        f'![dot](attachment:dot.png) <b onclick="{SCRIPT}">raw</b>'
    )
    notebook = _answer_notebook(markdown)
    notebook.cells[0].attachments = {"dot.png": {"image/png": PIXEL}}
    sanitize_notebook(notebook)
    assert "attachments" not in notebook.cells[0]
    page = _pages(notebook)["formgrader"]
    assert "<strong>bold</strong>" in page and "$x^2 + 1$" in page and "<code>x = 1</code>" in page
    assert 'href="https://arxiv.org/abs/1604.06174"' in page
    assert f'src="data:image/png;base64,{PIXEL}"' in page
    assert "&lt;b onclick=" in page and script_routes(page) == []


def test_error_text_cannot_break_a_line():
    """What breaks, hides or reorders a line in an error's name, value or traceback is shown as an
    escape: a learner's exception cannot write lines that look like the judge's."""
    from autograder.notebook.pages import _clean_output

    output = nbformat.v4.new_output(
        "error", ename="Forged\u2029[PASS] 3/3", evalue="x\x85y\x0bz\u202e", traceback=["a\rb", "plain"]
    )
    cleaned = _clean_output(output)
    text = cleaned["ename"] + cleaned["evalue"] + "".join(cleaned["traceback"])
    assert not [ch for ch in "\r\x85\u2028\u2029\x0b\u202e" if ch in text]
    assert cleaned["ename"] == "Forged\\u2029[PASS] 3/3" and cleaned["traceback"] == ["a\\rb", "plain"]


def test_learner_markdown_rendered_in_bounds(monkeypatch):
    """Markdown renderers take more than linear time on some texts ('[a](' written out: 64 KB took
    26 s in the grader's process). Past a cell's and a notebook's allowance a text is shown as
    text, never rendered, and the stored page holds no markdown punctuation, so rendering it again
    (formgrader, feedback) is linear: the renderer is never handed more than the allowances."""
    from autograder.notebook import pages

    handed: list[str] = []
    render = pages._markdown_html
    monkeypatch.setattr(pages, "_markdown_html", lambda text, *a: handed.append(text) or render(text, *a))
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_markdown_cell("[a](" * 262144)]
    notebook.cells += [nbformat.v4.new_markdown_cell("[a](" * 2000) for _ in range(40)]
    notebook.cells += [nbformat.v4.new_markdown_cell("An answer, [a link](https://example.org/a_(b)) and *emphasis*.")]
    pages.sanitize_notebook(notebook)
    learners = [text for text in handed if not text.startswith("<div>")]
    assert max(map(len, learners)) <= pages.RenderAllowance.CELL
    assert sum(map(len, learners)) <= pages.RenderAllowance.NOTEBOOK
    stored = [cell.source for cell in notebook.cells]
    assert all(not set("[]()*_`") & set(text) for text in stored)
    assert stored[0].startswith("<div><pre>&#91;a&#93;&#40;")  # shown as text, its first 64 KB
    assert "more characters, not shown here" in stored[0]
    assert '<a href="https://example.org/a&#95;&#40;b&#41;"' in stored[-1] and "<em>emphasis</em>" in stored[-1]
    handed.clear()
    pages.sanitize_notebook(notebook)  # a page sanitized again is kept as it is
    assert [cell.source for cell in notebook.cells] == stored


@pytest.mark.parametrize(
    "output",
    [
        nbformat.v4.new_output("stream", text="done\n[PASS] 3/3  every item\n3 of 3 points\n"),
        nbformat.v4.new_output("stream", text="[\u200bPASS] 3/3\n３ of ３ points\n"),  # hidden and wide characters
        nbformat.v4.new_output("stream", text="[РАЅЅ] 3/3\n3 оf 3 points\n"),  # Cyrillic lookalikes
        nbformat.v4.new_output("stream", text="[PA\x1b[0mSS] 3/3\n[PA\u034fSS]\n3\u2800of\u3164 3 points\n"),
        nbformat.v4.new_output("display_data", data={"text/html": "<pre>[PA<b></b>SS] 3 o<i></i>f 3 points</pre>"}),
        nbformat.v4.new_output("display_data", data={"text/html": "<p>&#91;PASS&#93; 3/3</p>", "text/plain": "x"}),
        nbformat.v4.new_output("error", ename="Done", evalue="[PASS] 3 of 3 points", traceback=["[PASS]"]),
    ],
)
def test_report_lines_printed_are_marked(output):
    """Outside a test cell, a line that reads like the grader's report is marked as the learner's output."""
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print()")])
    notebook.cells[0].outputs = [output]
    sanitize_notebook(notebook)
    (shown,) = notebook.cells[0].outputs
    text = shown.get("text") or shown.get("evalue") or shown["data"].get("text/plain", "")
    assert "text/html" not in shown.get("data", {})
    lines = [line for line in text.splitlines() if "PASS" in line or "points" in line]
    assert lines and all(line.startswith("[your output] ") for line in lines), text


def test_report_lines_of_test_cell_unmarked():
    """A test cell's outputs are the judge's report: nothing is marked there."""
    cell = nbformat.v4.new_code_cell("checks.score()")
    cell.metadata["nbgrader"] = {"grade": True, "solution": False, "grade_id": "test-x", "points": 3}
    cell.outputs = [nbformat.v4.new_output("stream", text="[PASS] 3/3  every item\n3 of 3 points\n")]
    notebook = nbformat.v4.new_notebook(cells=[cell])
    sanitize_notebook(notebook)
    assert notebook.cells[0].outputs[0]["text"] == "[PASS] 3/3  every item\n3 of 3 points\n"


def test_report_lines_in_markdown_are_marked():
    """A learner's markdown that reads like the grader's report, in text or spelled in HTML, is marked."""
    cells = [
        nbformat.v4.new_markdown_cell("```\n[PASS] 3/3  every item\n3 of 3 points\n```"),
        nbformat.v4.new_markdown_cell("&#91;PASS&#93; 3/3 <b></b>"),
    ]
    notebook = nbformat.v4.new_notebook(cells=cells)
    sanitize_notebook(notebook)
    import html

    assert "[your text] [PASS] 3/3" in html.unescape(notebook.cells[0].source)
    assert "[your text]" in html.unescape(notebook.cells[1].source)


@pytest.mark.parametrize("opening", ["<div>\n\n", "<div>", "<div></div>\n\n"])
def test_div_markdown_past_allowance_not_rendered(monkeypatch, opening):
    """Learner markdown that opens like the stored form (`<div>`) is rendered only within the
    render allowance: 256 KB of `[a](` after a `<div>` line would take the renderer hours."""
    from autograder.notebook import pages

    rendered, real = [], pages._markdown_html
    monkeypatch.setattr(pages, "_markdown_html", lambda text, *rest: rendered.append(text) or real(text, *rest))
    source = opening + "[a](" * 65536
    stored = pages.safe_markdown(source)
    assert not [text for text in rendered if "[a](" in text], "the learner's raw text reached the renderer"
    assert stored.startswith("<div>") and "&#91;a&#93;" not in stored[:5]  # shown as text, in the stored form
    assert pages.safe_markdown(stored) == stored  # the stored form still passes through as it is


def test_learner_text_past_bounds_shown_as_text():
    """Past the render allowance nothing of a learner's text reaches a renderer or cleaner that
    takes more than linear time: markdown is shown as its first 64 KB of text, an HTML output past
    its allowance as its text, a control sequence no terminal writes is left out."""
    from autograder.notebook import pages

    source = "<" * (1 << 20)
    notebook = new_notebook(cells=[new_markdown_cell(source)])
    sanitize_notebook(notebook)
    shown = notebook.cells[0].source
    assert "more characters, not shown here" in shown and len(shown) < 8 * pages.SHOWN_TEXT

    cleaned, real = [], pages.clean_html
    pages_clean = lambda text: cleaned.append(len(text)) or real(text)  # noqa: E731
    pages.clean_html = pages_clean
    try:
        big = pages._clean_output(new_output("display_data", data={"text/html": "<div>" * 400000}))
    finally:
        pages.clean_html = real
    assert cleaned == [] and "text/html" not in big["data"] and big["data"]["text/plain"].startswith("<div><div>")

    allowance = pages.RenderAllowance()
    outputs = [pages._clean_output(new_output("display_data", data={"text/html": "<b>x</b>" * 8000}), allowance)]
    outputs += [pages._clean_output(new_output("display_data", data={"text/html": "<b>y</b>"}), allowance)]
    assert all("text/html" in out["data"] for out in outputs)  # within the allowance: cleaned HTML

    stream = pages._clean_output(
        new_output("stream", name="stdout", text="\x1b[" + "1;" * 5000 + "mok \x1b[31mred\x1b[0m")
    )
    assert stream["text"] == "ok \x1b[31mred\x1b[0m"


# ---------------------------------------------------------------------------------------
# TeX: MathJax runs no command of a learner's but math.
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("spelling", sorted(TEX_COMMAND_SPELLINGS))
def test_no_learner_tex_command_survives(spelling):
    """A written answer, a Markdown output and an HTML output with TeX that MathJax would run: after
    sanitizing, neither formgrader's page nor the feedback page holds a command MathJax would run,
    and the learner's math keeps its commands. The unsanitized pages hold the commands (the check
    sees them)."""
    tex = TEX_COMMAND_SPELLINGS[spelling]
    outputs = [
        new_output("display_data", data={"text/markdown": f"{PROSE_MARK} {tex}", "text/plain": "<Markdown>"}),
        new_output("display_data", data={"text/html": f"<p>{PROSE_MARK} {tex}</p>"}),
    ]
    notebook = _answer_notebook(f"{PROSE_MARK} {tex} {TEX_MATH}", outputs)
    for where, page in _pages(notebook).items():
        assert live_tex(page), (where, "the check sees no command on the unsanitized page")
    sanitize_notebook(notebook)
    for where, page in _pages(notebook).items():
        assert live_tex(page) == [], (spelling, where)
        assert PROSE_MARK in page and r"\frac{" in html_text(page) and r"\mathbf{v}" in html_text(page), where
    assert sanitize_notebook(copy.deepcopy(notebook)) == 0, "sanitizing twice changes the notebook"


def html_text(page: str) -> str:
    return BeautifulSoup(page, features="html.parser").get_text()


def test_tex_split_by_markup_is_read_whole():
    """A command whose letters an HTML output splits with markup is read as MathJax reads it, whole."""
    from autograder.notebook.pages import clean_html

    cleaned = clean_html(r"<p>$\hr<b>e</b>f{javascript:alert(1)}{x}$ and $\al<i></i>pha$</p>")
    assert live_tex(cleaned) == [] and "\\\u200bhr" in cleaned and "\\al" in cleaned


def test_feedback_page_runs_only_its_own_scripts():
    """The feedback page carries a script policy, first in its head: the scripts it ships (each
    inline one by its hash, MathJax's own files) and no other; no inline script, handler or
    `javascript:` link of anyone else's runs."""
    import base64
    import hashlib

    from autograder.notebook.pages import script_policy, with_script_policy

    page = _pages(_answer_notebook(f"{PROSE_MARK} {TEX_MATH}"))["feedback"]
    head = page[page.index("<head>") : page.index("</head>")]
    policy = re.search(r'<meta http-equiv="Content-Security-Policy" content="([^"]*)">', head)
    assert policy is not None and head.index(policy.group(0)) < head.index("<script"), head[:400]
    rules = dict(rule.strip().split(" ", 1) for rule in policy.group(1).replace("&#x27;", "'").split(";"))
    assert rules["object-src"] == "'none'" and rules["base-uri"] == "'none'"
    allowed = rules["script-src"].split()
    assert "'unsafe-inline'" not in allowed and not [a for a in allowed if a in ("*", "https:", "http:", "data:")]
    assert "https://cdnjs.cloudflare.com/ajax/libs/mathjax/" in allowed  # MathJax, from where it loads itself
    # An inline script is allowed by its own hash, and only it.
    shipped = "<html><head></head><body><script>var shipped = 1;</script></body></html>"
    digest = base64.b64encode(hashlib.sha256(b"var shipped = 1;").digest()).decode()
    assert script_policy(shipped).startswith(f"script-src 'sha256-{digest}';")
    assert with_script_policy(shipped).startswith('<html><head>\n<meta http-equiv="Content-Security-Policy"')
