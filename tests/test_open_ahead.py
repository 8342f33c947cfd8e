"""Overlapped resets: a batch's first reset opens the rest of the batch's sessions at once, and with environment-owned
data and look-ahead the batch's last reset opens the next step's (runtime/ahead.py). Asserted on what the server saw:
when each `/create` arrived and when it was answered."""

import itertools
import time
from typing import ClassVar

import pytest
from orsgen.runtime import episode_of

from tests.harness import ROOT, processes, rankfork, servers
from tests.harness.generation import in_process, load
from tests.harness.open_ahead import GROUP, train
from tests.harness.servers import settle

pytestmark = pytest.mark.trainer  # trains or runs TRL code: under the newest TRL (make test)


@pytest.fixture(scope="module")
def slow(tmp_path_factory):
    with servers.running("tests.envs.slow_echo:SlowEcho", env={"ORSGEN_COUNT_REQUESTS": "1"}) as server:
        out = tmp_path_factory.mktemp("slow") / "slow_echo.py"
        assert in_process(server.url, "-o", str(out)).returncode == 0
        yield server, load(out)


def starts(server, since: int) -> list[dict]:
    """Each session started since the `since`-th request, in arrival order: its task, when its `/create` arrived,
    and when its prompt was answered (the prompt waits for the environment's 0.3 s setup)."""
    log = server.log()[since:]
    prompts = {e["session"]: e["answered"] for e in log if e["request"].endswith("/prompt")}
    tasks = {c["session"]: c["body"]["index"] for c in server.creates()}
    return [{"task": tasks[e["session"]], "session": e["session"], "arrived": e["arrived"],
             "ready": prompts[e["session"]]} for e in log if e["request"] == "POST /create"]


def test_a_batchs_sessions_open_together(slow, tmp_path):
    server, mod = slow
    before, ahead = len(server.log()), (mod.PINNED.ahead.opened, mod.PINNED.ahead.taken, mod.PINNED.ahead.unused)
    trainer = train(mod, tmp_path)
    started = starts(server, before)
    assert len(started) == 16  # 2 steps x 8 rollouts, nothing extra
    for step in (started[i:i + 8] for i in range(0, 16, 8)):
        # every session of the step's batch was asked for before the first of them was ready: one start in line
        assert max(s["arrived"] for s in step) < min(s["ready"] for s in step), step
        tasks = [s["task"] for s in step]  # two groups of 4 rollouts, one task each
        assert len(set(tasks)) == 2 and all(tasks.count(t) == GROUP for t in tasks), tasks
    opened = (mod.PINNED.ahead.opened - ahead[0], mod.PINNED.ahead.taken - ahead[1], mod.PINNED.ahead.unused - ahead[2])
    assert opened == (14, 14, 0)  # 7 a step, each taken by its own reset
    rewards = [e["rewards/Slowecho/mean"] for e in trainer.state.log_history if "rewards/Slowecho/mean" in e]
    assert rewards and all(r == 1.0 for r in rewards)  # every rollout got its own session's prompt and scored
    # after train(): nothing is open, not even the last step's sessions: each batch closed once TRL read its rewards
    assert mod.PINNED.ahead.waiting == {}
    settle()  # those closes run in the background
    assert server.open_sessions() == []
    mod.close_all()
    assert server.open_sessions() == []


def looking_ahead(adapter_class):
    """The adapter with open_ahead = "next-step", recording (episode_start hook) when each reset began, its session
    and its task."""
    from orsgen.runtime import hooks

    class LookingAhead(adapter_class):
        open_ahead = "next-step"
        resets: ClassVar[list[dict]] = []

    def record(start: hooks.EpisodeStart) -> None:
        began = time.monotonic() - start.seconds  # CLOCK_MONOTONIC: the same clock as the server's log
        LookingAhead.resets.append({"began": began, "session": episode_of(start.adapter).session.sid, "task": start.task_index})

    hooks.add("episode_start", record, LookingAhead)
    return LookingAhead


