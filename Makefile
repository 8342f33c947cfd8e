# Two commands on a fresh machine: `make demo` (set up, then the main job) and `make test`; `make test-fast` is the
# quick check while working (everything but the `trainer` tier: real trainers, torchrun, spawned workers, and the
# `install` tier: the README's install lines in fresh venvs, `make test-install`).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
EXAMPLE_PORT := 8031

.PHONY: setup demo test test-fast test-install test-trl-oldest lint generate check golden bench clean

$(PY):
	$(PYTHON) -m venv $(VENV)

# torch first, pinned: the CPU wheel is on this machine's disk, a bare `torch` would pull a multi-GB CUDA build.
setup: $(PY)
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e ".[dev]"

demo: setup
	$(PY) -m examples.demo

# TEST_ARGS: more pytest arguments (.ci/run: -m trainer, the fast and install tiers having run on their own just before).
test: setup
	$(PY) -m pytest -q $(TEST_ARGS)

test-fast: setup
	$(PY) -m pytest -q -m "not trainer and not install"

test-install: setup
	$(PY) -m pytest -q -m install

# The oldest TRL of the `train` extra's range, in .venv-trl-oldest: a training install, then the trainer tests.
test-trl-oldest:
	.ci/trl-oldest

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
# once (a model taking 0.2 s per reply, 20 ms per environment request); then the difficulty-aware task order against the
# seeded shuffle, the groups with no reward spread and the draws per pool (a GRPOTrainer with no dataset, 60 steps).
bench: setup
	$(PY) -m pip install -q matplotlib
	$(PY) bench/compare.py --reps 20 --latency-ms 20
	$(PY) bench/slow_starts.py --runs 2
	$(PY) bench/slow_starts.py --runs 2 --generate-ms 1000
	$(PY) bench/slow_tools.py --runs 2
	$(PY) bench/slow_tools.py --runs 2 --tool-ms 0
	$(PY) bench/eval_speed.py --runs 2
	$(PY) bench/curriculum.py --runs 2
