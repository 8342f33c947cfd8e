"""A turn's tool calls run at once across the batch (issue 28): what the model sees, the rewards, each session's calls
and TRL's failure count are those of TRL's own one-by-one loop; the calls of different rollouts overlap on the
server; what cannot be known runs as TRL makes it."""

import json
import sys

import pytest
from orsgen.runtime import calls, hooks

from tests.harness import processes, rankfork, trainers
from tests.harness.generation import served
from tests.harness.trainers import tool_methods

# Rollout position -> the calls its first turn makes: in order, a validation error, a tool that raises (its session
# ends), a tool TRL does not know (what follows it runs as TRL makes it), none at all.
SCRIPT = {
    0: [("add", {"n": 1}), ("add", {"n": 2})],
    1: [("add", {"n": 3})],
    2: [("add", {"n": "x"}), ("add", {"n": 1})],
    3: [("boom", {}), ("add", {"n": 1})],
    4: [("nope", {}), ("add", {"n": 5})],
    5: [("add", {"n": 1})] * 3,
    6: [],
    7: [("add", {"n": 2}), ("nap", {"seconds": 4})],  # no answer within ORSGEN_TOOL_TIMEOUT
}


def turn(i: int, prompt: str) -> str:
    made = SCRIPT[i % len(SCRIPT)]
    body = "".join("<tool>" + json.dumps({"name": n, "arguments": a}) + "</tool>" for n, a in made)
    return (body or "no calls") + "<|eot|>"


@pytest.fixture(scope="module")
def tally(tmp_path_factory):
    """(server counting requests, the tally module generated against it)."""
    with served("tests.envs.tally:Tally", tmp_path_factory.mktemp("tally"), "tally") as found:
        yield found


def train(mod, out_dir: str, factory=None) -> dict:
    """One GRPO step of 8 rollouts scripted by SCRIPT: what the model saw of each tool, the rewards, TRL's figures."""
    seen: list = []
    rewards: list = []
    reported: list = []
    hooks.add("tool_call", reported.append, mod.Tally)

    def tool_turns(completions, **kwargs):
        seen.extend([(m.get("name"), m["content"]) for m in c if m.get("role") == "tool"] for c in completions)
        return [0.0] * len(completions)

    def outcome(environments, **kwargs):
        rewards.extend(mod.outcome_reward(environments))
        return rewards[-len(environments):]

    conversations = [[{"role": "user", "content": "tally task 0"},
                      {"role": "assistant", "content": "", "tool_calls": [
                          {"type": "function", "function": {"name": n, "arguments": a}} for n, a in made]},
                      {"role": "assistant", "content": "done"}] for made in SCRIPT.values() if made]
    trainer = trainers.trainer(factory or mod.Tally, out_dir, 1, tools=tool_methods(mod.Tally()), conversations=conversations,
                               train_dataset=mod.dataset(num_tasks=2), first_turn=turn,
                               reward_funcs=[outcome, tool_turns], callbacks=[mod.EpisodeMetrics()],
                               max_completion_length=512,  # the results' room
                               # the untrained model's own turn after the tools, which the test never reads, stopped
                               # early: else it runs to 512 tokens (100 s of CPU for the two runs of one test)
                               generation_kwargs={"max_new_tokens": 8})
    before = calls.totals["started"]
    try:
        trainer.train()
    finally:
        hooks.remove("tool_call", reported.append, mod.Tally)
    mod.close_all()
    [logged] = [e for e in trainer.state.log_history if "orsgen/episodes" in e]
    return {"seen": seen, "rewards": rewards, "failures": logged["tools/failure_frequency"],
            "calls": logged["tools/call_frequency"], "ahead": calls.totals["started"] - before,
            "logged_ahead": logged["orsgen/calls_ahead"],
            "reported": sorted(((r.name, json.dumps(r.arguments), r.result, r.error) for r in reported), key=repr)}


def sessions_calls(log: list[dict]) -> dict[str, list[tuple[float, float]]]:
    found: dict[str, list[tuple[float, float]]] = {}
    for entry in log:
        if entry["request"].endswith("/call"):
            found.setdefault(entry["session"], []).append((entry["arrived"], entry["answered"]))
    return found


