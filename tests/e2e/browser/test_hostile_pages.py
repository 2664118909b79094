"""A submission written to attack the instructor through formgrader and the learner's feedback page.

One student, `hostile-pages`, hands in the solution of 04-exercise with script in every place a
learner controls that a page shows:

- the written answer `answer-why-hvp` (markdown) holds `<img src="x" onerror=...>`, a `<script>` and
  a link to the script in every spelling that only markdown or the browser decodes to `javascript:`
  (`java&#115;cript:`, `javascript&colon;`, `javascript\\:`, a reference definition with
  `&#106;avascript:`, a `/files/` prefix, `data:`, `vbscript:`, ...: tests/fixtures/build.py);
- appended code cells display an SVG (`IPython.display.SVG` and a raw `image/svg+xml` bundle) with
  an onload handler and a `<script>`, HTML (with a `<script>` and an onerror image), Markdown with
  an onerror image, and `application/javascript` (`IPython.display.Javascript`); and the same links
  as Markdown and as HTML (with SVG and MathML links, handlers alone, a form, an iframe), beside an
  image whose width metadata carries a handler;
- the notebook's metadata carries a `title` that closes `<title>` and opens a `<script>`.

Each script, if it ran, would mark the page (document.title and window.PWNED name the path it came
by) and use the instructor's session: create a terminal (POST /api/terminals with the _xsrf
cookie) and give full marks through formgrader's grade API (GET /formgrader/api/grades, PUT
/formgrader/api/grade/<id>); every such request carries an X-Pwned header naming its path.

The class (that student and a classmate handing in the solutions) is graded with the bundle's
grader, as tests/e2e/browser/test_formgrader.py grades the samples. Then, in headless Chromium,
formgrader's page of the student's 04-exercise and the student's feedback page (served over
http) must show the answer as text and run none of it: the title unchanged, no window.PWNED, no
element with an event handler or script of the submission's, no request to /api/terminals or to
the grade API but the one the instructor makes, and no terminal on the server, even after every
link of the submission's cells is clicked. The instructor
then grades the answer, and the gradebook holds that grade. Last, a control: the same script,
run by hand in formgrader's page of the classmate, does create a terminal and change grades, and
a click on a link of the unsanitized page runs its script, so the checks above would have seen it.

Screenshots: runs/browser/test_hostile_submission_runs_nothing_in_pages-NN-<step>.png.
"""

from __future__ import annotations

import base64
import io
import json
import re
import shutil
import urllib.parse
from pathlib import Path

import labdriver as lab
import nbformat
import pytest
from labdriver import SOLUTIONS
from nbgrader.api import Gradebook

from tests.fixtures.build import PIXEL_PNG, script_html_spellings, script_link_spellings

pytestmark = pytest.mark.browser

ASSIGNMENT = "performance-05"
STUDENT, CLASSMATE = "hostile-pages", "classmate"
NOTEBOOK, CELL = "04-exercise", "answer-why-hvp"
SCORE, COMMENT = 0.5, "Your answer is shown as text: the markup in it did not run."
#: Readable prose of the hostile answer, which must still be there to grade.
PROSE = "Equal gradients only test first derivatives at one point"
MARK = "PWNED"  # what a script that ran leaves in document.title and window.PWNED


def payload(path: str) -> str:
    """JavaScript that, if it ran, marks the page and acts with the instructor's session.

    No double quote, `<`, `>` or `&` in it, so that it fits an HTML attribute, an SVG script and a
    markdown line as it is. `path` names where it was put (it travels in title, PWNED and header).
    """
    return (
        "(function(){"
        f"window.{MARK}=(window.{MARK}||[]).concat('{path}');document.title='{MARK} {path}';"
        "var k=(document.cookie.match(/(^|; )_xsrf=([^;]*)/)||[])[2]||'';"
        f"var h={{'X-XSRFToken':decodeURIComponent(k),'Content-Type':'application/json','X-Pwned':'{path}'}};"
        "fetch('/api/terminals',{method:'POST',headers:h,credentials:'same-origin'});"
        "var s=(location.pathname.match(/submissions\\/([^\\/]+)/)||[])[1]||'none';"
        "fetch('/formgrader/api/grades?submission_id='+s,{headers:h,credentials:'same-origin'})"
        ".then(function(r){return r.json()}).then(function(g){g.forEach(function(x){"
        "fetch('/formgrader/api/grade/'+x.id,{method:'PUT',headers:h,credentials:'same-origin',"
        "body:JSON.stringify({manual_score:x.max_score})})})}).catch(function(){});"
        "})()"
    )


