"""The runtime under odd configurations, against live SDK servers: a group whose first rollout's tool raised is
still scored (on a session the environment did not end); timeouts, open-ahead modes and start settings no episode
could start with are refused in one line at the first reset, before any request, while the spellings of "off" turn
open-ahead off; environment-owned data of a module whose task list is pinned opens only pinned tasks."""

import json

import pytest
from orsgen.runtime import episode_of, settings

from tests.harness import servers
from tests.harness.generation import in_process, load, served

COUNTING = {"ORSGEN_COUNT_REQUESTS": "1"}


@pytest.fixture(autouse=True)
def _close_what_a_test_left_open(monkeypatch):
    yield
    from orsgen.runtime import close_all

    # the test's server is stopped by now: what is still open there is not waited for past a second
    monkeypatch.setenv("ORSGEN_CLOSE_TIMEOUT", "1")
    close_all()


@pytest.fixture(scope="module")
def brittle(tmp_path_factory):
    """(server, module) of tests.envs.brittle:Brittle (train: 4 tasks), served with request logging."""
    with served("tests.envs.brittle:Brittle", tmp_path_factory.mktemp("brittle"), "brittle_odd") as found:
        yield found


def _creates(server) -> int:
    """Sessions the server was asked for since the last look (the SDK's `POST /create` and `/create_session`)."""
    seen = server.requests()
    return seen.get("POST /create", 0) + seen.get("POST /create_session", 0)


# -- group scoring ---------------------------------------------------------------------------------------------------


def test_a_group_whose_first_rollouts_tool_raised_is_scored_on_a_session_the_environment_did_not_end(tmp_path):
    from orsgen.runtime import client, groups

    with servers.running("tests.envs.judged_crash:JudgedCrash", env=COUNTING) as server:
        out = tmp_path / "judged_crash.py"
        assert in_process(server.url, "-o", str(out)).returncode == 0
        mod = load(out)
        envs = [mod.Judgedcrash() for _ in range(3)]
        for env in envs:
            env.reset(task_index=0)
        with pytest.raises(Exception, match="the environment ended the session"):
            envs[0].crash()  # the SDK marks this rollout's session dead
        envs[1].answer(text="Paris")
        envs[2].answer(text="Rome")
        server.requests()
        prompt = [{"role": "user", "content": "Task 0"}]
        answers = ["paris!", "Paris", "Rome"]
        completions = [[{"role": "assistant", "content": "", "tool_calls": [
            {"type": "function", "function": {"name": "answer", "arguments": {"text": a}}}]}] for a in answers]
        scores = client.loop().submit(
            groups._score([episode_of(e) for e in envs], [prompt] * 3, completions, mod.MESSAGE_BLOCK_TYPES)).result(timeout=60)
        assert server.requests().get("POST /judgedcrash/score_group") == 1  # posted, on a live session
        assert scores == [0.5, 1.0, 0.25]  # the crashed rollout started: it is judged with the others


# -- settings no episode could start with -----------------------------------------------------------------------------


@pytest.mark.parametrize(("variable", "value"), [
    ("ORSGEN_RESET_TIMEOUT", "abc"), ("ORSGEN_RESET_TIMEOUT", "0"), ("ORSGEN_RESET_TIMEOUT", "-5"),
    ("ORSGEN_RESET_TIMEOUT", "nan"), ("ORSGEN_TOOL_TIMEOUT", "inf"), ("ORSGEN_CLOSE_TIMEOUT", "ten"),
    ("ORSGEN_OPEN_AHEAD", "next_step"), ("ORSGEN_OPEN_AHEAD", "maybe"),
])
def test_a_bad_variable_is_refused_in_one_line_at_the_first_reset_before_any_request(brittle, monkeypatch,
                                                                                      variable, value):
    server, mod = brittle
    env = mod.Brittle()
    _creates(server)
    with monkeypatch.context() as patched, pytest.raises(ValueError) as refused:
        patched.setenv(variable, value)  # undone before close_all, which reads ORSGEN_CLOSE_TIMEOUT too
        env.reset(task_index=0)
    assert str(refused.value).startswith(f"{variable}={value!r}: ") and "\n" not in str(refused.value)
    assert _creates(server) == 0  # not a failed start (an unscored episode): nothing was requested


@pytest.mark.parametrize(("value", "mode"), [("false", False), ("OFF", False), ("no", False), ("0", False),
                                             ("yes", True), ("true", True), ("1", True), ("next-step", "next-step")])
def test_the_spellings_of_off_turn_open_ahead_off_and_those_of_on_turn_it_on(brittle, monkeypatch, value, mode):
    _, mod = brittle
    monkeypatch.setenv("ORSGEN_OPEN_AHEAD", value)
    assert settings.resolve(mod.Brittle).open_ahead == mode


