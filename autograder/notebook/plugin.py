"""nbgrader's own `nbgrader autograde`, with this grader's defenses: the lines a course needs.

With this package installed, a course's `nbgrader_config.py` that holds

    from autograder.notebook.plugin import configure
    configure(c)                                              # any assignment
    configure(c, checks_module="my_checks", assignment="ps1")  # ps1's checks speak the judge's protocol

(or that `autograder configure COURSE` wrote) makes `nbgrader autograde` grade each notebook in a
sandbox of its own (autograder/kernel/sandbox.py), with the submission's nbgrader metadata taken from
the source, deleted or duplicated graded cells restored or merged, output capped, and the
autograded notebook written so that no page made of it runs a learner's script
(autograder/notebook/pages.py). With `checks_module`, every test cell of the assignment (of every
assignment, without `assignment`) is checked by the judge, outside the learner's process
(autograder/judge/core.py); the course's configuration may also name them itself
(`c.Assignments.settings`, autograder/course/settings.py). `nbgrader generate_feedback`,
`nbgrader export` and formgrader work on the result as they always do.

Where the sandbox cannot start on this machine, `nbgrader autograde` stops with exit status 3
and the fix, before any notebook runs: nothing falls back to grading without it (`unsafe=True`
does, for trusted work only).

What `nbgrader autograde` does not do, `autograder grade` does: the reference run that proves
the instructor's notebooks earn every point, the compile cache, the time budgets derived from
it, many students at once on Dask, one class gradebook merged per student.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import re
import sys
from pathlib import Path

import nbformat
from nbconvert.exporters import NotebookExporter
from nbgrader.plugins import CsvExportPlugin
from nbgrader.preprocessors import NbGraderPreprocessor
from traitlets import Bool, Dict, List

from autograder.course.errors import ExitCode
from autograder.course.intake import NotANotebook, not_graded, not_graded_lines, read_notebook
from autograder.course.outcomes import Trouble, TroubleKind
from autograder.course.text_safety import console_line
from autograder.gradebook.merge import answer_for, answers_of, recheck_line
from autograder.gradebook.reports import awaiting_a_person, pending_lines
from autograder.upstream.nbconvert import exporter_resources
from autograder.upstream.nbgrader import sanitizing

#: The module a course's config imports the grader from.
PLUGIN_MODULE = "autograder.notebook.plugin"
#: What a course's nbgrader_config.py needs (autograder configure writes it).
CONFIG_LINES = """
# The safe grader (the autograder package): nbgrader autograde runs every notebook in a sandbox,
# takes nbgrader metadata from the source, and writes pages that run no learner's script.
from autograder.notebook.plugin import configure

configure(c{arguments})
"""


#: In the course folder: what each graded answer was when it was last autograded (one JSON of
#: digests per notebook), so that a regrade knows whether a person's grade still stands.
ANSWERS_RECORD = ".autograder-answers"
#: In the course folder: the class report of each assignment `nbgrader autograde` grades
#: (CLASS_REPORT/<assignment>/report.html; autograder/gradebook/class_report.py).
CLASS_REPORT = "class-report"
#: Where a student's notebooks not graded (intake.not_graded's troubles) travel among
#: nbgrader's preprocessors, for the note on each of their pages.
NOT_GRADED = "autograder_not_graded"


class AnswerDigests:
    """COURSE/.autograder-answers/<assignment>/<student>/<notebook>.json: a digest of the answer
    behind each graded cell when it was last autograded (autograder/gradebook/merge.py's
    `answer_for`: the answer cell itself, or every answer of the notebook for a test cell)."""

    def __init__(self, root: Path, assignment: str, student: str, notebook: str, answers: dict[str, str] | None):
        self.path = root / ANSWERS_RECORD / assignment / student / f"{notebook}.json"
        try:
            self.before = json.loads(self.path.read_text())
        except (OSError, ValueError):
            self.before = {}
        self.answers = answers
        self.now: dict[str, str] = {}

    def changed(self, grade_id: str) -> bool:
        """Note the answer behind grade_id now; whether it differs from the last autograde's."""
        answer = answer_for(self.answers, grade_id)
        self.now[grade_id] = hashlib.sha256((answer or "").encode()).hexdigest()
        return self.before.get(grade_id) != self.now[grade_id]

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(json.dumps(self.now, sort_keys=True))