def _img(path: str) -> str:
    return f'<img src="x" onerror="{payload(path)}">'


def _script(path: str) -> str:
    return f"<script>{payload(path)}</script>"


def _svg(path: str) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="240" height="40" onload="{payload(path + "-onload")}">'
        f'<text x="4" y="24">an SVG of {path}</text>{_script(path + "-script")}</svg>'
    )


def _decoded(text: str) -> str:
    """Python that evaluates to `text`: the cell's source then holds none of its markup."""
    return f"base64.b64decode({base64.b64encode(text.encode()).decode()!r}).decode()"


def _links(spellings, kind: str) -> str:
    """Every spelling of a link (or markup) whose script names itself `<kind>-<spelling>`."""
    return "\n\n".join(
        spellings(urllib.parse.quote(payload(f"{kind}-{name}"), safe=""))[name] for name in sorted(spellings("x"))
    )


LINKS = _links(script_link_spellings, "link")
HOSTILE_ANSWER = (
    f"{PROSE}; a Hessian-vector product also differentiates the recomputed forward pass.\n\n"
    f"{_img('markdown-img')}\n\n"
    f"{_script('markdown-script')}\n\n"
    f"{LINKS}\n"
)
HOSTILE_CELLS = [
    # An SVG, twice: through IPython's SVG class and as a raw bundle with no text/plain.
    "import base64\nfrom IPython.display import SVG, display\n\n"
    f"display(SVG(data={_decoded(_svg('svg-class'))}))\n"
    f"display({{{_decoded('image/svg+xml')}: {_decoded(_svg('svg-raw'))}}}, raw=True)",
    # HTML with a script and an onerror image; Markdown with an onerror image.
    "import base64\nfrom IPython.display import HTML, Markdown, display\n\n"
    f"display(HTML({_decoded('<p>an HTML output</p>' + _img('html-img') + _script('html-script'))}))\n"
    f"display(Markdown({_decoded('a Markdown output ' + _img('markdown-output-img'))}))",
    # application/javascript.
    f"import base64\nfrom IPython.display import Javascript, display\n\ndisplay(Javascript({_decoded(payload('javascript'))}))",
    # The links as Markdown and as HTML, and a handler in an image's width metadata.
    "import base64\nfrom IPython.display import HTML, Markdown, display\n\n"
    f"display(Markdown({_decoded(_links(script_link_spellings, 'output-link'))}))\n"
    f"display(HTML({_decoded(_links(script_html_spellings, 'output-html'))}))\n"
    f"display({{'image/png': {PIXEL_PNG!r}}}, raw=True, metadata={{'image/png': "
    f"{{'width': {_decoded('1 onerror=' + payload('image-width'))}}}}})",
]
HOSTILE_TITLE = f"</title>{_script('notebook-title')}<title>"


def hostile_notebook() -> nbformat.NotebookNode:
    """The solution of 04-exercise with a hostile written answer, hostile outputs and title."""
    notebook = nbformat.read(SOLUTIONS / f"{NOTEBOOK}.ipynb", as_version=4)
    answer = notebook.cells[lab.cell_index(notebook, CELL)]
    assert answer.cell_type == "markdown"
    answer.source = HOSTILE_ANSWER
    notebook.cells.extend(nbformat.v4.new_code_cell(text) for text in HOSTILE_CELLS)
    notebook.metadata["title"] = HOSTILE_TITLE
    return notebook


def write_class(folder: Path) -> Path:
    """<folder>/<student>/04-exercise.ipynb for the hostile student and a classmate (the solutions)."""
    (folder / STUDENT).mkdir(parents=True)
    nbformat.write(hostile_notebook(), folder / STUDENT / f"{NOTEBOOK}.ipynb")
    (folder / CLASSMATE).mkdir()
    shutil.copyfile(SOLUTIONS / f"{NOTEBOOK}.ipynb", folder / CLASSMATE / f"{NOTEBOOK}.ipynb")
    return folder


@pytest.fixture(scope="module")
def hostile_class(chromium_path, tmp_path_factory) -> Path:
    """OUT after grading the hostile student and the classmate (the browser is checked first)."""
    from autograder.run.grade import grade
    from tests.grading import options

    root = tmp_path_factory.mktemp("hostile-pages")
    out = root / "out"
    result = grade(write_class(root / "submissions"), out, options(), io.StringIO())
    assert result.students == [CLASSMATE, STUDENT], result.students
    return out


def autograded(out: Path, student: str = STUDENT) -> Path:
    return out / "course" / "autograded" / student / ASSIGNMENT / f"{NOTEBOOK}.ipynb"


