# The two commands of the README: `make demo` (the main job) and `make test` (the test suite).
# Each creates .venv and installs the project with all its extras (pytimely[all]: Spark, plots,
# test and lint tools), and makes sure a Java 17+ runtime is there for the embedded Spark
# (scripts/ensure-java.sh: apt-get openjdk-17-jre-headless when `java` is missing or older);
# `make test` also installs Chromium and Graphviz for the dashboard tests
# (scripts/ensure-browser.sh).
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
SOURCES := pytimely tests bench examples
# `make bench` runs these; `make bench BENCH="wordcount --columnar"` runs one with options.
BENCH ?=

.PHONY: demo cluster-demo test bench results lint lint-format typecheck lint-all \
	check-install java browser clean

# The install also compiles the optional extension pytimely/_speedups.c (setup.py) in place, so
# a change to the C source reinstalls too.
$(STAMP): pyproject.toml setup.py pytimely/_speedups.c
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[all]'
	touch $(STAMP)

java:
	@sh scripts/ensure-java.sh

# The dashboard and graph tests drive a headless Chromium and Graphviz (Debian packages).
browser:
	@sh scripts/ensure-browser.sh

# `make demo REMOTE=sc://host:15002` runs it through a Spark Connect server instead.
demo: $(STAMP) java
	$(BIN)/python -m pytimely.demo $(if $(REMOTE),--remote $(REMOTE))

# The main job on a Spark standalone cluster (master + two workers as JVMs on 127.0.0.1).
cluster-demo: $(STAMP) java
	$(BIN)/python scripts/cluster_demo.py

test: $(STAMP) java browser
	$(BIN)/python -m pytest

# The benchmarks are scripts of the source checkout (bench/ is not in the wheel).
bench: $(STAMP)
ifeq ($(strip $(BENCH)),)
	$(BIN)/python bench/progress.py
	$(BIN)/python bench/chain.py
	$(BIN)/python bench/wordcount.py
	$(BIN)/python bench/manyflows.py
else
	$(BIN)/python bench/$(firstword $(BENCH)).py $(wordlist 2,99,$(BENCH))
endif

results: $(STAMP)
	$(BIN)/python bench/all_experiments.py > /dev/null

# The ruff rules of pyproject.toml (line length and the public docstrings of the package
# included).
lint: $(STAMP)
	$(BIN)/ruff check $(SOURCES)

# The tree is kept in `ruff format`'s layout (run `ruff format pytimely tests bench examples`).
lint-format: $(STAMP)
	$(BIN)/ruff format --check $(SOURCES)

# The package's types as a user's type checker sees them (mypy on a user-style job).
typecheck: $(STAMP)
	$(BIN)/python -m pytest -q -p no:cacheprovider tests/test_typing.py

# What .ci/run enforces before the tests.
lint-all: lint lint-format typecheck

# A wheel installed without extras into a fresh virtual environment; prints its size.
check-install:
	sh scripts/check-light-install.sh

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis out
