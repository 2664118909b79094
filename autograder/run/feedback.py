"""Regenerate the feedback pages of an assignment from the class gradebook, manual grades included.

    autograder feedback --out OUT [--student ID ...]   (python -m autograder.run.feedback)
    make feedback [STUDENT=ID]

After manual grading in formgrader, the feedback written while autograding still shows the
written answers as ungraded. This renders each student's autograded notebooks again with the
scores and comments now in OUT/course/gradebook.db (nbgrader's generate_feedback, in the course
folder), for the whole class or the students named, and writes them to
OUT/course/feedback/<student>/<assignment>/ and OUT/feedback/<student>/. No notebook is run.
Before rendering, each cell's source loses its hidden tests (whatever a learner's output may
print) and what a learner wrote or displayed loses anything that would run in a browser
(autograder/notebook/pages.py). Notebooks flagged in OUT/flags.csv keep their "Flagged for instructor
review" note. Each student's pages are made on their own: one whose pages cannot be made is
named (FAILED) and the others get theirs; a student's earlier pages in OUT/feedback/ stay until
theirs are made again. Ctrl-C or SIGTERM stops it after the students done (130, 143), naming
them. Exit 0 when done, 1 when some student's pages could not be made, 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import shutil
import signal
import stat
import sys
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from autograder.course.assignment import assignment_of
from autograder.course.errors import ExitCode, GraderError
from autograder.course.hidden_tests import strip_hidden_tests
from autograder.course.paths import ROOT
from autograder.course.text_safety import console_line
from autograder.gradebook.class_gradebook import GradebookError, class_students, open_api, require_gradebook
from autograder.gradebook.reports import flag_findings
from autograder.gradebook.student_files import flag_note
from autograder.notebook.pages import assignment_markdown, sanitize_notebook
from autograder.run.stopping import listening_for_stops, stopped_by


def prepare_for_pages(folder: Path, source_folder: Path | None = None) -> None:
    """The autograded notebooks of one student, made fit for pages: hidden tests out of every
    cell's source (by construction, whatever the outputs say) and nothing that runs
    (autograder/notebook/pages.py). Autograded files are read-only as nbgrader writes them: made writable
    for the owner first (the grader may run as an ordinary user)."""
    for path in sorted(folder.glob("*.ipynb")):
        notebook = nbformat.read(path, as_version=4)
        strip_hidden_tests(notebook)
        source = source_folder / path.name if source_folder is not None else None
        own = assignment_markdown(nbformat.read(source, as_version=4)) if source and source.is_file() else frozenset()
        sanitize_notebook(notebook, own)
        path.chmod(path.stat().st_mode | stat.S_IWUSR)
        nbformat.write(notebook, path)


@dataclass
class Regenerated:
    """The pages written, by student, and the students whose pages could not be made (and why)."""

    written: dict[str, list[Path]] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)
    #: The student whose pages were being made, while they were (what a stop cut short).
    making: str | None = None


def regenerate_feedback(out: Path, students: list[str] | None = None, into: Regenerated | None = None) -> Regenerated:
    """Feedback of `students` (default: every student with a submission) from the gradebook,
    each student on their own: one whose pages cannot be made is named and the others get
    theirs. GradebookError on bad input (no gradebook, an unknown student). A stop (Ctrl-C,
    SIGTERM) is raised, nbgrader's taking it for a failure or not; `into` then says how far it got."""
    out = Path(out).resolve()
    course = require_gradebook(out)
    known = class_students(course)
    wanted = known if not students else list(dict.fromkeys(students))
    unknown = [s for s in wanted if s not in known]
    if unknown:
        raise GradebookError(
            f"no submission of {', '.join(map(repr, unknown))} in {course / 'gradebook.db'}; "
            f"the class: {', '.join(known) or '(nobody yet)'}"
        )
    api, _ = open_api(course)
    done = Regenerated() if into is None else into
    for student in wanted:
        done.making = student
        try:
            done.written[student] = _regenerate_one(api, out, course, student)
        except Exception as error:  # this student's pages only: the class goes on
            if stopped_by() is not None:  # nbgrader took the stop for a failure of its own
                raise KeyboardInterrupt from None
            done.failed[student] = f"{type(error).__name__}: {str(error).strip()[:500]}"
        done.making = None
    return done