@pytest.mark.parametrize(("setting", "value", "says"), [
    ("start_retries", -1, "Brittle.start_retries = -1: 0 or more"),
    ("start_failures", "error", "Brittle.start_failures = 'error': 'skip' or 'raise'"),
    ("open_ahead", "next_step", "Brittle.open_ahead = 'next_step': one of True, False, 'next-step'"),
    ("task_seed", "7", "Brittle.task_seed = '7': an int"),
])
def test_a_start_setting_no_episode_could_start_with_is_refused_at_the_first_reset(brittle, setting, value, says):
    server, mod = brittle
    odd = type("Brittle", (mod.Brittle,), {setting: value})
    _creates(server)
    with pytest.raises((ValueError, TypeError), match="^" + says.replace("(", r"\(")):
        odd().reset(task_index=0)
    assert _creates(server) == 0


# -- a pinned task list -----------------------------------------------------------------------------------------------


def test_environment_owned_resets_of_a_pinned_module_open_only_its_pinned_tasks(tmp_path):
    """The server's split grew since the module pinned it (4 tasks now, 2 pinned): the task order is the pinned
    list's, so no reset opens a task outside it."""
    with servers.running("tests.envs.brittle:Brittle", env=COUNTING) as server:
        out = tmp_path / "brittle_pinned.py"
        assert in_process(server.url, "-o", str(out), "--pin-tasks").returncode == 0
        tasks_file = tmp_path / "brittle_pinned.tasks.json"
        pinned = json.loads(tasks_file.read_text(encoding="utf-8"))
        pinned["splits"]["train"] = pinned["splits"]["train"][:2]
        tasks_file.write_text(json.dumps(pinned), encoding="utf-8")
        mod = load(out)
        opened = set()
        for seed in range(12):
            env = type("Brittle", (mod.Brittle,), {"task_seed": seed})()
            opened.add((env.reset(), env.task_index))
            env._close(wait=True)
        assert opened <= {("brittle task 0", 0), ("brittle task 1", 1)}, opened  # what the server served
        assert len(opened) == 2  # both pinned tasks are reached


# -- open_in_background with unscored_reward ---------------------------------------------------------------------------


def test_an_episode_opened_in_the_background_and_never_called_is_settled_before_its_reward_is_read(brittle):
    """unscored_reward is for episodes that started and no tool scored: one that did not start, or whose live prompt
    differed, gives None from get_reward() and the reward functions, even when no tool call settled its start."""
    from orsgen.runtime import hooks, rewards

    server, mod = brittle
    background = type("Brittle", (mod.Brittle,), {"open_in_background": True, "unscored_reward": 0.0})
    ends = []
    since = len(server.creates())  # the server is the module's: other tests open task 99 too
    hooks.add("episode_end", ends.append, background)  # not another test's adapters, collected meanwhile
    try:
        stale, missing, finished, plain = background(), background(), background(), background()
        assert stale.reset(task_index=0, task_prompt="an older prompt") == "an older prompt"
        missing.reset(task_index=99, task_prompt="brittle task 99")  # the server refuses the index: never started
        finished.reset(task_index=99, task_prompt="brittle task 99")
        plain.reset(task_index=1, task_prompt="brittle task 1")
        assert stale.get_reward() is None and stale.prompt_mismatch == "brittle task 0"
        assert missing.get_reward() is None
        assert rewards.finished_reward([finished]) == [None]
        assert plain.get_reward() == 0.0  # started, no tool scored it: unscored_reward
    finally:
        hooks.remove("episode_end", ends.append, background)
    assert [e.reason for e in ends] == ["stale_prompt", "not_started", "not_started", "no_tool_scored"]
    creates = [c for c in server.creates()[since:] if c["body"].get("index") == 99]
    assert len(creates) == 2 and all(c["status"] >= 400 for c in creates)  # the two starts the server refused


# -- a server that restarts -------------------------------------------------------------------------------------------


def test_a_session_the_restarted_server_no_longer_has_ends_its_episode_and_later_calls_send_nothing(tmp_path):
    from orsgen.runtime import ToolError

    server = servers.start("tests.envs.brittle:Brittle", env=COUNTING)
    try:
        port = int(server.url.rsplit(":", 1)[1])
        out = tmp_path / "restarted.py"
        assert in_process(server.url, "-o", str(out)).returncode == 0
        mod = load(out)
        env = mod.Brittle()
        assert env.reset(task_index=0) == "brittle task 0"
        server.kill()
        server = servers.start("tests.envs.brittle:Brittle", port=port, env=COUNTING)
        server.requests()  # the harness's health checks
        with pytest.raises(ToolError) as first:
            env.score()
        assert "HTTP 404" in str(first.value) and str(first.value).endswith("the episode is over")
        assert env.finished and env.get_reward() is None
        assert server.requests() == {"POST /brittle/call": 1}
        with pytest.raises(ToolError, match="the environment ended this episode's session"):
            env.score()
        assert "POST /brittle/call" not in server.requests()  # refused here: the server was not asked again
        assert env.reset(task_index=1) == "brittle task 1" and env.score() == "scored"
    finally:
        from orsgen.runtime import close_all

        close_all()
        server.kill()


# -- a tool returning images Pillow cannot read -----------------------------------------------------------------------