def keep_settled_grade(grade, digests: AnswerDigests, settled: bool, log, student: str, notebook: str, gb) -> None:
    """After an autograde set `grade` (nbgrader asks for every manual grade again): a grade a
    person settled stays settled while the answer it was given for is unchanged; a changed one is
    asked for again, the grade kept, and a RECHECK line logged."""
    changed = digests.changed(grade.name)
    if not settled:
        return
    if changed:
        grade.needs_manual_grade = True
        comment = next((c for c in grade.notebook.comments if c.name == grade.name), None)
        log.warning("%s", console_line(recheck_line(student, notebook, grade, comment), 1000))
    else:
        grade.needs_manual_grade = False
    gb.db.commit()


def _save_auto_grades_keeping_manual():
    """LedgerGrades (nbgrader's SaveAutoGrades, a judged cell's points from the judge's ledger),
    and a grade a person settled stays settled while the answer it was given for is unchanged:
    stock nbgrader asks for every manual grade again on each `nbgrader autograde --force`. A
    changed answer is asked for again, the grade kept, and RECHECK says so."""
    import nbformat
    from nbgrader import utils
    from nbgrader.coursedir import CourseDirectory

    from autograder.judge.judged_cells import LedgerGrades

    class SaveAutoGradesKeepingManual(LedgerGrades):
        def preprocess(self, nb, resources):
            meta = resources["nbgrader"]
            root = Path(CourseDirectory(config=self.config).root)
            self._digests = AnswerDigests(
                root, meta["assignment"], meta["student"], meta["notebook"], answers_of(nbformat.writes(nb))
            )
            nb, resources = super().preprocess(nb, resources)
            self._digests.save()
            if self.config.TakenInExporter.get("class_report", True):
                _keep_for_report(root, meta, resources, self.log)
            return nb, resources

        def preprocess_cell(self, cell, resources, cell_index):
            if not utils.is_grade(cell):
                return super().preprocess_cell(cell, resources, cell_index)
            grade_id = cell.metadata["nbgrader"]["grade_id"]
            grade = self.gradebook.find_grade(grade_id, self.notebook_id, self.assignment_id, self.student_id)
            settled = grade.manual_score is not None and not grade.needs_manual_grade
            cell, resources = super().preprocess_cell(cell, resources, cell_index)
            keep_settled_grade(
                grade, self._digests, settled, self.log, self.student_id, self.notebook_id, self.gradebook
            )
            return cell, resources

    return SaveAutoGradesKeepingManual


def _keep_for_report(root: Path, meta: dict, resources: dict, log) -> None:
    """After one notebook is autograded: keep what the class report reads of it (its outcome: time,
    the judge's items and seed, its troubles; what was flagged). A record that cannot be written
    is logged; the grades are stored already."""
    from autograder.course.outcomes import NotebookOutcome
    from autograder.gradebook.class_report import record_notebook
    from autograder.judge.judged_cells import LEDGER
    from autograder.notebook.execute import OUTCOME

    name = f"{meta['notebook']}.ipynb"
    ledger, outcome = resources.get(LEDGER), resources.get(OUTCOME) or NotebookOutcome()
    outcome = dataclasses.replace(
        outcome, troubles=tuple(dataclasses.replace(trouble, notebook=name) for trouble in outcome.troubles)
    )
    flags = [Trouble(TroubleKind.REVIEW, finding, name) for finding in (ledger.findings if ledger else [])]
    try:
        record_notebook(root / CLASS_REPORT / meta["assignment"], meta["student"], meta["notebook"], outcome, flags)
    except Exception as error:
        log.warning("the class report's record was not written: %s: %s", type(error).__name__, error)


def _write_class_report(root: Path, assignment: str, student: str, not_graded: list, db_url: str, log) -> None:
    """After a student's last notebook: their notebooks not graded kept, and the class report
    written again (`nbgrader autograde` has no end of run to wait for). The feedback pages it
    links are nbgrader's own (COURSE/feedback/, once `nbgrader generate_feedback` wrote them)."""
    from autograder.gradebook.class_report import record_not_graded, write_class_report

    out = root / CLASS_REPORT / assignment
    try:
        record_not_graded(out, student, not_graded)
        write_class_report(
            out,
            db_url,
            assignment,
            lambda who, notebook: root / "feedback" / who / assignment / f"{notebook}.html",
        )
        log.info("the class report, with %s's notebooks: %s", student, out / "report.html")
    except Exception as error:
        log.warning("the class report was not written: %s: %s", type(error).__name__, error)