def _regenerate_one(api, out: Path, course: Path, student: str) -> list[Path]:
    name = assignment_of(course).id
    autograded = course / "autograded" / student / name
    feedback = course / "feedback" / student / name
    public = out / "feedback" / student
    earlier = sorted(public.glob("*.html")) if public.exists() else []
    if not autograded.exists() or not any(autograded.glob("*.ipynb")):
        for page in earlier + sorted(feedback.glob("*.html") if feedback.exists() else []):
            page.unlink()
        return []  # nothing was graded (the whole submission broke): no page to write
    prepare_for_pages(autograded, course / "source" / name)
    outcome = api.generate_feedback(name, student, force=True)
    if not outcome["success"]:
        raise RuntimeError(
            f"nbgrader generate_feedback failed: {(outcome.get('log', '') + (outcome.get('error') or ''))[-500:]}"
        )
    findings = flag_findings(out, student)
    public.mkdir(parents=True, exist_ok=True)
    written = []
    for page in sorted(feedback.glob("*.html")):
        html = page.read_text()
        notes = findings.get(f"{page.stem}.ipynb")
        if notes:
            html = flag_note(html, notes)
            page.chmod(page.stat().st_mode | stat.S_IWUSR)
            page.write_text(html)
        (public / page.name).write_text(html)
        written.append(public / page.name)
    # The student's earlier pages stay until theirs are made again (a failure or a stop keeps them).
    for page in earlier:
        if page not in written:
            page.unlink()
    # nbgrader copies the autograded folder's other files (the shipped modules) along: not feedback.
    for extra in feedback.iterdir():
        if extra.suffix != ".html":
            shutil.rmtree(extra) if extra.is_dir() else extra.unlink()
    return written


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="autograder feedback", description=__doc__.strip().splitlines()[0])
    parser.add_argument(
        "--out",
        type=Path,
        required=True,
        help="the folder `autograder grade` wrote (its --out)",
    )
    parser.add_argument(
        "--student",
        action="append",
        default=[],
        metavar="ID",
        help="only this student (repeat for more); default: the whole class",
    )
    args = parser.parse_args(argv)
    out = args.out.resolve()
    where = out.relative_to(ROOT) if out.is_relative_to(ROOT) else out
    done = Regenerated()
    try:
        with listening_for_stops():
            regenerate_feedback(args.out, args.student, into=done)
    except GraderError as error:
        print(f"error: {error}", file=sys.stderr)
        return error.exit_code
    except KeyboardInterrupt:
        terminated = stopped_by() is signal.SIGTERM
        said = f"stopped by {'SIGTERM' if terminated else 'Ctrl-C'}: "
        if done.making is not None:
            said += (
                f"pages made again for {', '.join(done.written) or 'nobody'}; {done.making}'s pages in "
                f"{where}/feedback/ are the earlier ones (its copy in the course may be gone); "
            )
        else:
            said += "no page was made again; "
        print(console_line(f"{said}run `autograder feedback --out {where}` again", 1000), file=sys.stderr)
        return ExitCode.TERMINATED if terminated else ExitCode.INTERRUPTED
    for student, why in done.failed.items():
        print(console_line(f"FAILED  {student}: no feedback page: {why}", 1000), file=sys.stderr)
    for student, pages in done.written.items():
        print(
            f"{student}: {len(pages)} page(s) in {where}/feedback/{student}/"
            if pages
            else f"{student}: nothing was autograded, no feedback"
        )
    return ExitCode.UNFINISHED if done.failed else ExitCode.DONE


if __name__ == "__main__":
    sys.exit(main())