def test_autograded_notebook_runs_nothing(hostile_class):
    """The autograded notebook holds nothing that runs.

    The file formgrader and the feedback pages are made of: no markup of the learner's left, the
    answer kept as text, the outputs the hostile cells displayed replaced or cleaned."""
    path = autograded(hostile_class)
    text = path.read_text()
    notebook = json.loads(text)
    assert "<script" not in text.lower()
    # No tag with an event handler anywhere; `onerror=` is left only as text of escaped markup.
    assert not re.search(r"<[a-z][^<>]*\son\w+\s*=", text, re.IGNORECASE)
    assert "title" not in notebook["metadata"]

    answer = notebook["cells"][lab.cell_index(notebook, CELL)]
    assert PROSE in lab.source(answer)
    assert '&lt;img src="x" onerror="' in lab.source(answer) and "&lt;script&gt;" in lab.source(answer)

    hostile = [cell for cell in notebook["cells"] if lab.source(cell) in HOSTILE_CELLS]
    assert len(hostile) == len(HOSTILE_CELLS), "the appended cells are missing from the autograded notebook"
    outputs = [output for cell in hostile for output in cell["outputs"]]
    mimes = sorted({mime for output in outputs for mime in output.get("data", {})})
    # They ran (one display each) and what is left is text, images and HTML made safe after
    # rendering (the Markdown output rendered, its markup shown as text, then cleaned).
    assert len(outputs) == 8, json.dumps(outputs, indent=1)[:3000]
    assert mimes == ["image/png", "text/html", "text/plain"], mimes
    for output in outputs:
        for mime, value in output["data"].items():
            value = "".join(value) if isinstance(value, list) else value
            if mime == "text/html":
                assert not re.search(r"<[a-z][^<>]*\s(on\w+|href|src|srcdoc|action)\s*=[^<>]*PWNED", value, re.I), value
                assert not re.search(r"<(script|svg|math|iframe|form)\b", value, re.I), value[:500]
        assert "onerror" not in json.dumps(output.get("metadata", {})), output["metadata"]
    plain = [lab.source({"source": output["data"].get("text/plain", "")}) for output in outputs]
    assert "[image/svg+xml output: not shown in grading pages]" in plain, plain
    for cell in notebook["cells"]:
        for output in cell.get("outputs", []):
            assert not {"application/javascript", "image/svg+xml"} & set(output.get("data", {})), output


@pytest.fixture(scope="module")
def formgrader(hostile_class, serve_formgrader):
    with serve_formgrader(hostile_class, "hostile-formgrader") as server:
        yield server


# What a page shows of having run the submission's script: its mark, and any element that would
# run it (an event handler or a script holding the payload).
RAN = f"""() => ({{
    title: document.title,
    marked: window.{MARK} || [],
    elements: [...document.querySelectorAll('*')].flatMap(el => [
        ...[...el.attributes].filter(a => /^on/i.test(a.name) && a.value.includes('{MARK}'))
            .map(a => `<${{el.tagName.toLowerCase()}} ${{a.name}}>`),
        ...(/^script$/i.test(el.tagName) && el.textContent.includes('{MARK}') ? ['<script>'] : []),
        ...(/^(svg|iframe|object|embed)$/i.test(el.tagName) && el.outerHTML.includes('{MARK}')
            ? [`<${{el.tagName.toLowerCase()}}>`] : []),
    ]),
}})"""


def record_requests(page) -> list[dict]:
    """Every request the page makes from now on: method, path, the X-Pwned header if any."""
    seen: list[dict] = []

    def note(request):
        path = re.sub(r"^[a-z]+://[^/]+", "", request.url)
        seen.append({"method": request.method, "path": path, "pwned": request.headers.get("x-pwned")})

    page.on("request", note)
    return seen


def settle(page) -> None:
    """Loaded, every image loaded or failed (an onerror would have fired), and a moment for any
    script that started to send its requests."""
    page.wait_for_load_state("load")
    page.wait_for_function("() => [...document.images].every(img => img.complete)")
    page.wait_for_timeout(1500)


def served_title(page) -> str:
    """The <title> the server sent for the page on show (what document.title is unless a script ran)."""
    html = page.context.request.get(page.url).text()
    return re.search(r"<title>(.*?)</title>", html, re.S).group(1).strip()


def hostile_requests(seen: list[dict]) -> list[dict]:
    return [r for r in seen if r["pwned"] or "/api/terminals" in r["path"] or "/formgrader/api/grade/" in r["path"]]


