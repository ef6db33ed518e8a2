# patchctl developer entry points. `make run` and `make test` work on a fresh clone.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
SERIES ?= patches/llamafile
PYTEST_ARGS ?=

.PHONY: run test lint venv clean-venv

# The venv may reuse packages already installed system-wide (offline-friendly); anything
# missing comes from PyPI. Re-installed when pyproject.toml changes.
$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv --system-site-packages $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[test,dca,longctx]'
	touch $@

venv: $(BIN)/.installed

## run: the main job on the default series: clean-room apply, verify --all, CPU build, smoke test
run: venv
	PATH="$(abspath $(BIN)):$$PATH" PATCHCTL=$(BIN)/patchctl bash scripts/main_job.sh $(SERIES)

## test: the test suite (the integration test downloads the upstream sdist once, then caches it)
test: venv
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/python -m pytest $(PYTEST_ARGS)

## lint: ruff and mypy --strict (patchctl, the long-context harness, the tests)
EVALS_TYPED := evals/__init__.py evals/errors.py evals/fsio.py evals/longctx
lint: venv
	$(BIN)/python -m ruff check patchctl tests $(EVALS_TYPED) scripts/series_corpus.py
	$(BIN)/python -m mypy --strict patchctl $(EVALS_TYPED) tests
	MYPYPATH=tests $(BIN)/python -m mypy --strict scripts/series_corpus.py  # imports tests/support

clean-venv:
	rm -rf $(VENV)
