# Two commands on a fresh machine: `make demo` (set up, then the main job) and `make test`; `make test-fast` is the
# quick check while working, `make test-unit` the quicker one (tests/README.md maps the tiers: unit, fast, slow,
# trainer, install). Each tier prints its slowest tests and its wall and CPU time.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
EXAMPLE_PORT := 8031

# The fast tier: what no marker sends elsewhere (pyproject.toml registers the markers).
FAST := not trainer and not install and not slow
PYTEST := $(PY) -m pytest -q --durations=25
# pytest-xdist: two workers for the tiers that mostly wait on servers and subprocesses (measured: the fast tier in
# 210 s instead of 330 s, the same CPU time; tests/README.md). Each worker has its own servers and session fixtures.
WORKERS := -n 2
# Bytecode is written (a machine may set PYTHONDONTWRITEBYTECODE=1): else each test process and each subprocess
# compiles orsgen and the tests again, and pytest rewrites every test module's asserts in each worker (measured: the
# suite's collection 23 s of CPU per worker without, 15 s with; orsgen's runtime and CLI 0.7 s per process, 0.2 s).
export PYTHONDONTWRITEBYTECODE :=
# `$(TIMED) command`: the command, then one line with its wall time and the CPU time of it and its children.
TIMED = TIMEFORMAT="== $@: %0R s wall, %0U s user + %0S s system CPU =="; time

.PHONY: setup demo test test-unit test-fast test-slow test-install test-trl-oldest lint generate check golden bench clean

$(PY):
	$(PYTHON) -m venv $(VENV)

# torch first, pinned: the CPU wheel is on this machine's disk, a bare `torch` would pull a multi-GB CUDA build. Done
# again only when what it installs from changes (the install is editable): `make test-unit` does not wait for pip.
# No bytecode at install (as uv does): pip compiles every module of torch, transformers, sympy..., of which a run
# imports a few. The last line imports those once, in two processes at once, which writes their bytecode (else the
# first processes of a run, two test workers and more, each compile the same modules at once) and fails here if the
# install is broken. Measured in CI: setup 173 s -> 119 s, its imports included.
setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml setup.py | $(PY)
	$(PY) -m pip install -q --no-compile torch==2.13.0
	$(PY) -m pip install -q --no-compile -e ".[dev]"
	$(PY) -c "import openreward, black, matplotlib.pyplot, uvicorn, pytest" & sdk=$$!; \
		$(PY) -c "import datasets; from trl import GRPOTrainer" && wait $$sdk
	touch $@

demo: setup
	$(PY) -m examples.demo

# TEST_ARGS: more pytest arguments (.ci/run: -m trainer, the other tiers having run on their own just before).
test: setup
	@$(TIMED) $(PYTEST) $(TEST_ARGS)

# No server, no trainer: the logic alone (tests/unit/; a file of it by path: .venv/bin/python -m pytest tests/unit/X.py).
test-unit: setup
	@$(TIMED) $(PYTEST) tests/unit

test-fast: setup
	@$(TIMED) $(PYTEST) $(WORKERS) -m "$(FAST)"

# What needs no trainer but longer than the fast tier's budget (`orsgen eval` runs, scale, outages).
test-slow: setup
	@$(TIMED) $(PYTEST) $(WORKERS) -m "slow and not trainer and not install"

# Only the files that hold install tests are collected (collecting the whole suite costs 13 s of CPU, to run 5 tests).
test-install: setup
	@$(TIMED) $(PYTEST) -m install $(shell grep -l "mark\.install" tests/*.py)

# The oldest TRL of the `train` extra's range, in .venv-trl-oldest: a training install, then the trainer tests.
test-trl-oldest:
	@$(TIMED) .ci/trl-oldest

lint: setup
	$(PY) -m ruff check codegen tests examples bench generated
	$(PY) -m mypy codegen examples generated

# Regenerate / check generated/ (the [tool.orsgen] targets) against the example environment on its pinned port.
generate: setup
	$(PY) -m examples.regen $(EXAMPLE_PORT)

check: setup
	$(PY) -m examples.regen $(EXAMPLE_PORT) --check

clean:
	rm -rf $(VENV) .venv-trl-oldest build *.egg-info .pytest_cache .mypy_cache .ruff_cache

# Rewrite the golden cases' expected.py after an intended change of the generator (then review the diff). The
# hostile case holds a tool no module can have: orsgen writes the rest and exits 2.
golden: setup
	for case in tests/golden/*/; do (cd $$case && ../../../$(PY) -m orsgen); rc=$$?; \
		[ $$rc -eq 0 ] || { [ $$rc -eq 2 ] && [ $$case = tests/golden/hostile/ ]; } || exit 1; done

# orsgen's adapter against TRL's OpenRewardSpec on one loopback server (scripts, not tests; needs matplotlib); then
# sandboxes that start in 1 s, with the tiny model's step and with a model taking 1 s to generate; then tools that
# take 0.5 s (and none) on the server, 3 turns per episode; then `orsgen eval`, 64 episodes one at a time and 16 at
# once (a model taking 0.2 s per reply, 20 ms per environment request), and beside a plain asyncio client at 16, 128
# and 512 at once (1 s replies, a tool awaiting 1 s); then the difficulty-aware task order against the
# seeded shuffle, the groups with no reward spread and the draws per pool (a GRPOTrainer with no dataset, 60 steps).
bench: setup
	$(PY) -m pip install -q matplotlib
	$(PY) bench/compare.py --reps 20 --latency-ms 20
	$(PY) bench/slow_starts.py --runs 2
	$(PY) bench/slow_starts.py --runs 2 --generate-ms 1000
	$(PY) bench/slow_tools.py --runs 2
	$(PY) bench/slow_tools.py --runs 2 --tool-ms 0
	$(PY) bench/eval_speed.py --runs 2
	$(PY) bench/eval_scale.py
	$(PY) bench/curriculum.py --runs 2
