"""Tool budgets at run time (issue 32): a module's pinned caps cut a result before the model reads it, on the side
`truncate` names, with one line saying so (characters, tokens of an offline tokenizer, images); a tool's own timeout
bounds its calls, in line and started ahead; an episode's call and time limits void it with their reasons;
run-time settings override the pinned values key by key; a module without budgets is what it was. Each tool result
here is read through the generated module, from a live server (tests/envs/budgeted.py)."""

import asyncio
import json
import time

import pytest
from orsgen.runtime import Unscored, calls, episode_of, hooks
from orsgen.runtime.budgets import NOTHING, Budgets

from tests.envs.budgeted import CAPTION, HUGE
from tests.harness.generation import in_process, load, served
from tests.harness.trainers import tool_methods

MIDDLE = "[orsgen: 180,000 of 200,000 characters cut from the middle of this result (max-output-chars 20,000): ask for less]"


@pytest.fixture(scope="module")
def budgeted(tmp_path_factory):
    """(server counting requests, the module generated against it)."""
    with served("tests.envs.budgeted:Budgeted", tmp_path_factory.mktemp("budgets"), "budgeted") as found:
        yield found


@pytest.fixture
def mod(budgeted, monkeypatch):
    """The module, its pinned budgets and run-time settings put back after the test."""
    _, module = budgeted
    monkeypatch.setattr(module.PINNED, "budgets", {})
    for name in ("max_output_chars", "max_output_tokens", "tokenizer", "truncate", "max_images", "max_tool_calls",
                 "tool_budgets"):
        monkeypatch.delattr(module.Budgeted, name, raising=False)
    for name in ("ORSGEN_MAX_OUTPUT_CHARS", "ORSGEN_MAX_TOOL_CALLS", "ORSGEN_EPISODE_TIMEOUT", "ORSGEN_TOOL_TIMEOUT"):
        monkeypatch.delenv(name, raising=False)
    yield module
    module.close_all()


@pytest.fixture
def heard():
    """Every tool_call and episode_end record, while the test runs."""
    records: list = []
    for event in ("tool_call", "episode_end"):
        hooks.add(event, records.append)
    yield records
    for event in ("tool_call", "episode_end"):
        hooks.remove(event, records.append)


def started(mod, **settings):
    env = mod.Budgeted(settings=settings) if settings else mod.Budgeted()
    env.reset(task_index=0)
    return env


def tool_calls(records) -> list:
    return [r for r in records if isinstance(r, hooks.ToolCall)]


def calls_sent(server) -> int:
    return sum(e["request"].endswith("/call") for e in server.log())


# -- caps -----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("side", "expected"), [
    ("middle", HUGE[:10_000] + "\n" + MIDDLE + "\n" + HUGE[-10_000:]),
    ("head", HUGE[:20_000] + "\n" + MIDDLE.replace("the middle", "the end")),
    ("tail", MIDDLE.replace("the middle", "the start") + "\n" + HUGE[-20_000:]),
])
def test_a_result_over_its_character_cap_is_cut_on_its_side_with_one_line_saying_so(mod, heard, side, expected):
    mod.PINNED.budgets = {"max-output-chars": 20_000, "truncate": side}
    result = started(mod).huge()
    assert result == expected
    marker = next(line for line in result.split("\n") if line.startswith("[orsgen: "))
    assert len(result) == 20_000 + len(marker) + 1 + (side == "middle")  # the line and its newlines only
    [call] = tool_calls(heard)
    assert (call.result, call.truncated, call.truncated_unit, call.images_left_out, call.timed_out) == (
        result, 180_000, "characters", 0, False)


@pytest.fixture(scope="module")
def saved_tokenizer(budgeted, tmp_path_factory):
    """(path, tokenizer): the tiny offline tokenizer (examples/tiny.py), saved where AutoTokenizer loads it."""
    from transformers import AutoTokenizer

    from examples import tiny

    _, module = budgeted
    path = tmp_path_factory.mktemp("tokenizer")
    conversation = tiny.conversation("budgeted task 0", "huge", {}, HUGE[:2_000])
    tiny.tokenizer([conversation], tool_methods(module.Budgeted())).save_pretrained(path)
    return str(path), AutoTokenizer.from_pretrained(path)


