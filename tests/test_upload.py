"""The upload to the OpenReward runs page (issue 30, point 3): `orsgen.runtime.upload.Uploader` against a local
stand-in of the OpenReward API (tests/harness/rollout_standin.py) that records what it receives. Per episode one
rollout with the run info and the task, its messages in order, the reward on the last; a server that fails, refuses,
hangs or is not there never blocks `put` or `close` (one warning, counted); the API key is sent in its header only.
The failure cases run in a fresh interpreter: the SDK is not imported yet when the episodes come, and all it prints
is seen."""

import json
import logging
import os
import sys
import tempfile
import time
from pathlib import Path

import pytest
from orsgen.runtime import upload
from orsgen.runtime.upload import Uploader

from tests.harness import ROOT, processes
from tests.harness.processes import wait_until
from tests.harness.rollout_standin import record, standin

CANARY = "canary-30-upload-not-for-bodies"
RUN_INFO = {"model_name": "tiny", "framework_version": "1.16.0", "run_type": "train"}


def shape(rollout):
    return [(m["type"], m.get("name"), m.get("content"), m.get("callId")) for m in rollout["messages"]]


def orsgen_warnings(caplog):
    return [r.getMessage() for r in caplog.records if r.name == "orsgen" and r.levelno >= logging.WARNING]


def test_each_episode_is_one_rollout_of_the_run_with_its_messages_in_order_and_the_reward_on_the_last(
        monkeypatch, caplog):
    fallback = record(task_index=4, step=3, stream="eval", environment="echo", completion=None, prompt="Echo pear",
                      reward=0.0, finished=False,
                      tool_calls=[{"name": "echo", "arguments": {"word": "pea"}, "result": None,
                                   "error": "echo: ValueError: no such word", "seconds": 0.5, "reward": 0.0,
                                   "finished": False}])
    unstarted = record(task_index=5, prompt=None, completion=None, tool_calls=[], reward=None, scored=False,
                       unscored_reason="start_failed", finished=False, start_error="HTTP 500: down")
    with standin() as server:
        monkeypatch.setenv("OPENREWARD_API_URL", server.url)
        monkeypatch.setenv("OPENREWARD_API_KEY", CANARY)
        up = Uploader(run_name="run-30", run_info=RUN_INFO)
        for r in (record(), fallback, unstarted):
            up.put(r)
        up.close(timeout=30)
        rollouts = {r["metadata"]["task_index"]: r for r in server.rollouts()}
        gets = [s.path for s in server.requests() if s.method == "GET"]

    assert (up.sent, up.dropped, up.failed) == (3, 0, 0)
    assert sorted(rollouts) == [3, 4, 5]  # one rollout each, no more
    for r in rollouts.values():
        assert r["runName"] == "run-30"
        assert r["run_info"] == {"model_name": "tiny", "framework": "trl", "framework_version": "1.16.0",
                                 "rl_algorithm": "grpo", "run_type": "train"}
        assert r["split"] == "train" and r["task_spec"] == {"id": "t3", "target": "apple"}
        assert [m["index"] for m in r["messages"]] == list(range(len(r["messages"])))
        assert [m.get("reward") for m in r["messages"][:-1]] == [None] * (len(r["messages"]) - 1)
        assert [m["isFinished"] for m in r["messages"][:-1]] == [False] * (len(r["messages"]) - 1)

    full = rollouts[3]
    assert full["environment"] == "Owner/Echo" and full["environment_id"] == "env-Owner-Echo"
    assert full["metadata"] == {"task_index": 3, "stream": "train", "step": 2, "rank": 0, "scored": True,
                                "adapter": "Echo", "seconds": {"reset": 0.05, "tools": 0.03, "episode": 1.25},
                                "ended_at": "2026-12-02T07:30:00.123Z"}
    assert shape(full) == [
        ("system_message", None, "Use the tools.", None),
        ("user_message", None, "Echo the word apple", None),
        ("assistant_message", None, "Calling echo.", None),
        ("tool_call", "hint", "{}", "call_0"),
        ("tool_call", "echo", '{"word": "apple"}', "call_1"),
        ("tool_result", None, "a fruit", "call_0"),
        ("tool_result", None, "right", "call_1"),
        ("assistant_message", None, "Done.", None)]
    assert full["messages"][-1]["reward"] == 1.0 and full["messages"][-1]["isFinished"] is True
    assert [u["rollout_info"] for u in full["updates"]] == [{"task_index": 3, "current_step": 2, "duration_ms": 1250}]

    # TRL's text not seen: the record's tool calls instead, with their own figures
    fell = rollouts[4]
    assert fell["environment"] == "echo" and "environment_id" not in fell
    assert fell["metadata"]["stream"] == "eval" and fell["metadata"]["step"] == 3
    assert shape(fell) == [("user_message", None, "Echo pear", None),
                           ("tool_call", "echo", '{"word": "pea"}', "call_0"),
                           ("tool_result", None, "echo: ValueError: no such word", "call_0")]
    assert fell["messages"][-1]["metadata"] == {"error": "echo: ValueError: no such word", "seconds": 0.5,
                                                "reward": 0.0, "finished": False}
    assert fell["messages"][-1]["reward"] == 0.0 and fell["messages"][-1]["isFinished"] is False

    # an episode that never started: one line saying why, no reward (the server drops None fields)
    none = rollouts[5]
    assert none["metadata"]["unscored_reason"] == "start_failed" and none["metadata"]["scored"] is False
    assert shape(none) == [("system_message", None, "orsgen: the episode did not start: HTTP 500: down", None)]
    assert "reward" not in none["messages"][-1]

    assert gets == ["/v1/environments/Owner/Echo"] * 2  # the SDK asks before each "Owner/Name" rollout's start
    assert orsgen_warnings(caplog) == []