def assert_ran_nothing(page, seen: list[dict], where: str) -> None:
    state = page.evaluate(RAN)
    assert MARK not in state["title"] and state["title"] == served_title(page), (where, state)
    assert state["marked"] == [], f"{where}: script of the submission ran by {state['marked']}"
    assert state["elements"] == [], f"{where}: elements that run the submission's script: {state['elements']}"
    assert hostile_requests(seen) == [], f"{where}: requests made by the submission's script"


def assert_answer_readable(text: str, where: str) -> None:
    """The learner's answer is there to read, its markup shown as text."""
    assert PROSE in text, f"{where}: the written answer is not shown"
    assert '<img src="x" onerror="(function(){window.' in text, f"{where}: the answer's markup is not shown as text"
    assert f"<script>(function(){{window.{MARK}" in text, f"{where}: the answer's script is not shown as text"


def unsanitized(out: Path) -> nbformat.NotebookNode:
    """The hostile student's autograded notebook as it would be without autograder/notebook/pages.py: the
    answer's markup as written and the outputs its appended cells display (run here, in a kernel
    of this venv)."""
    from nbclient import NotebookClient

    notebook = nbformat.read(autograded(out), as_version=4)
    notebook.cells[lab.cell_index(notebook, CELL)].source = HOSTILE_ANSWER
    indices = [i for i, cell in enumerate(notebook.cells) if lab.source(cell) in HOSTILE_CELLS]
    shown = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(notebook.cells[i].source) for i in indices])
    NotebookClient(shown, kernel_name="python3", timeout=60).execute()
    for index, cell in zip(indices, shown.cells, strict=True):
        notebook.cells[index].outputs = cell.outputs
    return notebook


def click_every_link(page, selector: str, where: str) -> int:
    """Click each link the submission's cells show (a new page, if one opens, is left again): a
    link that runs script marks the page, as any other route does. Returns how many there were."""
    links = page.locator(selector)
    count = links.count()
    assert count >= len(script_link_spellings("x")), f"{where}: {count} links, the spellings are missing"
    home = page.url
    for index in range(count):
        link = links.nth(index)
        link.scroll_into_view_if_needed()
        link.click(no_wait_after=True, timeout=5000)
        page.wait_for_timeout(100)
        if page.url.split("#")[0] != home.split("#")[0]:
            page.goto(home, wait_until="load")
    settle(page)
    return count


def _manual_score(course: Path, student: str) -> float | None:
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        return gb.find_grade(CELL, NOTEBOOK, ASSIGNMENT, student).manual_score


def _grade_id(course: Path, student: str) -> str:
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        return gb.find_grade(CELL, NOTEBOOK, ASSIGNMENT, student).id


