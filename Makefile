# The two commands of the README:
#   make demo   set up a fresh machine (.venv with the Rust engine built) and run a case study
#   make test   run every test, Rust and Python
PYTHON ?= python3
SHELL := /bin/bash
VENV := .venv
BIN := $(VENV)/bin

.PHONY: setup demo test bench clean

setup:
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@$(BIN)/python -m pip install -q --upgrade pip
	@$(BIN)/python -m pip install -q -e '.[test]'
	@# The small Linux guest the live backend's tests boot (QEMU and busybox from Debian's packages).
	@bash vmimage/build.sh target/vmimage
	@# Headless Chromium renders report.html in the report tests (Debian's package).
	@command -v chromium >/dev/null || (apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium >/dev/null)

demo: setup
	$(BIN)/memvisor run nfs-balloon

test: setup
	cargo test --release --workspace --quiet
	$(BIN)/python -m pytest -q

# The peer benchmark replays a recorded `sort` (recorded once under valgrind, about a minute).
BENCH_TRACE := runs/bench/sort30k.mvtrace
# The miss-path benchmark: Zipf(1.0) over a million pages (bench/zipftrace.py).
ZIPF_TRACE := runs/bench/zipf1m.oracleGeneral

bench: setup $(BENCH_TRACE) $(ZIPF_TRACE)
	$(BIN)/memvisor bench
	cargo run --release -q -p memvisor --example scale -- 1000 512MiB 8MiB
	$(BIN)/memvisor trace bench $(BENCH_TRACE) --frames 4,8,16,32,64,128,256,509 --repeats 5
	$(BIN)/memvisor trace bench $(ZIPF_TRACE) --frames 1000,10000,100000 --repeats 5
	# The esx-overcommit case's four-guest run on one core (its table's last column is the wall time).
	$(BIN)/memvisor run esx-overcommit --variant four --jobs 1 --quiet --out runs/bench/esx-overcommit
	# One observe/decide/apply round of the live backend over 10 real guests (QEMU).
	$(BIN)/memvisor bench --live 10

$(ZIPF_TRACE):
	mkdir -p runs/bench
	$(BIN)/python bench/zipftrace.py $@

$(BENCH_TRACE):
	@# `trace record` runs the program under valgrind's lackey (Debian's package).
	@command -v valgrind >/dev/null || (apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends valgrind >/dev/null)
	mkdir -p runs/bench
	seq 1 30000 | shuf --random-source=<(yes) > runs/bench/nums.txt
	$(BIN)/memvisor trace record -o $@ -- sort -n runs/bench/nums.txt -o runs/bench/sorted.txt

clean:
	rm -rf $(VENV) target runs