def overlapping(spans: dict[str, list[tuple[float, float]]]) -> int:
    """Pairs of calls on different sessions that were on the server at the same time."""
    flat = [(a, b, s) for s, pairs in spans.items() for a, b in pairs]
    return sum(1 for i, (a, b, s) in enumerate(flat) for c, d, t in flat[i + 1:] if s != t and a < d and c < b)


@pytest.mark.trainer
def test_a_turn_runs_at_once_and_the_model_sees_what_trls_own_loop_gives(tally, tmp_path, monkeypatch):
    server, mod = tally
    monkeypatch.setenv("ORSGEN_TOOL_TIMEOUT", "1.5")
    monkeypatch.setenv("ORSGEN_BATCH_CALLS", "0")
    start = len(server.log())
    one_by_one = train(mod, str(tmp_path / "off"))
    middle = len(server.log())
    monkeypatch.delenv("ORSGEN_BATCH_CALLS")
    at_once = train(mod, str(tmp_path / "on"))
    log = server.log()
    off, on = sessions_calls(log[start:middle]), sessions_calls(log[middle:])

    assert one_by_one["ahead"] == 0 and one_by_one["logged_ahead"] == 0
    assert at_once["ahead"] == at_once["logged_ahead"] > 0
    # what the model saw, rollout by rollout and call by call; the rewards; TRL's own counts
    assert at_once["seen"] == one_by_one["seen"] and len(at_once["seen"]) == 8
    assert at_once["rewards"] == one_by_one["rewards"]
    assert (at_once["failures"], at_once["calls"]) == (one_by_one["failures"], one_by_one["calls"])
    assert one_by_one["failures"] > 0  # the validation error, the raised tool, the unknown tool, the ended session
    # the same calls on the same number of sessions, each session's in order; one by one they never overlap
    assert sorted(map(len, on.values())) == sorted(map(len, off.values()))
    assert overlapping(off) == 0 and overlapping(on) > 0
    by_rollout = {i: [content for _, content in turns] for i, turns in enumerate(one_by_one["seen"])}
    assert by_rollout[5] == ["total 1 after 1 calls", "total 2 after 2 calls", "total 3 after 3 calls"]
    assert "Tool nope not found" in by_rollout[4][0] and by_rollout[4][1] == "total 5 after 1 calls"
    assert "no answer within 1.5s (ORSGEN_TOOL_TIMEOUT)" in by_rollout[7][1]
    # the hooks saw each call once, as it was made, whichever way it ran
    assert at_once["reported"] == one_by_one["reported"] and len(one_by_one["reported"]) == 13


def test_a_call_outside_trls_loop_starts_nothing_ahead(tally):
    _, mod = tally
    env = mod.Tally()
    env.reset(task_index=0)
    before = calls.totals["started"]
    assert env.add(n=2) == "total 2 after 1 calls"
    assert calls.totals["started"] == before and env.get_reward() == 2.0
    mod.close_all()


MISMATCH = """
import json, logging, sys, urllib.request
sys.path[:0] = {paths!r}
logging.basicConfig(level=logging.WARNING, format="%(message)s")
from tests.harness.generation import load
from tests.harness.processes import wait_until
from orsgen.runtime import calls, hooks, episode_of
mod = load(__import__("pathlib").Path({path!r}))
env = mod.Tally()
env.reset(task_index=0)
calls.start(env, [calls.Captured("add", {{"n": 1}})], env._call_ahead)
log = lambda: json.loads(urllib.request.urlopen({url!r} + "/_log", timeout=5).read())
sid = episode_of(env).session.sid
wait_until(lambda: any(e["session"] == sid and e["request"].endswith("/call") and e["done"] for e in log()),
           waiting_for="the call started ahead to be answered")  # it has run: TRL's call comes after it
print(env.add(n=5))  # not the call started ahead: a warning, and the feature is off
print(calls.off(), calls.totals)
mod.close_all()
"""


@pytest.mark.slow
def test_a_call_that_is_not_the_one_started_ahead_is_a_warning_and_turns_the_feature_off(tally):
    server, mod = tally
    script = MISMATCH.format(paths=sys.path, path=str(mod.__file__), url=server.url)
    argv, env = rankfork.python("-c", script)
    run = processes.run(argv, env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-2000:]
    out = run.stdout.splitlines()
    assert out[0] == "total 6 after 2 calls"  # the call started ahead ran; TRL's then ran as asked
    assert out[1] == "True {'started': 1, 'mismatched': 1}"
    [warning] = [line for line in run.stderr.splitlines() if "started ahead" in line]
    assert "add(['n'])" in warning and "one by one from now on" in warning


