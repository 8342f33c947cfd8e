"""`dataset(pass_rates=...)` reads a bar it can trust (issue 41): an `orsgen eval` summary whose bar was the highest
reward its run saw (summaries from before the bar was recorded) is refused in one line; one at the recorded bar, or
an older one whose bar stayed at 1.0, is read."""

import json

import pytest
from orsgen.runtime.rows import pass_rates


def summary(threshold, given):
    tasks = [{"environment": "studio", "split": "train", "task_index": i, "pass_rate": rate}
             for i, rate in enumerate([0.0, 0.0, 0.5, 1.0])]
    return {"schema": "orsgen.eval/1", "pass": {"threshold": threshold, "given": given, "k": 2}, "tasks": tasks}


def test_a_summary_whose_bar_was_the_best_episode_is_refused(tmp_path):
    (tmp_path / "summary.json").write_text(json.dumps(summary(1.05, None)))  # one 1.05 bonus moved it
    with pytest.raises(ValueError, match=r"its pass rates rest on a bar of 1\.05, the highest reward that run saw") as e:
        pass_rates(tmp_path, "studio", "train")
    assert "orsgen eval --resume" in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize(("threshold", "given"), [(1.0, 1.0), (0.5, 0.5), (1.0, None)])
def test_a_summary_at_its_recorded_bar_is_read(tmp_path, threshold, given):
    """(1.0, None): an older summary whose bar never moved is the same as one at the fixed 1.0."""
    (tmp_path / "summary.json").write_text(json.dumps(summary(threshold, given)))
    assert pass_rates(tmp_path, "studio", "train") == {0: 0.0, 1: 0.0, 2: 0.5, 3: 1.0}
    assert pass_rates({"2": 0.5}, "studio", "train") == {2: 0.5}  # the user's own mapping: theirs to trust