def test_after_a_failed_start_episodes_wait_and_one_tries_again(monkeypatch, caplog):
    """A refused start pauses the upload; the next episodes wait in the queue, not counted failed, and go once a
    try after the pause goes through. While refused, one episode at a time tries: the server sees one start."""
    monkeypatch.setattr(upload, "PAUSE", 0.5)
    with standin("refuse") as server:
        monkeypatch.setenv("OPENREWARD_API_URL", server.url)
        up = Uploader(run_name="run-30", run_info=RUN_INFO)
        for n in range(4):
            up.put(record(task_index=n, environment="echo"))
        wait_until(lambda: up.failed, waiting_for="the refused start")
        tried = [s for s in server.requests() if s.path == "/v1/rollouts"]
        assert (up.failed, up.sent, len(tried)) == (1, 0, 1)
        server.mode = "ok"
        up.close(timeout=30)
        starts = server.events("rollout")
    assert (up.sent, up.failed, up.dropped) == (3, 1, 0)
    assert sorted(e["metadata"]["task_index"] for e in starts) == [1, 2, 3]
    assert len(orsgen_warnings(caplog)) == 1


def test_a_full_queue_drops_and_counts_and_put_never_waits(monkeypatch, caplog):
    with standin("hang") as server:
        monkeypatch.setenv("OPENREWARD_API_URL", server.url)
        up = Uploader(run_name="run-30", run_info=RUN_INFO, max_queued=5)
        for n in range(20):  # the server never answers: put returns all the same, dropping what does not fit
            up.put(record(task_index=n, environment="echo"))
        assert up.dropped >= 14  # 5 queued, at most one taken by a sender
        up.close(timeout=1.0)  # returns though the server never answers: it gives the queue up
        up.put(record())  # after close: dropped, not queued
    assert (up.sent, up.failed, up.dropped) == (0, 0, 21)
    assert len(orsgen_warnings(caplog)) == 1  # the queue full; the give-up at close is not said again


def test_a_record_that_is_not_json_is_sent_as_text_and_one_that_cannot_be_read_is_counted(monkeypatch):
    odd = record(task_spec={"when": time, "nan": float("nan")}, seconds={"episode": float("inf")})
    with standin() as server:
        monkeypatch.setenv("OPENREWARD_API_URL", server.url)
        up = Uploader(run_name="run-30", run_info=RUN_INFO)
        up.put(odd)
        up.put("not a record")  # type: ignore[arg-type]
        up.close(timeout=30)
        rollouts = server.rollouts()
    assert (up.sent, up.failed) == (1, 1)
    assert rollouts[0]["task_spec"] == {"when": str(time)}  # nan: None, which the SDK leaves out
    assert rollouts[0]["updates"][0]["rollout_info"] == {"task_index": 3, "current_step": 2}


