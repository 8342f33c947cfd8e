"""ORSGEN_EPISODE_TIMEOUT (issue 27's proof that a feature lands in the runtime's objects): seconds from reset after
which an episode is void, with its own reason; every later call fails with one line and sends nothing; the
episode's end says why, and EpisodeMetrics counts it."""

import time

import pytest
from orsgen.runtime import Unscored, hooks

from tests.harness import trainers
from tests.harness.generation import served
from tests.harness.trainers import tool_methods


@pytest.fixture(scope="module")
def counted(tmp_path_factory):
    """(server counting requests, the echo module generated against it)."""
    with served("examples.echo:Echo", tmp_path_factory.mktemp("timeout"), "echo_timeout") as found:
        yield found


def calls(server) -> int:
    return sum(e["request"].endswith("/call") for e in server.log())


def test_a_call_after_the_episode_timeout_fails_in_one_line_and_voids_the_episode(counted, monkeypatch):
    server, mod = counted
    ended = []
    hooks.add("episode_end", ended.append, mod.Echo)
    try:
        env = mod.Echo()
        env.reset(task_index=0)  # the SDK's import and the drift check are done before the limit is set
        env._close(wait=True)
        ended.clear()
        monkeypatch.setenv("ORSGEN_EPISODE_TIMEOUT", "1.5")
        env.reset(task_index=0)
        before = calls(server)
        assert env.echo(text="apple")  # within the limit: sent and scored
        time.sleep(1.6)  # the behaviour under test: the episode's 1.5 s pass
        with pytest.raises(mod.ToolError) as late:
            env.echo(text="apple")
        line = str(late.value)
        assert "\n" not in line and "ORSGEN_EPISODE_TIMEOUT" in line and "1.5s" in line, line
        with pytest.raises(mod.ToolError, match="ORSGEN_EPISODE_TIMEOUT"):
            env.echo(text="apple")  # and every call after it
        assert calls(server) - before == 1  # the late calls sent nothing
        assert env.get_reward() is None  # void: not the reward the first call earned, not unscored_reward
        assert [(e.reason, e.scored, e.calls, e.failures) for e in ended] == [(Unscored.TIMED_OUT, False, 3, 2)]
        assert ended[0].reason == "timed_out"
        env.reset(task_index=0)  # a new episode has a new limit
        assert env.echo(text="apple") and env.get_reward() is not None
    finally:
        hooks.remove("episode_end", ended.append, mod.Echo)
        mod.close_all()


@pytest.mark.parametrize("value", ["0", "-1", "soon", "nan"])
def test_an_episode_timeout_no_episode_could_run_with_is_refused_at_reset(counted, monkeypatch, value):
    server, mod = counted
    monkeypatch.setenv("ORSGEN_EPISODE_TIMEOUT", value)
    before = len(server.creates())
    with pytest.raises(ValueError) as refused:
        mod.Echo().reset(task_index=0)
    assert str(refused.value).startswith(f"ORSGEN_EPISODE_TIMEOUT={value!r}: ") and "\n" not in str(refused.value)
    assert len(server.creates()) == before


@pytest.mark.trainer
def test_episodes_past_their_timeout_are_counted_in_episode_metrics(counted, tmp_path, monkeypatch):
    """A real GRPOTrainer whose rollouts' one tool call comes after a limit no generation can meet: every episode is
    void with its own reason, and the trainer's logs say so."""
    server, mod = counted
    monkeypatch.setenv("ORSGEN_EPISODE_TIMEOUT", "0.000001")
    before = calls(server)
    trainer = trainers.trainer(mod.Echo, str(tmp_path / "out"), 1, tools=tool_methods(mod.Echo()),
                               train_dataset=mod.dataset(num_tasks=2), callbacks=[mod.EpisodeMetrics()])
    trainer.train()
    mod.close_all()
    [row] = [{k.removeprefix("orsgen/"): v for k, v in e.items()} for e in trainer.state.log_history
             if "orsgen/episodes" in e]
    assert row["episodes"] > 0 and row["unscored/timed_out"] == row["episodes"]
    assert row["scored_fraction"] == 0.0 and row["tool_failures_per_episode"] == 1.0
    assert calls(server) == before  # no call reached the server
