# The two commands of the README: `make demo` (the main job) and `make test` (the test suite).
# Each creates .venv and installs what the project needs on a fresh machine.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test bench lint clean

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python -m pytimely.demo

test: $(STAMP)
	$(BIN)/python -m pytest

bench: $(STAMP)
	$(BIN)/python bench/progress.py
	$(BIN)/python bench/chain.py
	$(BIN)/python bench/manyflows.py

lint: $(STAMP)
	$(BIN)/ruff check pytimely tests bench examples

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis out