def markdown_text(text: str) -> str:
    """Text as markdown that shows it as it is: its markdown punctuation escaped, so that no name
    a learner chose becomes a link or emphasis. (Its raw HTML is made text by the pages'
    sanitizer, which every page of it goes through: ForPages, sanitize_notebook.)"""
    return re.sub(r"([\\`*_{}\[\]()#+!|~-])", r"\\\1", text)


def not_graded_note(not_graded: list) -> str:
    """What a learner's pages say of their notebooks that were not graded (markdown)."""
    lines = "\n".join(f"- {markdown_text(trouble.line())}" for trouble in not_graded)
    return f"**Not graded in this assignment** (each such notebook scores 0):\n\n{lines}"


class NotGradedNote(NbGraderPreprocessor):
    """The note, at the top of each autograded notebook of a student who has notebooks that were
    not graded (missing, unreadable, renamed): formgrader and the feedback pages show it. Before
    `ForPages`, which makes it safe as it does every text that is not the assignment's."""

    def preprocess(self, nb, resources):
        not_graded = resources.get(NOT_GRADED)
        if not_graded:
            nb.cells.insert(0, nbformat.v4.new_markdown_cell(not_graded_note(not_graded)))
        return nb, resources


def as_saved(data: bytes) -> nbformat.NotebookNode | None:
    """The notebook in `data` as nbformat reads it, when it is a valid notebook; None otherwise.

    A notebook nbformat can read is graded as nbgrader reads it: the intake's order (`normalized`)
    would give its cells without an id new random ones (a regrade would write a different file)
    and drop its outputs (`--no-execute` keeps them), its kernel (nbgrader runs the one it names
    when the source names none) and its markdown's attachments (a person grading reads them)."""
    try:
        notebook = nbformat.convert(nbformat.reader.reads(data.decode("utf-8")), 4)
        nbformat.validate(notebook)
    except Exception:  # whatever nbformat trips on: the intake's order takes the notebook in
        return None
    return notebook


class PendingNamingExport(CsvExportPlugin):
    """nbgrader's CSV export (grades.csv, unchanged), then a PENDING line for each submission whose
    total still counts a cell that awaits a person: nbgrader's own export says nothing of them."""

    def export(self, gradebook) -> None:
        super().export(gradebook)
        names = [a.name for a in gradebook.assignments if not self.assignment or a.name in self.assignment]
        waiting = awaiting_a_person(gradebook, names, self.student)
        count = sum(len(students) for students in waiting.values())
        if count:
            self.log.warning(
                "%d submission(s) have cells awaiting a person: grades.csv counts each at the score the gradebook "
                "holds for it (0 for a written answer nobody graded yet) until it is graded in formgrader; "
                "export again then",
                count,
            )
        for assignment, students in sorted(waiting.items()):
            for line in pending_lines(students, assignment):
                self.log.warning("%s", console_line(line, 1000))


