# rsup: `make demo` shows it, `make test` proves it. Both create .venv when missing.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=

.PHONY: all venv test lint typecheck unit demo bench e2e libs compat slow soak compare clean

all: test

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# Dev and CI pin torch/torchvision (constraints/dev.txt); the package itself does not.
$(STAMP): $(BIN)/python pyproject.toml constraints/dev.txt
	$(BIN)/pip install -q -c constraints/dev.txt -e '.[dev,train]'
	touch $(STAMP)

venv: $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff check supervisor workers tests
	$(BIN)/ruff format --check supervisor workers tests

# mypy does not read setuptools' package-dir: give it an rsup/ tree of links to check.
typecheck: $(STAMP)
	@mkdir -p build/typecheck/rsup
	@ln -sfn ../../../supervisor build/typecheck/rsup/supervisor
	@ln -sfn ../../../workers build/typecheck/rsup/workers
	MYPYPATH=build/typecheck $(BIN)/mypy -p rsup.supervisor -p rsup.workers

# pytest exits 5 when it collected nothing: that proves nothing, so it fails loudly.
test: lint typecheck
	@$(BIN)/pytest -q -m "not slow and not libs" $(PYTEST_ARGS); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "make test: pytest collected no tests" >&2; fi; exit $$rc

unit: $(STAMP)
	$(BIN)/pytest -q tests/unit $(PYTEST_ARGS)

e2e: $(STAMP)
	$(BIN)/pytest -q tests/e2e $(PYTEST_ARGS)

# Hugging Face Trainer, Lightning and a plain loop under rsup on the CPU (a few minutes).
libs: $(STAMP)
	$(BIN)/pytest -q -m libs tests/e2e/test_libraries.py $(PYTEST_ARGS)

demo: $(STAMP)
	$(BIN)/python -m rsup.supervisor.cli.demo

# Every benchmark runs; the exit is 1 when any missed its goal (or failed).
bench: $(STAMP)
	@rc=0; for script in tests/bench/bench_*.py; do $(BIN)/python $$script || rc=1; done; \
	exit $$rc

# The RDNA1 user's job side (Python 3.10, torch 1.13.1, Ultralytics 8.3.227, NumPy < 2)
# under a real rsupd, and rsup.workers under Python 3.9 (tests/compat/README.md).
# Builds .compat-venv on first use (2-4 min), about 1 min once it is cached.
compat: $(STAMP)
	$(BIN)/python tests/compat/run_compat.py $(COMPAT_ARGS)

# The tests marked slow: every crash point of the exactly-once matrix, the 1,000
# start/stop cycles, and end-to-end cases `make test` covers another way. CI runs it last.
slow: $(STAMP)
	@$(BIN)/pytest -q -m "slow and not libs" $(PYTEST_ARGS); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "make slow: pytest collected no tests" >&2; fi; exit $$rc

# Long suites, kept out of `make test`.
soak: $(STAMP)
	$(BIN)/python tests/soak/soak.py $(SOAK_ARGS)

compare: $(STAMP)
	$(BIN)/python tests/compare/compare.py --runs 3 $(COMPARE_ARGS)

clean:
	rm -rf .rsup-run demo-run .pytest_cache .mypy_cache .ruff_cache
