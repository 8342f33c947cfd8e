"""The demo (`make demo`) says in one line of its own what its unscored first steps are, instead of TRL's warning, a
dump of a rollout's kwargs for every step that has one; it says what each GRPO step is doing, and prints none of TRL's
log dicts (issue 44)."""

import sys

import pytest

from tests.harness import ROOT, processes


@pytest.mark.trainer
def test_demo_explains_unscored_rollouts_in_one_line(tmp_path):
    # No warm-up: the tiny model calls no tool, so every rollout of the step is unscored (the demo's worst case).
    result = processes.run([sys.executable, "-m", "examples.demo", "--steps", "1", "--warmup-steps", "0", "--out",
                             str(tmp_path)], cwd=ROOT, capture_output=True, text=True)
    output = result.stdout + result.stderr
    assert "All reward functions returned None" not in output, result.stderr
    assert "for the following kwargs" not in output
    assert "'train_runtime'" not in output and "{'loss'" not in output, output  # TRL's PrinterCallback's dicts
    assert "      step 1 of 1: the rollouts, against the live environment" in result.stdout.splitlines()
    assert "      step 1 done in " in result.stdout
    line = ("      8 of 8 rollouts (step 1) called no tool that gives a reward, as expected of a model still learning "
            "its tools: get_reward() is None for them, GRPO leaves them out of their group, TRL's warning is silenced")
    assert result.stdout.splitlines().count(line) == 1, result.stdout
    # The demo's own verdict: a model that reached the environment through no tool call is exit 1.
    assert result.returncode == 1 and "      0 tool calls reached the environment" in result.stdout, output