class TakenInExporter(NotebookExporter):
    """nbgrader's exporter for `nbgrader autograde`, taking each submitted file in as `autograder
    grade` does (autograder/course/intake.py), so that one broken notebook costs only itself.

    nbgrader 0.9.6 reads a submitted file with nbformat and stops the student at the first that is
    not JSON (`NotJSONError`): their other notebooks are not graded. Here a file is read by the
    intake's `read_notebook`, within its bounds: a valid notebook goes on as nbgrader reads it
    (`as_saved`), any other in the intake's order. One the intake cannot read becomes a page that
    says why, scored 0 in every cell (as nbgrader scores a missing notebook) without running, and
    is named in the log (BROKEN). The student's missing and renamed notebooks are named too (MISSING, NOTE), every
    page of theirs says which notebooks were not graded, and after their last notebook the class
    report is written again. The converter (`parent`) says which pass it is in: sanitizing reads
    the submitted file, autograding the file the sanitizing pass wrote.

    `autograder grade` takes the files in itself and prints what is not graded; its workers set
    `not_graded` (the student's, as data) and turn `class_report` off (it writes its own)."""

    not_graded = List(
        Dict(),
        default_value=None,
        allow_none=True,
        help="The student's notebooks not graded (intake.not_graded's troubles, as JSON), when the grader found them",
    ).tag(config=True)
    class_report = Bool(True, help="Keep the class report of the course (nbgrader autograde)").tag(config=True)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._not_graded: dict[tuple[str, str], list[Trouble]] = {}  # (assignment, student) -> theirs

    def from_filename(self, filename, resources=None, **kw):
        meta = resources["nbgrader"]
        assignment, student, stem = meta["assignment"], meta["student"], meta["notebook"]
        not_graded = self._student(Path(filename), resources)
        unreadable = next(
            (t for t in not_graded if t.kind is TroubleKind.UNREADABLE and t.notebook == f"{stem}.ipynb"), None
        )
        resources[NOT_GRADED] = not_graded
        if sanitizing(self.parent):
            if unreadable is not None:
                return self._page_in_place(unreadable, not_graded, resources)
            data = Path(filename).read_bytes()
            taken_in = read_notebook(data)  # within the intake's bounds (NotANotebook otherwise)
            # Under `nbgrader autograde`, a valid notebook goes on as nbgrader reads it; the grader's
            # own workers (`not_graded` set) hand in what their intake took in, in its order.
            saved = as_saved(data) if self.not_graded is None else None
            notebook = taken_in if saved is None else saved
            resources.setdefault("metadata", {}).update(name=stem, path=os.path.dirname(filename))
            return self.from_notebook_node(notebook, resources, **kw)
        if unreadable is not None:
            self._score_zero(unreadable, resources)
            output = self._page_in_place(unreadable, not_graded, resources)
        else:
            output = super().from_filename(filename, resources, **kw)
        if self.class_report and self._last_of_student(filename):
            root = Path(self.parent.coursedir.root)
            _write_class_report(root, assignment, student, not_graded, meta["db_url"], self.log)
        return output

    def _student(self, filename: Path, resources) -> list[Trouble]:
        """The student's notebooks not graded, found at their first notebook (from the folder they
        handed in), and named in the log then."""
        meta = resources["nbgrader"]
        key = (meta["assignment"], meta["student"])
        if self.not_graded is not None:
            return [Trouble.from_json(item) for item in self.not_graded]
        if key not in self._not_graded:
            from autograder.course.assignment import assignment_source

            folder = filename.parent
            notebooks = sorted(p.name for p in assignment_source(self.config, resources).glob("*.ipynb"))
            handed_in = sorted(p.name for p in folder.glob("*.ipynb"))
            unreadable = []  # read as `autograder grade` takes them in (intake.take_in)
            for name in handed_in:
                if name in notebooks:
                    try:
                        read_notebook((folder / name).read_bytes())
                    except NotANotebook as why:
                        unreadable.append(Trouble(TroubleKind.UNREADABLE, f"{why}; graded 0", console_line(name)))
                    except OSError as error:
                        said = f"the grader could not read it ({type(error).__name__}); graded 0"
                        unreadable.append(Trouble(TroubleKind.UNREADABLE, said, console_line(name)))
            self._not_graded[key] = found = not_graded(notebooks, handed_in, unreadable)
            for line in not_graded_lines(meta["student"], found):
                self.log.warning("%s", line)
        return self._not_graded[key]

    def _last_of_student(self, filename) -> bool:
        names = [os.path.basename(path) for path in getattr(self.parent, "notebooks", [])]
        return not names or os.path.basename(filename) == names[-1]

    def _page_in_place(self, unreadable: Trouble, not_graded: list, resources):
        """The notebook written in place of one that could not be read: a page that says so."""
        from autograder.notebook.pages import sanitize_notebook

        text = (
            f"# {markdown_text(unreadable.notebook or '')}\n\nThe grader could not read this notebook "
            f"({markdown_text(unreadable.message)}): every cell of it scores 0. Hand in the notebook as Jupyter "
            "saves it (File → Save Notebook), under the name the assignment gave it."
        )
        page = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(not_graded_note(not_graded))])
        page.cells.append(nbformat.v4.new_markdown_cell(text))
        sanitize_notebook(page)
        resources = exporter_resources(self, resources)
        return nbformat.writes(page), resources

    def _score_zero(self, unreadable: Trouble, resources) -> None:
        """Every cell of the notebook scores 0, as nbgrader scores a notebook not handed in; a
        grade a person gave is kept, and marked for a re-check (its answer can no longer be read)."""
        from nbgrader.api import Gradebook
        from nbgrader.coursedir import CourseDirectory

        meta = resources["nbgrader"]
        root = Path(CourseDirectory(config=self.config).root)
        digests = AnswerDigests(root, meta["assignment"], meta["student"], meta["notebook"], None)
        with Gradebook(meta["db_url"]) as gb:
            notebook = gb.find_submission_notebook(meta["notebook"], meta["assignment"], meta["student"])
            for grade in notebook.grades:
                settled = grade.manual_score is not None and not grade.needs_manual_grade
                grade.auto_score, grade.needs_manual_grade = 0.0, grade.manual_score is not None
                keep_settled_grade(grade, digests, settled, self.log, meta["student"], meta["notebook"], gb)
            for comment in notebook.comments:
                comment.auto_comment = None
            gb.db.commit()
        digests.save()