def test_look_ahead_opens_the_next_steps_sessions_while_this_one_runs(slow, tmp_path):
    """Environment-owned data with open_ahead = "next-step": once a step's batch is open, its first reset opens the
    next step's 8 sessions, and those are the sessions the next step's resets take; the last step opens nothing
    beyond the run."""
    server, mod = slow
    env_class = looking_ahead(mod.Slowecho)
    before, ahead = len(server.creates()), (mod.PINNED.ahead.opened, mod.PINNED.ahead.taken, mod.PINNED.ahead.unused)
    since = len(server.log())
    trainer = train(mod, tmp_path, steps=3, env_class=env_class, owned=True)
    creates, resets = server.creates()[before:], env_class.resets
    ready = {s["session"]: s["ready"] for s in starts(server, since)}
    assert len(creates) == len(resets) == 24  # 3 steps x 8 rollouts: the last step looked nowhere
    arrived = {c["session"]: c["arrived"] for c in creates}
    assert len(arrived) == 24 and {r["session"] for r in resets} == set(arrived)
    for step in (1, 2):
        batch, before_it = resets[step * 8:(step + 1) * 8], resets[(step - 1) * 8]
        # each session this step took was asked for after the last step's first reset began, before this step's first
        assert all(before_it["began"] < arrived[r["session"]] < batch[0]["began"] for r in batch), step
        # and only once every session of the step before was open: the look-ahead never competes with a batch
        assert min(arrived[r["session"]] for r in batch) > max(ready[r["session"]] for r in resets[step * 8 - 8:step * 8])
    groups = [[r["task"] for r in resets[i:i + GROUP]] for i in range(0, 24, GROUP)]
    assert all(len(set(g)) == 1 for g in groups) and len({g[0] for g in groups}) == 6, groups
    counts = (mod.PINNED.ahead.opened - ahead[0], mod.PINNED.ahead.taken - ahead[1], mod.PINNED.ahead.unused - ahead[2])
    assert counts == (7 + 8 + 8, 23, 0)  # step 1's batch, then steps 2 and 3 wholly ahead
    rewards = [e["rewards/LookingAhead/mean"] for e in trainer.state.log_history if "rewards/LookingAhead/mean" in e]
    assert rewards == [1.0, 1.0, 1.0]
    mod.close_all()
    assert server.open_sessions() == []


def test_a_capacity_refusal_costs_the_look_ahead_not_the_run(slow, tmp_path):
    """Capacity 12: step 1 holds 8 sessions, so the look-ahead gets 4 of step 2's 8 before step 2 begins and the
    server refuses the rest (429). Nothing fails and nothing opens twice: each refused slot is opened once, by the
    SDK's own retry once sessions close, or in line at its reset."""
    server, mod = slow
    env_class = looking_ahead(mod.Slowecho)
    mod.close_all()
    settle()
    before = len(server.creates())
    server.set_capacity(12)
    try:
        trainer = train(mod, tmp_path, steps=2, env_class=env_class, owned=True)
    finally:
        server.set_capacity(0)
    creates, resets = server.creates()[before:], env_class.resets
    opened = [c for c in creates if c["status"] == 200]
    assert len(opened) == len(resets) == 16 and {c["session"] for c in opened} == {r["session"] for r in resets}
    # While step 1 held its 8, the look-ahead got the 4 places left of step 2's 8, and the rest were refused: counted
    # up to the server's first close of a step-1 session (the batch closes them once TRL has read its rewards, and
    # the refused ones may then open, by the SDK's retry, before step 2's first reset or at it). A close is `POST
    # /delete`, which frees the place, then `POST /delete_session`: a create between the two may take that place.
    step_one = {c["session"] for c in opened[:8]}
    first_close = min(r["arrived"] for r in server.log()
                      if r["request"] == "POST /delete" and r["session"] in step_one)
    assert sum(c["arrived"] < first_close for c in opened[8:]) == 4
    assert any(c["status"] == 429 and c["arrived"] < first_close for c in creates)
    assert all(c["arrived"] < resets[8]["began"] for c in opened[8:12])  # the look-ahead's, before step 2 began
    rewards = [e["rewards/LookingAhead/mean"] for e in trainer.state.log_history if "rewards/LookingAhead/mean" in e]
    assert rewards == [1.0, 1.0]  # every rollout started and scored
    mod.close_all()
    assert server.open_sessions() == []


def test_turned_off_the_resets_open_one_after_another(slow, tmp_path, monkeypatch):
    server, mod = slow
    monkeypatch.setenv("ORSGEN_OPEN_AHEAD", "0")
    before, opened = len(server.log()), mod.PINNED.ahead.opened
    train(mod, tmp_path, steps=1)
    started = starts(server, before)
    assert len(started) == 8
    assert all(b["arrived"] >= a["ready"] for a, b in itertools.pairwise(started))  # today's pattern: one by one
    assert mod.PINNED.ahead.opened == opened
    mod.close_all()
    assert server.open_sessions() == []