def test_flush_waits_for_what_was_put_and_leaves_the_uploader_open(monkeypatch):
    with standin() as server:
        monkeypatch.setenv("OPENREWARD_API_URL", server.url)
        up = Uploader(run_name="run-30", run_info=RUN_INFO)
        for n in range(3):
            up.put(record(task_index=n))
        assert up.flush(timeout=30) is True
        assert up.sent == 3
        up.put(record(task_index=3))
        up.close(timeout=30)
        assert sorted(r["metadata"]["task_index"] for r in server.rollouts()) == [0, 1, 2, 3]
    assert (up.sent, up.dropped, up.failed) == (4, 0, 0)


EXIT = r"""
import atexit, os, sys, time
from orsgen.runtime.upload import Uploader
from tests.harness.processes import wait_until
from tests.harness.rollout_standin import record

def late():  # registered first, so run last: as a recorder made before the upload closes it at exit
    up.close(timeout=3600)  # it returns at once: were it to wait, the exit would hang (the test's hang guard)
    print("LATE " + f"{up.sent} {up.dropped} {up.failed}", flush=True)

atexit.register(late)
up = Uploader(run_name="run-30", run_info={"model_name": "tiny"})
up.put(record(task_index=0))
wait_until(lambda: up.sent, waiting_for="the first episode sent")
for n in range(1, 6):
    up.put(record(task_index=n))
"""


@pytest.mark.slow
def test_at_exit_what_is_queued_is_sent_and_a_later_close_does_not_wait():
    """The SDK's own exit hook stops its loop (a start sent after it would wait for ever): the uploader's hook runs
    before it, and a close() after both returns at once."""
    with standin() as server:
        env = {**os.environ, "OPENREWARD_API_URL": server.url,
               "PYTHONPATH": os.pathsep.join([str(ROOT / "codegen"), str(ROOT)])}
        done = processes.run([sys.executable, "-c", EXIT], capture_output=True, text=True, env=env, cwd=ROOT)
        starts = sorted(r["metadata"]["task_index"] for r in server.rollouts())
    assert done.returncode == 0, done.stderr
    sent, dropped, failed = done.stdout.split("LATE ")[1].split()
    assert (int(sent), int(dropped), int(failed)) == (6, 0, 0)
    assert starts == [0, 1, 2, 3, 4, 5]
    assert "Task was destroyed" not in done.stderr and "never awaited" not in done.stderr, done.stderr


# -- in a fresh interpreter: the failures, the canary -------------------------------------------------------------

SCRIPT = r"""
import json, logging, os, sys, time
logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(name)s %(levelname)s %(message)s")
from tests.harness.processes import wait_until
from tests.harness.rollout_standin import Standin, free_port, record
from orsgen.runtime.upload import Uploader

mode, timeout, wait = sys.argv[1], float(sys.argv[2]), sys.argv[3] == "wait"
server = Standin(mode).start() if mode != "down" else None
os.environ["OPENREWARD_API_URL"] = server.url if server else f"http://127.0.0.1:{free_port()}"
imported = "openreward" in sys.modules
up = Uploader(run_name="run-30", run_info={"model_name": "tiny"})
secret = os.environ["OPENREWARD_API_KEY"]
for n in range(100):
    up.put(record(task_index=n, environment="echo", task_spec={"token": secret},
                  tool_calls=[{"name": "echo", "arguments": {}, "result": "key " + secret}], completion=None))
if wait:  # the SDK imported, an episode sent
    wait_until(lambda: server.requests(), waiting_for="the server to see a request")
up.close(timeout=timeout)
seen = [{"method": s.method, "path": s.path, "headers": s.headers, "text": s.text, "status": s.status}
        for s in (server.requests() if server else [])]
if server:
    server.stop()
with open(sys.argv[4], "w") as out:  # not stdout: the SDK's threads print there, a line may be cut into
    json.dump({"sent": up.sent, "dropped": up.dropped, "failed": up.failed,
               "imported": imported, "seen": seen}, out)
"""


