"""Run-time behaviour against live servers: round trips, SSE framing, timeouts, faults, leaks, secrets, scale-out."""

import asyncio
import contextlib
import subprocess
import textwrap

import pytest

from tests.harness import processes, rankfork, servers
from tests.harness.generation import in_process, load
from tests.harness.servers import settle

COUNTING = {"ORSGEN_COUNT_REQUESTS": "1"}


@pytest.fixture(scope="module")
def faulty(tmp_path_factory):
    with servers.running("tests.envs.faulty:Faulty", env=COUNTING) as server:
        out = tmp_path_factory.mktemp("faulty") / "faulty_adapter.py"
        assert in_process(server.url, "-o", str(out)).returncode == 0
        yield server, load(out), out


def test_round_trips(faulty):
    server, _, path = faulty
    mod = load(path)  # a module of its own: its drift check has not run yet, whatever ran before
    env = mod.Faulty()
    mod.close_all()  # what earlier tests left open (tests run in random order) is closed before the count starts
    settle()
    server.requests()
    env.reset(task_index=0)  # the first reset of the process also compares the live tools with the pinned ones
    first = server.requests()
    assert first.get("GET /faulty/tools") == 1
    env.reset(task_index=1)
    settle()  # the previous session is closed in the background
    counts = server.requests()
    assert counts.get("POST /create_session") == 1 and counts.get("POST /create") == 1
    assert counts.get("GET /faulty/prompt") == 1 and counts.get("POST /delete") == 1
    assert not [k for k in {**first, **counts} if k.split(" ")[1] in ("/prompt", "/call", "/tools")]  # no 308 hops
    env.slow(seconds=0)
    made = {k: n for k, n in server.requests().items() if k != "POST /ping"}  # the SDK's keep-alive, on its own clock
    assert made == {"POST /faulty/call": 1}  # one request per tool call
    mod.close_all()


def test_spaces_at_sse_chunk_boundaries_arrive_intact(faulty):
    _, mod, _ = faulty
    env = mod.Faulty()
    env.reset(task_index=0)
    assert env.spacey() == "x" * 4056 + " " * 10 + "END"  # the SDK alone returns 4059 characters
    mod.close_all()


@pytest.mark.slow  # scale: 200 rollouts
def test_no_session_is_left_open_after_200_rollouts(faulty):
    server, mod, _ = faulty
    pool = [mod.Faulty() for _ in range(8)]
    for i in range(200):
        env = pool[i % 8]
        env.reset(task_index=i % 3)
        assert env.slow(seconds=0) == "slept 0.0"
    assert len(server.open_sessions()) == 8  # each adapter keeps its current episode until the next reset
    mod.close_all()
    assert server.open_sessions() == []
    del pool, env  # garbage collection closes too
    fresh = mod.Faulty()
    fresh.reset(task_index=0)
    del fresh
    settle()
    assert server.open_sessions() == []


def test_failed_starts_give_unscored_episodes_and_leave_nothing_open(faulty, caplog):
    server, mod, _ = faulty

    class Once(mod.Faulty):
        start_retries = 0

    env = Once()
    assert "could not start" in env.reset(task_index=3)
    assert "task 3 of split 'train' could not start" in caplog.text and "setup exploded" in caplog.text
    with pytest.raises(mod.ToolError, match="not scored.*setup exploded"):
        env.slow(seconds=0)
    assert env.get_reward() is None
    env.reset(task_index=4)
    assert "no prompt for you" in caplog.text
    assert env.reset(task_index=0) == "faulty task 0"  # the adapter is still usable

    class Strict(Once):
        start_failures = "raise"

    with pytest.raises(mod.runtime.StartError) as raised:
        Strict().reset(task_index=3)
    assert "task 3 of split 'train' could not start" in str(raised.value) and "\n" not in str(raised.value)
    mod.close_all()
    assert server.open_sessions() == []


