"""Faults against live servers, no mocks: starts that fail (for good or for a while), a GRPOTrainer run with a task
that never starts, processes that end without close_all(), the ORSGEN_*_TIMEOUT variables, garbage collection."""

import contextlib
import gc
import itertools
import json
import logging
import os
import re
import signal
import threading
import time

import pytest
from orsgen.runtime import episode_of

from examples import tiny
from tests.envs.flaky import BROKEN, FLAKY, FLAKY_FAILURES, NORMAL
from tests.harness import processes, rankfork, servers, trainers
from tests.harness.generation import in_process, load
from tests.harness.processes import wait_until
from tests.harness.servers import settle

COUNTING = {"ORSGEN_COUNT_REQUESTS": "1"}
BROKEN_REASON = "the broken task's setup always fails"
UNSCORED_PROMPT = f"(task {BROKEN} could not start: this episode is not scored)"


def generated(server: servers.Served, tmp_path_factory: pytest.TempPathFactory, stem: str):
    out = tmp_path_factory.mktemp(stem) / f"{stem}.py"
    made = in_process(server.url, "-o", str(out))
    assert made.returncode == 0, made.stderr
    return out


@pytest.fixture(scope="module")
def flaky(tmp_path_factory):
    """(server, module, module path) of tests.envs.flaky, served with session tracking."""
    with servers.running("tests.envs.flaky:Flaky", env=COUNTING) as server:
        out = generated(server, tmp_path_factory, "flaky_adapter")
        yield server, load(out), out


@pytest.fixture(scope="module")
def faulty(tmp_path_factory):
    with servers.running("tests.envs.faulty:Faulty", env=COUNTING) as server:
        out = generated(server, tmp_path_factory, "faulty_faults")
        yield server, load(out), out


@pytest.fixture(autouse=True)
def _close_what_a_failed_test_left_open():
    """A test that fails before its own close_all() leaves sessions open: close them so the next test starts clean."""
    yield
    from orsgen.runtime import close_all

    close_all()


def orsgen_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "orsgen" and r.levelno == logging.WARNING]


def wait_closed(server: servers.Served, sids: set[str], within: float = 60.0) -> set[str]:
    """Poll the server until none of `sids` is open (`within`: a hang guard); the ones still open then."""
    with contextlib.suppress(AssertionError):
        wait_until(lambda: not sids & set(server.open_sessions()), within)
    return sids & set(server.open_sessions())


# -- 1. starts that fail -----------------------------------------------------------------------------------------------


def test_a_flaky_start_is_retried_and_a_broken_one_gives_an_unscored_episode(flaky, caplog):
    server, mod, _ = flaky
    caplog.set_level(logging.WARNING, logger="orsgen")
    env = mod.Flaky()  # start_retries = 2: three attempts, 1 s then 2 s apart
    assert env.reset(task_index=NORMAL).startswith(f"flaky task {NORMAL}")
    before = len(server.creates())
    prompt = env.reset(task_index=FLAKY)
    assert prompt == f"flaky task {FLAKY} (started after {FLAKY_FAILURES + 1} attempts)"  # the server counted them
    attempts = [c["arrived"] for c in server.creates()[before:]]
    gaps = [later - earlier for earlier, later in itertools.pairwise(attempts)]
    # The backoff between attempts, on the server's clock: 1 s, then 2 s (lower bounds: they are the waits themselves,
    # which a loaded machine only lengthens).
    assert len(gaps) == 2 and gaps[0] >= 0.95 and gaps[1] >= 1.95, gaps
    assert orsgen_warnings(caplog) == []  # a start that worked on a retry is not an unscored episode
    assert env.score() == "scored" and env.get_reward() == 1.0

    assert env.reset(task_index=BROKEN) == UNSCORED_PROMPT
    [warning] = orsgen_warnings(caplog)
    assert "\n" not in warning
    assert f"Flaky: task {BROKEN} of split 'train' could not start" in warning  # the task and the split
    assert BROKEN_REASON in warning  # the server's reason
    with pytest.raises(mod.ToolError) as failed:
        env.score()
    assert "this episode is not scored" in str(failed.value) and BROKEN_REASON in str(failed.value)
    assert env.get_reward() is None and env.rewards == []
    assert env.reset(task_index=NORMAL).startswith(f"flaky task {NORMAL}")  # the adapter is still usable
    assert env.score() == "scored" and env.get_reward() == 1.0
    mod.close_all()
    assert server.open_sessions() == []


def test_unscored_reward_applies_to_episodes_no_tool_scored_but_never_to_one_that_did_not_start(flaky):
    _, mod, _ = flaky

    class Zero(mod.Flaky):
        unscored_reward, start_retries = 0.0, 0

    env = Zero()
    env.reset(task_index=NORMAL)
    assert env.get_reward() == 0.0  # no tool call: unscored_reward
    env.reset(task_index=BROKEN)
    assert env.get_reward() is None  # did not start: None, whatever unscored_reward says
    mod.close_all()