@pytest.mark.parametrize("side", ["middle", "head", "tail"])
def test_a_token_cap_cuts_by_tokens_of_its_tokenizer(mod, heard, saved_tokenizer, side):
    path, tok = saved_tokenizer
    mod.PINNED.budgets = {"max-output-tokens": 50, "tokenizer": path, "truncate": side}
    result = started(mod).huge()
    ids = tok(HUGE, add_special_tokens=False)["input_ids"]
    n = len(ids)
    where = {"middle": "the middle", "head": "the end", "tail": "the start"}[side]
    line = f"[orsgen: {n - 50:,} of {n:,} tokens cut from {where} of this result (max-output-tokens 50): ask for less]"
    expected = {"middle": tok.decode(ids[:25]) + "\n" + line + "\n" + tok.decode(ids[-25:]),
                "head": tok.decode(ids[:50]) + "\n" + line, "tail": line + "\n" + tok.decode(ids[-50:])}[side]
    assert result == expected
    [call] = tool_calls(heard)
    assert (call.truncated, call.truncated_unit) == (n - 50, "tokens")


def test_images_past_max_images_become_one_line(mod, heard):
    mod.PINNED.budgets = {"max-images": 2}
    result = started(mod).images()
    assert [p["type"] for p in result] == ["text", "image", "image", "text"]
    assert result[0]["text"] == CAPTION
    assert result[-1] == {"type": "text", "text": "[orsgen: 18 of 20 images left out of this result (max-images 2)]"}
    mod.PINNED.budgets = {"max-images": 0}
    assert started(mod).images(n=3) == [{"type": "text", "text": CAPTION}, {
        "type": "text", "text": "[orsgen: 3 of 3 images left out of this result (max-images 0)]"}]
    assert [(c.images_left_out, c.truncated) for c in tool_calls(heard)] == [(18, 0), (3, 0)]


def test_the_text_parts_of_a_result_with_images_are_capped_as_one_text(mod, heard):
    """Caption (15) + 3 x (10 letters, an image): 45 characters of text; 20 kept, 10 at each end."""
    mod.PINNED.budgets = {"max-output-chars": 20, "max-images": 1}
    result = started(mod).images(n=3, text=10)
    line = "[orsgen: 25 of 45 characters cut from the middle of this result (max-output-chars 20): ask for less]"
    assert [p if p["type"] == "text" else "image" for p in result] == [
        {"type": "text", "text": CAPTION[:10] + "\n" + line + "\n"},  # the cut begins in the caption
        "image",  # the first image stays where it was; the part of b's the cut took whole is left out
        {"type": "text", "text": "[orsgen: 2 of 3 images left out of this result (max-images 1)]"},
        {"type": "text", "text": "c" * 10},
    ]
    [call] = tool_calls(heard)
    assert (call.truncated, call.truncated_unit, call.images_left_out) == (25, "characters", 2)


def test_a_result_within_its_caps_is_the_same_object():
    budgets = Budgets({"max-output-chars": 10, "max-images": 1, "tools": {"small": {"truncate": "head"}}})
    text, parts = "small", [{"type": "text", "text": "a"}, {"type": "image", "image": "data:"}]
    assert budgets.cap("small", text) == (text, NOTHING) and budgets.cap("small", text)[0] is text
    assert budgets.cap("images", parts)[0] is parts
    assert Budgets().cap("huge", HUGE)[0] is HUGE and not Budgets().caps