def test_a_tool_result_holding_an_image_pillow_cannot_read_reaches_the_model_as_a_result_not_a_failure(tmp_path):
    """The environment ran the tool and scored it: the model is told so, with a text part where the image was."""
    with servers.running("tests.envs.sketchy:Sketchy", env=COUNTING) as server:
        out = tmp_path / "sketchy.py"
        assert in_process(server.url, "-o", str(out)).returncode == 0
        mod = load(out)
        env = mod.Sketchy()
        env.reset(task_index=0)
        assert env.sketch() == [{"type": "text", "text": "a sketch"},
                                {"type": "text", "text": "[an image (image/svg+xml) that could not be decoded]"}]
        assert env.noise() == [{"type": "text", "text": "[an image (image/png) that could not be decoded]"}]
        assert env.rewards == [1.0, 0.5] and env.get_reward() == 0.5
        assert server.requests()["POST /sketchy/call"] == 2


# -- unscored_reward with the module's reward functions ---------------------------------------------------------------


def test_the_reward_functions_give_unscored_reward_as_get_reward_does_and_never_to_an_episode_that_did_not_start(
        brittle):
    from orsgen.runtime import rewards

    _, mod = brittle
    failing = type("Brittle", (mod.Brittle,), {"unscored_reward": 0.0})
    for reward in (rewards.outcome_reward, rewards.total_reward):
        unscored, scored, broken = failing(), failing(), failing()
        unscored.reset(task_index=0)
        scored.reset(task_index=1)
        scored.score()
        broken.reset(task_index=99)  # refused by the server: never started
        assert reward(environments=[unscored, scored, broken]) == [0.0, 1.0, None], reward.__name__
        assert [e.get_reward() for e in (unscored, scored, broken)] == [None, None, None]  # counted once


# -- hooks ------------------------------------------------------------------------------------------------------------


def test_a_hook_for_an_adapter_instance_or_a_name_is_refused_at_add_not_at_every_start_and_call(brittle):
    """`env=` is checked at each event outside the listener's guard: an instance there would make every start fail
    (the episode unscored) and every tool call raise."""
    from orsgen.runtime import hooks

    server, mod = brittle
    env = mod.Brittle()
    _creates(server)
    listening = hooks.wanted("session_open"), hooks.wanted("tool_call")  # another test's listener may be alive
    for wrong in (env, "Brittle"):
        with pytest.raises(TypeError, match=r"^hooks.add\('session_open', ..., env="):
            hooks.add("session_open", print, wrong)
    with pytest.raises(TypeError, match="is not callable"):
        hooks.add("tool_call", "print")
    assert (hooks.wanted("session_open"), hooks.wanted("tool_call")) == listening  # nothing was added
    assert env.reset(task_index=0) == "brittle task 0" and env.score() == "scored" and env.get_reward() == 1.0
    assert _creates(server) > 0  # the start reached the server and worked


# -- TRL's multi-environment mode with an environment of another kind -------------------------------------------------


class _OwnEnvironment:
    """A user's own TRL environment beside the module's in `environment_factory={...}`."""

    def reset(self, **row):
        return "my own task"

    def get_reward(self):
        return 0.75


def test_the_reward_functions_give_an_environment_of_another_kind_none_not_an_attribute_error(brittle):
    from orsgen.runtime import rewards

    server, mod = brittle
    ours, theirs = mod.Brittle(), _OwnEnvironment()
    ours.reset(task_index=0)
    ours.score()
    shaped = rewards.shaped_reward(lambda env: env.reward)
    for reward in (rewards.outcome_reward, rewards.total_reward, rewards.finished_reward, shaped):
        ours._reward_claimed = False
        assert reward(environments=[theirs, ours]) == [None, 0.0 if reward is rewards.finished_reward else 1.0]
    server.requests()
    assert rewards.terminal_reward({"name": "score", "arg": None}, ["done", "done"], [theirs, ours]) == [None, 1.0]
    assert server.requests()["POST /brittle/call"] == 1  # sent for the module's rollout only


# -- open_in_background against tools that drifted --------------------------------------------------------------------


def test_drifted_tools_stop_an_episode_opened_in_the_background_as_loudly_as_one_opened_in_line(tmp_path):
    """In line, DriftError leaves reset(); in the background it was an unscored episode (a warning, every run on):
    the first tool call raises it and so does the reward read, which TRL does not catch."""
    from orsgen.runtime import DriftError

    port = servers.free_port()
    server = servers.start("tests.envs.drift:Drift", port=port, env={"DRIFT_VARIANT": "a"})
    try:
        out = tmp_path / "drifted.py"
        assert in_process(server.url, "-o", str(out)).returncode == 0
        server.kill()
        server = servers.start("tests.envs.drift:Drift", port=port, env={"DRIFT_VARIANT": "b", **COUNTING})
        mod = load(out)
        background = type("Drift", (mod.Drift,), {"open_in_background": True})
        env = background()
        assert env.reset(task_index=0, task_prompt="task 0") == "task 0"
        with pytest.raises(DriftError, match="differ from those pinned"):
            env.say(text="hi")
        with pytest.raises(DriftError, match="differ from those pinned"):
            env.get_reward()
        assert "POST /drift/call" not in server.requests()  # nothing was called on the drifted tools
    finally:
        from orsgen.runtime import close_all

        close_all()
        server.kill()
