"""What a browser is shown of a submission: its text and pictures, never its script.

formgrader renders the autograded notebooks on the instructor's own Jupyter server, and the
feedback pages go to learners; both are nbconvert HTML. A learner writes the notebook's
markdown and everything its cells display, so before any page is made of it the grader
rewrites the autograded notebook (`sanitize_notebook`). Every check is made on HTML, after
rendering, never on the markdown a browser never sees:

- markdown written by the learner is rendered as nbconvert renders it (its links decoded, its
  attachments embedded, `/files/` prefixes stripped), that HTML is cleaned by nh3, and the cell
  keeps the cleaned HTML, written so that nbconvert's markdown renderer passes it through as it
  is (`safe_markdown` checks that it does, else the cell shows its text only);
- nh3 keeps an allow-list of tags and attributes: no script, style, SVG, MathML, form or event
  handler; a link keeps only an absolute http(s) or mailto target, or `#fragment`; an image only
  the notebook's own PNG, JPEG or GIF data (no request of a learner's choosing);
- a cell's outputs keep plain text, PNG, JPEG and GIF images (their metadata only as numbers and
  text); HTML is cleaned by nh3, Markdown rendered and cleaned as cells are; SVG, JavaScript,
  widget views and every other type are replaced by a line saying they are not shown;
- the text of the assignment's own cells (locked and test cells, which grading restores, and
  markdown cells whose text is exactly the assignment's) is left as it is: it is the instructor's.

The result is data only: the checks' reports, the learner's printed output and pictures, the
text of the answers, all still there to read. `ForPages`, last of nbgrader's autograde
preprocessors, writes every autograded notebook so: hidden tests out, streams joined, sanitized,
its size bounded.
"""

from __future__ import annotations

import html
import json
import re

import jinja2
import nbformat
import nh3
from nbconvert.filters.highlight import Highlight2HTML
from nbconvert.filters.markdown_mistune import IPythonRenderer, MarkdownWithMath
from nbconvert.filters.strings import strip_files_prefix
from nbformat.notebooknode import NotebookNode
from nbgrader.preprocessors import NbGraderPreprocessor
from traitlets import Integer

from autograder.course.hidden_tests import strip_hidden_tests
from autograder.course.text_safety import page_text, reads_like_the_report
from autograder.judge.core import is_test_cell
from autograder.upstream.nbconvert import HTMLExporterSteps

#: Output types shown as they are (text is escaped by every template; images are pixels).
SAFE_OUTPUTS = frozenset({"text/plain", "image/png", "image/jpeg", "image/gif"})
NOT_SHOWN = "[{kind} output: not shown in grading pages]"
#: What a written answer shows when its HTML could not be made safe (it never has, so far).
NOT_RENDERED = "<p>[a written answer the grader could not show safely]</p>"
#: A tag, for reading text out of HTML: `[^<>]` keeps it linear (from a `<` with no `>` after
#: it, `[^>]*` would scan to the end of the text, once for every `<`).
_TAG = re.compile(r"<[^<>]*>")
#: The most of a learner's text a page shows as text (where it is not rendered); the rest is named.
SHOWN_TEXT = 64 << 10
#: A control sequence longer than any a terminal writes: nbconvert's ANSI filter takes time
#: quadratic in its length (`ESC[1;1;1;...m`), so it is left out of the page.
_LONG_CSI = re.compile(r"\x1b\[[0-?]{32,}[ -/]*[@-~]?")


#: What a stored page never holds (nh3 writes every `&` as a reference), and what takes nh3 more
#: than linear time: a bare `&`, or tags nested deeper than any page nests them.
_BARE_AMPERSAND = re.compile(r"&(?![#a-zA-Z0-9]+;)")
_VOID = frozenset(
    ["area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"]
)
MAX_STORED_NESTING = 64


def _may_be_stored(text: str) -> bool:
    """A linear look at whether text can be in the form pages store, before anything that takes
    more than linear time reads it: no bare `&`, tags nested at most MAX_STORED_NESTING deep."""
    if _BARE_AMPERSAND.search(text):
        return False
    depth = 0
    for tag in _TAG.finditer(text):
        name = tag.group(0)[1:].split(None, 1)[0].rstrip("/>").lower() if len(tag.group(0)) > 2 else ""
        if tag.group(0).startswith("</"):
            depth -= 1
        elif not tag.group(0).endswith("/>") and name not in _VOID:
            depth += 1
            if depth > MAX_STORED_NESTING:
                return False
    return True


