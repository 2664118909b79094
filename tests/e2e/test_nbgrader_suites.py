"""nbgrader's own test suites, with the grader's plugin enabled for every course they make.

nbgrader ships its tests inside the installed package. They run here with a Jupyter config folder
whose nbgrader_config.py holds only the lines `autograder configure` writes (no course's
settings), so each course the suites build grades through the grader. Every test passes but
those the grader differs on deliberately, each skipped with its reason
(tests/nbgrader_with_the_grader.py; autograder/README.md lists them).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

from autograder.course.paths import ROOT
from tests.nbgrader_with_the_grader import DELIBERATE

SUITES = (
    "nbgrader.tests.apps.test_nbgrader_autograde",
    "nbgrader.tests.apps.test_nbgrader_validate",
    "nbgrader.tests.apps.test_nbgrader_generate_feedback",
)


def test_nbgrader_suites_pass_with_plugin(tmp_path):
    """nbgrader's suites pass with the plugin but the deliberate differences."""
    config = tmp_path / "jupyter-config"
    config.mkdir()
    mark = tmp_path / "plugin-loaded"
    (config / "nbgrader_config.py").write_text(
        "c = get_config()  # noqa: F821\n"
        f"open({str(mark)!r}, 'a').write('loaded\\n')  # the suites' nbgrader did read this file\n"
        "from autograder.notebook.plugin import configure\n\nconfigure(c)\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("JUPYTER_NO_CONFIG", "JUPYTER_CONFIG_DIR")}
    env |= {
        "JUPYTER_CONFIG_PATH": str(config),
        # nbgrader's tests call its commands by name (and it shells out to alembic).
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
        "PYTHONPATH": str(ROOT),
    }
    command = [sys.executable, "-m", "pytest", "--pyargs", *SUITES, "-p", "tests.nbgrader_with_the_grader"]
    command += ["-p", "no:cacheprovider", "-q", "-rfEs", "--rootdir", str(tmp_path)]
    run = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=3000)
    report = run.stdout[-6000:] + run.stderr[-2000:]
    assert run.returncode == 0, report
    assert mark.is_file(), "nbgrader never read the grader's lines"
    summary = run.stdout.strip().splitlines()[-1]
    passed = int(re.search(r"(\d+) passed", summary).group(1))
    assert passed >= 60, summary
    # pytest's -rs writes each reason once, with how many tests it skipped.
    skipped = Counter()
    for count, why in re.findall(r"SKIPPED \[(\d+)\] .*?: deliberate difference of the grader: (.*)", run.stdout):
        skipped[why] += int(count)
    assert skipped == Counter(DELIBERATE.values()), report  # each one still exists, and is skipped
    print(summary)
