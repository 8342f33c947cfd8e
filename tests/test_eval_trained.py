"""`orsgen eval` against a real model: the tiny chat model warmed up on the echo environment
(tests/harness/tiny_serve.py) behind `transformers serve`, a real OpenAI-compatible endpoint on 127.0.0.1; and its
`--keep-passing` dataset trained on for one `SFTTrainer` step.

The first test needs transformers and torch, no TRL: it is in the fast tier (one model build, one server start). The
second builds a trainer (marker `trainer`); it runs against the scripted stand-in, so its passing episodes are known
exactly, and it must pass at both ends of the supported TRL range.
"""

import json
import math
from pathlib import Path

import pytest

from examples.echo import WORDS
from tests.harness import chat_standin, evaluation, generation
from tests.harness.chat_standin import Reply, first_user_text, tool_results
from tests.harness.generation import load

pytestmark = pytest.mark.slow  # the tiny model trained, served by `transformers serve`: make test-slow

K = 2
CHAT_ANSWERED = '"POST /v1/chat/completions HTTP/1.1" 200'  # uvicorn's access log line of an answered request


@pytest.fixture(scope="module")
def echo_module(tmp_path_factory):
    """The echo environment served with its request log on, and its module generated: (server, module path)."""
    with generation.served("examples.echo:Echo", tmp_path_factory.mktemp("echo-module"), "echo") as (server, module):
        yield server, Path(module.__file__)


def calls_by_session(server, before: set[str]) -> dict[str, int]:
    """How many `/call` requests the env server got on each session not in `before`."""
    calls: dict[str, int] = {}
    for entry in server.log():
        if entry["request"].endswith("/call") and entry["session"] not in before:
            calls[entry["session"]] = calls.get(entry["session"], 0) + 1
    return calls


# -- a real endpoint: the tiny model behind `transformers serve` ----------------------------------------------------


def offered_tools(module) -> list[dict]:
    """What `orsgen eval` offers the model on the echo environment (as TRL would): `get_json_schema` of each tool
    method of the generated adapter, echo and hint."""
    from orsgen.evaluate.target import tool_methods
    from transformers.utils import get_json_schema

    return [get_json_schema(method) for method in tool_methods(load(module).Echo())]


@pytest.fixture(scope="module")
def served(echo_module, run_tmp):
    """The tiny model, built and warmed up once on the tools the eval offers, behind `transformers serve`:
    (Served, its build_info, the tools). Warmed up on the harness's default tools (echo alone) the model sees another
    prompt in the eval and writes no parseable call at all."""
    from tests.harness.tiny_serve import build_info, serving, shared_model_dir

    tools = offered_tools(echo_module[1])
    assert [t["function"]["name"] for t in tools] == ["echo", "hint"]
    model_dir = shared_model_dir(run_tmp, tools)  # built once for the run's workers (test_eval_hostile.py's too)
    info = build_info(model_dir)
    assert info is not None, model_dir
    with serving(model_dir) as server:
        yield server, info, tools


