"""Conversation-shaped tasks (GET /messages): the turns reach the dataset's `prompt`, reset() adds only the last user
turn, and plain get_prompt environments read /prompt exactly as before. Against live SDK servers."""

import pytest

from tests.harness import servers
from tests.harness.servers import settle

SYSTEM = "You are terse: answer with as few words as you can."


@pytest.fixture(scope="module")
def judged():
    with servers.running("tests.envs.judged:Judged", env={"ORSGEN_COUNT_REQUESTS": "1"}) as server:
        yield server


def test_a_conversation_task_fills_the_prompt_and_reset_adds_its_last_turn(judged, generate):
    mod = generate(judged.url, name="judged_messages")
    judged.requests()
    rows = mod.dataset(indices=[1, 0], prompts=True)
    assert rows[0]["prompt"] == [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "Warm-up: say hi"},
        {"role": "assistant", "content": "hi"},
        {"role": "user", "content": ""},  # completed by reset(), as every row's prompt is
    ]
    assert rows["task_prompt"] == ["Task 1: the capital of Italy?", "Task 0: the capital of France?"]
    counts = judged.requests()
    assert counts.get("GET /judged/messages") == 2 and "GET /judged/prompt" not in counts

    env = mod.Judged()
    assert env.reset(**rows[0]) == "Task 1: the capital of Italy?"  # the last turn only: nothing said twice
    assert env.answer(text="Rome") == "correct" and env.get_reward() == 1.0
    env._close(wait=True)
    counts = judged.requests()
    assert counts.get("GET /judged/messages") == 1 and "GET /judged/prompt" not in counts

    class Background(mod.Judged):
        open_in_background = True

    early = Background()
    assert early.reset(**rows[1]) == "Task 0: the capital of France?"
    assert early.answer(text="Paris") == "correct" and early.prompt_mismatch is None
    mod.close_all()
    settle()
    assert judged.open_sessions() == []


def test_without_prompts_a_conversation_task_gets_the_servers_flattened_prompt(judged, generate):
    """dataset() without prompts=True: reset() reads /prompt, the SDK's flattening of the turns (one text)."""
    mod = generate(judged.url, name="judged_flat")
    row = mod.dataset(indices=[0])[0]
    assert row["prompt"] == [{"role": "user", "content": ""}]
    env = mod.Judged()
    text = env.reset(**row)
    assert SYSTEM in text and "Task 0: the capital of France?" in text
    mod.close_all()


def test_a_plain_environment_keeps_its_prompt_rows_and_reads_prompt_at_reset(echo_server, generate):
    mod = generate(echo_server.url, name="echo_plain")
    rows = mod.dataset(indices=[0, 1], prompts=True)
    assert rows["prompt"] == [[{"role": "user", "content": ""}]] * 2
    assert all(isinstance(p, str) and p for p in rows["task_prompt"])
    env = mod.Echo()
    assert env.reset(**rows[0]) == rows["task_prompt"][0]
    assert not mod.PINNED.conversations
    mod.close_all()
