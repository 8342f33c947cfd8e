"""Trajectory records under a hostile model (issue 41, item 1): a model that writes half of a surrogate pair in its
tool-call JSON (`"\\ud83d"`) gives TRL's parsed arguments a lone surrogate, which UTF-8 cannot encode. A real adapter
against a served environment, a `Recorder` writing and uploading (to the stand-in of the OpenReward API): every
record is in the file and reads back as it was, every episode reaches the runs page, nothing is counted dropped."""

import json
import logging

import pytest

from tests.harness.generation import served
from tests.harness.rollout_standin import standin

HALF = "\ud83d"  # the first half of 😀 alone: `json.loads('"\\ud83d"')`
MODEL_ARGUMENTS = '{"text": "a half \\ud83d of a pair"}'  # what the model wrote, as TRL parses it (json.loads)


@pytest.fixture(scope="module")
def halves(tmp_path_factory):
    """(server counting requests, the halves module generated against it)."""
    with served("tests.envs.halves:Halves", tmp_path_factory.mktemp("halves"), "halves") as found:
        yield found


def test_a_lone_surrogate_in_a_models_arguments_is_written_uploaded_and_read_back(halves, tmp_path, monkeypatch,
                                                                                   caplog):
    server, mod = halves
    from orsgen.runtime import Recorder

    arguments = json.loads(MODEL_ARGUMENTS)
    assert HALF in arguments["text"]
    with standin() as runs_page:
        monkeypatch.setenv("OPENREWARD_API_URL", runs_page.url)
        monkeypatch.setenv("OPENREWARD_API_KEY", "canary-41-records")
        recorder = Recorder(tmp_path / "traj", upload=True, run="hostile")
        try:
            env = mod.Halves()
            for index in range(4):
                env.reset(task_index=index)
                if index == 1:
                    assert env.measure(**arguments) == "18 characters"  # the server took it, and scored it
                elif index == 2:  # the server cannot write its echo as JSON: the environment ends the session
                    with pytest.raises(mod.ToolError, match="the environment ended the session"):
                        env.echo(**arguments)
                else:
                    env.measure(text="plain")
                env.get_reward()
            mod.close_all()
            assert recorder.flush(timeout=60) is True  # every record so far written and sent
        finally:
            recorder.close(timeout=60)
        rollouts = sorted(runs_page.rollouts(), key=lambda r: r["metadata"]["task_index"])

    lines = recorder.path.read_text(encoding="utf-8").splitlines()  # strict UTF-8: the file is valid text
    records = [json.loads(line) for line in lines]
    assert [r["task_index"] for r in records] == [0, 1, 2, 3]  # the records after the hostile one too
    assert records[1]["tool_calls"][0]["arguments"] == arguments  # read back as it was: the lone surrogate itself
    assert records[2]["tool_calls"][0]["arguments"] == arguments and records[2]["tool_calls"][0]["error"]
    assert [r["reward"] for r in records] == [1.0, 1.0, None, 1.0]
    assert (recorder.written, recorder.dropped, recorder.stopped) == (4, 0, None)

    up = recorder.uploader
    assert (up.sent, up.failed, up.dropped) == (4, 0, 0)
    assert [r["metadata"]["task_index"] for r in rollouts] == [0, 1, 2, 3]
    calls = [m["content"] for m in rollouts[1]["messages"] if m["type"] == "tool_call"]
    assert calls == ['{"text": "a half \\ud83d of a pair"}']  # the six characters of the escape, as the file has them
    assert [r.getMessage() for r in caplog.records if r.name == "orsgen" and r.levelno >= logging.WARNING] == []
    creates = [c for c in server.creates() if c["status"] == 200]
    assert len(creates) >= 4  # the episodes ran on the server


def hostile_record(index: int, half: str = HALF) -> dict:
    """A record as a trainer's recorder makes it, TRL's turns holding what a model that writes `\\ud83d` gets: a
    tool name and arguments with a lone surrogate (TRL parses them with json.loads), the error TRL shows for that
    name; the same in a task spec and a tool call's error, which the SDK sends as they are."""
    name = f"ech{half}o"
    return {
        "schema": "orsgen.trajectory/1", "run": "r", "step": 1, "rank": 0, "stream": "train", "environment": "echo",
        "adapter": "Echo", "split": "train", "task_index": index, "task_spec": {"note": f"spec {half}"},
        "prompt": [{"role": "user", "content": f"Echo the word {half}"}],
        "completion": [{"role": "assistant", "content": "",
                        "tool_calls": [{"type": "function", "function": {"name": name, "arguments": {"text": half}}}]},
                       {"role": "tool", "name": name, "content": f"Tool {name} not found"}],
        "tool_calls": [{"name": "echo", "arguments": {"text": half}, "result": None, "error": f"echo: bad {half}",
                        "seconds": 0.1, "reward": None, "finished": False}],
        "reward": 0.0, "scored": True, "unscored_reason": None, "finished": False, "start_error": None,
        "seconds": {"reset": 0.1, "tools": 0.1, "episode": 0.5}, "ended_at": "2026-12-02T07:30:00.123Z"}


def test_an_upload_holding_lone_surrogates_the_sdk_sends_as_they_are_reaches_the_runs_page(monkeypatch, caplog):
    """The SDK cleans a message's text of lone surrogates, but not a tool call's name, a task spec or metadata: one
    such record stopped the SDK's send loop, and every message of every episode after it was lost."""
    from orsgen.runtime.upload import Uploader

    with standin() as runs_page:
        monkeypatch.setenv("OPENREWARD_API_URL", runs_page.url)
        up = Uploader(run_name="hostile", run_info={"model_name": "tiny"})
        for index in range(3):
            up.put(hostile_record(index) if index == 1 else hostile_record(index, half="h"))
        assert up.flush(timeout=60) is True
        up.close(timeout=60)
        rollouts = sorted(runs_page.rollouts(), key=lambda r: r["metadata"]["task_index"])
    assert (up.sent, up.failed, up.dropped) == (3, 0, 0)
    assert [len(r["messages"]) for r in rollouts] == [3, 3, 3]  # every episode's messages arrived
    hostile = rollouts[1]
    assert hostile["task_spec"] == {"note": "spec \\ud83d"}  # the escape's six characters
    assert [(m["type"], m.get("name"), m["content"]) for m in hostile["messages"]] == [
        ("user_message", None, "Echo the word \\ud83d"),
        ("tool_call", "ech\\ud83do", '{"text": "\\ud83d"}'),
        ("tool_result", None, "Tool ech\\ud83do not found")]
    assert [r.getMessage() for r in caplog.records if r.name == "orsgen" and r.levelno >= logging.WARNING] == []
