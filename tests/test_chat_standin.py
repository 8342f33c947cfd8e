"""The chat-completions stand-in (tests/harness/chat_standin.py) as the openai client sees it: what `orsgen eval`'s
tests and benchmark rely on."""

import json
import socket
import threading

import openai
import pytest

from tests.harness.chat_standin import Error, Reply, first_user_text, last_user_text, serving, tool_results

TOOLS = [{"type": "function", "function": {"name": "answer", "description": "Submit an answer.",
                                           "parameters": {"type": "object", "properties": {"text": {"type": "string"}},
                                                          "required": ["text"]}}}]


def client(standin, **options) -> openai.OpenAI:
    return openai.OpenAI(base_url=standin.url, api_key="k", max_retries=0, **options)


def ask(c: openai.OpenAI, text: str = "hello", model: str = "scripted", **options):
    return c.chat.completions.create(model=model, messages=[{"role": "user", "content": text}], **options)


def test_models_are_listed():
    with serving(lambda payload: "hi", models=("a", "b")) as s:
        models = client(s).models.list()
        assert [m.id for m in models.data] == ["a", "b"]
        assert all(m.owned_by == "standin" and m.object == "model" for m in models.data)
        assert s.requests[0].method == "GET" and s.requests[0].path == "/v1/models" and s.chats() == []


def test_a_tool_call_then_a_plain_reply_after_the_tool_message():
    def script(payload):
        done = tool_results(payload)
        if not done:
            return Reply(tool_calls=[("answer", {"text": first_user_text(payload).upper()})],
                         prompt_tokens=12, completion_tokens=5)
        return Reply(content=f"done: {done[0]}", prompt_tokens=20, completion_tokens=2)

    with serving(script) as s:
        c = client(s)
        messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "what is 2+2?"}]
        first = c.chat.completions.create(model="scripted", messages=messages, tools=TOOLS)
        choice = first.choices[0]
        assert choice.finish_reason == "tool_calls" and choice.message.role == "assistant"
        call = choice.message.tool_calls[0]
        assert call.type == "function" and call.id.startswith("call_")
        assert call.function.name == "answer" and json.loads(call.function.arguments) == {"text": "WHAT IS 2+2?"}
        assert first.usage.prompt_tokens == 12 and first.usage.completion_tokens == 5 and first.usage.total_tokens == 17
        assert first.object == "chat.completion" and first.model == "scripted" and first.id

        messages += [choice.message.model_dump(exclude_none=True),
                     {"role": "tool", "tool_call_id": call.id, "content": "correct"}]
        second = c.chat.completions.create(model="scripted", messages=messages, tools=TOOLS)
        assert second.choices[0].finish_reason == "stop" and not second.choices[0].message.tool_calls
        assert second.choices[0].message.content == "done: correct"
        assert second.usage.total_tokens == 22

        assert [r.status for r in s.chats()] == [200, 200]
        assert s.payloads()[1]["messages"][2]["tool_calls"][0]["id"] == call.id


def test_no_usage_without_token_counts():
    with serving(lambda payload: Reply(content="plain")) as s:
        reply = ask(client(s))
        assert reply.usage is None and reply.choices[0].message.content == "plain"


def test_the_recorded_payload_keeps_what_was_sent():
    with serving(lambda payload: "ok") as s:
        ask(client(s), "task one", tools=TOOLS, seed=7, temperature=0.3, max_tokens=64)
        (request,) = s.chats()
        assert request.payload["tools"] == TOOLS
        assert request.payload["seed"] == 7 and request.payload["temperature"] == 0.3
        assert request.payload["max_tokens"] == 64
        assert request.headers["authorization"] == "Bearer k" and request.headers["content-type"] == "application/json"
        assert request.received <= request.answered
        assert first_user_text(request.payload) == last_user_text(request.payload) == "task one"


def test_an_unknown_model_is_not_found_as_vllm_says():
    with serving(lambda payload: "never") as s:
        with pytest.raises(openai.NotFoundError) as raised:
            ask(client(s), model="gpt-nothing")
        assert raised.value.status_code == 404
        assert raised.value.body == {"message": "The model `gpt-nothing` does not exist.", "type": "NotFoundError",
                                     "code": 404}


def test_tools_refused_is_a_bad_request_with_vllms_message():
    with serving(lambda payload: "without tools", tools_refused=True) as s:
        with pytest.raises(openai.BadRequestError) as raised:
            ask(client(s), tools=TOOLS)
        assert "--enable-auto-tool-choice and --tool-call-parser" in raised.value.message
        assert ask(client(s)).choices[0].message.content == "without tools"  # no tools: answered


def test_streaming_is_refused():
    with serving(lambda payload: "x") as s:
        with pytest.raises(openai.BadRequestError, match="does not stream"):
            ask(client(s), stream=True)
        assert s.chats()[0].status == 400 and s.chats()[0].payload["stream"] is True


def test_busy_is_rate_limited_then_answered():
    with serving(lambda payload: "at last", busy=2) as s:
        c = client(s)
        for _ in range(2):
            with pytest.raises(openai.RateLimitError) as raised:
                ask(c)
            assert raised.value.response.headers["retry-after"] == "0"
        assert ask(c).choices[0].message.content == "at last"
        assert [r.status for r in s.chats()] == [429, 429, 200]


def test_a_scripted_error_and_a_failing_script():
    def script(payload):
        if first_user_text(payload) == "overloaded":
            return Error(503, "try later", {"Retry-After": "1"})
        raise RuntimeError("no answer scripted")

    with serving(script) as s:
        with pytest.raises(openai.InternalServerError) as raised:
            ask(client(s), "overloaded")
        assert raised.value.status_code == 503 and raised.value.response.headers["retry-after"] == "1"
        assert raised.value.body["message"] == "try later"
        with pytest.raises(openai.InternalServerError, match="no answer scripted"):
            ask(client(s), "anything")


def test_an_api_key_is_required_when_given():
    with serving(lambda payload: "ok", api_key="secret") as s:
        with pytest.raises(openai.AuthenticationError):
            ask(client(s))
        good = openai.OpenAI(base_url=s.url, api_key="secret", max_retries=0)
        assert ask(good).choices[0].message.content == "ok"


def test_concurrent_requests_wait_out_the_delay_together():
    with serving(lambda payload: first_user_text(payload), delay=0.2) as s:
        c = client(s)
        answers: dict[int, str] = {}

        def one(i: int) -> None:
            answers[i] = ask(c, f"episode {i}").choices[0].message.content

        threads = [threading.Thread(target=one, args=(i,)) for i in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert answers == {i: f"episode {i}" for i in range(16)}
        assert s.peak_concurrency() >= 2  # a request arrived while another waited out its delay: they overlapped


def test_a_hanging_server_times_out_and_stops_with_a_request_still_open():
    with serving(lambda payload: "never", hang=True) as s:
        with pytest.raises(openai.APITimeoutError):
            ask(client(s, timeout=0.5))
        (request,) = s.chats()
        assert request.answered is None and request.status is None
    # stopped (the hanging handler did not hold it): the serving thread is gone and the port refuses
    assert not [t for t in threading.enumerate() if t.name == "chat-standin"]
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", int(s.url.rsplit(":", 1)[1].split("/")[0])), timeout=5).close()
