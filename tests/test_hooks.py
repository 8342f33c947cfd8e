"""The runtime's hooks (runtime/hooks.py) on episodes by hand against a live server: what each event reports, per
adapter class or for all, and that a listener's failure never reaches the caller."""

import logging
import sys

import pytest

from tests.harness import processes, servers
from tests.harness.generation import load, orsgen


@pytest.fixture(scope="module")
def metered(tmp_path_factory):
    with servers.running("tests.envs.metered:Metered", env={"ORSGEN_COUNT_REQUESTS": "1"}) as server:
        out = tmp_path_factory.mktemp("hooks") / "metered_hooks.py"
        assert orsgen(server.url, "-o", str(out)).returncode == 0
        yield server, load(out)


@pytest.fixture
def heard():
    """Every event of every adapter, as (event, record); the listeners are removed afterwards."""
    from orsgen.runtime import hooks

    seen: list[tuple[str, object]] = []
    listeners = {event: (lambda record, event=event: seen.append((event, record))) for event in hooks.EVENTS}
    for event, listener in listeners.items():
        hooks.add(event, listener)
    yield seen
    for event, listener in listeners.items():
        hooks.remove(event, listener)


def test_an_episode_by_hand_reports_its_start_calls_and_end(metered, heard):
    server, mod = metered
    env = mod.Metered()
    before = len(server.creates())
    env.reset(task_index=0)
    env.answer()
    with pytest.raises(mod.ToolError):
        env.fumble()  # refused: the episode has finished
    assert env.get_reward() == 1.0
    env.get_reward()  # read twice: the episode ended once
    kinds = [event for event, _ in heard]
    assert kinds == ["session_open", "episode_start", "tool_call", "tool_call", "episode_end"]
    opened, start, answered, fumbled, end = (record for _, record in heard)
    assert (opened.split, opened.task_index, opened.attempt, opened.error) == ("train", 0, 0, None)
    assert len(server.creates()) == before + 1  # one attempt, one session on the server
    assert (start.adapter, start.task_index, start.stream, start.error) == (env, 0, None, None)
    assert start.prompt == "Answer train task 0" and start.seconds > 0
    assert (answered.name, answered.arguments, answered.result, answered.error, answered.reward) == (
        "answer", {}, "answered", None, 1.0)
    assert fumbled.name == "fumble" and fumbled.result is None and "finished" in fumbled.error
    assert (end.scored, end.reward, end.finished, end.reason, end.calls, end.failures) == (True, 1.0, True, None, 2, 1)
    env._close(wait=True)


def test_a_task_that_never_starts_reports_each_attempt_and_why_it_is_unscored(metered, heard):
    server, mod = metered
    env = type("Metered", (mod.Metered,), {"start_retries": 1})()
    before = len(server.creates())
    prompt = env.reset(task_index=1)
    env._close()  # closed before its reward was read: it ends there
    attempts = [r for e, r in heard if e == "session_open"]
    assert len(attempts) == len(server.creates()) - before == 2
    assert [a.attempt for a in attempts] == [0, 1] and all("never starts" in a.error for a in attempts)
    assert all(a.status == 500 for a in attempts)
    start = next(r for e, r in heard if e == "episode_start")
    assert start.prompt == prompt and "could not start" in start.error
    end = next(r for e, r in heard if e == "episode_end")
    assert (end.scored, end.reward, end.reason) == (False, None, "not_started")


def test_listeners_per_class_removal_and_a_failing_listener(metered, caplog):
    from orsgen.runtime import hooks

    _, mod = metered
    Mine = type("Mine", (mod.Metered,), {})
    mine, other = Mine(), mod.Metered()
    calls: list[str] = []

    def broken(call: hooks.ToolCall) -> None:
        raise RuntimeError("listener bug")

    def note(call: hooks.ToolCall) -> None:
        calls.append(type(call.adapter).__name__)

    hooks.add("tool_call", note, Mine)
    hooks.add("tool_call", broken)
    try:
        for env in (mine, other):
            env.reset(task_index=0)
            with caplog.at_level(logging.ERROR, logger="orsgen"):
                assert env.answer() == "answered"  # the broken listener is logged, the call goes on
        assert calls == ["Mine"]
        assert sum("the tool_call hook" in r.getMessage() for r in caplog.records) == 2
        hooks.remove("tool_call", note, Mine)
        with pytest.raises(mod.ToolError):
            mine.fumble()
        assert calls == ["Mine"]
    finally:
        hooks.remove("tool_call", note, Mine)
        hooks.remove("tool_call", broken)
        for env in (mine, other):
            env._close(wait=True)
    with pytest.raises(ValueError, match="unknown hook 'tool_calls'"):
        hooks.add("tool_calls", note)  # type: ignore[arg-type]


def test_importing_the_runtime_does_not_import_transformers():
    """EpisodeMetrics is imported on first use: generation and `dataset()` stay fast and need no transformers."""
    code = ("import sys, orsgen.runtime, orsgen.runtime.hooks; from generated import echo; "
            "assert 'transformers' not in sys.modules and 'torch' not in sys.modules, 'imported'; "
            "from generated.echo import EpisodeMetrics; from transformers import TrainerCallback; "
            "assert issubclass(EpisodeMetrics, TrainerCallback)")
    run = processes.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-2000:]
