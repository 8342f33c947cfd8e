"""Records through sinks (issue 43): the recorder hands every record, from its one queue and writer thread, to its
JSONL file and to each registered sink its options turn on; a sink that fails is counted and said, the others go on.
The recorder is fed the hook records an adapter emits (the adapter is a stand-in, and so are the sinks here)."""

import json
import threading
from typing import ClassVar

from orsgen.runtime import Recorder, hooks, sinks
from orsgen.runtime.jsonl import JsonlSink
from orsgen.runtime.upload import UploadSink


class Env:
    """The adapter a hook record is about."""


def episode(env, reward, result="ok"):
    ep = object()
    hooks.emit("episode_start", hooks.EpisodeStart(env, "train", 0, None, "prompt", None, 0.1, ep))
    hooks.emit("tool_call", hooks.ToolCall(env, "echo", {"text": "x"}, result, None, 0.1, reward, episode=ep))
    hooks.emit("episode_end", hooks.EpisodeEnd(env, "train", None, None, True, reward, True, None, 1, 0, episode=ep))


class Kept:
    """A sink that keeps what it is given, and on which thread."""

    made: ClassVar[list["Kept"]] = []

    def __init__(self, fail: bool = False) -> None:
        self.records, self.threads, self.fail, self.closed = [], set(), fail, False

    @classmethod
    def made_for(cls, fail: bool):
        def made(recorder):
            sink = cls(fail)
            cls.made.append(sink)
            return sink
        return made

    def write(self, records):
        self.threads.add(threading.current_thread().name)
        if self.fail:
            raise OSError("the tracker is down")
        self.records += records

    def flush(self, timeout):
        return not self.fail

    def close(self, timeout):
        self.closed = True

    def unsent(self):
        return 0

    def said(self):
        return None


def registered(monkeypatch, fail=False):
    sink = type("Registered", (), {"made": staticmethod(Kept.made_for(fail))})
    monkeypatch.setattr(sinks, "REGISTERED", (sink,))
    Kept.made.clear()


def test_a_registered_sink_gets_every_record_from_the_one_writer_beside_the_file(tmp_path, monkeypatch):
    registered(monkeypatch)
    recorder = Recorder(tmp_path / "traj")
    try:
        for reward in (0.0, 1.0, 2.0):
            episode(Env(), reward)
        assert recorder.flush() is True
    finally:
        recorder.close()
    [kept] = Kept.made
    assert [r["reward"] for r in kept.records] == [0.0, 1.0, 2.0] and kept.closed
    assert kept.threads == {"orsgen-trajectories"}
    lines = recorder.path.read_text().splitlines()
    assert [json.loads(line) for line in lines] == kept.records  # the file holds what every sink was given


def test_a_sink_that_fails_is_counted_and_said_and_the_file_goes_on(tmp_path, monkeypatch, caplog):
    registered(monkeypatch, fail=True)
    recorder = Recorder(tmp_path / "traj")
    try:
        episode(Env(), 1.0)
        episode(Env(), 2.0)
        assert recorder.flush() is False  # the tracker did not take them
        assert (recorder.written, recorder.dropped) == (2, 0)
    finally:
        recorder.close()
    said = [r.getMessage() for r in caplog.records if "could not be written to Kept" in r.getMessage()]
    assert len(said) == 1 and "the tracker is down" in said[0]


def test_the_upload_sink_is_made_only_when_the_recorder_is_asked_to_upload(tmp_path):
    quiet = Recorder(tmp_path / "a")
    uploading = Recorder(tmp_path / "b", upload=True)
    try:
        assert UploadSink.made(quiet) is None and [type(s) for s in quiet.sinks] == [JsonlSink]
        assert [type(s) for s in uploading.sinks] == [JsonlSink, UploadSink]
        assert uploading.uploader is None  # made at the first record: nothing was sent
    finally:
        quiet.close()
        uploading.close()


def test_the_jsonl_sink_writes_whole_lines_and_counts_what_json_cannot_hold(tmp_path):
    sink = JsonlSink(lambda: tmp_path / "records.jsonl", quiet=True)
    cycle: dict = {}
    cycle["self"] = cycle
    sink.write([{"text": "a lone \ud800 surrogate"}, cycle, {"n": 2}])
    sink.close(1)
    lines = (tmp_path / "records.jsonl").read_text(encoding="utf-8").splitlines()  # strict UTF-8: valid text
    assert lines[0] == '{"text": "a lone \\ud800 surrogate"}'  # the lone surrogate as its escape
    assert [json.loads(line) for line in lines] == [{"text": "a lone \ud800 surrogate"}, {"n": 2}]
    assert (sink.written, sink.lost, sink.unsent()) == (2, 1, 1)