def test_the_served_model_calls_echo_in_the_openai_format(served):
    """What `orsgen eval` reads from the endpoint and does not record: the call's id and type, the finish reasons,
    the arguments as a JSON string; and the endpoint's address and model list as `Served` gives them."""
    from openai import OpenAI

    server, info, tools = served
    assert server.url.startswith("http://127.0.0.1:") and server.url.endswith("/v1")
    client = OpenAI(base_url=server.url, api_key="EMPTY", max_retries=0, timeout=120)
    assert [model.id for model in client.models.list().data] == [server.model]

    word = WORDS[0]
    messages = [{"role": "user", "content": f"Echo the word {word}"}]
    reply = client.chat.completions.create(model=server.model, messages=messages, tools=tools, max_tokens=64)
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls", (choice, info, server.output()[-2000:])
    (call,) = choice.message.tool_calls
    assert call.type == "function" and call.id and call.function.name == "echo"
    assert isinstance(call.function.arguments, str) and json.loads(call.function.arguments) == {"text": word}, info
    assert reply.usage.prompt_tokens > 0 and reply.usage.completion_tokens > 0

    messages += [{"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
                 {"role": "tool", "tool_call_id": call.id, "content": word}]
    reply = client.chat.completions.create(model=server.model, messages=messages, tools=tools, max_tokens=64)
    choice = reply.choices[0]
    assert choice.finish_reason == "stop" and not choice.message.tool_calls, (choice, server.output()[-2000:])
    assert choice.message.content == word


def test_orsgen_eval_end_to_end_on_transformers_serve(served, echo_module, tmp_path):
    server, info, _ = served
    env_server, module = echo_module
    # The warm-up leaves the greedy model echoing `info["echoed"]` of the 8 words on its first turn (all 8 in every
    # build measured); the server decodes greedily too, so each of those tasks passes in both rollouts: pass@1 is at
    # least echoed / 8 >= 0.75.
    assert info["echoed"] >= 6, info
    before = {entry["session"] for entry in env_server.log()}
    answered = server.output().count(CHAT_ANSWERED)
    run = evaluation.orsgen_eval(str(module), "--base-url", server.url, "--model", server.model, "-k", str(K),
                                 "--concurrency", "4", "--out", "run", cwd=tmp_path)
    assert run.returncode == 0, (run.stderr[-4000:], server.output()[-4000:])
    folder = tmp_path / "run"

    # one record per (task, rollout), every one counted, on a session of its own
    records = evaluation.records(folder)
    assert sorted((r["task_index"], r["rollout"]) for r in records) == [(t, k) for t in range(8) for k in range(K)]
    for r in records:
        assert r["schema"] == "orsgen.trajectory/1" and r["stream"] == "eval" and r["model"] == server.model, r
        assert r["split"] == "train" and r["prompt"] == [{"role": "user",
                                                          "content": f"Echo the word {WORDS[r['task_index']]}"}], r
        assert r["error"] is None and r["unscored_reason"] in (None, "no_tool_scored") and r["session"], r
        assert r["usage"]["prompt_tokens"] > 0 and r["usage"]["completion_tokens"] > 0, r  # the server's usage
    passed = [r for r in records if r["reward"] is not None and r["reward"] >= 1.0]
    for r in passed:  # the model's call, the tool's answer, the word said back: as the warm-up taught it
        word = WORDS[r["task_index"]]
        assert r["completion"] == [
            {"role": "assistant", "content": "", "tool_calls": [
                {"type": "function", "function": {"name": "echo", "arguments": {"text": word}}}]},
            {"role": "tool", "name": "echo", "content": word},
            {"role": "assistant", "content": word}], r
        assert [(c["name"], c["arguments"], c["reward"], c["finished"]) for c in r["tool_calls"]] == [
            ("echo", {"text": word}, 1.0, True)], r

    # what the env server saw: each record's calls on its session, every session closed
    assert {r["session"]: len(r["tool_calls"]) for r in records} == calls_by_session(env_server, before)
    assert env_server.open_sessions() == []
    # what the model server answered: the probe (tools, max_tokens 1) and each assistant turn, with 200, none a 500
    turns = sum(1 for r in records for turn in r["completion"] if turn["role"] == "assistant")
    assert server.output().count(CHAT_ANSWERED) - answered == 1 + turns, server.output()[-4000:]
    assert "500 Internal Server Error" not in server.output(), server.output()[-4000:]

    # the figures, from the records
    found = evaluation.summary(folder)
    assert found["episodes"] == {"planned": 8 * K, "done": 8 * K, "counted": 8 * K}
    assert found["pass"]["threshold"] == 1.0
    assert found["pass"]["at_1"] == pytest.approx(len(passed) / len(records))  # every task counted K times
    assert found["reward"]["passed"] == len(passed)
    assert found["pass"]["at_1"] >= 0.75, (found["pass"], info, [r["completion"] for r in records if r not in passed])
    assert found["tokens"]["prompt"] == sum(r["usage"]["prompt_tokens"] for r in records)
    assert found["tokens"]["completion"] == sum(r["usage"]["completion_tokens"] for r in records)
    assert f"pass@1  {100 * found['pass']['at_1']:.1f}%" in run.stdout
    assert found["run"]["model"] == server.model and found["run"]["endpoint"] == server.url


# -- the passing episodes as an SFT dataset, one SFTTrainer step on them ---------------------------------------------

RIGHT = {"apple", "lemon", "peach", "kiwi"}  # the stand-in's model echoes these words, and misspells the others


def script(payload):
    """One tool call (the task's word, or a wrong one), then a plain reply echoing the word; "OK" to the probe."""
    text = first_user_text(payload)
    if not text.startswith("Echo the word "):
        return Reply(content="OK")
    word = text.split()[-1]
    if tool_results(payload):
        return Reply(content=word, prompt_tokens=30, completion_tokens=2)
    return Reply(tool_calls=[("echo", {"text": word if word in RIGHT else word.upper()})], prompt_tokens=20,
                 completion_tokens=5)


@pytest.mark.trainer
def test_passing_episodes_train_one_sft_step(echo_module, tmp_path):
    import datasets
    import torch
    from trl import SFTConfig, SFTTrainer

    from examples import tiny

    _, module = echo_module
    with chat_standin.serving(script) as endpoint:
        run = evaluation.orsgen_eval(str(module), "--base-url", endpoint.url, "--model", "scripted", "-k", str(K),
                                     "--out", "run", "--keep-passing", "sft", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    records = evaluation.records(tmp_path / "run")
    assert len(records) == 8 * K
    passing = sorted((r["task_index"], r["rollout"]) for r in records if r["reward"] is not None and r["reward"] >= 1.0)
    assert passing == sorted((WORDS.index(w), k) for w in RIGHT for k in range(K))
    assert evaluation.summary(tmp_path / "run")["reward"]["passed"] == len(passing)
    path = tmp_path / "sft" / "passing.jsonl"
    assert f"{len(passing)} passing episodes in sft/passing.jsonl" in run.stderr

    # the file: one row per passing episode, the turns as the records hold them
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    assert sorted((row["task_index"], row["environment"], row["split"], row["reward"]) for row in rows) == sorted(
        (t, "echo", "train", 1.0) for t, _ in passing)
    for row in rows:
        word = WORDS[row["task_index"]]
        assert row["messages"] == [
            {"role": "user", "content": f"Echo the word {word}"},
            {"role": "assistant", "content": "", "tool_calls": [
                {"type": "function", "function": {"name": "echo", "arguments": {"text": word}}}]},
            {"role": "tool", "name": "echo", "content": word},
            {"role": "assistant", "content": word}], row
        assert [t["function"]["name"] for t in row["tools"]] == ["echo", "hint"], row

    # as `datasets` loads it for SFTTrainer
    data = datasets.load_dataset("json", data_files=str(path), split="train")
    assert data.num_rows == len(passing)
    assert {"messages", "tools"} <= set(data.column_names)
    for example in data:
        word = WORDS[example["task_index"]]
        (call,) = example["messages"][1]["tool_calls"]
        assert call["function"]["name"] == "echo"
        assert call["function"]["arguments"] == {"text": word}  # a dict, no key of another call's arguments
        assert example["messages"][2]["content"] == word

    # rendered by the tiny model's chat template: the prompt, the call, the tool's result, the reply
    conversations = [row["messages"] for row in rows]
    tok = tiny.tokenizer(conversations, rows[0]["tools"])
    example = data[0]
    text = tok.apply_chat_template(example["messages"], tools=example["tools"], tokenize=False)
    word = WORDS[example["task_index"]]
    assert tiny.call_text("echo", {"text": word}) in text, text
    assert f"<|tool|>{word}<|eot|>" in text and text.rstrip().endswith(f"<|bot|>{word}<|eot|>"), text
    assert '"name": "echo"' in text and '"name": "hint"' in text, text  # the tools offered
    same = next(row for row in rows if row["task_index"] == example["task_index"])
    assert text == tok.apply_chat_template(same["messages"], tools=same["tools"], tokenize=False)  # no null added

    # one SFTTrainer step on it
    torch.manual_seed(0)
    config = SFTConfig(output_dir=str(tmp_path / "out"), max_steps=1, per_device_train_batch_size=2, use_cpu=True,
                       report_to="none", save_strategy="no", max_length=256, assistant_only_loss=False,
                       learning_rate=1e-3, logging_steps=1, disable_tqdm=True, dataloader_num_workers=0, bf16=False,
                       seed=0)
    trainer = SFTTrainer(model=tiny.model(tok), args=config, train_dataset=data, processing_class=tok)
    trained_on = tok.decode(trainer.train_dataset[0]["input_ids"])  # what the step trains on: nothing cut off
    assert trained_on.strip() == text.strip(), (trained_on, text)
    result = trainer.train()
    assert trainer.state.global_step == 1
    assert math.isfinite(result.training_loss) and result.training_loss > 0, trainer.state.log_history