def test_an_environment_still_starting_is_a_bounded_wait(faulty, monkeypatch):
    _, mod, _ = faulty
    monkeypatch.setenv("ORSGEN_RESET_TIMEOUT", "2")

    class Strict(mod.Faulty):
        start_retries, start_failures = 0, "raise"

    env = Strict()
    env.reset(task_index=0)
    # Task 5 holds its prompt for 8 s: the reset gives up at its bound and says so (how soon is the timeout's job).
    with pytest.raises(mod.runtime.StartError, match=r"task 5 .*no answer within 2s \(ORSGEN_RESET_TIMEOUT\)"):
        env.reset(task_index=5)
    assert env.reset(task_index=0) == "faulty task 0"
    mod.close_all()


def test_a_slow_tool_times_out(faulty, monkeypatch):
    _, mod, _ = faulty
    monkeypatch.setenv("ORSGEN_TOOL_TIMEOUT", "1")
    env = mod.Faulty()
    env.reset(task_index=0)
    with pytest.raises(mod.ToolError, match=r"no answer within 1s \(ORSGEN_TOOL_TIMEOUT\)"):
        env.slow(seconds=5)
    assert env.reset(task_index=1) == "faulty task 1"
    mod.close_all()


def test_server_killed_mid_episode_then_restarted(tmp_path, monkeypatch):
    server = servers.start("tests.envs.faulty:Faulty")
    try:
        port = int(server.url.rsplit(":", 1)[1])
        out = tmp_path / "killed.py"
        assert in_process(server.url, "-o", str(out)).returncode == 0
        mod = load(out)
        monkeypatch.setenv("ORSGEN_TOOL_TIMEOUT", "5")
        monkeypatch.setenv("ORSGEN_RESET_TIMEOUT", "5")

        class Strict(mod.Faulty):
            start_retries, start_failures = 0, "raise"

        env = Strict()
        env.reset(task_index=0)
        server.kill()
        with pytest.raises(mod.ToolError):
            env.slow(seconds=0)
        with pytest.raises(mod.runtime.StartError, match="task 1 of split 'train' could not start"):
            env.reset(task_index=1)
        server = servers.start("tests.envs.faulty:Faulty", port=port)
        assert env.reset(task_index=2) == "faulty task 2"
        assert env.slow(seconds=0) == "slept 0.0"
        mod.close_all()
    finally:
        server.stop()  # whichever server is current, on failure too


def test_validation_errors_reach_the_model_as_one_sentence_per_field(faulty):
    _, mod, _ = faulty
    env = mod.Faulty()
    env.reset(task_index=0)
    with pytest.raises(mod.ToolError) as failed:
        env.slow(seconds="not a number")
    assert str(failed.value) == "slow: invalid arguments: seconds: Input should be a valid number, unable to parse " \
                                "string as a number"
    mod.close_all()


def test_async_tools_overlap(faulty, tmp_path):
    server, _, _ = faulty
    out = tmp_path / "async_adapter.py"
    assert in_process(server.url, "--async-tools", "-o", str(out)).returncode == 0
    mod = load(out)
    from transformers.utils import get_json_schema

    first, second = mod.Faulty(), mod.Faulty()
    assert get_json_schema(first.slow)["function"]["parameters"]["required"] == ["seconds"]
    first.reset(task_index=0)
    second.reset(task_index=1)

    async def both():
        return await asyncio.gather(first.slow(seconds=1), second.slow(seconds=1))

    before = len(server.log())
    assert asyncio.run(both()) == ["slept 1.0", "slept 1.0"]
    calls = [e for e in server.log()[before:] if e["request"].endswith("/call")]
    assert len(calls) == 2
    # concurrent, not one after the other: the server had both calls before it finished answering either
    assert max(e["arrived"] for e in calls) < min(e["done"] for e in calls)
    mod.close_all()