def test_budgets_leave_the_tools_trl_offers_and_their_schemas_as_they_are(mod, monkeypatch):
    from transformers.utils import get_json_schema

    def offered() -> dict:
        return {m.__name__: get_json_schema(m) for m in tool_methods(mod.Budgeted())}

    before = offered()
    assert set(before) == {"huge", "images", "never", "score", "sleepy", "small"}
    mod.PINNED.budgets = {"max-output-chars": 100, "max-tool-calls": 3, "tools": {"never": {"timeout": 1.0}}}
    monkeypatch.setattr(mod.Budgeted, "max_output_chars", 50, raising=False)
    monkeypatch.setattr(mod.Budgeted, "tool_budgets", {"huge": {"truncate": "head"}}, raising=False)
    assert offered() == before


# -- timeouts -------------------------------------------------------------------------------------------------------


def test_a_tools_own_timeout_bounds_its_calls_and_no_other_tools(mod, heard):
    mod.PINNED.budgets = {"tools": {"never": {"timeout": 1.0}}}
    env = started(mod)
    with pytest.raises(mod.ToolError) as late:  # `never` never answers: its own 1 s bound ends the call
        env.never()
    assert str(late.value) == ("never: no answer within 1s (its timeout): the call was abandoned; the session stays "
                               "open and the tool may still be running there")
    assert env.sleepy() == "slept"  # 5 s on the server, past never's 1 s: no timeout of its own, ORSGEN_TOOL_TIMEOUT's
    assert env.small() == "small" and env.get_reward() == 0.5  # the session stayed open and scored
    assert [(c.name, c.timed_out, c.error is None) for c in tool_calls(heard)] == [
        ("never", True, False), ("sleepy", False, True), ("small", False, True)]


def test_a_call_started_ahead_honours_its_tools_timeout(mod, heard):
    """The path of a turn's later calls (ORSGEN_BATCH_CALLS): started on the runtime's loop, taken by TRL's call."""
    mod.PINNED.budgets = {"tools": {"never": {"timeout": 1.0}}}
    env = started(mod)
    calls.start(env, [calls.Captured("never", {})], env._call_ahead)
    with pytest.raises(mod.ToolError, match=r"^never: no answer within 1s \(its timeout\): the call was abandoned"):
        env.never()
    [call] = tool_calls(heard)  # reported once, when it ran
    assert call.timed_out and call.name == "never"


@pytest.fixture(scope="module")
def async_mod(budgeted, tmp_path_factory):
    """The module generated with --async-tools (its calls go through the adapter's `_acall`)."""
    server, _ = budgeted
    out = tmp_path_factory.mktemp("async") / "budgeted_async.py"
    result = in_process(server.url, "--async-tools", "-o", str(out))
    assert result.returncode == 0, result.stderr
    return load(out)


def test_async_tools_are_capped_and_bounded_as_sync_ones(async_mod, heard, monkeypatch):
    monkeypatch.setattr(async_mod.PINNED, "budgets", {"max-output-chars": 20_000, "tools": {"never": {"timeout": 1.0}}})
    env = async_mod.Budgeted()
    env.reset(task_index=0)

    async def both() -> tuple:
        capped = await env.huge()
        with pytest.raises(async_mod.ToolError) as late:
            await env.never()
        return capped, str(late.value)

    try:
        capped, line = asyncio.run(both())
    finally:
        async_mod.close_all()
    assert capped == HUGE[:10_000] + "\n" + MIDDLE + "\n" + HUGE[-10_000:]
    assert line.startswith("never: no answer within 1s (its timeout): the call was abandoned")
    assert [(c.truncated, c.timed_out) for c in tool_calls(heard)] == [(180_000, False), (0, True)]


def test_tool_timeout_still_bounds_tools_without_their_own(mod, heard, monkeypatch):
    monkeypatch.setenv("ORSGEN_TOOL_TIMEOUT", "1")
    with pytest.raises(mod.ToolError) as late:
        started(mod).never()
    assert str(late.value) == "never failed: TimeoutError: no answer within 1s (ORSGEN_TOOL_TIMEOUT)"
    assert [c.timed_out for c in tool_calls(heard)] == [True]


