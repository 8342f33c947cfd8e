"""Starts and tools that fail, against live SDK servers (tests/envs/brittle.py): secrets the SDK would refuse and
splits the module did not pin are refused where they are given; a start refused before any request is still
reported; a tool that raised ends its episode, and what the model reads holds no session id; an outage shorter than
`down_after` ends nothing while one longer stops the run in one line (32 threads resetting, as AsyncGRPOTrainer's
rollout pool does); group_reward never sends or scores a rollout that did not start (a real GRPOTrainer)."""

import base64
import contextlib
import dataclasses
import json
import threading
import time

import pytest
from orsgen.runtime import episode_of

from tests.harness import servers
from tests.harness.generation import in_process, load, served
from tests.harness.processes import wait_until
from tests.harness.servers import settle

COUNTING = {"ORSGEN_COUNT_REQUESTS": "1"}


@pytest.fixture(scope="module")
def brittle(tmp_path_factory):
    """(server, module) of tests.envs.brittle:Brittle, served with request logging."""
    with served("tests.envs.brittle:Brittle", tmp_path_factory.mktemp("brittle"), "brittle_adapter") as found:
        yield found


@pytest.fixture(autouse=True)
def _close_what_a_failed_test_left_open():
    yield
    from orsgen.runtime import close_all

    close_all()


# -- secrets and splits, refused where they are given ------------------------------------------------------------------


def test_a_secret_outside_the_sdks_list_is_refused_at_construction_and_the_sdks_form_with_domains_works(brittle):
    server, mod = brittle
    server.requests()
    with pytest.raises(ValueError) as refused:
        mod.Brittle(secrets={"GRADER_TOKEN": "s3cret"})
    message = str(refused.value)
    assert message.startswith("Brittle(secrets=...): 'GRADER_TOKEN' is not one of the openreward SDK's well-known")
    assert "\n" not in message and "s3cret" not in message
    assert "secrets={'GRADER_TOKEN': (value, ['api.example.com'])}" in message  # the fix, in the SDK's own form
    with pytest.raises(ValueError, match="'GRADER_TOKEN' is a list, not a string or"):
        mod.Brittle(secrets={"GRADER_TOKEN": ["s3cret", ["grader.example.com"]]})
    assert server.requests() == {}  # refused before anything was sent

    env = mod.Brittle(secrets={"GRADER_TOKEN": ("s3cret", ["grader.example.com"]), "OPENAI_API_KEY": "sk-x"})
    assert env.reset(task_index=0) == "brittle task 0"
    assert env.secret(name="GRADER_TOKEN") == "True" and env.secret(name="OPENAI_API_KEY") == "True"
    sent = [h["headers"]["x-secrets"] for h in server.headers() if "x-secrets" in h["headers"]]
    payload = json.loads(base64.b64decode(sent[-1]))
    assert payload["GRADER_TOKEN"] == {"value": "s3cret", "allowed_domains": ["grader.example.com"]}
    assert payload["OPENAI_API_KEY"] == {"value": "sk-x", "allowed_domains": ["api.openai.com"]}
    mod.close_all()
    settle()
    assert server.open_sessions() == []


def test_a_start_refused_before_any_request_is_still_reported_as_a_session_open(brittle):
    server, mod = brittle
    from orsgen.runtime import hooks

    class Once(mod.Brittle):
        start_retries = 0

    secrets: dict = {}
    env = Once(secrets=secrets)
    secrets["GRADER_TOKEN"] = "s3cret"  # after construction: the SDK refuses it when the session is made
    opens: list = []
    hooks.add("session_open", opens.append, Once)
    server.requests()
    try:
        prompt = env.reset(task_index=0)
    finally:
        hooks.remove("session_open", opens.append, Once)
    assert prompt == "(task 0 could not start: this episode is not scored)"
    assert len(opens) == 1 and opens[0].status is None and opens[0].attempt == 0
    assert "GRADER_TOKEN" in opens[0].error and "s3cret" not in opens[0].error
    assert "POST /create_session" not in server.requests()  # it failed before the request


def test_a_split_the_module_did_not_pin_is_refused_at_construction(brittle):
    _, mod = brittle
    with pytest.raises(ValueError) as refused:
        mod.Brittle(split="validation")
    assert str(refused.value) == (f"Brittle(split='validation'): brittle has no split 'validation': {mod.__name__} "
                                  "pinned 'train', 'test'")
    env = mod.Brittle(split="test")
    assert env.reset() == "brittle task 0"

    class Unpinned(mod.Brittle):  # a module that pinned no splits accepts any
        pinned = dataclasses.replace(mod.PINNED, snapshot={**mod.PINNED.snapshot, "splits": []})

    Unpinned(split="validation")
    mod.close_all()