def configure(
    c,
    *,
    checks_module: str | None = None,
    assignment: str | None = None,
    limits: dict | None = None,
    unsafe: bool | None = None,
) -> None:
    """Put the grader's preprocessors into nbgrader's autograde pipeline of config `c`; with
    `checks_module`, name the checks module of `assignment` (of every assignment, without one);
    `limits` and `unsafe` set SandboxLimits and SandboxedExecute.unsafe (None: as `c` has them, or
    as declared)."""
    from nbconvert.preprocessors import ClearMetadataPreprocessor
    from nbgrader.preprocessors import (
        AssignLatePenalties,
        CheckCellMetadata,
        ClearOutput,
        IgnorePattern,
        LimitOutput,
        OverwriteKernelspec,
    )

    from autograder.gradebook.class_gradebook import quiet_gradebook_warnings
    from autograder.notebook.execute import RequireSandbox, SandboxedExecute
    from autograder.notebook.pages import ForPages
    from autograder.notebook.repair import DeduplicateIdsCleanly, MetadataFromSource, RestoreMissingCells

    # nbgrader's own gradebook code trips SQLAlchemy's autoflush warnings in every run: they say
    # nothing to an instructor, and fill the log (the config file runs in nbgrader's process).
    quiet_gradebook_warnings()
    c.Autograde.sanitize_preprocessors = [
        RequireSandbox,
        ClearOutput,
        MetadataFromSource,
        DeduplicateIdsCleanly,
        OverwriteKernelspec,
        RestoreMissingCells,
        CheckCellMetadata,
    ]
    c.Autograde.autograde_preprocessors = [
        SandboxedExecute,
        IgnorePattern,
        ClearMetadataPreprocessor,
        LimitOutput,
        # SaveAutoGrades, with a judged cell's points from the judge's ledger and settled manual
        # grades kept while their answers are unchanged.
        _save_auto_grades_keeping_manual(),
        AssignLatePenalties,
        CheckCellMetadata,
        NotGradedNote,
        ForPages,
    ]
    # Each submitted file taken in as `autograder grade` takes it: one that cannot be read costs
    # only itself (scored 0, named), not the student's other notebooks.
    c.Autograde.exporter_class = TakenInExporter
    # Deleted graded and locked cells come back from the source.
    c.OverwriteCells.add_missing_cells = True
    # Autograde.permissions is left to nbgrader (444, or 664 in a groupshared course): its --force
    # replaces read-only files itself, and courses that instructors share need the group's bits.
    # The same feedback pages as nbgrader's HTMLExporter writes, in about half the time (pages.py).
    c.GenerateFeedback.exporter_class = "autograder.notebook.pages.PageExporter"
    # nbgrader export's grades.csv as nbgrader writes it, and the cells still awaiting a person
    # named (a course that chose its own exporter keeps it).
    if "plugin_class" not in c.ExportApp:
        c.ExportApp.plugin_class = PendingNamingExport
    if checks_module and assignment:
        c.Assignments.settings = {**c.Assignments.get("settings", {}), assignment: {"checks_module": checks_module}}
    elif checks_module:
        c.Assignments.checks_module = checks_module
    if unsafe is not None:
        c.SandboxedExecute.unsafe = unsafe
    if limits:
        from autograder.kernel.sandbox import Limits

        Limits(**limits)  # each a limit there is, its value one: ValueError otherwise
        for name, value in limits.items():
            c.SandboxLimits[name] = value


#: Characters an assignment's name given to `configure` may not hold: nbgrader's globs, a path's.
_NOT_IN_AN_ASSIGNMENT = set("*?[]/\\")