# -- episode limits -------------------------------------------------------------------------------------------------


def test_the_call_past_max_tool_calls_voids_the_episode_and_every_later_one_fails(mod, heard, budgeted):
    server, _ = budgeted
    mod.PINNED.budgets = {"max-tool-calls": 2}
    env = started(mod)
    before = calls_sent(server)
    assert env.small() == "small" and env.small() == "small"
    line = "small: this episode is not scored: the model called tools more than its 2 times (max-tool-calls, " \
           "pinned in the module)"
    for _ in range(2):
        with pytest.raises(mod.ToolError) as refused:
            env.small()
        assert str(refused.value) == line
    assert calls_sent(server) - before == 2  # the refused calls sent nothing
    assert env.get_reward() is None  # void: not the 0.5 the calls earned
    [end] = [r for r in heard if isinstance(r, hooks.EpisodeEnd)]
    assert (end.reason, end.scored, end.calls, end.failures) == (Unscored.TOO_MANY_CALLS, False, 4, 2)
    assert end.reason == "too_many_calls"


def test_max_tool_calls_at_run_time_overrides_the_modules(mod, monkeypatch):
    mod.PINNED.budgets = {"max-tool-calls": 1}
    monkeypatch.setenv("ORSGEN_MAX_TOOL_CALLS", "3")
    env = started(mod)
    assert [env.small() for _ in range(3)] == ["small"] * 3
    with pytest.raises(mod.ToolError, match=r"more than its 3 times \(the max_tool_calls setting\)$"):
        env.small()
    env = started(mod, max_tool_calls=1)  # the constructor over the variable
    env.small()
    with pytest.raises(mod.ToolError, match="more than its 1 times"):
        env.small()


def test_the_modules_episode_timeout_voids_late_calls_and_the_variable_overrides_it(mod, heard, monkeypatch):
    mod.PINNED.budgets = {"episode-timeout": 0.5}
    env = started(mod)
    assert env.small() == "small"
    time.sleep(0.6)  # the behaviour under test: the episode's 0.5 s pass
    with pytest.raises(mod.ToolError) as late:
        env.small()
    assert str(late.value) == ("small: this episode is not scored: it ran past its 0.5s from reset (episode-timeout, "
                               "pinned in the module)")
    assert env.get_reward() is None
    monkeypatch.setenv("ORSGEN_EPISODE_TIMEOUT", "30")
    env.reset(task_index=0)
    time.sleep(0.6)  # as long again: under the variable's 30 s the episode is still on
    assert env.small() == "small" and env.get_reward() == 0.5
    assert [e.reason for e in heard if isinstance(e, hooks.EpisodeEnd)] == [Unscored.TIMED_OUT, None]


# -- run-time settings over the module's ----------------------------------------------------------------------------


def cap_of(result) -> str:
    """The cap a result was cut at, as its line names it."""
    text = result if isinstance(result, str) else "".join(p["text"] for p in result if p["type"] == "text")
    return text.split("(max-output-chars ")[1].split(")")[0]


def test_run_time_settings_override_the_pinned_budgets_key_by_key(mod, monkeypatch):
    """For one tool and key: tool_budgets[tool], the module's tools[tool], the run-time setting, the module's."""
    mod.PINNED.budgets = {"max-output-chars": 100, "tools": {"huge": {"max-output-chars": 50}}}
    env = started(mod)
    assert (cap_of(env.huge()), cap_of(env.images(n=1, text=500))) == ("50", "100")
    monkeypatch.setattr(mod.Budgeted, "max_output_chars", 70, raising=False)
    env = started(mod)
    assert (cap_of(env.huge()), cap_of(env.images(n=1, text=500))) == ("50", "70")  # not over the tool's own
    monkeypatch.setenv("ORSGEN_MAX_OUTPUT_CHARS", "80")
    assert cap_of(started(mod).images(n=1, text=500)) == "80"  # the variable over the class attribute
    assert cap_of(started(mod, max_output_chars=90).images(n=1, text=500)) == "90"  # the constructor over both
    monkeypatch.setattr(mod.Budgeted, "tool_budgets", {"huge": {"max-output-chars": 30, "truncate": "head"}},
                        raising=False)
    result = started(mod).huge()
    assert cap_of(result) == "30" and result.startswith(HUGE[:30] + "\n[orsgen: ") and "from the end" in result
    monkeypatch.setattr(mod.Budgeted, "truncate", "tail", raising=False)
    assert "from the start" in started(mod).images(n=1, text=500)[0]["text"]  # no truncate of its own
    budgets = episode_of(started(mod, tool_budgets={"never": {"timeout": 2.5}})).budgets
    assert budgets.timeout("never") == (2.5, True) and budgets.timeout("small") == (900.0, False)