@pytest.mark.slow
def test_secrets_never_reach_files_logs_or_errors(faulty, tmp_path):
    server, _, _ = faulty
    key, token = "sk-orsgen-test-key-4711", "tok-very-secret-0815"
    out = tmp_path / "secretive.py"
    made = in_process(server.url, "-o", str(out), env={"OPENREWARD_API_KEY": key})
    assert made.returncode == 0
    script = textwrap.dedent(f"""
        import sys; sys.path.insert(0, {str(tmp_path)!r})
        import secretive
        env = secretive.Faulty(secrets={{"MY_TOKEN": ({token!r}, ["example.com"])}})
        env.reset(task_index=0)
        print("token reached env:", env.secret_names(name="MY_TOKEN"))
        try:
            env.slow(seconds="not a number")
        except secretive.ToolError as exc:
            print("error:", exc)
        class Strict(secretive.Faulty):
            start_retries, start_failures = 0, "raise"
        try:
            Strict(url="http://127.0.0.1:9").reset(task_index=0)
        except RuntimeError as exc:
            print("error:", exc)
        secretive.close_all()
    """)
    argv, env = rankfork.python("-c", script, env={**__import__("os").environ, "OPENREWARD_API_KEY": key,
                                                   "ORSGEN_DRIFT_CHECK": "0", "ORSGEN_RESET_TIMEOUT": "5"})
    run = processes.run(argv, env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines[0] == "token reached env: True" and [line[:6] for line in lines[1:]] == ["error:", "error:"]
    for text in (out.read_text(), made.stdout, made.stderr, run.stdout, run.stderr):
        assert key not in text and token not in text


SCALE_SCRIPT = """
import sys, threading
sys.path.insert(0, {folder!r})
import {module} as m
results = []
def rollout(i):
    env = m.Faulty()
    env.reset(task_index=i % 3)
    results.append(env.slow(seconds=0.2))
threads = [threading.Thread(target=rollout, args=(i,)) for i in range(32)]
[t.start() for t in threads]
[t.join() for t in threads]
m.close_all()
print(len(results))
"""


@pytest.mark.slow  # scale: two processes of their own with 32 sessions each
def test_processes_with_32_concurrent_sessions_each_leak_nothing(faulty):
    server, _, out = faulty
    script = SCALE_SCRIPT.format(folder=str(out.parent), module=out.stem)
    argv, env = rankfork.python("-c", script)
    with contextlib.ExitStack() as stack:
        workers = [stack.enter_context(processes.started(argv, env=env, stdout=subprocess.PIPE,
                                                         stderr=subprocess.PIPE, text=True)) for _ in range(2)]
        outputs = [w.communicate() for w in workers]
    assert [w.returncode for w in workers] == [0, 0], [o[1][-2000:] for o in outputs]
    assert [o[0].strip() for o in outputs] == ["32", "32"]
    assert server.open_sessions() == []


def test_resets_return_at_once_when_sessions_open_in_background(faulty):
    server, mod, _ = faulty
    rows = mod.dataset(indices=[0, 1, 2], prompts=True)
    assert rows["task_prompt"] == ["faulty task 0", "faulty task 1", "faulty task 2"]

    class Background(mod.Faulty):
        open_in_background = True

    pool = [Background() for _ in range(3)]
    assert [env.reset(**row) for env, row in zip(pool, rows, strict=True)] == rows["task_prompt"]
    assert [env.slow(seconds=0) for env in pool] == ["slept 0.0"] * 3  # the first call waits for its session
    stale = Background()
    assert stale.reset(task_index=1, task_prompt="an old prompt") == "an old prompt"
    for _ in range(2):  # the episode is void: every call fails, and no error shows the model the live prompt
        with pytest.raises(mod.ToolError, match="live prompt differs") as failed:
            stale.slow(seconds=0)
        assert "faulty task 1" not in str(failed.value)
    assert stale.prompt_mismatch == "faulty task 1" and stale.get_reward() is None

    class Once(Background):
        start_retries = 0

    broken = Once()
    broken.reset(task_index=3, task_prompt="never starts")
    with pytest.raises(mod.ToolError, match="not scored.*setup exploded"):
        broken.slow(seconds=0)
    assert broken.get_reward() is None
    mod.close_all()
    assert server.open_sessions() == []
