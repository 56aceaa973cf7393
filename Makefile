# make run   : dev stack (embedded Redis persisted in .run/ unless REDIS_URL is set, migrate, dev superuser,
#              runserver, Celery worker + beat, then the demo members and producer; README "make run")
# make test  : ruff + mypy --strict on the protocol core + pytest on SQLite, then the database tests on
#              a private PostgreSQL (chaos tests excluded)
PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
# The stamp lives inside .venv so deleting .venv also forgets the install.
STAMP  := $(VENV)/.install.stamp

.DEFAULT_GOAL := help
.PHONY: help venv test lint run chaos bench bench-e2e bench-latency bench-producer bench-jobs bench-gate clean constraints

help:
	@echo "make run    start the dev stack on http://127.0.0.1:8000/admin/ (Ctrl-C stops everything; data in .run/)"
	@echo "make test   ruff, mypy --strict coordinator/protocol, pytest (without chaos tests)"
	@echo "make chaos  only the chaos / soak tests (pytest -m chaos)"
	@echo "make bench  heartbeat, producer, end-to-end and slow-job benchmarks; rewrites docs/benchmarks.md"
	@echo "make bench-producer  the producer benchmarks only; rewrites their section of docs/benchmarks.md"
	@echo "make bench-e2e       the end-to-end benchmark only (against raw loops); rewrites its section of docs/benchmarks.md"
	@echo "make bench-latency   the latency and idle-cost benchmark only; rewrites its section of docs/benchmarks.md"
	@echo "make bench-jobs      the slow-jobs benchmark only (orderings against Celery); rewrites its section of docs/benchmarks.md"
	@echo "make bench-gate      the gate module's Redis CPU against FCALL; rewrites its section of docs/benchmarks.md"
	@echo "make lint   ruff and mypy only"
	@echo "make constraints  re-resolve pyproject.toml's ranges into constraints.txt (the tested set)"
	@echo "make clean  remove .venv and tool caches (keeps db.sqlite3 and .env)"

venv: $(STAMP)

# Re-runs whenever pyproject.toml or constraints.txt changes (or .venv is gone). pyproject.toml has the
# compatible ranges a host project installs against; constraints.txt the exact set tested here.
$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -c constraints.txt -e '.[dev]'
	touch $@

# The Redis gate module (rsc_redis/module/rsc_gate.c) that the embedded Redis of `make run` and of the
# tests loads: compiled with the machine's C compiler into ~/.cache/rsc-redis/ when its source changed
# (a no-op otherwise; docs/redis-acl.md, "The gate module").
.PHONY: gate-module
gate-module: $(STAMP)
	$(BIN)/python -m rsc_redis.module

# After changing a range in pyproject.toml: resolve it afresh and record the exact set that was tested.
constraints:
	rm -rf .venv-constraints
	$(PYTHON) -m venv .venv-constraints
	.venv-constraints/bin/python -m pip install -q '.[dev,bench]'
	{ echo "# The exact dependency set that make test installs and CI tests (pip install -c constraints.txt)."; \
	  echo "# pyproject.toml states compatible ranges; regenerate this file with 'make constraints'."; \
	  .venv-constraints/bin/python -m pip freeze --exclude-editable | grep -v -e '^-e' -e '^redis-stream-coordinator'; } > constraints.txt
	rm -rf .venv-constraints

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy --strict coordinator/protocol

# Two passes: the whole suite on SQLite, then the tests that touch the database again on a private
# PostgreSQL server that tests/postgres.py starts (skipped, saying so, where no PostgreSQL is installed).
test: lint gate-module
	$(BIN)/pytest -q
	$(BIN)/python -m tests.postgres -q -p no:cacheprovider --ignore=tests/e2e

chaos: $(STAMP)
	@# pytest exits 5 when no test is selected; that is not a failure while there are no chaos tests.
	$(BIN)/pytest -m chaos; rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "no chaos tests collected"; exit 0; fi; exit $$rc

# e.g. make run RUN_ARGS="--addr 127.0.0.1:8001 --data-dir .run2" (a second stack); RSC_EXTRA_APPS=billing make run
RUN_ARGS ?=
# The benchmarks also compare against FastStream (the optional `bench` extra, pinned in constraints.txt).
BENCH_STAMP := $(VENV)/.bench.stamp
$(BENCH_STAMP): $(STAMP)
	$(BIN)/python -m pip install -c constraints.txt -e '.[dev,bench]'
	touch $@

bench: $(BENCH_STAMP)
	mkdir -p bench/results
	$(BIN)/python bench/heartbeat_bench.py --out bench/results/heartbeat.json
	$(BIN)/python bench/producer_bench.py --out bench/results/producer.json
	$(BIN)/python bench/producer_instructions.py --out bench/results/producer_instructions.json
	$(BIN)/python bench/e2e_bench.py --out bench/results/e2e.json
	$(BIN)/python bench/latency_bench.py --out bench/results/latency.json
	$(BIN)/python bench/store_bench.py --form-members 1000,10000 --out bench/results/store.json
	$(BIN)/python bench/cluster_bench.py --out bench/results/cluster.json
	$(BIN)/python bench/jobs_bench.py --out bench/results/jobs.json
	$(BIN)/python bench/gate_cost.py --out bench/results/gate.json
	$(BIN)/python bench/report.py bench/results/heartbeat.json bench/results/e2e.json docs/benchmarks.md

bench-latency: $(BENCH_STAMP)
	mkdir -p bench/results
	$(BIN)/python bench/latency_bench.py --out bench/results/latency.json
	$(BIN)/python bench/report.py --latency-only bench/results/latency.json docs/benchmarks.md

bench-e2e: $(BENCH_STAMP)
	mkdir -p bench/results
	$(BIN)/python bench/e2e_bench.py --out bench/results/e2e.json
	$(BIN)/python bench/report.py --e2e-only bench/results/e2e.json docs/benchmarks.md

bench-jobs: $(BENCH_STAMP)
	mkdir -p bench/results
	$(BIN)/python bench/jobs_bench.py --out bench/results/jobs.json
	$(BIN)/python bench/report.py --jobs-only bench/results/jobs.json docs/benchmarks.md

bench-gate: $(BENCH_STAMP)
	mkdir -p bench/results
	$(BIN)/python bench/gate_cost.py --out bench/results/gate.json
	$(BIN)/python bench/report.py --gate-only bench/results/gate.json docs/benchmarks.md

bench-producer: $(BENCH_STAMP)
	mkdir -p bench/results
	$(BIN)/python bench/producer_bench.py --out bench/results/producer.json
	$(BIN)/python bench/producer_instructions.py --out bench/results/producer_instructions.json
	$(BIN)/python bench/report.py --producer-only bench/results/producer.json docs/benchmarks.md

run: gate-module
	$(BIN)/python -m config.devstack $(RUN_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .mypy_cache .hypothesis *.egg-info build
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