def test_a_tools_timeout_at_run_time_overrides_the_modules(mod):
    mod.PINNED.budgets = {"tools": {"never": {"timeout": 30.0}}}
    env = started(mod, tool_budgets={"never": {"timeout": 1}})
    with pytest.raises(mod.ToolError, match=r"^never: no answer within 1s \(its timeout\)"):  # not the module's 30 s
        env.never()


@pytest.mark.parametrize(("how", "line"), [
    ({"attribute": ("max_output_chars", 0)}, "Budgeted.max_output_chars = 0: a whole number, 1 or more"),
    ({"variable": ("ORSGEN_MAX_TOOL_CALLS", "many")}, "ORSGEN_MAX_TOOL_CALLS='many': a whole number, 1 or more"),
    ({"attribute": ("truncate", "both")}, "Budgeted.truncate = 'both': one of 'head', 'tail', 'middle'"),
    ({"attribute": ("max_images", -1)}, "Budgeted.max_images = -1: a whole number, 0 or more"),
    ({"setting": ("tool_budgets", {"huge": {"max-chars": 5}})},
     ("Budgeted(settings={'tool_budgets': {'huge': {'max-chars': 5}}}): tool 'huge': no budget 'max-chars': one of "
     "max-output-chars, max-output-tokens, truncate, max-images, timeout")),
    ({"setting": ("tool_budgets", {"huge": {"timeout": 0}})},
     "Budgeted(settings={'tool_budgets': {'huge': {'timeout': 0}}}): tool 'huge': timeout: a number of seconds above 0"),
    ({"setting": ("tool_budgets", {"hug": {"timeout": 1}})},
     "tool_budgets: {module} has no tool 'hug': its tools are huge, images, never, score, sleepy, small"),
    ({"pinned": {"max-output-chars": "many"}}, "{module} pins max-output-chars = 'many': a whole number, 1 or more"),
    ({"pinned": {"tools": {"huge": {"tokenizer": "x"}}}},
     ("{module} pins tokenizer for tool 'huge': a tool's budget is one of max-output-chars, max-output-tokens, "
     "truncate, max-images, timeout")),
    ({"pinned": {"max-output-tokens": 100}},
     ("{module}: max-output-tokens needs a tokenizer to count with: set tokenizer (the module's [tool.orsgen] "
     "target, or the tokenizer setting)")),
    ({"pinned": {"max-output-tokens": 100, "tokenizer": "/nowhere/no-tokenizer"}},
     "{module}: the tokenizer '/nowhere/no-tokenizer' (max-output-tokens) could not be loaded: "),
])
def test_a_bad_budget_is_refused_at_reset_in_one_line_before_any_request(mod, budgeted, monkeypatch, how, line):
    server, _ = budgeted
    (kind, value), = how.items()
    settings = {}
    if kind == "attribute":
        monkeypatch.setattr(mod.Budgeted, value[0], value[1], raising=False)
    elif kind == "variable":
        monkeypatch.setenv(*value)
    elif kind == "setting":
        settings = {value[0]: value[1]}
    else:
        mod.PINNED.budgets = value
    before = len(server.log())
    with pytest.raises((ValueError, TypeError)) as refused:
        mod.Budgeted(settings=settings).reset(task_index=0)
    said = str(refused.value)
    assert said.startswith(line.replace("{module}", mod.__name__)) and "\n" not in said, said
    assert len(server.log()) == before