def test_start_failures_raise_gives_a_one_line_start_error(flaky):
    server, mod, _ = flaky

    class Strict(mod.Flaky):
        start_failures, start_retries = "raise", 0

    env = Strict()
    with pytest.raises(mod.runtime.StartError) as raised:
        env.reset(task_index=BROKEN)
    message = str(raised.value)
    assert "\n" not in message  # the server's reason has two lines; the error has one
    assert f"Strict: task {BROKEN} of split 'train' could not start" in message
    assert BROKEN_REASON in message and "second line of the reason" in message
    assert env.reset(task_index=NORMAL).startswith(f"flaky task {NORMAL}")
    mod.close_all()
    assert server.open_sessions() == []


def test_max_start_failures_in_a_row_raise(flaky, caplog):
    _, mod, _ = flaky
    caplog.set_level(logging.WARNING, logger="orsgen")

    class Twice(mod.Flaky):
        max_start_failures, start_retries, down_after = 2, 0, 0  # no wait: the count alone decides

    env = Twice()
    env.reset(task_index=NORMAL)  # a start that works resets the count, whatever ran before in this process
    assert env.reset(task_index=BROKEN) == UNSCORED_PROMPT
    env.reset(task_index=NORMAL)
    assert env.reset(task_index=BROKEN) == UNSCORED_PROMPT  # not in a row: a start worked in between
    with pytest.raises(mod.runtime.StartError) as raised:
        env.reset(task_index=BROKEN)
    assert str(raised.value).startswith("2 episodes in a row could not start")
    assert BROKEN_REASON in str(raised.value) and "\n" not in str(raised.value)
    assert len(orsgen_warnings(caplog)) == 2  # the third failure raised instead of warning
    env.reset(task_index=NORMAL)
    mod.close_all()


# -- 2. a real GRPOTrainer run with a task that never starts -----------------------------------------------------------


@pytest.mark.trainer
@pytest.mark.parametrize("group", [4, 8])  # 8: TRL's default num_generations
def test_grpo_trains_to_the_end_with_a_task_that_never_starts(flaky, tmp_path, caplog, group):
    """8 rollouts a step (per_device_train_batch_size 8) over the tasks [normal, broken]: with groups of 4 each step
    has both; with groups of 8 (TRL's default) the second step is one group of 8 resets of the broken task, one after
    the other, while the environment is up."""
    import math

    from trl import GRPOConfig

    assert GRPOConfig.__dataclass_fields__["num_generations"].default == 8
    server, mod, _ = flaky
    caplog.set_level(logging.WARNING, logger="orsgen")
    train = mod.dataset(indices=[NORMAL, BROKEN])
    assert list(train["task_index"]) == [NORMAL, BROKEN]
    probe = mod.Flaky()
    conversation = tiny.conversation(probe.reset(task_index=NORMAL), "score", {}, "scored")
    probe._close(wait=True)
    prompts: list[str] = []

    def first_turn(i: int, prompt: str) -> str:
        prompts.append(prompt)
        return tiny.call_text("score", {})

    # one attempt per start keeps the run fast; the class keeps the generated name (the reward column's name)
    env_class = trainers.recording(type("Flaky", (mod.Flaky,), {"start_retries": 0}))
    steps = 2
    trainer = trainers.trainer(env_class, str(tmp_path / "out"), steps, tools=trainers.tool_methods(probe),
                               conversations=[conversation], train_dataset=train, first_turn=first_turn, threads=1,
                               num_generations=group)
    trainer.train()  # a StartError here: the broken task stopped the run

    assert trainer.state.global_step == steps
    assert len(prompts) == 8 * steps
    assert sum(p.endswith(UNSCORED_PROMPT) for p in prompts) == 8  # the trainer got the notice as the prompt
    assert sum(f"flaky task {NORMAL}" in p for p in prompts) == 8
    warnings = orsgen_warnings(caplog)
    assert len(warnings) == 8 and all(f"task {BROKEN} of split 'train' could not start" in w for w in warnings)
    calls = [result for name, _, result in env_class.calls if name == "score"]
    assert len(calls) == 8 * steps  # every rollout's scripted call reached the adapter
    assert calls.count("scored") == 8
    assert sum("this episode is not scored" in c for c in calls) == 8
    # the last step's adapters: the broken task's rollouts are unscored (None), the others scored
    last = {env.task_index for env in trainer.environments}
    assert last == ({NORMAL, BROKEN} if group == 4 else {BROKEN})
    assert all(env.get_reward() == {NORMAL: 1.0, BROKEN: None}[env.task_index] for env in trainer.environments)
    logs = [entry for entry in trainer.state.log_history if "rewards/Flaky/mean" in entry]
    assert len(logs) == steps
    # None rewards are left out of the means, not counted as 0: a step has mean 1.0, or none (TRL logs nan as None)
    # if it had no scored rollout
    means = [m if isinstance(m, float) and not math.isnan(m) else None for m in (e["rewards/Flaky/mean"] for e in logs)]
    assert means == ([1.0, 1.0] if group == 4 else [1.0, None])
    assert all(entry["tools/call_frequency"] == pytest.approx(1.0) for entry in logs)
    # the unscored rollouts' calls failed: half the calls of the run
    assert math.fsum(entry["tools/failure_frequency"] for entry in logs) == pytest.approx(1.0)
    mod.close_all()
    assert server.open_sessions() == []