def _shown_as_text(text: str) -> str:
    """Learner text for a page as text: at most SHOWN_TEXT characters, the rest named."""
    if len(text) <= SHOWN_TEXT:
        return text
    return (
        text[:SHOWN_TEXT]
        + f"\n[… {len(text) - SHOWN_TEXT} more characters, not shown here: see the submitted notebook]"
    )


def _no_long_sequences(text):
    return _LONG_CSI.sub("", text) if isinstance(text, str) and "\x1b[" in text else text


_INLINE_IMAGE = re.compile(r"^data:image/(png|jpeg|gif);base64,[A-Za-z0-9+/=\s]*$", re.IGNORECASE)
#: A link target a browser follows to another page (after it removes tabs and newlines).
_LINK = re.compile(r"^(?:(?:https?|mailto):|#)", re.IGNORECASE)
#: Attributes whose value a browser reads as an address.
_ADDRESSES = frozenset({"href", "src", "srcset", "action", "formaction", "cite", "background", "poster", "longdesc"})
#: The tags nh3 keeps (its own allow-list, less image maps, whose areas would be links).
_TAGS = frozenset(nh3.ALLOWED_TAGS) - {"area", "map"}
#: Output metadata a template writes into an attribute: kept only as a number (width, height) or text.
_IMAGE_METADATA = {"width": int, "height": int, "alt": str, "unconfined": bool}
#: What a browser strips from an address before reading its scheme (the URL standard's rules).
_URL_IGNORED = re.compile(r"[\t\n\r]")


def _is_the_assignments(cell) -> bool:
    """Cells the assignment's source restores (their text is the instructor's): locked ones and tests."""
    meta = cell.get("metadata", {}).get("nbgrader")
    if not isinstance(meta, dict):
        return False
    return bool(meta.get("locked") or (meta.get("grade") and not meta.get("solution")))


def _address(value: str) -> str:
    """An attribute's address as a browser reads its scheme: tabs and newlines removed, and the
    C0 controls and spaces around it."""
    return _URL_IGNORED.sub("", value).strip("".join(map(chr, range(33))))


def _safe_attribute(tag: str, attribute: str, value: str) -> str | None:
    """nh3's attribute filter: a link goes only to another site (http, https, mailto) or a place
    on the page, and an image shows only what the notebook holds. A relative address is dropped:
    on the instructor's server it is one of the server's own pages, and nbconvert rewrites
    `files/...` addresses after rendering."""
    if attribute not in _ADDRESSES:
        return value
    address = _address(value)
    if tag == "img" and attribute == "src":
        return address if _INLINE_IMAGE.match(address) else None
    if tag == "a" and attribute == "href":
        return address if _LINK.match(address) else None
    return None


def clean_html(html: str) -> str:
    """HTML cleaned to nh3's allow-list with the grader's rules for addresses (_safe_attribute), its
    text's TeX commands outside TEX_COMMANDS written so that MathJax does not run them (neutral_tex)."""
    return neutral_tex(
        nh3.clean(
            html, tags=set(_TAGS), url_schemes={"http", "https", "mailto", "data"}, attribute_filter=_safe_attribute
        )
    )


