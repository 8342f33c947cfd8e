"""A trajectory writer or an upload thread that stops, whatever stops it, is seen (issue 41, item 1): `flush()` is
False, what it could not write or send is counted, and the run's end says how many in one line. The `Recorder` and
the `Uploader` alone, fed the hook records an adapter emits (the adapter is a stand-in: only its secrets are read)."""

import logging

from orsgen.runtime import Recorder, adapter, hooks
from orsgen.runtime.upload import Uploader


class Stop(BaseException):
    """Not an Exception: what no `except Exception` of a worker thread catches."""


class Unprintable:
    """A tool result JSON cannot hold, whose description stops the thread that tries to make it."""

    def __repr__(self) -> str:
        raise Stop("the thread that described it stopped")


class Env:
    """The adapter a hook record is about."""


def episode(env: Env, reward: float, result: object = "ok") -> None:
    ep = object()
    hooks.emit("episode_start", hooks.EpisodeStart(env, "train", 0, None, "prompt", None, 0.1, ep))
    hooks.emit("tool_call", hooks.ToolCall(env, "echo", {"text": "x"}, result, None, 0.1, reward, episode=ep))
    hooks.emit("episode_end", hooks.EpisodeEnd(env, "train", None, None, True, reward, True, None, 1, 0, episode=ep))


def warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "orsgen" and r.levelno >= logging.WARNING]


def test_a_writer_that_stops_is_seen_counted_and_said_at_the_end(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(adapter, "secrets_of", lambda env: [])
    env = Env()
    recorder = Recorder(tmp_path / "traj")
    try:
        for reward in (0.0, 1.0):
            episode(env, reward)
        assert recorder.flush() is True and recorder.written == 2
        episode(env, 2.0, result=Unprintable())  # the writer's thread stops on it
        for reward in (3.0, 4.0):
            episode(env, reward)
        assert recorder.flush(timeout=10) is False
        assert (recorder.written, recorder.dropped) == (2, 3)
        assert recorder.stopped is not None and "the thread that described it stopped" in recorder.stopped
    finally:
        recorder.close()
    assert len(recorder.path.read_text().splitlines()) == 2
    said = warnings(caplog)
    assert len(said) == 2, said  # the stop, once; the run's end
    assert "trajectory writer" in said[0] and "stopped" in said[0]
    assert said[1] == f"orsgen: trajectory records of this run: 3 of 5 not written to {recorder.path}"


class Hostile(dict):
    """A record whose reading stops the upload thread that reads it."""

    def get(self, *args, **kwargs):
        raise Stop("the upload thread that read it stopped")


def test_upload_threads_that_stop_are_counted_said_and_flush_says_so(monkeypatch, caplog):
    monkeypatch.setenv("OPENREWARD_API_URL", "http://127.0.0.1:9")  # never reached: no record is readable
    up = Uploader(run_name="hostile", run_info={"model_name": "tiny"})
    for _ in range(4):  # one per sender thread
        up.put(Hostile())
    up.put({"task_index": 1})
    assert up.flush(timeout=60) is False
    assert (up.sent, up.failed, up.dropped) == (0, 5, 0)
    assert up.stopped is not None and "the upload thread that read it stopped" in up.stopped
    up.put({"task_index": 2})  # nobody is left to send it
    up.close(timeout=5)
    assert (up.sent, up.failed, up.dropped) == (0, 5, 1)
    said = warnings(caplog)
    assert len(said) == 1 and "an upload thread stopped" in said[0], said
