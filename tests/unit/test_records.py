"""Record building (`trajectories.build`, the one place a trajectory record is made) from hook records alone, and
the cut of a long tool result. Written by a trainer or `orsgen eval`: tests/test_trajectory_records.py, test_eval.py."""

import json

from orsgen.runtime import hooks, trajectories
from orsgen.runtime.trajectories import SECRET, build, cut


class Echo:
    """A stand-in adapter: a record names its class."""


ADAPTER = Echo()


def start(error=None):
    return hooks.EpisodeStart(ADAPTER, "train", 2, "train", "Echo the word apple", error, 0.25)


def call(name="echo", result="apple", error=None, reward=None, seconds=0.5, **kw):
    return hooks.ToolCall(ADAPTER, name, {"text": "apple"}, result, error, seconds, reward, "train", **kw)


def end(reward=1.0, reason=None, **kw):
    return hooks.EpisodeEnd(ADAPTER, "train", 2, "train", reason is None, reward, True, reason, 1, 0,
                            seconds=2.0, **kw)


def test_a_record_holds_the_episode_its_calls_and_their_times():
    record = build(start(), [call(reward=1.0, seconds=0.5), call(seconds=0.25)], end(), run="r", step=4, rank=1,
                   environment="echo", session="s1", prompt=[{"role": "user", "content": "hi"}], ended_at=0.0)
    assert (record["schema"], record["run"], record["step"], record["rank"], record["adapter"]) == (
        "orsgen.trajectory/1", "r", 4, 1, "Echo")
    assert (record["split"], record["task_index"], record["stream"], record["session"]) == ("train", 2, "train", "s1")
    assert (record["reward"], record["scored"], record["unscored_reason"]) == (1.0, True, None)
    assert record["seconds"] == {"reset": 0.25, "tools": 0.75, "model": None, "episode": 2.0}
    assert [c["reward"] for c in record["tool_calls"]] == [1.0, None]
    assert record["prompt"] == [{"role": "user", "content": "hi"}]
    assert record["ended_at"] == "1970-01-01T00:00:00.000Z"
    json.dumps(record)  # a record is JSON as it is


def test_an_endpoint_error_makes_the_episode_unscored_whatever_the_environment_said():
    record = build(start(), [], end(reward=1.0), error="the endpoint answered 500")
    assert (record["reward"], record["scored"], record["unscored_reason"], record["error"]) == (
        None, False, "endpoint_error", "the endpoint answered 500")


def test_a_start_that_failed_is_kept_with_its_error():
    record = build(start(error="503 from /create"), [], end(reward=None, reason="not_started"))
    assert (record["start_error"], record["unscored_reason"], record["scored"]) == (
        "503 from /create", "not_started", False)
    assert build(None, [], end())["seconds"]["reset"] is None


def test_secrets_are_replaced_everywhere_and_short_ones_are_left_alone():
    record = build(start(), [call(result="key sk-abc123 echoed", error="bad sk-abc123")], end(),
                   prompt="sk-abc123 in the prompt", secrets=["sk-abc123", "abc"])
    text = json.dumps(record)
    assert "sk-abc123" not in text
    assert record["tool_calls"][0]["result"] == f"key {SECRET} echoed"
    assert record["prompt"] == f"{SECRET} in the prompt"
    assert "abc" in json.dumps(build(start(), [], end(), prompt="abc", secrets=["abc"]))  # under 4 characters


def test_a_long_result_keeps_its_head_and_tail_around_a_marker_and_counts_the_cut():
    text = "a" * 60 + "b" * 40
    assert cut(text, 100) == (text, 0) and cut(text, None) == (text, 0)
    kept, dropped = cut(text, 10)
    assert dropped == 90
    assert kept == "aaaaa\n[orsgen: 90 of 100 characters cut from this tool result]\nbbbbb"
    record = build(start(), [call(result=text)], end(), max_result_chars=10,
                   completion=[{"role": "tool", "content": text}, {"role": "assistant", "content": text}])
    assert (record["tool_calls"][0]["result"], record["tool_calls"][0]["cut"]) == (kept, 90)
    assert record["completion"] == [{"role": "tool", "content": kept}, {"role": "assistant", "content": text}]


def test_what_the_budget_cut_is_reported_apart_from_the_records_own_cut():
    record = build(start(), [call(truncated=12, truncated_unit="tokens", images_left_out=2, timed_out=True)], end())
    shown = record["tool_calls"][0]
    assert (shown["truncated"], shown["truncated_unit"], shown["images_left_out"], shown["timed_out"], shown["cut"]) \
        == (12, "tokens", 2, True, 0)


def test_what_json_cannot_hold_is_described():
    class Picture:
        mode, size = "RGB", (4, 3)

    record = build(start(), [call(result=[{"type": "image", "image": Picture()}, {"type": "text", "text": "t"}]),
                             call(result=b"\x00\x01")], end())
    assert record["tool_calls"][0]["result"] == [{"type": "image", "image": "[image 4x3]"},
                                                 {"type": "text", "text": "t"}]
    assert record["tool_calls"][1]["result"] == "[2 bytes]"
    assert trajectories.SCHEMA == record["schema"]
