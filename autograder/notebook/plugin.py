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
import sys
from pathlib import Path

from autograder.course.errors import ExitCode

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


def _save_auto_grades_keeping_manual():
    """LedgerGrades (nbgrader's SaveAutoGrades, a judged cell's points from the judge's ledger),
    and a grade a person settled stays settled while the answer it was given for is unchanged:
    stock nbgrader asks for every manual grade again on each `nbgrader autograde --force`. A
    changed answer is asked for again, the grade kept."""
    import hashlib
    import json

    import nbformat
    from nbgrader.coursedir import CourseDirectory

    from autograder.gradebook.merge import _answer_for, _answers
    from autograder.judge.judged_cells import LedgerGrades

    class SaveAutoGradesKeepingManual(LedgerGrades):
        def preprocess(self, nb, resources):
            meta = resources["nbgrader"]
            coursedir = CourseDirectory(config=self.config)
            root = Path(coursedir.root)
            self._record = root / ANSWERS_RECORD / meta["assignment"] / meta["student"] / f"{meta['notebook']}.json"
            try:
                self._before = json.loads(self._record.read_text())
            except (OSError, ValueError):
                self._before = {}
            self._now = {}
            self._answers = _answers(nbformat.writes(nb))
            nb, resources = super().preprocess(nb, resources)
            self._record.parent.mkdir(parents=True, exist_ok=True)
            self._record.write_text(json.dumps(self._now, sort_keys=True))
            # The report is written after a student's last notebook (nbgrader takes them in name
            # order): once per student, not once per notebook.
            submitted = Path(coursedir.format_path(coursedir.submitted_directory, meta["student"], meta["assignment"]))
            names = sorted(p.stem for p in submitted.glob("*.ipynb"))
            last = not names or meta["notebook"] >= names[-1]
            _class_report_after(root, meta, resources, self.db_url, self.log, write=last)
            return nb, resources

        def _add_score(self, cell, resources):
            grade_id = cell.metadata["nbgrader"]["grade_id"]
            grade = self.gradebook.find_grade(grade_id, self.notebook_id, self.assignment_id, self.student_id)
            settled = grade.manual_score is not None and not grade.needs_manual_grade
            super()._add_score(cell, resources)
            answer = _answer_for(self._answers, grade_id)
            self._now[grade_id] = hashlib.sha256((answer or "").encode()).hexdigest()
            if settled and self._before.get(grade_id) == self._now[grade_id]:
                grade.needs_manual_grade = False
                self.gradebook.db.commit()

    return SaveAutoGradesKeepingManual


#: In the course folder: the class report of each assignment `nbgrader autograde` grades
#: (CLASS_REPORT/<assignment>/report.html; autograder/gradebook/class_report.py).
CLASS_REPORT = "class-report"


def _class_report_after(root: Path, meta: dict, resources: dict, db_url: str, log, write: bool = True) -> None:
    """After one notebook is autograded: keep what the class report reads of it, and, when write
    (after a student's last notebook), write the report again (nbgrader autograde has no end of
    run to wait for). The feedback pages it links
    are nbgrader's own (COURSE/feedback/, once `nbgrader generate_feedback` wrote them). A report
    that cannot be written is logged; the grades are stored already."""
    from autograder.course.outcomes import NotebookOutcome, Trouble, TroubleKind
    from autograder.gradebook.class_report import record_notebook, write_class_report
    from autograder.judge.judged_cells import LEDGER
    from autograder.notebook.execute import OUTCOME

    assignment, student, name = meta["assignment"], meta["student"], f"{meta['notebook']}.ipynb"
    out = root / CLASS_REPORT / assignment
    ledger, outcome = resources.get(LEDGER), resources.get(OUTCOME) or NotebookOutcome()
    outcome = dataclasses.replace(
        outcome, troubles=tuple(dataclasses.replace(trouble, notebook=name) for trouble in outcome.troubles)
    )
    flags = [Trouble(TroubleKind.REVIEW, finding, name) for finding in (ledger.findings if ledger else [])]
    try:
        record_notebook(out, student, meta["notebook"], outcome, flags)
        if not write:
            return
        write_class_report(
            out,
            db_url,
            assignment,
            lambda who, notebook: root / "feedback" / who / assignment / f"{notebook}.html",
        )
    except Exception as error:
        log.warning("the class report was not written: %s: %s", type(error).__name__, error)


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

    from autograder.notebook.execute import RequireSandbox, SandboxedExecute
    from autograder.notebook.pages import ForPages
    from autograder.notebook.repair import DeduplicateIdsCleanly, MetadataFromSource, RestoreMissingCells

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
        ForPages,
    ]
    # Deleted graded and locked cells come back from the source.
    c.OverwriteCells.add_missing_cells = True
    # Autograde.permissions is left to nbgrader (444, or 664 in a groupshared course): its --force
    # replaces read-only files itself, and courses that instructors share need the group's bits.
    # The same feedback pages as nbgrader's HTMLExporter writes, in about half the time (pages.py).
    c.GenerateFeedback.exporter_class = "autograder.notebook.pages.PageExporter"
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
    config = args.course / "nbgrader_config.py"
    text = config.read_text() if config.exists() else "c = get_config()  # noqa: F821\n"
    if "autograder.notebook.plugin" in text:
        print(f"{config} already configures the grader")
        return ExitCode.DONE
    arguments = f", checks_module={args.checks_module!r}" if args.checks_module else ""
    arguments += f", assignment={args.assignment!r}" if args.checks_module and args.assignment else ""
    config.write_text(text.rstrip("\n") + "\n" + CONFIG_LINES.format(arguments=arguments))
    print(f"wrote the grader's lines into {config}: `nbgrader autograde` there now grades in a sandbox")
    return ExitCode.DONE