def test_a_row_of_a_split_the_module_did_not_pin_is_refused_and_closes_the_episode_before_it(brittle):
    """A hand-made row (a placeholder eval row with a typo) would give only unscored episodes: reset() refuses it,
    before any request, and the previous episode's session is still closed (on the server)."""
    server, mod = brittle
    env = mod.Brittle()
    env.reset(task_index=0)
    sid = episode_of(env).session.sid
    creates = len(server.creates())
    with pytest.raises(ValueError) as refused:
        env.reset(task_index=1, split="tset")
    assert str(refused.value) == (f"Brittle.reset(split='tset'): brittle has no split 'tset': {mod.__name__} "
                                  "pinned 'train', 'test'")
    settle()
    assert len(server.creates()) == creates and sid not in server.open_sessions()
    assert env.reset(task_index=0, split="test") == "brittle task 0"
    mod.close_all()


# -- a tool that raised: the session is gone, and the model is told so without the SDK's session id --------------------


def test_a_tool_that_raised_ends_the_episode_and_later_calls_say_the_session_ended(brittle):
    server, mod = brittle
    env = mod.Brittle()
    env.reset(task_index=1)
    sid = episode_of(env).session.sid
    assert env.score() == "scored" and not env.finished
    with pytest.raises(mod.ToolError) as crashed:
        env.crash()
    text = str(crashed.value)
    assert "the tool's code broke" in text and text.endswith("the environment ended the session: the episode is over")
    assert "sid" not in text and sid not in text and "\n" not in text, text
    assert env.finished

    # the SDK ends the session on the server itself
    wait_until(lambda: [e for e in server.log() if e["request"] == "POST /delete" and e["session"] == sid],
               waiting_for="the session the tool ended to be deleted")
    calls = sum(e["request"] == "POST /brittle/call" for e in server.log())
    with pytest.raises(mod.ToolError) as later:
        env.score()
    said = str(later.value)
    assert said.startswith("score: the environment ended this episode's session (crash failed: ")
    assert said.endswith("): the episode is over") and sid not in said and "\n" not in said
    assert sum(e["request"] == "POST /brittle/call" for e in server.log()) == calls  # nothing more was sent
    assert env.get_reward() == 1.0  # what the episode earned before its session ended

    env.reset(task_index=2)  # the next episode is a new session, usable
    assert not env.finished and env.score() == "scored"
    mod.close_all()
    settle()
    assert server.open_sessions() == []


# -- an outage: a judgement over time, not a count of concurrent failures ---------------------------------------------


def storm(cls, threads: int, stop: threading.Event) -> tuple[list[threading.Thread], list[tuple[float, str]]]:
    """`threads` threads each resetting an adapter of `cls` (a scored call per episode that started) until `stop`;
    what each episode gave: (monotonic time, "scored" | "unscored" | "cut" (its call failed) | the StartError's text,
    which ends the thread)."""
    from orsgen.runtime import StartError, ToolError

    seen: list[tuple[float, str]] = []
    lock = threading.Lock()

    def run(k: int) -> None:
        env, episode = cls(), 0
        while not stop.is_set():
            try:
                prompt = env.reset(task_index=(k + episode) % 4)
            except StartError as exc:
                with lock:
                    seen.append((time.monotonic(), str(exc)))
                return
            episode += 1
            started = not prompt.startswith("(task")
            with contextlib.suppress(ToolError):  # the server died during the episode
                if started:
                    env.score()
            with lock:
                seen.append((time.monotonic(), "unscored" if not started else "scored" if env.get_reward() == 1.0
                             else "cut"))
            time.sleep(0.02 if started else 0.1)  # the rollout's generation

    pool = [threading.Thread(target=run, args=(k,), name=f"rollout-{k}", daemon=True) for k in range(threads)]
    for thread in pool:
        thread.start()
    return pool, seen