def test_hostile_submission_runs_nothing_in_pages(hostile_class, formgrader, static_server, make_page):
    out, course = hostile_class, hostile_class / "course"
    page = make_page()
    shot = page.shots
    seen = record_requests(page)

    # 1. formgrader: Manual Grading -> performance-05 -> 04-exercise -> the hostile submission.
    lab.open_formgrader_submission(page, formgrader, ASSIGNMENT, NOTEBOOK, STUDENT, shot)
    settle(page)
    answer = page.locator(".nbgrader_cell", has=page.locator(f"input.score#{CELL}"))
    lab.show(page, answer)
    shot("formgrader-hostile-answer")
    assert_ran_nothing(page, seen, "formgrader")
    assert_answer_readable(answer.inner_text(), "formgrader")
    assert formgrader.api("GET", "terminals") == [], "a terminal was created"
    outputs = page.locator(".output_area").filter(has_text="an HTML output")
    assert outputs.count() == 1, "the cleaned HTML output is not shown"
    lab.show(page, outputs)
    shot("formgrader-hostile-outputs")
    body = page.locator("body").inner_text()
    assert "[image/svg+xml output: not shown in grading pages]" in body
    assert "a Markdown output <img" in body
    click_every_link(page, ".text_cell_render a, .output_area a", "formgrader")
    assert_ran_nothing(page, seen, "formgrader, every link clicked")
    assert formgrader.api("GET", "terminals") == [], "a terminal was created by a click"

    # 2. The instructor grades the written answer; that PUT is the only one to the grade API.
    before = len(seen)
    saved, said = lab.save_manual_grade(page, CELL, SCORE, COMMENT)
    assert saved["manual_score"] == SCORE and said["manual_comment"] == COMMENT
    mine = hostile_requests(seen[before:])
    assert [(r["method"], r["path"], r["pwned"]) for r in mine] == [
        ("PUT", f"/formgrader/api/grade/{saved['id']}", None)
    ], mine
    lab.show(page, answer)
    shot("formgrader-graded")
    after = len(seen)
    page.reload(wait_until="domcontentloaded")
    page.wait_for_function(lab.FORMGRADER_LOADED)
    settle(page)
    assert_ran_nothing(page, seen[after:], "formgrader, reloaded")
    assert float(page.locator(f"input.score#{CELL}").input_value()) == SCORE

    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        grade = gb.find_grade(CELL, NOTEBOOK, ASSIGNMENT, STUDENT)
        assert (grade.id, grade.manual_score, grade.needs_manual_grade) == (saved["id"], SCORE, False)
        assert gb.find_comment(CELL, NOTEBOOK, ASSIGNMENT, STUDENT).manual_comment == COMMENT
        others = [g for g in gb.find_submission_notebook(NOTEBOOK, ASSIGNMENT, STUDENT).grades if g.name != CELL]
        assert [g.name for g in others if g.manual_score is not None] == [], "grades changed by the page"
        mate = gb.find_submission_notebook(NOTEBOOK, ASSIGNMENT, CLASSMATE).grades
        assert [g.name for g in mate if g.manual_score is not None] == [], "the classmate's grades changed"

    # 3. The learner's feedback page, over http.
    with static_server(out / "feedback") as site:
        start = len(seen)
        page.goto(f"{site.url}/{STUDENT}/{NOTEBOOK}.html", wait_until="load")
        settle(page)
        assert_ran_nothing(page, seen[start:], "feedback page")
        text = page.locator("body").inner_text()
        assert_answer_readable(text, "feedback page")
        assert "[image/svg+xml output: not shown in grading pages]" in text
        click_every_link(page, ".text_cell_render a, .output_area a", "feedback page")
        assert_ran_nothing(page, seen[start:], "feedback page, every link clicked")
        assert [r for r in site.requests if "X-Pwned" in r or not r.startswith("GET ")] == [], site.requests
        page.get_by_text(PROSE).first.scroll_into_view_if_needed()
        page.mouse.wheel(0, -200)
        shot("feedback-hostile-answer")
        page.get_by_text("an HTML output").first.scroll_into_view_if_needed()
        page.mouse.wheel(0, -200)
        shot("feedback-hostile-outputs")

        # Control: the same script, run by hand in the page, is seen by these checks.
        page.evaluate(payload("control"))
        page.wait_for_function(f"() => document.title === '{MARK} control'")
        lab.wait_until(lambda: any("X-Pwned: control" in r for r in site.requests), "the control's requests")
    assert formgrader.api("GET", "terminals") == [], "a terminal was created"

    # 4. Control in formgrader: the classmate's autograded notebook swapped for the hostile one as it
    # would be without pages.py (formgrader renders the file at each request). Its scripts run in
    # formgrader's page with the instructor's session, create a terminal and give full marks through
    # the grade API: what the checks above would have seen.
    target = autograded(out, CLASSMATE)
    target.chmod(0o644)
    nbformat.write(unsanitized(out), target)
    start = len(seen)
    lab.open_formgrader_submission(page, formgrader, ASSIGNMENT, NOTEBOOK, CLASSMATE)
    settle(page)
    lab.wait_until(lambda: formgrader.api("GET", "terminals") != [], "a terminal made by the unsanitized page")
    lab.wait_until(lambda: _manual_score(course, CLASSMATE) == 2.0, "full marks given by the unsanitized page")
    # A link the text check let through, clicked, runs its script.
    page.locator(".text_cell_render a", has_text="entity-s").first.click(no_wait_after=True)
    lab.wait_until(lambda: "link-entity-s" in page.evaluate(RAN)["marked"], "the clicked link's script")
    ran = page.evaluate(RAN)["marked"]
    print(f"the unsanitized notebook, in formgrader, ran the scripts of: {sorted(set(ran))}")
    assert {"markdown-img", "markdown-script", "html-img", "html-script", "javascript"} <= set(ran), ran
    control = {(r["method"], r["path"].split("?")[0]) for r in seen[start:] if r["pwned"] == "markdown-img"}
    assert {("POST", "/api/terminals"), ("PUT", f"/formgrader/api/grade/{_grade_id(course, CLASSMATE)}")} <= control
    lab.show(page, page.locator(".nbgrader_cell", has=page.locator(f"input.score#{CELL}")))
    shot("control-unsanitized-classmate")
    for terminal in formgrader.api("GET", "terminals"):
        formgrader.api("DELETE", f"terminals/{terminal['name']}")

    errors = [m for m in page.console_messages if m.startswith("[pageerror]") and "MathJax is not defined" not in m]
    assert errors == [], errors
