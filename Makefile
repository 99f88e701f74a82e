# The commands people type. Each target sets up .venv first when needed.
VENV ?= .venv

.PHONY: setup train test test-fast lint format bench-cpu figures clean

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

# the documented figures against their JSON; SET=quick|long|all, REGENERATE=1 re-runs them first
figures: setup
	$(VENV)/bin/python benchmarks/figures.py --set $(or $(SET),all) $(if $(REGENERATE),--regenerate,--check)

clean:
	rm -rf runs .pytest_cache .ruff_cache