@pytest.mark.slow  # an outage of seconds, ridden out or judged by down_after
@pytest.mark.parametrize("outage", ["short", "long"])
def test_an_outage_shorter_than_down_after_ends_nothing_and_a_longer_one_stops_in_one_line(tmp_path, outage):
    """32 threads resetting (AsyncGRPOTrainer's rollout pool), the server killed and restarted on its port. The SDK
    rides out about 3 s itself; past that, with one attempt per start, the failures come by the dozen at once: a
    count alone would end the run."""
    server = servers.start("tests.envs.brittle:Brittle", env=COUNTING)
    port = int(server.url.rsplit(":", 1)[1])
    out = tmp_path / "storm.py"
    assert in_process(server.url, "-o", str(out)).returncode == 0
    mod = load(out)
    window = 30.0 if outage == "short" else 2.0  # short: far longer than the outage, whatever the machine's load

    class Pooled(mod.Brittle):
        start_retries, down_after = 0, window

    stop = threading.Event()
    pool, seen = storm(Pooled, 32, stop)
    try:
        wait_until(lambda: sum(what == "scored" for _, what in seen) >= 64,  # every thread is past its first episode
                   waiting_for="two scored episodes per thread")
        killed = time.monotonic()
        server.kill()
        if outage == "short":
            time.sleep(5.0)  # the outage itself: past what the SDK rides out, short of down_after
            server = servers.start("tests.envs.brittle:Brittle", port=port, env=COUNTING)
            back = time.monotonic()
            wait_until(lambda: [what for at, what in seen if at > back].count("scored") >= 32,
                       waiting_for="episodes scored on the restarted server")
        else:
            wait_until(lambda: not any(t.is_alive() for t in pool), waiting_for="every thread to stop")
    finally:
        stop.set()
        for thread in pool:
            thread.join(timeout=30)
    mod.close_all()
    settle()
    failed = [at for at, what in seen if what == "unscored" and at >= killed]
    stopped = [(at, what) for at, what in seen if what not in ("scored", "unscored", "cut")]
    if outage == "short":
        try:
            assert stopped == [], stopped[:1]  # nothing ended: no thread raised
            assert len(failed) > Pooled.max_start_failures  # starts failed in the outage, by the dozen
            assert back - killed < window  # the premise: the outage was shorter than down_after
            assert [what for at, what in seen if at > back].count("scored") >= 32  # the threads went on
            assert sum(c["status"] == 200 for c in server.creates()) >= 32  # on the restarted server
            assert server.open_sessions() == []  # and nothing was left open there
        finally:
            server.stop()
    else:
        assert len(stopped) == 32  # every thread stopped, each with the one line
        for at, what in stopped:
            assert at - failed[0] >= window  # only once no start had worked for down_after
            assert "\n" not in what and "episodes in a row could not start and none has started for" in what
            assert "(down_after = 2): the environment looks down; last, Pooled: task " in what


# -- group_reward: a rollout that did not start is never sent to the judge, and stays None ------------------------------


@pytest.mark.trainer
def test_group_reward_never_sends_or_scores_a_rollout_that_did_not_start(generate, tmp_path, caplog):
    """One GRPOTrainer step of two groups of 4 (tasks 0 and 1): one start of task 0 fails, three of task 1's do. The
    judge compares task 0's three started rollouts among themselves; task 1's lone one is not sent (a comparison
    needs two); the rollouts that did not start stay None."""
    import logging

    from orsgen.runtime import groups

    from tests.harness.group_scoring import ANSWERS, train

    fails, log = tmp_path / "fails.json", tmp_path / "judged.jsonl"
    env = {**COUNTING, "JUDGED_LOG": str(log), "SHAKY_FAILS": str(fails)}
    with servers.running("tests.envs.brittle:Shaky", env=env) as server:
        mod = generate(server.url, name="shaky_judged")
        one_try = type("Judged", (mod.Judged,), {"start_retries": 0})

        def factory():
            if not fails.exists():  # armed once dataset() has read the prompts, before training starts any episode
                fails.write_text(json.dumps({"0": 1, "1": 3}))
            return one_try()

        sent = groups.requests["score_group"]
        with caplog.at_level(logging.WARNING, logger="orsgen"):
            trainer, returned, _ = train(mod, str(tmp_path / "out"), indices=[0, 1], steps=1, factory=factory)
        requests = server.requests()
        mod.close_all()
        settle()
        assert server.open_sessions() == []

    assert json.loads(fails.read_text()) == {"0": 0, "1": 0}  # every armed failure happened
    adapters = trainer.environments
    [scores] = returned
    by_task = {t: [i for i, a in enumerate(adapters) if a.task_index == t] for t in (0, 1)}
    assert all(len(rows) == 4 for rows in by_task.values())
    void = {i for i, a in enumerate(adapters) if episode_of(a).void is not None}
    assert len(void & set(by_task[0])) == 1 and len(void & set(by_task[1])) == 3

    # The server's judge got one request: task 0's started rollouts, in TRL's order, none of them a failed start.
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert not any("could not start" in json.dumps(c) for r in records for c in r["candidates"])
    [record] = records
    started = [k for k, i in enumerate(by_task[0]) if i not in void]
    assert record["task"] == 0 and [c["metadata"] for c in record["candidates"]] == [{"rollout": k} for k in started]
    assert requests.get("POST /judged/score_group") == 1 and groups.requests["score_group"] - sent == 1

    # Their scores are the judge's among the three (the shortest correct answer of those that started wins).
    answers = [ANSWERS[k] for k in started]
    best = min(len(a) for a in answers if a and "paris" in a.lower())
    expected = [0.0 if a is None else 0.25 if "paris" not in a.lower() else 1.0 if len(a) == best else 0.5
                for a in answers]
    assert [scores[by_task[0][k]] for k in started] == expected
    assert all(scores[i] is None for i in void)  # never scored, never in the baseline
    assert all(scores[i] is None for i in by_task[1])  # a lone started rollout: nothing to compare it with
    warned = [r.getMessage() for r in caplog.records if r.name == "orsgen" and "is not scored" in r.getMessage()]
    lone = "orsgen: Judged: the group of task 1 is not scored: 1 of its 4 episodes started (a comparison needs two)"
    assert warned == [lone]