# -- 3. processes that end without close_all() -------------------------------------------------------------------------

LOADERS = {
    "import": "import sys\nsys.path.insert(0, {folder!r})\nimport {stem} as m\n",
    "spec_from_file_location": (
        "import importlib.util\n"
        "spec = importlib.util.spec_from_file_location({stem!r}, {path!r})\n"
        "m = importlib.util.module_from_spec(spec)\n"
        "spec.loader.exec_module(m)\n"
    ),
}
OPEN_FOUR = """
import json, urllib.request

def open_four():
    pool = [m.Flaky() for _ in range(4)]
    for env in pool:
        env.reset(task_index={normal})
    sids = [m.runtime.episode_of(env).session.sid for env in pool]
    with urllib.request.urlopen({url!r} + "/_sessions", timeout=5) as r:
        assert set(sids) <= set(json.load(r)), "the sessions are not open on the server"
    print(json.dumps(sids), flush=True)
    return pool
"""
ENDINGS = {
    "normal exit": "pool = open_four()\n",
    "uncaught exception": (
        "def train():\n"
        "    pool = open_four()  # held by the traceback's frames\n"
        "    raise RuntimeError('training crashed')\n"
        "train()\n"
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("ending", list(ENDINGS))
@pytest.mark.parametrize("loader", list(LOADERS))
def test_a_process_ending_without_close_all_leaves_no_session_open(flaky, loader, ending):
    server, _, path = flaky
    script = (
        LOADERS[loader].format(folder=str(path.parent), stem=path.stem, path=str(path))
        + OPEN_FOUR.format(normal=NORMAL, url=server.url)
        + ENDINGS[ending]
    )
    before = set(server.open_sessions())
    argv, env = rankfork.python("-c", script)
    run = processes.run(argv, env=env, capture_output=True, text=True)
    assert run.stdout.strip(), run.stderr[-3000:]
    sids = set(json.loads(run.stdout.strip().splitlines()[-1]))
    assert len(sids) == 4
    if ending == "normal exit":
        assert run.returncode == 0, run.stderr[-3000:]
    else:
        assert run.returncode == 1 and "RuntimeError: training crashed" in run.stderr
    assert "Exception ignored" not in run.stderr, run.stderr[-3000:]
    after = set(server.open_sessions())  # no polling: the process is gone, what it did not close stays open
    assert sids & after == set(), f"{len(sids & after)} of the 4 sessions were left open on the server"
    assert after - before == set()


# -- 4. the timeouts, read from the environment when used --------------------------------------------------------------


def test_reset_timeout_is_read_from_the_environment(faulty, monkeypatch, caplog):
    _, mod, _ = faulty
    caplog.set_level(logging.WARNING, logger="orsgen")

    class Once(mod.Faulty):
        start_retries = 0

    class Strict(Once):
        start_failures = "raise"

    env = Once()
    env.reset(task_index=0)
    monkeypatch.setenv("ORSGEN_RESET_TIMEOUT", "1.5")  # after the module was imported and the adapter made
    assert env.reset(task_index=5) == "(task 5 could not start: this episode is not scored)"  # task 5 takes 8 s
    [warning] = orsgen_warnings(caplog)
    assert "task 5 of split 'train'" in warning and "no answer within 1.5s (ORSGEN_RESET_TIMEOUT)" in warning
    with pytest.raises(mod.runtime.StartError) as raised:
        Strict().reset(task_index=5)
    assert "no answer within 1.5s (ORSGEN_RESET_TIMEOUT)" in str(raised.value) and "\n" not in str(raised.value)
    monkeypatch.setenv("ORSGEN_RESET_TIMEOUT", "30")
    assert Strict().reset(task_index=5) == "faulty task 5"  # the new value applies at once: 8 s is within 30 s
    mod.close_all()


TOOL_TIMEOUT_SCRIPT = """
import sys, time
sys.path.insert(0, {folder!r})
import {stem} as m
env = m.Faulty()
env.reset(task_index=0)
try:
    env.slow(seconds=6)
    print("no timeout")
except m.ToolError as exc:
    print(exc)
env.reset(task_index=1)  # the server still runs the timed-out call in the old session
print(env.slow(seconds=0))
m.close_all()
"""


@pytest.mark.slow
def test_tool_timeout_is_read_from_the_environment(faulty):
    _, _, path = faulty
    script = TOOL_TIMEOUT_SCRIPT.format(folder=str(path.parent), stem=path.stem)
    argv, env = rankfork.python("-c", script, env={**os.environ, "ORSGEN_TOOL_TIMEOUT": "1"})
    run = processes.run(argv, env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-3000:]
    message, after = run.stdout.strip().splitlines()
    assert message == "slow failed: TimeoutError: no answer within 1s (ORSGEN_TOOL_TIMEOUT)"
    assert after == "slept 0.0"  # the adapter goes on after a timed-out call


def test_close_timeout_is_read_from_the_environment(flaky, monkeypatch):
    """close_all() waits for the server at most ORSGEN_CLOSE_TIMEOUT: here the server is frozen (SIGSTOP). Shown by
    what returns while it is frozen, not by how soon: at 1 s close_all() returns with the server still frozen; at an
    hour it is still waiting three times as long after, and returns once the server thaws and answers. (Were the
    variable not read, both would wait the default 10 s and the second would have returned by then.)"""
    _, mod, _ = flaky
    settle()  # nothing of earlier tests is still closing
    frozen = servers.start("tests.envs.flaky:Flaky")

    def closing() -> threading.Thread:
        env = mod.Flaky(url=frozen.url)
        assert env.reset(task_index=NORMAL).startswith(f"flaky task {NORMAL}")
        frozen.process.send_signal(signal.SIGSTOP)
        thread = threading.Thread(target=mod.close_all, name="close_all", daemon=True)
        thread.start()
        return thread

    try:
        monkeypatch.setenv("ORSGEN_CLOSE_TIMEOUT", "1")
        began = time.monotonic()
        bounded = closing()
        wait_until(lambda: not bounded.is_alive(), waiting_for="close_all() with the server frozen")
        returned_in = time.monotonic() - began  # not asserted: what the second close_all is given to return in
        frozen.process.send_signal(signal.SIGCONT)
        settle()
        monkeypatch.setenv("ORSGEN_CLOSE_TIMEOUT", "3600")
        waiting = closing()
        waiting.join(3 * returned_in)
        assert waiting.is_alive()
        frozen.process.send_signal(signal.SIGCONT)
        wait_until(lambda: not waiting.is_alive(), waiting_for="close_all() once the server thawed")
    finally:
        frozen.process.send_signal(signal.SIGCONT)
        frozen.stop()


# -- 5. garbage collection ---------------------------------------------------------------------------------------------


def test_garbage_collection_closes_the_session(flaky):
    server, mod, _ = flaky
    env = mod.Flaky()
    env.reset(task_index=NORMAL)
    sid = episode_of(env).session.sid
    assert sid in server.open_sessions()
    del env
    gc.collect()
    assert wait_closed(server, {sid}) == set()  # nothing else closed it: no reset, no close_all


def test_garbage_collection_closes_a_session_still_opening_in_the_background(flaky):
    server, mod, _ = flaky

    class Background(mod.Flaky):
        open_in_background = True

    before = set(server.open_sessions())
    env = Background()
    assert env.reset(task_index=NORMAL, task_prompt="a pinned prompt") == "a pinned prompt"
    creates = len(server.creates())
    del env  # before the session has opened
    gc.collect()
    # It was asked for: the server answers its create (the session opens), then the collected adapter's close.
    wait_until(lambda: [c for c in server.creates()[creates:] if c["status"] is not None],
               waiting_for="the background session's create to be answered")
    assert wait_closed(server, set(server.open_sessions()) - before) == set()


# -- helpers' own checks -----------------------------------------------------------------------------------------------


def test_the_flaky_server_counts_start_attempts_per_task(flaky):
    """The flaky task's server-side count is what test 1 relies on: it never goes down, and other tasks have their
    own counts."""
    _, mod, _ = flaky

    class Once(mod.Flaky):
        start_retries = 0

    env = Once()
    first = re.fullmatch(rf"flaky task {NORMAL} \(started after (\d+) attempts\)", env.reset(task_index=NORMAL))
    second = re.fullmatch(rf"flaky task {NORMAL} \(started after (\d+) attempts\)", env.reset(task_index=NORMAL))
    assert first and second and int(second.group(1)) == int(first.group(1)) + 1
    mod.close_all()