#: The TeX commands a learner's math keeps, as MathJax reads them: letters and symbols, operators,
#: fonts, accents, spacing, sizes, layout. Any other control word (`\href`, `\unicode`, `\style`,
#: `\class`, `\cssId`, `\require`, `\mathtip`, `\bbox`, `\color`, and `\def`, `\newcommand`,
#: `\let`, `\begingroup`, `\csname`, which would make one of them from other names) is written
#: with NEUTRAL after its backslash: MathJax reads a backslash and then letters, and runs nothing.
_TEX_COMMAND_NAMES = """
    alpha beta gamma delta epsilon varepsilon zeta eta theta vartheta iota kappa lambda mu nu xi pi varpi rho
    varrho sigma varsigma tau upsilon phi varphi chi psi omega Gamma Delta Theta Lambda Xi Pi Sigma Upsilon Phi
    Psi Omega ell hbar nabla partial infty emptyset varnothing Re Im aleph imath jmath wp
    sum prod coprod int iint iiint oint lim limsup liminf sup inf max min arg det dim ker exp log ln lg sin cos
    tan cot sec csc arcsin arccos arctan sinh cosh tanh coth gcd deg hom Pr operatorname limits nolimits
    frac dfrac tfrac binom dbinom tbinom sqrt cdot cdots ldots dots dotsc dotsb vdots ddots times div pm mp
    ast star circ bullet oplus ominus otimes oslash odot cap cup setminus wedge vee land lor lnot neg
    le leq ge geq ne neq lt gt approx sim simeq cong equiv propto ll gg prec succ preceq succeq subset supset
    subseteq supseteq in notin ni mid nmid parallel perp models vdash dashv top bot forall exists nexists
    to gets mapsto rightarrow leftarrow leftrightarrow Rightarrow Leftarrow Leftrightarrow longrightarrow
    longleftarrow longmapsto implies impliedby iff uparrow downarrow updownarrow Uparrow Downarrow
    nearrow searrow swarrow nwarrow hookrightarrow hookleftarrow rightharpoonup leftharpoonup
    langle rangle lvert rvert lVert rVert vert Vert lceil rceil lfloor rfloor backslash prime angle
    triangle square Box diamond lozenge clubsuit spadesuit heartsuit diamondsuit flat natural sharp
    left right middle big Big bigg Bigg bigl bigr Bigl Bigr biggl biggr Biggl Biggr
    mathrm mathbf mathit mathsf mathtt mathcal mathbb mathfrak mathscr boldsymbol bm rm bf it sf tt cal
    text textrm textbf textit textsf texttt textnormal mbox
    hat widehat bar overline underline tilde widetilde vec dot ddot acute grave breve check overrightarrow
    overleftarrow overbrace underbrace stackrel overset underset substack
    quad qquad enspace thinspace negthinspace hspace vspace space
    displaystyle textstyle scriptstyle scriptscriptstyle
    begin end hline cr intercal transpose dagger ddagger checkmark
"""
TEX_COMMANDS = frozenset(_TEX_COMMAND_NAMES.split())
#: What neutral_tex writes after a backslash: TeX reads `\` and it as one symbol, MathJax shows it.
NEUTRAL = "\u200b"
#: A tag, or a text between tags (in HTML made by nh3: every `<` of the text is written `&lt;`).
_TAG_OR_TEXT = re.compile(r"<[^<>]*>|[^<]+")


def neutral_tex(cleaned: str) -> str:
    """Clean HTML whose text holds no TeX command but those of TEX_COMMANDS: read as MathJax reads a
    page (the text between tags joined, entities decoded), each other control word gets NEUTRAL
    after its backslash. Idempotent: a neutral backslash starts no control word."""
    pieces = [match.group(0) for match in _TAG_OR_TEXT.finditer(cleaned)]
    # Each text's characters as a browser reads them, with where each came from.
    decoded, where = [], []
    for index, piece in enumerate(pieces):
        if not piece.startswith("<"):
            for offset, ch in _decoded_characters(piece):
                decoded.append(ch)
                where.append((index, offset))
    text, neutral, at = "".join(decoded), set(), 0
    while at < len(text):
        if text[at] != "\\":
            at += 1
            continue
        end = at + 1
        while end < len(text) and text[end].isascii() and text[end].isalpha():
            end += 1
        if end == at + 1:  # a control symbol (`\\`, `\{`, `\(`...): nothing is run
            at += 2
            continue
        if text[at + 1 : end] not in TEX_COMMANDS:
            neutral.add(where[at])
        at = end
    if not neutral:
        return cleaned
    for index in sorted({index for index, _ in neutral}):
        offsets = sorted(offset for i, offset in neutral if i == index)
        piece = pieces[index]
        for offset in reversed(offsets):  # after the backslash as written (`\\` or a reference)
            piece = piece[:offset] + NEUTRAL + piece[offset:]
        pieces[index] = piece
    return "".join(pieces)


_REFERENCE = re.compile(r"&(?:#[0-9]+|#[xX][0-9a-fA-F]+|[a-zA-Z][a-zA-Z0-9]*);")


def _decoded_characters(text: str):
    """(offset just after it, character) of each character of HTML text as a browser decodes it."""
    at = 0
    while at < len(text):
        reference = _REFERENCE.match(text, at) if text[at] == "&" else None
        if reference is not None:
            for ch in html.unescape(reference.group(0)):
                yield reference.end(), ch
            at = reference.end()
        else:
            yield at + 1, text[at]
            at += 1


def _markdown_html(source: str, attachments: dict | None = None) -> str:
    """The HTML nbconvert's templates make of a markdown source (HTMLExporter.markdown2html, then
    the templates' strip_files_prefix)."""
    renderer = IPythonRenderer(escape=False, attachments=attachments or {}, anchor_link_text="¶")
    return strip_files_prefix(MarkdownWithMath(renderer=renderer).render(source))


