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
PIP_QUIET := 2>&1 | { grep -v "is ignored: it is neither a file nor a directory" || true; }

$(STAMP): requirements.txt pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	# torch first, exact pin: a plain torch would pull a multi-GB CUDA build
	$(PY) -m pip install -q --disable-pip-version-check torch==$$(sed -n 's/^torch==//p' requirements.txt) $(PIP_QUIET)
	$(PY) -m pip install -q --disable-pip-version-check -r requirements.txt $(PIP_QUIET)
	$(PY) -m pip install -q --disable-pip-version-check --no-deps -e . $(PIP_QUIET)
	touch $@

.PHONY: all install studies book test clean
install: $(STAMP)

## Run every study headlessly; one JSON table per study in results/.
studies: install
	mkdir -p results
	for study in synthetic oracle-blind mlp sweep stream optimisers; do \
	  echo "study $$study"; \
	  $(PY) -m memlib study $$study --json > results/$$study.json.tmp && mv results/$$study.json.tmp results/$$study.json || exit 1; \
	done

## Build the book into _build/html (re-executes every notebook; any failing cell fails the build).
book: install
	$(PY) -m memlib book build
	$(PY) -m memlib book check _build/html

all: studies book

## The test suite: library unit tests, doctests and every notebook in quick mode under nbval.
test: install
	$(PY) -m memlib notebooks prepare build/nb --quick
	$(PY) -m pytest tests memlib --doctest-modules --nbval-lax --nbval-current-env build/nb

clean:
	rm -rf _build build results