CRASH = """
import importlib.util
spec = importlib.util.spec_from_file_location("slow_echo_crash", {path!r})
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)
from tests.harness.open_ahead import train

class Crashing(mod.Slowecho):
    resets = 0

    def reset(self, **row):
        Crashing.resets += 1
        if Crashing.resets == 2:  # the batch's first reset has just opened the other seven sessions ahead
            raise RuntimeError("training crashed")
        return super().reset(**row)

mod.Slowecho = Crashing
{ending}
"""
ENDINGS = {
    "uncaught": "train(mod, {out!r})",
    # environment-owned data with the next step's sessions opening in the background when the trainer dies
    "look-ahead": "mod.Slowecho.open_ahead = 'next-step'\ntrain(mod, {out!r}, owned=True)",
    # caught, and the trainer with its environments dropped: no adapter is left to find the sessions through
    "caught": "import gc\ntry:\n    train(mod, {out!r})\nexcept RuntimeError:\n    print('crashed')\ngc.collect()",
}


@pytest.mark.parametrize("ending", list(ENDINGS))
def test_sessions_opened_ahead_are_closed_when_training_crashes_and_the_process_exits(slow, tmp_path, ending):
    """No close_all(): the trainer dies at the batch's second reset, with seven sessions opened ahead and never
    taken (some may still be starting); the process's exit must close them all on the server."""
    server, mod = slow
    before = len(server.creates())
    out = str(tmp_path / "out")
    script = CRASH.format(path=mod.__file__, ending=ENDINGS[ending].format(out=out))
    argv, env = rankfork.python("-c", script)  # a process of its own, forked with TRL imported
    run = processes.run(argv, cwd=ROOT, env=env, capture_output=True, text=True)
    if ending != "caught":
        assert run.returncode == 1 and "RuntimeError: training crashed" in run.stderr, run.stderr[-3000:]
    else:
        assert run.returncode == 0 and run.stdout.strip() == "crashed", run.stderr[-3000:]
    assert "Exception ignored" not in run.stderr, run.stderr[-3000:]
    opened = server.creates()[before:]
    if ending == "look-ahead":  # the batch's 8, and of the next step's 8 only what began before the exit
        assert 8 <= len(opened) <= 16 and len({c["body"]["index"] for c in opened[:8]}) == 2
    else:
        assert len(opened) == 8 and len({c["body"]["index"] for c in opened}) == 2  # the first and seven ahead
    left = set(server.open_sessions())  # no polling: the process is gone, what it did not close stays open
    assert {c["session"] for c in opened} & left == set()


def test_after_the_first_step_a_start_sends_two_requests_in_a_row_its_session_id_asked_for_ahead(slow, tmp_path):
    """Once TRL has read a step's rewards, the batch asks for the next step's 8 session ids (`POST /create_session`
    makes no state on the server), so each later start is `/create` then the prompt: every id of steps 2 and 3 was
    handed out before its step's first `/create`. Each id opens one session, its `/create_session` first; none is
    used twice; after the last step none is asked for."""
    server, mod = slow
    since = len(server.log())
    train(mod, tmp_path, steps=3)
    mod.close_all()
    log = server.log()[since:]
    requests: dict[str, list[str]] = {}
    for entry in log:
        requests.setdefault(entry["session"], []).append(entry["request"])
    handed = {e["session"]: e["arrived"] for e in log if e["request"] == "POST /create_session"}
    creates = [e for e in log if e["request"] == "POST /create"]
    assert len(creates) == 24 and len({e["session"] for e in creates}) == 24  # 3 steps x 8: no id used twice
    for create in creates:
        assert requests[create["session"]][:2] == ["POST /create_session", "POST /create"], requests[create["session"]]
        assert requests[create["session"]].count("POST /create_session") == 1
    for step in (1, 2):
        batch = creates[step * 8:(step + 1) * 8]
        assert all(handed[c["session"]] < batch[0]["arrived"] for c in batch), step  # asked for while it trained
    unused = [sid for sid, made in requests.items() if made[0] == "POST /create_session" and "POST /create" not in made
              and "POST /delete_session" not in made[1:]]  # (the drift check's id reads the tools, then is deleted)
    given_back = [sid for sid, made in requests.items() if made == ["POST /create_session", "POST /delete_session"]]
    assert unused == [] and given_back == []
    assert server.open_sessions() == []