@pytest.mark.trainer
def test_a_tool_a_subclass_wraps_runs_once_per_call_as_trl_makes_it(tally, tmp_path, monkeypatch):
    """A subclass's tool may do more than send (count, log, shape): it is never run to read a call ahead, so it runs
    exactly once per call TRL makes, and what follows it in its rollout runs as TRL makes it too."""
    import functools

    _, mod = tally
    monkeypatch.setenv("ORSGEN_TOOL_TIMEOUT", "1.5")

    class Counting(mod.Tally):
        count = 0

        @functools.wraps(mod.Tally.add)
        def add(self, **arguments):
            Counting.count += 1
            return super().add(**arguments)

    Counting.__name__ = "Tally"
    ran = train(mod, str(tmp_path / "wrapped"), Counting)
    made = sum(1 for turns in ran["reported"] if turns[0] == "add")
    assert Counting.count == made == 11  # once per add TRL made (the one after `boom` fails in the runtime)
    assert ran["ahead"] == 1  # `boom`, the one call no wrapped add comes before in its rollout


@pytest.mark.trainer
def test_a_tool_that_raises_when_read_ahead_runs_as_trl_makes_it(tally, tmp_path, monkeypatch):
    """A class that names the generated module (as the benchmark's timing subclass does) is read ahead by running
    its method: one that raises there is not read, and the turn's first call, during which it was read, is untouched."""
    import functools

    _, mod = tally
    monkeypatch.setenv("ORSGEN_TOOL_TIMEOUT", "1.5")

    @functools.wraps(mod.Tally.add)  # the schema TRL renders stays the generated one
    def add(self, **arguments):
        if arguments.get("n") == 3:
            raise ValueError("three is refused here")
        return mod.Tally.add(self, **arguments)

    Refusing = type("Tally", (mod.Tally,), {"add": add, "__module__": mod.__name__})
    ran = train(mod, str(tmp_path / "refusing"), Refusing)
    by_rollout = {i: [content for _, content in turns] for i, turns in enumerate(ran["seen"])}
    assert by_rollout[0] == ["total 1 after 1 calls", "total 3 after 2 calls"]
    assert by_rollout[1] == [str({"error": "three is refused here"})]
    assert ran["ahead"] > 0  # the others were read and started


EXITS = """
import json, sys, time, urllib.request
sys.path[:0] = {paths!r}
from tests.harness.generation import load
from tests.harness.processes import wait_until
from orsgen.runtime import calls, episode_of
mod = load(__import__("pathlib").Path({path!r}))
env = mod.Tally()
env.reset(task_index=0)
print(episode_of(env).session.sid, flush=True)
calls.start(env, [calls.Captured("nap", {{"seconds": 60}})], env._call_ahead)  # TRL never takes it
log = lambda: json.loads(urllib.request.urlopen({url!r} + "/_log", timeout=5).read())
wait_until(lambda: any(e["request"].endswith("/call") for e in log()), waiting_for="the server to get the call")
raise RuntimeError("the trainer crashed")
"""


@pytest.mark.slow
def test_a_process_that_dies_with_a_call_started_ahead_leaves_nothing_running_or_open(tally):
    server, mod = tally
    argv, env = rankfork.python("-c", EXITS.format(paths=sys.path, path=str(mod.__file__), url=server.url))
    run = processes.run(argv, env=env, capture_output=True, text=True)
    assert run.returncode == 1 and "the trainer crashed" in run.stderr, run.stderr[-2000:]
    sid = run.stdout.strip()
    [call] = [e for e in server.log() if e["session"] == sid and e["request"].endswith("/call")]
    [closed] = [e for e in server.log() if e["session"] == sid and e["request"] == "POST /delete"]
    # the 60 s call did not hold the exit: the session was closed while the server was still running the call
    assert call["done"] is None or closed["arrived"] < call["done"]
    assert sid not in server.open_sessions()  # closed at exit, the call in flight given up
