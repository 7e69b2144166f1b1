# The two commands of the README:
#   make demo   set up a fresh machine (.venv with the Rust engine built) and run a case study
#   make test   run every test, Rust and Python
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: setup demo test bench clean

setup:
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@$(BIN)/python -m pip install -q --upgrade pip
	@$(BIN)/python -m pip install -q -e '.[test]'

demo: setup
	$(BIN)/memvisor run paging-stress

test: setup
	cargo test --release --workspace --quiet
	$(BIN)/python -m pytest -q

bench: setup
	$(BIN)/memvisor bench

clean:
	rm -rf $(VENV) target runs