#: Markdown's punctuation, written as character references in a stored page (the same text to a
#: browser): the renderer then finds nothing to match in it, and takes linear time on any text
#: (on `[a](` written out 32,000 times inside an HTML block it took 27 s, with these 0.04 s).
_MARKDOWN_PUNCTUATION = {ord(c): f"&#{ord(c)};" for c in "[]()*_`!\\~$"}


def _verbatim(clean: str) -> str:
    """Markdown that nbconvert renders as exactly this HTML: one line (newlines written as
    character references, the same text to a browser) opening an HTML block, markdown's
    punctuation written as references too."""
    return "<div>" + clean.replace("\r", "&#13;").replace("\n", "&#10;").translate(_MARKDOWN_PUNCTUATION) + "</div>"


def _shown_as_is(stored: str) -> bool:
    """Whether nbconvert shows this markdown as the HTML it is, and nh3 keeps that HTML whole.

    The linear check comes first: only a text already in `_verbatim`'s form (one line, markdown's
    punctuation as references) is then rendered, whatever its length. Learner text in any other
    form never reaches the renderer here (some texts take it quadratic time: `RenderAllowance`)."""
    try:
        return _verbatim(clean_html(stored)[5:-6]) == stored and _markdown_html(stored).strip() == stored
    except Exception:  # the renderer refused it (a missing attachment, say): not shown as it is
        return False


class RenderAllowance:
    """How much learner markdown one notebook may still have rendered. Markdown renderers take
    more than linear time on some texts (64 KB of `[a](` took 26 s, 128 KB 145 s), in the
    grader's own process: past these bounds a text is shown as text, never rendered."""

    #: The longest markdown rendered (a long written answer fits; the worst text of this length
    #: takes about 2 s, and the notebook's allowance holds about three).
    CELL = 24 << 10
    #: The most markdown rendered for one notebook, all its cells and outputs together.
    NOTEBOOK = 64 << 10

    #: The same for HTML a learner's output holds (the HTML cleaner too takes more than linear time
    #: on some texts: 256 KB of nested `<div>` 14 s): past these, the output is shown as its text.
    HTML_OUTPUT = 64 << 10
    HTML_NOTEBOOK = 1 << 20

    def __init__(self):
        self.left = self.NOTEBOOK
        self.html_left = self.HTML_NOTEBOOK

    def take_html(self, text: str) -> bool:
        if len(text) > self.HTML_OUTPUT or len(text) > self.html_left:
            return False
        self.html_left -= len(text)
        return True

    def take(self, text: str) -> bool:
        if len(text) > self.CELL or len(text) > self.left:
            return False
        self.left -= len(text)
        return True


def safe_markdown(source: str, attachments: dict | None = None, allowance: RenderAllowance | None = None) -> str:
    """Learner markdown as the grader keeps it for pages: its raw HTML made text (every `<` written
    `&lt;`, so the instructor reads what was tried), rendered as nbconvert renders it, cleaned by
    nh3 after rendering, written so that rendering it again changes nothing (checked). Where that
    check fails, or the text is past what the allowance renders (one is made for the call when
    none is given), the source is shown as text; where even that fails, a line says so."""
    allowance = allowance or RenderAllowance()
    as_text = "<pre>" + html.escape(_shown_as_text(source), quote=False) + "</pre>"
    if source.startswith("<div>") and _may_be_stored(source) and _shown_as_is(source):
        return source  # already in this form (a notebook sanitized before; rendering it is linear)
    if not allowance.take(source):
        rendered = as_text
    else:
        try:
            rendered = _markdown_html(source.replace("<", "&lt;"), attachments).strip()
        except Exception:  # nbconvert could not render it: its text is shown instead
            rendered = as_text
    for candidate in (rendered, as_text, NOT_RENDERED):
        stored = _verbatim(clean_html(candidate))
        if _shown_as_is(stored):
            return stored
    raise AssertionError("the grader's own line for an unshowable answer is not shown as it is")


def _image_metadata(metadata) -> dict:
    """An output's metadata, only what templates write of it for images, as numbers and text."""
    kept = {}
    for mime in ("image/png", "image/jpeg", "image/gif"):
        given = metadata.get(mime) if isinstance(metadata, dict) else None
        if isinstance(given, dict):
            ok = {k: v for k, v in given.items() if k in _IMAGE_METADATA and type(v) is _IMAGE_METADATA[k]}
            if ok:
                kept[mime] = ok
    return kept


