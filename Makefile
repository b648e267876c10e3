# The two commands of the README: `make demo` (the main job) and `make test` (the test suite).
# Each creates .venv and installs what the project needs on a fresh machine, including a Java 17+
# runtime for the embedded Spark (scripts/ensure-java.sh: apt-get openjdk-17-jre-headless when
# `java` is missing or older).
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test bench results lint clean java

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

java:
	@sh scripts/ensure-java.sh

demo: $(STAMP) java
	$(BIN)/python -m pytimely.demo

test: $(STAMP) java
	$(BIN)/python -m pytest

bench: $(STAMP)
	$(BIN)/python bench/progress.py
	$(BIN)/python bench/chain.py
	$(BIN)/python bench/wordcount.py
	$(BIN)/python bench/manyflows.py

results: $(STAMP)
	$(BIN)/python bench/all_experiments.py > /dev/null

lint: $(STAMP)
	$(BIN)/ruff check pytimely tests bench examples

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis out
