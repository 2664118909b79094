"""Regenerate the grade files of an assignment from the class gradebook, after manual grading.

    autograder export --out OUT [--allow-pending] [--total-only]   (python -m autograder.commands.export)
    make export

Reads OUT/course/gradebook.db (never rebuilt here, no notebook run) and rewrites:

- OUT/cells.csv: one row per graded cell (score empty while a cell awaits manual grading);
- OUT/grades.csv: nbgrader's own export (what `nbgrader export` writes in the course folder);
- OUT/lms-<assignment>.csv: Canvas's gradebook import layout, one row per student
  (Student, ID, SIS User ID, SIS Login ID, Section, <assignment>, then one column per notebook),
  under a "Points Possible" row;
- OUT/report.html and OUT/report/*.csv: the class report (autograder/gradebook/class_report.py).

While any cell awaits manual grading (or a re-check after regrading), the LMS file is not
written and every such cell is listed: exit 1. --allow-pending writes it without those
students' rows. Exit 0 when everything was written, 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from autograder.course.errors import ExitCode, GraderError
from autograder.course.paths import ROOT
from autograder.course.text_safety import console_line
from autograder.gradebook.class_gradebook import require_gradebook
from autograder.gradebook.class_report import write_run_report
from autograder.gradebook.reports import (
    lms_file,
    pending_lines,
    regenerate_class_files,
    write_lms_file,
)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="autograder export", description=__doc__.strip().splitlines()[0])
    parser.add_argument(
        "--out",
        type=Path,
        required=True,
        help="the folder `autograder grade` wrote (its --out)",
    )
    parser.add_argument(
        "--allow-pending",
        action="store_true",
        help="write the LMS file even while cells await manual grading, without those students",
    )
    parser.add_argument(
        "--total-only",
        action="store_true",
        help="the LMS file gets the assignment's total only, no per-notebook columns",
    )
    args = parser.parse_args(argv)
    out = args.out.resolve()
    try:
        course = require_gradebook(out)
        cells = regenerate_class_files(out)
        written, export = write_lms_file(out, course, allow_pending=args.allow_pending, total_only=args.total_only)
        write_run_report(out, course)  # manual grades given since the run counted there too
    except GraderError as error:
        print(f"error: {error}", file=sys.stderr)
        return error.exit_code
    where = out.relative_to(ROOT) if out.is_relative_to(ROOT) else out
    students = len({row["student_id"] for row in cells})
    print(f"wrote {where}/cells.csv ({len(cells)} cells of {students} students) and {where}/grades.csv")
    for line in pending_lines(export.pending):
        print(console_line(line, 1000))
    if written is None:
        print(
            f"{lms_file(course)} not written: {len(export.pending)} student(s) have cells awaiting manual grading. "
            f"Grade them in formgrader (`jupyter lab --no-browser --LabApp.default_url=/formgrader` in {course}), then run this again; or pass --allow-pending "
            f"to leave those students out.",
            file=sys.stderr,
        )
        return ExitCode.UNFINISHED
    left_out = f", without {len(export.pending)} student(s) awaiting manual grading" if export.pending else ""
    print(f"wrote {where}/{lms_file(course)}: {len(export.rows)} student(s){left_out}")
    return ExitCode.DONE


if __name__ == "__main__":
    sys.exit(main())