def _count(value) -> int | None:
    """An execution count as a template writes it (unescaped): a number or nothing."""
    return value if type(value) is int else None


def _visible(text):
    """An error's text on a page: what breaks, hides or reorders a line shown, not obeyed."""
    return page_text(text) if isinstance(text, str) else text


#: What marks a line of a learner's output that reads like the grader's report (`[PASS]`, `3 of 3
#: points`): outside a test cell, only the learner's code wrote it.
LEARNER_OUTPUT = "[your output] "


def _marked(text: str, mark: str = LEARNER_OUTPUT) -> str:
    """text, each line that reads like the grader's report marked as the learner's."""
    if not reads_like_the_report(text):
        return text
    lines = text.splitlines(keepends=True)
    return "".join(mark + line if reads_like_the_report(line) else line for line in lines)


def _marked_output(output) -> NotebookNode:
    """A cleaned output of a learner's cell (not a test cell) with its report-like lines marked; an
    HTML one that reads like the report is shown as its text, marked."""
    kind = output.get("output_type")
    if kind == "stream" and isinstance(output.get("text"), str):
        output["text"] = _marked(output["text"])
    elif kind == "error":
        output["evalue"] = _marked(str(output.get("evalue", "")))
        output["traceback"] = [_marked(str(line)) for line in output.get("traceback") or []]
    elif isinstance(output.get("data"), dict):
        data = output["data"]
        if isinstance(data.get("text/plain"), str):
            data["text/plain"] = _marked(data["text/plain"])
        shown = data.get("text/html")
        if isinstance(shown, str):
            text = html.unescape(_TAG.sub("", shown))
            if reads_like_the_report(text):
                del data["text/html"]
                data["text/plain"] = _marked(" ".join(text.split()))
    return output


def _clean_output(output, allowance: RenderAllowance | None = None) -> NotebookNode:
    allowance = allowance or RenderAllowance()
    kind = output.get("output_type")
    if kind == "stream":
        output["text"] = _no_long_sequences(output.get("text"))
        return output  # text, escaped when rendered
    if kind == "error":
        # Its traceback is escaped when rendered; what breaks a line is shown, not obeyed.
        output["ename"], output["evalue"] = _visible(output.get("ename", "")), _visible(output.get("evalue", ""))
        if isinstance(output.get("traceback"), list):
            output["traceback"] = [_no_long_sequences(_visible(line)) for line in output["traceback"]]
        return output
    data = output.get("data")
    if not isinstance(data, dict):
        return NotebookNode(output_type="stream", name="stdout", text="[an output the grader could not read]\n")
    kept, dropped = {}, []
    for mime, value in data.items():
        text = "".join(value) if isinstance(value, list) and all(isinstance(v, str) for v in value) else value
        if mime in SAFE_OUTPUTS and isinstance(text, str):
            if mime == "text/plain" or _INLINE_IMAGE.match(f"data:{mime};base64,{text}"):
                kept[mime] = _no_long_sequences(text)
            else:
                dropped.append(mime)
        elif mime == "text/html" and isinstance(text, str) and allowance.take_html(text):
            kept[mime] = clean_html(text)
        elif mime == "text/html" and isinstance(text, str):  # past the allowance: its text, escaped when shown
            kept.setdefault("text/plain", _shown_as_text(text))
        elif mime == "text/markdown" and isinstance(text, str):
            kept.setdefault("text/html", clean_html(safe_markdown(text, allowance=allowance)))
        else:
            dropped.append(mime)
    if dropped and not kept:
        kept["text/plain"] = NOT_SHOWN.format(kind=", ".join(sorted(dropped))[:200])
    output["data"] = kept
    output["metadata"] = _image_metadata(output.get("metadata"))
    if "execution_count" in output:
        output["execution_count"] = _count(output.get("execution_count"))
    return output


#: A name in the notebook's kernel and language metadata (what templates and highlighting read).
_NAME = re.compile(r"^[\w .+/()-]{0,100}$")


def _names(value) -> dict:
    """A metadata dict of names: only text that is a plain name, numbers, and such dicts one level down."""
    if not isinstance(value, dict):
        return {}
    kept: dict[str, object] = {}
    for key, item in value.items():
        if isinstance(item, str) and _NAME.match(item) or type(item) is int:
            kept[key] = item
        elif isinstance(item, dict):
            kept[key] = {k: v for k, v in item.items() if isinstance(v, str) and _NAME.match(v) or type(v) is int}
    return kept


