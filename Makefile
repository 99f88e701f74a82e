# The commands people type. Each target sets up .venv first when needed.
VENV ?= .venv

.PHONY: setup train test test-fast lint format bench-cpu clean

setup:
	bash scripts/setup.sh

train: setup
	$(VENV)/bin/spotlight train $(ARGS)

test:
	bash scripts/test.sh $(ARGS)

test-fast: setup
	$(VENV)/bin/pytest -m "not slow" $(ARGS)

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: setup
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

bench-cpu: setup
	$(VENV)/bin/python benchmarks/tiny_cpu.py --out docs/bench

clean:
	rm -rf runs .pytest_cache .ruff_cache
