"""`orsgen eval`'s figures, comparison and picture from records and summaries alone (issue 41): a pass is the run's
recorded bar, never its best episode; `--compare` refuses runs at different bars and labels each run's k; counts of
done and counted episodes agree; nothing counted is said once, in the report, the picture and the comparison."""

import pytest
from orsgen.evaluate import figures, plot, report

TASKS = [("studio", "train", i) for i in range(4)]


def record(task, reward, rollout=0, reason=None, error=None):
    return {"environment": "studio", "split": "train", "task_index": task, "rollout": rollout, "reward": reward,
            "unscored_reason": reason, "error": error, "completion": [], "seconds": {"episode": 1.0, "model": 0.5}}


def summary(records, threshold=1.0, k=1, planned=4):
    return figures.summary(records, k=k, planned=planned, threshold=threshold, tasks=TASKS)


def test_a_bonus_episode_moves_no_bar():
    found = summary([record(0, 1.0), record(1, 1.0), record(2, 1.05), record(3, 0.0)])
    assert [t["pass_rate"] for t in found["tasks"]] == [1.0, 1.0, 1.0, 0.0]
    assert found["pass"]["threshold"] == found["pass"]["given"] == 1.0
    assert found["reward"]["passed"] == 3 and found["pass"]["at_1"] == 0.75
    assert summary([record(0, 1.0), record(1, 0.5)], threshold=0.5)["pass"]["at_1"] == 1.0


def test_done_is_what_resume_keeps_and_agrees_with_the_records():
    failed = [record(t, None, reason="endpoint_error", error="the endpoint at http://h/v1 answered 400") for t in range(4)]
    found = summary([*failed[:2], record(2, 1.0)], planned=8)
    assert found["episodes"] == {"planned": 8, "done": 1, "counted": 1}
    assert found["unscored"] == {"endpoint_error": 2}
    line = next(x for x in report.render(found, {}, markdown=False).splitlines() if x.strip().startswith("episodes"))
    assert line.split(None, 1)[1] == "1 of 8 done (1 counted; --resume runs 2 again: 2 the endpoint had failed)"


def test_compare_refuses_different_bars_and_explains_a_bar_that_moved():
    one, half = summary([record(0, 1.0)]), summary([record(0, 1.0)], threshold=0.5)
    assert figures.refusal(one, one, ("a", "b")) is None
    assert figures.refusal(one, half, ("a", "b")) == ("a passes at reward >= 1 and b at reward >= 0.5: their pass "
                                                      "rates are not comparable (measure both at one --pass-threshold)")
    old = summary([record(0, 1.0), record(1, 1.05)], threshold=1.05)
    old["pass"]["given"] = None  # a summary of the bar that moved: "1.0, or the highest reward seen"
    said = figures.refusal(one, old, ("a", "b"))
    assert said is not None and "b at reward >= 1.05 (the highest reward it saw: orsgen eval --resume" in said


def test_compare_labels_each_run_with_its_own_k():
    two = summary([record(t, 1.0, rollout=r) for t in range(3) for r in range(2)], k=2)
    one = summary([record(t, 1.0) for t in range(3)], k=1)
    found = figures.compare(one, two)
    assert found["k"] == (1, 2) and "pass@k" in found["figures"] and "pass@1" in found["figures"]
    text = report.render_comparison(found, ("one", "two"), markdown=True)
    assert "| figure | one (k=1) | two (k=2) |" in text
    assert text.count("k differs: one ran 1 episodes per task, two 2") == 1
    same = report.render_comparison(figures.compare(two, two), ("a", "b"), markdown=True)
    assert "| figure | a | b |" in same and "| pass@2 |" in same and "k differs" not in same


def test_compare_tells_tasks_in_one_run_from_tasks_in_neither():
    a = summary([record(0, 1.0), record(1, None, reason="not_started")])
    b = summary([record(0, 1.0), record(2, 1.0), record(1, None, reason="not_started")])
    found = figures.compare(a, b)
    assert (found["unchanged"], found["only_one"], found["neither"]) == (1, 1, 2)  # 2 in b only; 1 and 3 in neither
    assert "tasks: 0 improved, 0 regressed, 1 unchanged, 1 measured in one run only, 2 measured in neither" in \
        report.render_comparison(found, ("a", "b"), markdown=False)


@pytest.mark.parametrize("counted", [(0, 0), (0, 1), (1, 0)])
def test_a_comparison_with_nothing_counted_says_so_once(counted):
    failed = record(0, None, reason="endpoint_error", error="x")
    runs = [summary([record(0, 1.0)] if n else [failed]) for n in counted]
    text = report.render_comparison(figures.compare(*runs), ("a", "b"), markdown=False)
    assert "measured in one run only" not in text and "figure" not in text, text
    empty = [name for name, n in zip("ab", counted) if not n]
    said = ("neither a nor b counted an episode (a: endpoint_error 1; b: endpoint_error 1)" if len(empty) == 2 else
            f"{empty[0]} counted no episode ({empty[0]}: endpoint_error 1)")
    assert text.count(said) == 1 and text.count("counted") == 1, text


@pytest.fixture
def drawn(monkeypatch, tmp_path):
    """draw(summary, rewards) -> the matplotlib figure plot.draw made (and wrote to a PNG)."""
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt

    made = []
    close = plt.close
    monkeypatch.setattr(plt, "close", lambda figure: (made.append(figure), close(figure)))

    def draw(found, rewards):
        plot.draw(found, rewards, "scripted on studio", tmp_path / "pass_rates.png")
        assert (tmp_path / "pass_rates.png").stat().st_size > 0
        return made[-1]

    return draw


def texts(figure):
    return [t.get_text() for t in figure.findobj(lambda o: hasattr(o, "get_text")) if t.get_text()]


def bars(figure):
    from matplotlib.patches import Rectangle

    return [p for ax in figure.axes for p in ax.patches if isinstance(p, Rectangle)]


def test_a_picture_with_nothing_counted_says_so_once_and_draws_no_bar(drawn):
    found = summary([record(t, None, reason="endpoint_error", error="x") for t in range(2)], planned=8)
    figure = drawn(found, [])
    assert bars(figure) == []
    said = [t for t in texts(figure) if "counted" in t or "scored" in t]
    assert said == ["no episode counted (endpoint_error 2)"], texts(figure)


def test_a_picture_draws_one_bar_per_measured_task_and_the_rewards_it_has(drawn):
    found = summary([record(0, 1.0), record(1, 0.0), record(2, None, reason="not_started")])
    figure = drawn(found, [1.0, 0.0])
    assert len(figure.axes) == 2 and len(figure.axes[0].patches) == 2  # tasks 0 and 1
    assert "reward distribution (2 scored episodes)" in texts(figure)
    unscored = summary([record(0, None, reason="no_tool_scored")])  # counted, a failure, and no reward to draw
    figure = drawn(unscored, [])
    assert len(figure.axes[0].patches) == 1 and len(figure.axes[1].patches) == 0
    assert "no counted episode has a reward (1 counted)" in texts(figure)
