# Two entry points (see README): `make` (install, run the studies, build the book) and `make test`.
SHELL := /bin/bash
.SHELLFLAGS := -eo pipefail -c
.DEFAULT_GOAL := all

VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# Data: $MEMLIB_DATA_DIR if set; in this workplace the shared datasets folder beside the repo;
# otherwise memlib looks in data/raw/ and downloads what it can verify (see data/README.md).
ifneq ($(wildcard ../shared/datasets),)
export MEMLIB_DATA_DIR ?= $(abspath ../shared/datasets)
endif
# Caches (embeddings, parsed datasets, factor tables, study results) are content-addressed, so one per user serves every
# clone: the hour of LongMemEval-S embeddings is paid once per machine. memlib keeps them in the user's cache folder
# ($XDG_CACHE_HOME/memlib, else ~/.cache/memlib: memlib._cachefiles.cache_root); set MEMLIB_CACHE_DIR to move them.
PIP_QUIET := 2>&1 | { grep -v "is ignored: it is neither a file nor a directory" || true; }

# uv into this venv, from the places pip looks (`where`, set in the recipe below), compiling the bytecode as pip does
UV_INSTALL = $(VENV)/bin/uv pip install -q --python $(PY) --compile-bytecode --no-config --index-strategy unsafe-best-match \
	"$${where[@]}"

$(STAMP): requirements.txt pyproject.toml .ci/pip_to_uv.py
	test -x $(PY) || python3 -m venv $(VENV)
	# uv installs the pinned set in well under a minute where pip took two to three (issue 33), from the places
	# pip is configured to look (.ci/pip_to_uv.py); it compiles the bytecode, as pip does
	$(PY) -m pip install -q --disable-pip-version-check uv==$$(sed -n 's/^uv==//p' requirements.txt) $(PIP_QUIET)
	opts=$$($(PY) .ci/pip_to_uv.py $(PY)); where=(); [ -z "$$opts" ] || readarray -t where <<<"$$opts"; \
	$(UV_INSTALL) -r requirements.txt; \
	$(UV_INSTALL) --no-deps -e .
	touch $@

# `make` is the quick main job: wherever a study would read all of LongMemEval-S (the paper study,
# chapter 08; the LongMemEval-S side of chapters 03 to 07; the defaults study of chapter 06; the cue
# study's transfer in chapter 09) it reads a seeded sample of 3 questions (memlib.studies.MAIN_SAMPLE,
# the same questions everywhere, so a fresh clone embeds those haystacks once), and of each sampled
# RealMem user 24 of the histories its questions end, spread over its stream (memlib.studies.MAIN_HISTORIES:
# a user asks dozens of questions inside one stream, each a history the defaults, transfer, usage and need
# studies replay). `make paper` runs them, and the book, on all of them (MEMLIB_PAPER=1 tells the chapters).
STUDY_JOBS := 2
ifeq ($(PAPER),1)
export MEMLIB_PAPER := 1
endif

.PHONY: all install studies book test test-fast clean lab lint paper
install: $(STAMP)

## Run every study headlessly, two at a time; one JSON table per run in results/ (the runs and their
## parameters: memlib.studies.main_job, which reads the STUDIES registry). Each result is also cached
## (under $MEMLIB_CACHE_DIR, keyed by the memlib sources, the data file and the parameters;
## memlib/studies/_cache.py), so the book's chapters, which run the same registered studies with the
## same parameters, reuse it instead of computing it again. MEMLIB_RESULT_CACHE=0 turns the cache off.
studies: install
	$(PY) -m memlib studies --out results --jobs $(STUDY_JOBS) $(if $(filter 1,$(PAPER)),--paper,)

## Build the book into _build/html (re-executes every notebook, on every core; any failing cell or any warning, such as a
## glue key glued twice on a page, fails the build). After `make studies` the chapters read the cached
## study results, so a warm rebuild only renders. `make book QUICK=1` builds every chapter in quick mode,
## with the same strictness and the same check: CI (.ci/run) builds that.
book: install
	$(PY) -m memlib book build $(if $(filter 1,$(QUICK)),--quick,)
	$(PY) -m memlib book check _build/html

## After the main job every chapter reads its studies cached: MEMLIB_EXPECT_CACHED=1 makes a chapter whose
## parameters no run of the main job shares fail the build by name, instead of computing its study unseen (a quick
## book, QUICK=1, reads no result of the main job and computes its own).
all: studies
	$(if $(filter 1,$(QUICK)),,MEMLIB_EXPECT_CACHED=1 )$(MAKE) --no-print-directory book

## The full book with the paper's benchmark: chapter 08 and the paper study on all 498 LongMemEval-S
## questions. Every corpus is embedded first, one at a time on every core (memlib.studies.PAPER_EMBED; cached, so
## seconds when warm), then every study runs in one pool. Cold, LongMemEval-S is embedded twice: at 128 word pieces for
## every study, about 48 minutes on 2 cores, and its long turns at 256 for the released factors, about 70 more.
paper:
	$(MAKE) all PAPER=1

## The test suite: library unit tests, doctests and every notebook in quick mode under nbval: all of it,
## the tests marked slow or integration (pyproject.toml) included.
## The tests run on TEST_JOBS processes (pytest-xdist), a whole file to one process (--dist loadfile): a notebook's cells
## run in order in one kernel, and a module's fixtures are built once. The notebooks go first, in the order given (not
## xdist's largest-file-first): with the study results not yet cached (a change to memlib's code) they are the longest
## files, and the long first share out best. TEST_JOBS defaults to the online cores (getconf, which OMP_NUM_THREADS does
## not change as it does nproc); TEST_JOBS=1 runs everything in this process.
TEST_JOBS := $(shell getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2)
PYTEST_JOBS = $(if $(filter 1,$(TEST_JOBS)),,-n $(TEST_JOBS) --dist loadfile --no-loadscope-reorder)
## Temporary files of the tests (pytest's tmp_path, the doctests' and the kernels' temporary folders) go to one new
## folder (TMPDIR), removed when the run ends, pass or fail: before, each run left dozens of folders in /tmp.
IN_TEST_TMP = tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; TMPDIR=$$tmp
test: install
	$(PY) -m memlib notebooks prepare build/nb --quick
	$(IN_TEST_TMP) $(PY) -m pytest build/nb tests memlib --doctest-modules --nbval-lax --nbval-current-env --durations=30 $(PYTEST_JOBS)

## The unit tests alone (not marked slow): under a minute on 2 cores.
test-fast: install
	$(IN_TEST_TMP) $(PY) -m pytest -m "not slow" $(PYTEST_JOBS)

## Edit the chapters in JupyterLab on this venv's kernel: notebooks/*.md open as notebooks and saving
## writes the .md (jupytext; paired .ipynb are git-ignored). Config: .jupyter/. Extra flags: LAB_ARGS=...
lab: install
	$(PY) -m jupyterlab --config=.jupyter/jupyter_server_config.py $(LAB_ARGS)

## Lint and format check (ruff, configured in pyproject.toml); `ruff format .` fixes the format.
lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

clean:
	rm -rf _build build results