def _checks_module_refused(course: Path, module: str, assignment: str) -> str | None:
    """Why `configure` will not name `module` as the checks module of `assignment` ("": of every
    assignment), or None. A misspelt module would otherwise be found only when autograde refuses to
    grade anyone; an assignment not installed yet is not checked (said so)."""
    if module.endswith(".py"):
        return f"give the checks module's name, {module[:-3]!r}, not its file's"
    if not module.isidentifier():
        return f"the checks module must be a module's name, not {module!r}"
    if assignment and (
        set(assignment) & _NOT_IN_AN_ASSIGNMENT or assignment.startswith(".") or assignment == "__pycache__"
    ):
        return f"{assignment!r} is not an assignment's name"
    source = course / "source"
    # (a hidden folder, JupyterLab's .ipynb_checkpoints say, or Python's __pycache__ is no assignment)
    folders = (
        [source / assignment]
        if assignment
        else sorted(p for p in source.glob("[!.]*") if p.is_dir() and p.name != "__pycache__")
    )
    folders = [folder for folder in folders if folder.is_dir()]
    if not folders:
        print(f"note: {module}.py not looked for: {source} holds no {assignment or 'assignment'} yet")
    lacking = [folder.name for folder in folders if not (folder / f"{module}.py").is_file()]
    if lacking:
        other = "" if assignment else ", or name the one it is for with --assignment"
        return (
            f"{module}.py is not in the source of {', '.join(lacking)} ({source}): install the assignment first{other}"
        )
    return None


def _imports_the_plugin(text: str) -> bool:
    """Whether a course's config imports the grader's plugin (its lines, `CONFIG_LINES`): as code,
    not in a comment or a string, where nbgrader would run stock, with no sandbox."""
    import ast

    package, _, name = PLUGIN_MODULE.rpartition(".")
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.ImportFrom) and node.level == 0:
            names = {alias.name for alias in node.names}
            if node.module == PLUGIN_MODULE or (node.module == package and name in names):
                return True
        if isinstance(node, ast.Import) and any(alias.name == PLUGIN_MODULE for alias in node.names):
            return True
    return False


def _configured_already(config: Path, module: str, assignment: str) -> int:
    """`configure` on a course whose config has the grader's lines: done when it names the same
    checks module for the assignment; otherwise refused, the file left for its owner to change."""
    from traitlets.config.loader import PyFileConfigLoader

    from autograder.course.settings import checks_module_for

    try:
        named = checks_module_for(PyFileConfigLoader(config.name, path=str(config.parent)).load_config(), assignment)
    except Exception as error:  # the instructor's own file: any error of theirs, said as one line
        print(f"error: {config} could not be read ({type(error).__name__}: {error})", file=sys.stderr)
        return ExitCode.USAGE
    if module and named != module:
        has = f"the checks module {named!r}" if named else "no checks module"
        print(
            f"error: {config} already configures the grader, with {has} for {assignment or 'every assignment'} "
            "(a module for one assignment is named with --assignment): change it in that file",
            file=sys.stderr,
        )
        return ExitCode.USAGE
    print(f"{config} already configures the grader")
    return ExitCode.DONE


def main(argv=None) -> int:
    """`autograder configure COURSE [--checks-module NAME [--assignment ID]]`: add the lines to
    COURSE/nbgrader_config.py."""
    assert main.__doc__ is not None  # its docstring is the command's description
    parser = argparse.ArgumentParser(prog="autograder configure", description=main.__doc__.split(":", 1)[1].strip())
    parser.add_argument("course", type=Path, help="an nbgrader course folder (it holds source/)")
    parser.add_argument("--checks-module", default="", help="the checks module of the assignment, for the judge")
    parser.add_argument("--assignment", default="", help="the assignment the checks module is of (default: every one)")
    args = parser.parse_args(argv)
    if not args.course.is_dir():
        print(f"error: {args.course} is not a folder", file=sys.stderr)
        return ExitCode.USAGE
    if args.assignment and not args.checks_module:
        print("error: --assignment names the assignment of --checks-module: give both", file=sys.stderr)
        return ExitCode.USAGE
    config = args.course / "nbgrader_config.py"
    text = config.read_text() if config.exists() else "c = get_config()  # noqa: F821\n"
    why = _checks_module_refused(args.course, args.checks_module, args.assignment) if args.checks_module else None
    if why:
        print(f"error: {why}", file=sys.stderr)
        return ExitCode.USAGE
    try:
        configured = _imports_the_plugin(text)
    except SyntaxError as error:
        print(f"error: {config} is not Python nbgrader can read (line {error.lineno}: {error.msg})", file=sys.stderr)
        return ExitCode.USAGE
    if configured:
        return _configured_already(config, args.checks_module, args.assignment)
    arguments = f", checks_module={args.checks_module!r}" if args.checks_module else ""
    arguments += f", assignment={args.assignment!r}" if args.checks_module and args.assignment else ""
    config.write_text(text.rstrip("\n") + "\n" + CONFIG_LINES.format(arguments=arguments))
    print(f"wrote the grader's lines into {config}: `nbgrader autograde` there now grades in a sandbox")
    return ExitCode.DONE
