"""The grader's pages: `PageExporter` writes the document nbconvert's HTMLExporter writes.

HTMLExporter renders a page, then reads it back through BeautifulSoup's pure-Python parser to
add an alt text to every image without one and a tab stop to each cell's input and output
inside `.jp-Notebook`; `with_alt_text_and_tab_stops` adds the same to the start tags. Two pages
are the same document when BeautifulSoup reads them the same, so each comparison here reads the
grader's page through it and compares the result with HTMLExporter's, byte for byte.
"""

from __future__ import annotations

import base64

import nbformat
import pytest
from bs4 import BeautifulSoup
from nbconvert.exporters import HTMLExporter
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from autograder.pages import MISSING_ALT, PageExporter, with_alt_text_and_tab_stops
from autograder.paths import SOLUTIONS

PIXEL = base64.b64encode(
    bytes.fromhex(
        "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
        "1f15c4890000000d49444154789c6360000002000154a24f5d0000000049454e44ae426082"
    )
).decode()


def _read_back(page: str) -> str:
    return str(BeautifulSoup(page, features="html.parser"))


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
def test_a_page_is_the_document_html_exporter_writes(template):
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


def test_only_start_tags_outside_scripts_styles_and_comments_change():
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


def test_a_page_without_images_or_a_notebook_element_is_left_as_it_is():
    page = '<html><body><div class="jp-OutputArea-output">x</div><br/><p>text &amp; more</p></body></html>'
    assert with_alt_text_and_tab_stops(page) == (page, 0)


def test_remembered_highlighting_stays_within_its_size_and_skips_long_sources(monkeypatch):
    """Code highlighted once per process is kept only while small: a class of submissions with
    long cells of their own cannot fill a worker's memory through it."""
    from nbconvert.filters.highlight import Highlight2HTML

    from autograder import pages

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
