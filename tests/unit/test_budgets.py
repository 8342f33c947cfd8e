"""`Budgets` alone: the cut of a result (`cap` is pure), which value applies to a tool, and the refusals of bad pinned
budgets. The same cuts through a served module are tests/test_budgets.py's."""

import pytest
from orsgen.runtime import settings
from orsgen.runtime.budgets import NOTHING, Budgets, Cut, no_answer

SNAPSHOT = {"tools": [{"name": "read"}, {"name": "look"}], "terminal_tool": {"name": "submit"}}


def line(count: int, of: int, side: str, limit: int) -> str:
    where = {"head": "the end", "tail": "the start", "middle": "the middle"}[side]
    return (f"[orsgen: {count:,} of {of:,} characters cut from {where} of this result (max-output-chars {limit:,}): "
            "ask for less]")


def test_without_caps_a_result_is_the_same_object_and_nothing_is_cut():
    result = ["a" * 10_000]
    assert Budgets().cap("read", result) == (result, NOTHING)
    assert Budgets().cap("read", result)[0] is result
    assert not Budgets().caps


@pytest.mark.parametrize(("side", "expected"), [
    ("head", "abcd\n" + line(6, 10, "head", 4)),
    ("tail", line(6, 10, "tail", 4) + "\nghij"),
    ("middle", "ab\n" + line(6, 10, "middle", 4) + "\nij"),
])
def test_a_text_over_its_character_cap_keeps_its_side_and_says_what_was_cut(side, expected):
    capped, cut = Budgets({"max-output-chars": 4, "truncate": side}).cap("read", "abcdefghij")
    assert capped == expected
    assert cut == Cut(6, "characters")


def test_a_text_within_its_cap_comes_back_as_it_came():
    text = "abcd"
    capped, cut = Budgets({"max-output-chars": 4}).cap("read", text)
    assert capped is text and cut is NOTHING


def test_an_odd_cap_keeps_the_extra_character_at_the_start_when_cutting_the_middle():
    capped, _ = Budgets({"max-output-chars": 5}).cap("read", "0123456789")
    assert capped.startswith("012\n") and capped.endswith("\n89")


def test_text_parts_count_as_one_text_and_a_part_taken_whole_is_left_out():
    parts = [{"type": "text", "text": "aaaa"}, {"type": "image", "data": "i1"}, {"type": "text", "text": "bbbbbb"}]
    capped, cut = Budgets({"max-output-chars": 3, "truncate": "head"}).cap("read", parts)
    assert cut == Cut(7, "characters")
    assert capped == [{"type": "text", "text": "aaa\n" + line(7, 10, "head", 3)}, {"type": "image", "data": "i1"}]


def test_images_past_the_cap_become_one_line_where_the_first_left_out_was():
    parts = [{"type": "image", "data": str(i)} for i in range(4)]
    capped, cut = Budgets({"max-images": 1}).cap("look", parts)
    assert cut == Cut(images=3)
    assert capped == [{"type": "image", "data": "0"},
                      {"type": "text", "text": "[orsgen: 3 of 4 images left out of this result (max-images 1)]"}]


def test_a_result_neither_text_nor_parts_is_not_cut():
    value = {"rows": list(range(100))}
    assert Budgets({"max-output-chars": 1}).cap("read", value) == (value, NOTHING)


def test_per_tool_values_come_before_the_environment_wide_ones_and_settings_before_the_module():
    pinned = {"max-output-chars": 100, "truncate": "tail", "tools": {"read": {"max-output-chars": 10}}}
    given = settings.Settings(tool_budgets={"read": {"truncate": "head"}}, max_output_chars=50)
    budgets = Budgets(pinned, given, snapshot=SNAPSHOT)
    read, look = budgets.limits("read"), budgets.limits("look")
    assert (read.chars, read.truncate) == (10, "head")  # the module's per-tool cap, the setting's per-tool side
    assert (look.chars, look.truncate) == (50, "tail")  # the setting's wide cap over the module's, the module's side


def test_a_tools_own_timeout_replaces_tool_timeout_for_that_tool_only():
    budgets = Budgets({"tools": {"read": {"timeout": 2}}}, settings.Settings(tool_timeout=30.0), snapshot=SNAPSHOT)
    assert budgets.timeout("read") == (2.0, True)
    assert budgets.timeout("look") == (30.0, False)


def test_episode_limits_say_where_they_came_from():
    pinned = Budgets({"max-tool-calls": 3, "episode-timeout": 60})
    assert (pinned.max_tool_calls, pinned.episode_timeout) == (3, 60.0)
    assert pinned.calls_from == "max-tool-calls, pinned in the module"
    assert pinned.timeout_from == "episode-timeout, pinned in the module"
    given = Budgets({"max-tool-calls": 3}, settings.Settings(max_tool_calls=7, episode_timeout=5.0))
    assert (given.max_tool_calls, given.calls_from) == (7, "the max_tool_calls setting")
    assert (given.episode_timeout, given.timeout_from) == (5.0, "ORSGEN_EPISODE_TIMEOUT")


@pytest.mark.parametrize(("pinned", "says"), [
    ({"max-output-chars": 0}, "m pins max-output-chars = 0: a whole number, 1 or more"),
    ({"truncate": "left"}, "m pins truncate = 'left': one of 'head', 'tail', 'middle'"),
    ({"max-outputs": 3}, "m pins a budget 'max-outputs' this orsgen does not know"),
    ({"tools": {"read": {"episode-timeout": 3}}}, "m pins episode-timeout for tool 'read': a tool's budget is one of"),
    ({"tools": {"write": {"timeout": 3}}}, ("m pins a budget for tool 'write', which it does not have: its tools are "
                                           "look, read, submit")),
    ({"tools": ["read"]}, "m pins tools = ['read']: {tool name: {key: value}}"),
    ({"max-output-tokens": 5}, "m: max-output-tokens needs a tokenizer to count with"),
])
def test_a_bad_pinned_budget_is_refused_in_one_line(pinned, says):
    with pytest.raises(ValueError) as refused:
        Budgets(pinned, module="m", snapshot=SNAPSHOT)
    assert str(refused.value).startswith(says)
    assert "\n" not in str(refused.value)


def test_a_tool_budget_setting_for_a_tool_the_module_lacks_is_refused():
    with pytest.raises(ValueError, match=r"^tool_budgets: m has no tool 'reed': its tools are look, read, submit$"):
        Budgets({}, settings.Settings(tool_budgets={"reed": {"timeout": 1.0}}), module="m", snapshot=SNAPSHOT)


def test_what_the_model_reads_of_an_abandoned_call():
    assert no_answer("read", 2.5) == ("read: no answer within 2.5s (its timeout): the call was abandoned; the "
                                      "session stays open and the tool may still be running there")