def run(mode: str, timeout: float, wait: bool = False):
    env = {**os.environ, "OPENREWARD_API_KEY": CANARY, "PYTHONPATH": os.pathsep.join([str(ROOT / "codegen"),
                                                                                         str(ROOT)])}
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "result.json"
        argv = [sys.executable, "-c", SCRIPT, mode, str(timeout), "wait" if wait else "now", str(out)]
        done = processes.run(argv, capture_output=True, text=True, env=env, cwd=ROOT)
        assert done.returncode == 0, done.stderr
        assert out.exists(), done.stdout + done.stderr
        return json.loads(out.read_text()), done.stdout, done.stderr


@pytest.mark.slow  # a fresh interpreter per failure, the SDK imported and retrying in each
@pytest.mark.parametrize(("mode", "timeout", "wait", "counted"), [
    # close's timeout where the try must end first: the SDK's import (4-5 s idle, longer on a loaded machine) and its
    # requests fit in it; close returns as soon as the try has failed, so a generous bound costs nothing
    ("down", 30.0, False, "failed"),  # nothing listens: refused at once
    ("refuse", 30.0, False, "failed"),  # 401, not retried
    ("fail", 30.0, True, "failed"),  # 500: the SDK retries for 7.5 s, then the try has failed
    ("fail", 2.0, True, "dropped"),  # ... closed 2 s into those retries: given up
    ("hang", 2.0, True, "dropped"),  # no answer: given up
])
def test_a_failing_server_never_blocks_put_or_close_and_is_said_once(mode, timeout, wait, counted):
    """`wait`: close once the server has seen the first request (the SDK imported), not at once. That put and close
    never block is shown by what happened, not by a time: the 100 puts were done before the SDK was even imported
    (the network is the uploader's thread's); close gave up at its timeout where the server hangs or retries run
    longer (the episodes dropped, not failed), and the process exited with a request still hanging."""
    result, stdout, stderr = run(mode, timeout, wait)
    assert result["imported"] is False  # the SDK's 4-5 s import happens on the uploader's thread, after the puts
    assert result["sent"] == 0 and result[counted] == 100
    starts = [s for s in result["seen"] if s["path"] == "/v1/rollouts"]
    # one episode tried, the others waited: a 500 is its start and the SDK's 4 retries (0.5 s, then 1, 2, 4 s apart)
    tried = {"down": [0], "refuse": [1], "hang": [1], "fail": [5] if counted == "failed" else [1, 2, 3, 4]}[mode]
    assert len(starts) in tried
    warnings = [x for x in stderr.splitlines() if x.startswith("orsgen WARNING")]
    assert len(warnings) == 1, stderr
    assert "OpenReward runs page" in warnings[0]
    sdk = [x for x in stdout.splitlines() if "failed to start rollout" in x]
    assert len(sdk) == 1 if counted == "failed" else len(sdk) <= 1, stdout  # the SDK's own line: once, not per episode
    assert CANARY not in stdout + stderr


@pytest.mark.slow
def test_the_api_key_goes_in_its_header_and_nowhere_else():
    result, stdout, stderr = run("ok", 30.0)
    assert (result["sent"], result["dropped"], result["failed"]) == (100, 0, 0)
    posts = [s for s in result["seen"] if s["method"] == "POST"]
    assert len(posts) > 100  # every start, then the messages in batches
    assert all(s["headers"].get("x-api-key") == CANARY for s in posts)  # the SDK's header for it
    assert not any("authorization" in s["headers"] for s in result["seen"])
    assert all(CANARY not in s["text"] and CANARY not in s["path"] for s in result["seen"])
    assert all(CANARY not in v for s in result["seen"] for k, v in s["headers"].items() if k != "x-api-key")
    events = [e for s in posts for e in json.loads(s["text"])["events"]]
    assert [e["task_spec"] for e in events if e["eventType"] == "rollout"] == [{"token": "[secret]"}] * 100
    assert [e["content"] for e in events if e.get("type") == "tool_result"] == ["key [secret]"] * 100
    assert CANARY not in stdout + stderr
