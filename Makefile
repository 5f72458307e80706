# make demo / make test each create .venv when missing and install the package into it.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-slow lint docs format bench clean

$(STAMP): pyproject.toml constraints.txt
	@echo "make: setting up $(VENV) (first time: a few minutes; torch is the CPU build)"
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@echo "make: installing dpaudit and its test tools (pip install -c constraints.txt -e \".[test]\")"
	$(BIN)/python -m pip install --quiet --progress-bar off -c constraints.txt -e ".[test]"
	@touch $(STAMP)
	@echo "make: $(VENV) is ready"

demo: $(STAMP)
	@echo "make: running the quickstart audit (dpaudit run audits/quickstart.toml)"
	$(BIN)/dpaudit run audits/quickstart.toml

# Random order (pytest-randomly); the statistical sweeps marked slow run in test-slow.
test: $(STAMP)
	$(BIN)/python -m pytest -n 2 -q -m "not slow"

test-slow: $(STAMP)
	$(BIN)/python -m pytest -n 2 -q -m slow

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports

# The documentation site (mkdocs.yml), built into site/ with warnings as errors.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

format: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

# Removes what the build made, never your audit runs (remove those with rm -r reports/NAME).
clean:
	rm -rf $(VENV) site .pytest_cache .mypy_cache .ruff_cache .import_linter_cache dpaudit.egg-info