def sanitize_notebook(notebook, assignment_texts: frozenset[str] = frozenset()) -> int:
    """Rewrite, in place, what a learner wrote or displayed so that no page made of this notebook
    runs anything (see the module docstring). assignment_texts: the markdown of the assignment's
    own cells, left as it is. Returns how many cells changed."""
    changed, allowance = 0, RenderAllowance()
    for cell in notebook.get("cells", []):
        before = repr(cell)
        if isinstance(cell.get("source"), list):  # as written on disk: lines
            cell["source"] = "".join(str(line) for line in cell["source"])
        if not isinstance(cell.get("source", ""), str):
            cell["source"] = ""
        own = _is_the_assignments(cell) or cell.get("source") in assignment_texts
        attachments = cell.pop("attachments", None) if cell.get("cell_type") != "code" else None
        if cell.get("cell_type") == "markdown" and not own:
            # Attachments are embedded by rendering (as data the sanitizer lets through or not).
            bundles = {k: v for k, v in (attachments or {}).items() if isinstance(v, dict)}
            source = _marked(cell.get("source", ""), "[your text] ")
            if reads_like_the_report(_TAG.sub("", html.unescape(source))) and source == cell.get("source"):
                source = "[your text]\n\n" + source  # the marks are spelled in HTML or entities
            cell["source"] = safe_markdown(source, bundles, allowance)
        elif cell.get("cell_type") == "markdown" and attachments:
            cell["attachments"] = attachments  # the instructor's own
        elif cell.get("cell_type") == "raw":
            cell["source"] = cell.get("source", "").replace("<", "&lt;")
        if cell.get("cell_type") == "code":
            cell["outputs"] = [_clean_output(output, allowance) for output in cell.get("outputs", [])]
            if not is_test_cell(cell):  # only the judge writes a test cell's report
                cell["outputs"] = [_marked_output(output) for output in cell["outputs"]]
            cell["execution_count"] = _count(cell.get("execution_count"))
        changed += repr(cell) != before
    # The notebook's own metadata, which the kernel's replies fill in while it runs: its kernel and
    # language as names; no title, no widget state (a page with it loads a widget renderer).
    metadata = notebook.get("metadata")
    if isinstance(metadata, dict):
        kept = {key: _names(metadata.get(key)) for key in ("kernelspec", "language_info") if key in metadata}
        if kept != metadata:
            metadata.clear()
            metadata.update(nbformat.from_dict(kept))
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
    for key in sorted(sizes, key=sizes.__getitem__, reverse=True):
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
    them varies from run to run), nothing a browser would run (autograder/notebook/pages.py), and its size
    bounded (`max_bytes`, counted as a page would escape it)."""

    max_bytes = Integer(8 << 20, help="The most bytes an autograded notebook may hold, as a page escapes it").tag(
        config=True
    )

    def preprocess(self, nb, resources):
        strip_hidden_tests(nb)
        coalesce_streams(nb)
        from autograder.course.assignment import assignment_source

        own = frozenset()
        source = (
            assignment_source(self.config, resources) / f"{resources.get('nbgrader', {}).get('notebook', '')}.ipynb"
        )
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
        merged: list[NotebookNode] = []
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


# ---------------------------------------------------------------------------------------
# The page itself: nbconvert's HTML, without reading it back through BeautifulSoup.
# ---------------------------------------------------------------------------------------
#: What nbconvert's HTMLExporter gives an image that has no alternative text.
MISSING_ALT = "No description has been provided for this image"
#: Elements a browser reads as text rather than tags (and comments), or a tag with its attributes.
_TOKEN = re.compile(
    r"""(?P<raw><(script|style)\b(?:[^>"']|"[^"]*"|'[^']*')*>.*?</\2\s*>|<!--.*?-->)"""
    r"""|<(?P<end>/?)(?P<name>[a-zA-Z][a-zA-Z0-9-]*)(?P<attributes>(?:[^>"']|"[^"]*"|'[^']*')*)>""",
    re.IGNORECASE | re.DOTALL,
)
#: The same, where only images can change (a page without an element of class jp-Notebook).
_IMAGE_TOKEN = re.compile(
    r"""(?P<raw><(script|style)\b(?:[^>"']|"[^"]*"|'[^']*')*>.*?</\2\s*>|<!--.*?-->)"""
    r"""|<(?P<end>)(?P<name>img)\b(?P<attributes>(?:[^>"']|"[^"]*"|'[^']*')*)>""",
    re.IGNORECASE | re.DOTALL,
)
_ATTRIBUTE = re.compile(r"""\s*(?P<name>[^\s"'>/=]+)(?:\s*=\s*(?P<value>"[^"]*"|'[^']*'|[^\s"'=<>`]+))?""")
_VOID = frozenset(
    {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}
)
#: The elements HTMLExporter makes focusable, inside an element of class jp-Notebook.
_FOCUSABLE = frozenset({"jp-Cell-inputWrapper", "jp-OutputArea-output"})


def _attributes(text: str) -> list[tuple[str, str | None, str]]:
    """(name, value without quotes or None, the attribute as written) of a start tag's attributes."""
    found = []
    for match in _ATTRIBUTE.finditer(text):
        value = match.group("value")
        if value is not None and value[:1] in "\"'":
            value = value[1:-1]
        found.append((match.group("name").lower(), value, match.group(0).strip()))
    return found


def with_alt_text_and_tab_stops(page: str) -> tuple[str, int]:
    """What nbconvert's HTMLExporter adds to a page once it is rendered (an alt text on every
    image without one; tabindex 0 on each cell's input and output inside `.jp-Notebook`), added in
    the start tags themselves: the document the exporter makes, without its round trip through
    BeautifulSoup's pure-Python parser (half of a feedback page's time). (page, images that got
    the alt text)."""
    tokens = _TOKEN if "jp-Notebook" in page else _IMAGE_TOKEN
    if tokens is _IMAGE_TOKEN and not re.search(r"<img\b", page, re.IGNORECASE):
        return page, 0
    pieces: list[str] = []
    open_tags: list[tuple[str, bool]] = []  # (tag name, whether it has the class jp-Notebook)
    missing, position = 0, 0
    for match in tokens.finditer(page):
        pieces.append(page[position : match.start()])
        position = match.end()
        if match.group("raw") is not None or match.group("end"):
            if match.group("end"):  # close up to the element it names, as a lenient parser does
                name = match.group("name").lower()
                for depth in range(len(open_tags) - 1, -1, -1):
                    if open_tags[depth][0] == name:
                        del open_tags[depth:]
                        break
            pieces.append(match.group(0))
            continue
        name, text = match.group("name").lower(), match.group("attributes")
        closes = text.rstrip().endswith("/")
        attributes = _attributes(text.rstrip()[:-1] if closes else text)
        classes = set(next((v for n, v, _ in attributes if n == "class" and v), "").split())
        written = [raw for _, _, raw in attributes]
        if name == "img" and not any(n == "alt" for n, _, _ in attributes):
            written.append(f'alt="{MISSING_ALT}"')
            missing += 1
        if name == "div" and classes & _FOCUSABLE and any(inside for _, inside in open_tags):
            written = [raw for n, _, raw in attributes if n != "tabindex"]
            where = next((i for i, (n, _, _) in enumerate(attributes) if n == "tabindex"), len(written))
            written.insert(where, 'tabindex="0"')
        changed = written != [raw for _, _, raw in attributes]
        pieces.append(
            f"<{match.group('name')}{''.join(' ' + w for w in written)}{'/' if closes else ''}>"
            if changed
            else match.group(0)
        )
        if name not in _VOID and not closes:
            open_tags.append((name, "jp-Notebook" in classes))
    pieces.append(page[position:])
    return "".join(pieces), missing


class _Templates(jinja2.BytecodeCache):
    """Compiled templates kept in memory for the process: every student's pages use the same ones
    (Jinja checks each template's source against the checksum kept with it)."""

    def __init__(self):
        self.kept: dict[str, bytes] = {}

    def load_bytecode(self, bucket):
        if bucket.key in self.kept:
            bucket.bytecode_from_string(self.kept[bucket.key])

    def dump_bytecode(self, bucket):
        self.kept[bucket.key] = bucket.bytecode_to_string()


_TEMPLATES = _Templates()


#: Highlighted code, by (source, language, magics language, formatter options).
_HIGHLIGHTED: dict[tuple, str] = {}
#: Sources longer than this are highlighted every time: a submission's own long cells would only
#: fill a worker's memory, student after student (the assignment's cells are far shorter).
REMEMBERED_SOURCE = 8_000
#: The most characters kept, sources and highlighted code together, before the memo is emptied.
REMEMBERED_TOTAL = 4_000_000
_highlighted_size = 0


class _RememberedHighlight:
    """nbconvert's code highlighting, each source highlighted once per process: most of a page's
    code is the assignment's own, the same in every student's notebook."""

    def __init__(self, highlight: Highlight2HTML):
        self.highlight = highlight
        self.options = json.dumps(highlight.extra_formatter_options, sort_keys=True, default=str)

    def __call__(self, source, language=None, metadata=None):
        global _highlighted_size
        if not isinstance(source, str) or len(source) > REMEMBERED_SOURCE:
            return self.highlight(source, language, metadata)
        magics = metadata.get("magics_language") if isinstance(metadata, dict) else None
        key = (source, language or self.highlight.pygments_lexer, magics, self.options)
        if key not in _HIGHLIGHTED:
            highlighted = self.highlight(source, language, metadata)
            if _highlighted_size + len(source) + len(highlighted) > REMEMBERED_TOTAL:
                _HIGHLIGHTED.clear()
                _highlighted_size = 0
            _HIGHLIGHTED[key] = highlighted
            _highlighted_size += len(source) + len(highlighted)
        return _HIGHLIGHTED[key]


class PageExporter(HTMLExporterSteps):
    """nbconvert's HTMLExporter making the same pages in about half the time: its alt texts and tab
    stops are added by with_alt_text_and_tab_stops, its templates are compiled once per process
    and each code source is highlighted once. The grader's feedback pages are written with it
    (`configure` names it for nbgrader's generate_feedback)."""

    def template_cache(self) -> jinja2.BytecodeCache:
        return _TEMPLATES

    def code_highlighter(self, lexer: str | None) -> _RememberedHighlight:
        return _RememberedHighlight(Highlight2HTML(pygments_lexer=lexer, parent=self))

    def finish_page(self, html: str) -> str:
        page, missing = with_alt_text_and_tab_stops(html)
        if missing:
            self.log.warning("Alternative text is missing on %s image(s).", missing)
        return with_script_policy(page)


#: A script element of a page: its attributes and its text.
_SCRIPT = re.compile(r"<script\b(?P<attributes>[^>]*)>(?P<text>.*?)</script\s*>", re.IGNORECASE | re.DOTALL)
#: Script types a browser runs (no type, or a JavaScript one).
_RUN_TYPES = frozenset({"", "text/javascript", "application/javascript", "module"})


def script_policy(page: str) -> str:
    """The Content-Security-Policy a page carries: the scripts it ships and no other. Each inline
    script by its hash, each script file's folder (MathJax loads its extensions from there);
    nothing else runs: no script a learner's text could add, no handler, no `javascript:` link
    (MathJax's `\\href` included). MathJax runs its configuration block (`text/x-mathjax-config`)
    through eval: a page with one allows eval, of what its own scripts pass it."""
    import base64
    import hashlib

    sources, configured = set(), False
    for match in _SCRIPT.finditer(page):
        attributes = {name: value or "" for name, value, _ in _attributes(match.group("attributes"))}
        kind = attributes.get("type", "").strip().lower()
        if attributes.get("src"):
            sources.add(_script_folder(html.unescape(attributes["src"])))
        elif kind in _RUN_TYPES:
            digest = hashlib.sha256(match.group("text").encode()).digest()
            sources.add(f"'sha256-{base64.b64encode(digest).decode()}'")
        elif kind == "text/x-mathjax-config":
            configured = True
    allowed = " ".join(sorted(sources) + (["'unsafe-eval'"] if configured else [])) or "'none'"
    return f"script-src {allowed}; object-src 'none'; base-uri 'none'; form-action 'none'"


def _script_folder(address: str) -> str:
    """Where a page's script file loads its own scripts from: its folder; for MathJax's
    `latest.js`, which loads the newest MathJax 2 of its CDN, the folder of MathJax's versions."""
    if "/" not in address.partition("://")[2]:
        return address
    folder, _, name = address.partition("?")[0].rpartition("/")
    if name == "latest.js" and "/" in folder.partition("://")[2]:
        folder = folder.rpartition("/")[0]
    return folder + "/"


def with_script_policy(page: str) -> str:
    """The page with its script_policy in a meta element, first in its head (before any script)."""
    head = re.search(r"<head\b[^>]*>", page, re.IGNORECASE)
    if head is None:
        return page
    meta = f'<meta http-equiv="Content-Security-Policy" content="{html.escape(script_policy(page))}">'
    return page[: head.end()] + "\n" + meta + page[head.end() :]