# -- without budgets ------------------------------------------------------------------------------------------------


def scenario(mod, server) -> tuple[list, list]:
    """Every quick tool once, then the reward: (results, the requests the server saw, by kind)."""
    before = len(server.log())
    env = started(mod)
    results = [env.huge(), env.images(n=2), env.small(), env.score(value=1.0)]
    results.append(env.get_reward())
    mod.close_all()
    return results, [(e["request"], bool(e["session"])) for e in server.log()[before:] if e["request"] != "POST /ping"]


def test_a_module_without_budgets_gives_what_the_server_sent_and_sends_the_same_requests(mod, heard, budgeted):
    server, _ = budgeted
    scenario(mod, server)  # the process's first start also checks the tools for drift: not what is compared
    heard.clear()
    plain, asked = scenario(mod, server)
    assert plain[0] == HUGE and plain[2:] == ["small", "scored", 1.0]
    assert [p["type"] for p in plain[1]] == ["text", "image", "image"]
    assert all(c.result is r for c, r in zip(tool_calls(heard), plain, strict=False))  # what the model got, as is
    assert all((c.truncated, c.truncated_unit, c.images_left_out, c.timed_out) == (0, None, 0, False)
               for c in tool_calls(heard))
    mod.PINNED.budgets = {"max-output-chars": 100, "max-images": 1, "max-tool-calls": 10, "episode-timeout": 60.0,
                          "tools": {"sleepy": {"timeout": 30.0}}}
    capped, asked_capped = scenario(mod, server)
    assert asked_capped == asked  # budgets add no request
    assert capped[0] != HUGE and capped[2:] == plain[2:]


def test_the_trajectory_record_marks_the_budgets_cut_apart_from_its_own(mod, tmp_path):
    from orsgen.runtime import Recorder

    mod.PINNED.budgets = {"max-output-chars": 20_000, "tools": {"never": {"timeout": 1.0}}}
    recorder = Recorder(tmp_path / "traj", max_result_chars=1_000)
    env = started(mod)
    env.huge()
    with pytest.raises(mod.ToolError):
        env.never()
    env.get_reward()
    recorder.close()
    [record] = [json.loads(line) for line in recorder.path.read_text().splitlines()]
    huge, never = record["tool_calls"]
    assert (huge["truncated"], huge["truncated_unit"], huge["images_left_out"], huge["timed_out"]) == (
        180_000, "characters", 0, False)
    assert huge["cut"] == 20_000 + len(MIDDLE) + 2 - 1_000  # the record's own cap, of what the model read
    assert (never["truncated"], never["timed_out"], never["error"].startswith("never: no answer within 1s")) == (
        0, True, True)


def test_budgets_from_pyproject_reach_what_the_model_reads(budgeted, tmp_path):
    """The whole way: a [tool.orsgen] target's budgets, generated into the module, cap and bound its calls."""
    server, _ = budgeted
    (tmp_path / "pyproject.toml").write_text(
        f'[tool.orsgen.targets.b]\ntarget = "{server.url}"\noutput = "gen/b.py"\nmax-output-chars = 20000\n'
        '[tool.orsgen.targets.b.tools.never]\ntimeout = 1\n')
    made = in_process(cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    module = load(tmp_path / "gen" / "b.py")
    assert module.BUDGETS == {"max-output-chars": 20000, "tools": {"never": {"timeout": 1.0}}}
    env = module.Budgeted()
    env.reset(task_index=0)
    assert MIDDLE in env.huge()
    with pytest.raises(module.ToolError, match=r"^never: no answer within 1s \(its timeout\)"):
        env.never()
    module.close_all()
