"""`orsgen eval` under hostile models, endpoints and disks (issue 41): one episode's problem stays that episode's.

Against the ORS server running the graded environment (tests/envs/graded.py; tests/envs/graded_shaky.py adds starts
that fail on demand and an empty split) and the scripted endpoint (tests/harness/chat_standin.py, whose `Raw`
answers send what no well-behaved server sends), each test asserts on what the servers saw and on the run's folder:

- a reply holding a lone surrogate is saved (escaped) and read back; a full disk (a real `EFBIG`: the file size limit
  of the process, RLIMIT_FSIZE) stops the run with what was saved and the resume line, exit 2;
- malformed replies (arguments sent as a JSON object, no choices, a body that is not JSON, content that is not text,
  a call without a name) are each their episode's `endpoint_error` with a line saying what was wrong; odd but
  readable ones (a Retry-After of -1 or nan, arguments nested past Python's recursion limit, usage that is not
  numbers) finish their episodes;
- `--timeout` bounds a reply whose bytes trickle in: the episode fails, the connection is closed;
- `--resume` runs again the episodes that could not start, and says how many it ran again;
- an empty split is "no tasks in split X", whatever -n asks;
- the endpoint's reason is kept in the message and the record; a conversation the endpoint refused for the model's
  own tool call that is not JSON (vLLM's 400, `transformers serve`'s 500) is the model's failed episode, counted.
"""

import contextlib
import itertools
import json
import resource
import subprocess
import sys
import time

import pytest
from orsgen.evaluate.endpoint import PROBE

from tests.harness import evaluation, servers
from tests.harness.chat_standin import Error, Raw, Reply, completion, first_user_text, serving, tool_results
from tests.harness.generation import in_process

pytestmark = pytest.mark.slow  # `orsgen eval` run as a user runs it, several runs a test: make test-slow

script, task_of = evaluation.script, evaluation.task_of
SURROGATE = "\ud83d"  # half of an emoji's surrogate pair: what `json.loads` makes of a model's "\ud83d"


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    with evaluation.graded(tmp_path_factory.mktemp("graded")) as found:
        yield found


@contextlib.contextmanager
def shaky(folder, fails):
    """tests/envs/graded_shaky.py served, the next starts of each task in `fails` set to fail, and its module
    generated into `folder`: (server, path)."""
    plan = folder / "fails.json"
    plan.write_text(json.dumps(fails), encoding="utf-8")
    env = {"ORSGEN_COUNT_REQUESTS": "1", "GRADED_FAILS": str(plan)}
    with servers.running("tests.envs.graded_shaky:ShakyGraded", env=env) as server:
        out = folder / "graded.py"
        made = in_process(server.url, "-o", str(out))
        assert made.returncode == 0, made.stderr
        yield server, out


def last_error_line(stderr):
    """stderr ends with one `orsgen: error:` line, the only one, and shows no traceback: that line."""
    lines = stderr.strip().splitlines()
    assert "Traceback" not in stderr, stderr
    assert lines and lines[-1].startswith("orsgen: error: "), stderr
    assert sum(line.startswith("orsgen: error:") for line in lines) == 1, stderr
    return lines[-1]


def whole_records(folder):
    """Every line of trajectories.jsonl, each a whole JSON record (json.loads fails the test on a cut one)."""
    data = (folder / "trajectories.jsonl").read_bytes()
    text = data.decode("utf-8")  # strict: the file is UTF-8
    assert text == "" or text.endswith("\n"), text[-200:]
    return [json.loads(line) for line in text.splitlines()]


def wait_closed(server, before, timeout=10.0):
    """Wait until the server holds no session opened since `before`; assert it holds none."""
    deadline = time.monotonic() + timeout
    while (left := set(server.open_sessions()) - before) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert left == set(), f"sessions left open: {sorted(left)}"


def first_turn(payload):
    """The episode's first request (no assistant turn yet), not the probe."""
    return task_of(payload) >= 0 and not any(m.get("role") == "assistant" for m in payload["messages"])


def body_of(reply, **message):
    """A chat completion body of `reply` with `message`'s fields put into its message as given."""
    body = completion(reply, "scripted", 0, itertools.count())
    body["choices"][0]["message"].update(message)
    return body


def episodes_asked(payloads):
    """task -> requests the episodes of that task made (the probe left out)."""
    asked = {}
    for payload in payloads:
        if first_user_text(payload) != PROBE:
            asked[task_of(payload)] = asked.get(task_of(payload), 0) + 1
    return asked


# -- item 3: what a record holds, and a disk that is full -----------------------------------------------------------


def test_a_lone_surrogate_in_a_reply_is_saved_and_read_back(graded, tmp_path):
    """The model writes half a surrogate pair in its call's arguments and in its last words: the record holds both
    (escaped in the file, the same string read back), and the run and its --resume end as usual."""
    _server, module = graded

    def surrogates(payload):
        if task_of(payload) == 0 and not tool_results(payload):
            return Reply(tool_calls=[("answer", '{"text": "w0\\ud83d"}')])
        if task_of(payload) == 0:
            return Reply(content=f"done {SURROGATE}")
        return script(payload)

    with serving(surrogates) as endpoint:
        run = evaluation.orsgen_eval(str(module), "--base-url", endpoint.url, "--model", "scripted", "--tasks", "0-1",
                                     "--out", "run", cwd=tmp_path)
        assert run.returncode == 0, run.stderr
        again = evaluation.orsgen_eval("--resume", "run", "--base-url", endpoint.url, cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert "2 episodes (2 tasks x 1), 0 to run" in again.stderr
    assert b"\\ud83d" in (tmp_path / "run" / "trajectories.jsonl").read_bytes()
    records = {r["task_index"]: r for r in whole_records(tmp_path / "run")}
    assert sorted(records) == [0, 1]
    mine = records[0]
    assert mine["completion"][-1] == {"role": "assistant", "content": f"done {SURROGATE}"}
    assert mine["completion"][0]["tool_calls"][0]["function"]["arguments"] == {"text": f"w0{SURROGATE}"}
    assert mine["error"] is None and mine["reward"] == 0.0  # the environment got the call, and said it was wrong
    assert evaluation.summary(tmp_path / "run")["episodes"] == {"planned": 2, "done": 2, "counted": 2}


FILE_SIZE_LIMIT = 9_000  # bytes any file of the process may grow to: run.json and two or three records


def limited(*args, cwd, limit):
    """`orsgen eval` in a process whose files may not grow past `limit` bytes (RLIMIT_FSIZE): a write past it fails
    with EFBIG, as a full disk fails one with ENOSPC (Python ignores SIGXFSZ, so the write returns the error). It writes
    no bytecode: CPython keeps a .pyc its write cut short, which every later process of the venv then fails to load."""
    def cap():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return subprocess.run([sys.executable, "-m", "orsgen", "eval", *args], check=False, capture_output=True, text=True,
                          cwd=cwd, env={**evaluation.environ(), "PYTHONDONTWRITEBYTECODE": "1"}, timeout=300,
                          preexec_fn=cap)


def test_a_full_disk_stops_the_run_with_what_was_saved_and_the_resume_line(graded, tmp_path):
    server, module = graded
    before = set(server.open_sessions())
    planned = {(t, k) for t in range(5) for k in range(2)}
    with serving(script) as endpoint:
        run = limited(str(module), "--base-url", endpoint.url, "--model", "scripted", "--tasks", "0-4", "-k", "2",
                      "--seed", "0", "--concurrency", "1", "--out", "run", cwd=tmp_path, limit=FILE_SIZE_LIMIT)
    assert run.returncode == 2, run.stderr
    line = last_error_line(run.stderr)
    saved = whole_records(tmp_path / "run")  # whole lines only: the write that failed left nothing
    assert 1 <= len(saved) < len(planned), saved
    assert line.startswith("orsgen: error: cannot write run/trajectories.jsonl: File too large"), line
    assert line.endswith(f"({len(saved)} of {len(planned)} episodes saved in run: orsgen eval --resume run runs the "
                         "rest)"), line
    wait_closed(server, before)  # the episodes running when it stopped closed their sessions

    with serving(script) as endpoint:
        resumed = evaluation.orsgen_eval("--resume", "run", "--base-url", endpoint.url, cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    final = whole_records(tmp_path / "run")
    assert sorted((r["task_index"], r["rollout"]) for r in final) == sorted(planned)  # each once: none lost, none twice
    assert evaluation.summary(tmp_path / "run")["episodes"] == {"planned": 10, "done": 10, "counted": 10}


# -- item 4: a malformed reply is its episode's failure ---------------------------------------------------------------

MALFORMED = {  # task -> (its first reply, what the record's error says of it)
    0: (Raw(body=body_of(Reply(), tool_calls=[{"id": "c0", "type": "function",
                                               "function": {"name": "answer", "arguments": {"text": "w0"}}}])),
        "the arguments of its tool call 0 (answer) are a JSON object, not the JSON text of one"),
    1: (Raw(body={"id": "chatcmpl-1", "object": "chat.completion", "choices": []}), "it has no choices"),
    2: (Raw(body=b"<html>the gateway is busy</html>", content_type="text/html"),
        "its body is not JSON: '<html>the gateway is busy</html>'"),
    3: (Raw(body=body_of(Reply(), content=42)), "its content is a JSON number, not text"),
    4: (Raw(body=body_of(Reply(), tool_calls=[{"id": "c4", "type": "function", "function": {"arguments": "{}"}}])),
        "its tool call 0 has no function name"),
}


def test_malformed_replies_are_each_their_episodes_endpoint_error(graded, tmp_path):
    server, module = graded
    before = set(server.open_sessions())

    def malformed(payload):
        return MALFORMED[task_of(payload)][0] if first_turn(payload) else script(payload)

    with serving(malformed) as endpoint:
        run = evaluation.orsgen_eval(str(module), "--base-url", endpoint.url, "--model", "scripted", "--tasks", "0-4",
                                     "--seed", "0", "--out", "run", cwd=tmp_path)
        asked = episodes_asked(endpoint.payloads())
    assert run.returncode == 0, run.stderr
    assert "internal error" not in run.stderr and "Traceback" not in run.stderr, run.stderr
    assert asked == {t: 1 for t in range(5)}  # one request each: a malformed 200 is not asked again
    records = {r["task_index"]: r for r in whole_records(tmp_path / "run")}
    for task, (_, said) in MALFORMED.items():
        r = records[task]
        assert r["unscored_reason"] == "endpoint_error" and r["reward"] is None, r
        assert r["error"].startswith(f"the endpoint at {endpoint.url} sent a reply orsgen cannot read: {said}"), r
    assert evaluation.summary(tmp_path / "run")["unscored"] == {"endpoint_error": 5}
    wait_closed(server, before)

    with serving(script) as healthy:  # --resume asks again, and this time they are answered
        resumed = evaluation.orsgen_eval("--resume", "run", "--base-url", healthy.url, cwd=tmp_path)
        asked = episodes_asked(healthy.payloads())
    assert resumed.returncode == 0, resumed.stderr
    assert "5 episodes (5 tasks x 1), 5 to run (5 of them again: 5 the endpoint had failed)" in resumed.stderr
    assert asked == {0: 2, 1: 3, 2: 2, 3: 2, 4: 2}
    assert evaluation.summary(tmp_path / "run")["unscored"] == {}


def test_odd_but_readable_replies_finish_their_episodes(graded, tmp_path):
    """A 429 whose Retry-After is -1 or nan is waited out as one without it; arguments nested past the recursion
    limit are text, a call the method refuses (TRL's error text), and the model answers again; usage that is not
    numbers is left out of the tokens."""
    _server, module = graded
    refused = {0: 1, 1: 1}  # task -> 429s still to answer
    odd = {0: Error(429, "slow down", {"Retry-After": "-1"}), 1: Error(429, "slow down", {"Retry-After": "nan"}),
           2: Reply(tool_calls=[("answer", "[" * 100_000)]),
           3: Raw(body={**body_of(Reply(tool_calls=[("answer", {"text": "w3"})])),
                        "usage": {"prompt_tokens": "many", "completion_tokens": None}})}

    def oddly(payload):
        task = task_of(payload)
        if first_turn(payload) and task in odd and refused.get(task, 1) > 0:
            refused[task] = refused.get(task, 1) - 1
            return odd[task]
        return script(payload)

    with serving(oddly) as endpoint:
        run = evaluation.orsgen_eval(str(module), "--base-url", endpoint.url, "--model", "scripted", "--tasks", "0-3",
                                     "--out", "run", cwd=tmp_path)
        statuses = [(task_of(r.payload), r.status) for r in endpoint.chats() if task_of(r.payload) >= 0]
    assert run.returncode == 0, run.stderr
    assert "internal error" not in run.stderr and "Traceback" not in run.stderr, run.stderr
    assert statuses.count((0, 429)) == 1 and statuses.count((1, 429)) == 1, statuses  # each asked again once
    records = {r["task_index"]: r for r in whole_records(tmp_path / "run")}
    assert [records[t]["reward"] for t in range(4)] == [1.0, 1.0, 0.0, 1.0], records  # task 2: "nope" after it
    assert all(r["error"] is None for r in records.values())
    nested = records[2]["completion"][1]
    assert nested["role"] == "tool" and nested["content"].startswith("{'error': 'the arguments of answer are not"), nested
    assert records[3]["usage"] == {"prompt_tokens": 30, "completion_tokens": 2}  # the second reply's alone


# -- item 5: --timeout bounds the whole reply -------------------------------------------------------------------------


def test_a_reply_trickling_past_the_timeout_fails_its_episode_and_is_hung_up(graded, tmp_path):
    """The endpoint answers 200 and then sends a space a second, for ever; `--timeout 3` ends that episode (the
    openai client's own timeout is per read, which each space resets) and closes its connection."""
    server, module = graded
    before = set(server.open_sessions())

    def trickling(payload):
        return Raw(trickle=1.0) if task_of(payload) == 0 else script(payload)

    with serving(trickling) as endpoint:
        run = evaluation.orsgen_eval(str(module), "--base-url", endpoint.url, "--model", "scripted", "--tasks", "0-1",
                                     "--timeout", "3", "--out", "run", cwd=tmp_path, timeout=120)
        (trickled,) = [r for r in endpoint.chats() if task_of(r.payload) == 0]
        assert trickled.ended.wait(30), "the client never hung up"
        assert trickled.hung_up is not None and not endpoint.stopped.is_set()
    assert run.returncode == 0, run.stderr
    records = {r["task_index"]: r for r in whole_records(tmp_path / "run")}
    assert records[0]["unscored_reason"] == "endpoint_error"
    assert records[0]["error"] == f"the endpoint at {endpoint.url} did not answer within 3s (--timeout)"
    assert records[1]["reward"] == 1.0
    wait_closed(server, before)


# -- item 6: --resume runs again what could not start ----------------------------------------------------------------


def test_resume_runs_again_the_episodes_that_could_not_start(tmp_path):
    """Task 1's start fails three times: its reset and both retries, so its episode could not start. --resume runs
    it again, the environment starts it, and the run says so."""
    with shaky(tmp_path, {"1": 3}) as (server, module), serving(script) as endpoint:
        first = evaluation.orsgen_eval(str(module), "--base-url", endpoint.url, "--model", "scripted", "--tasks",
                                       "0-2", "--out", "run", cwd=tmp_path)
        assert first.returncode == 0, first.stderr
        assert evaluation.summary(tmp_path / "run")["unscored"] == {"not_started": 1}
        creates = len(server.creates())
        resumed = evaluation.orsgen_eval("--resume", "run", "--base-url", endpoint.url, cwd=tmp_path)
        created = server.creates()[creates:]
    assert resumed.returncode == 0, resumed.stderr
    assert "3 episodes (3 tasks x 1), 1 to run (1 of them again: 1 that had not started)" in resumed.stderr
    assert "orsgen eval: ran 1 episode again (1 that had not started)" in resumed.stderr
    assert [(c["body"]["index"], c["status"]) for c in created] == [(1, 200)]  # asked again, and it started
    found = evaluation.summary(tmp_path / "run")
    assert found["unscored"] == {} and found["episodes"] == {"planned": 3, "done": 3, "counted": 3}
    assert [r["task_index"] for r in evaluation.records(tmp_path / "run")][-1] == 1  # appended: the latest counts


# -- item 12: a split with no tasks -----------------------------------------------------------------------------------


@pytest.mark.parametrize("asked", [(), ("-n", "2")], ids=["whole split", "-n 2"])
def test_a_split_without_tasks_says_so_whatever_n_asks(tmp_path, asked):
    with shaky(tmp_path, {}) as (_server, module), serving(script) as endpoint:
        run = evaluation.orsgen_eval(str(module), "--base-url", endpoint.url, "--model", "scripted", "--split",
                                     "empty", *asked, "--out", "run", cwd=tmp_path)
        requests = list(endpoint.requests)
    assert run.returncode == 2, run.stderr
    assert run.stderr.strip().splitlines() == ["orsgen: error: no tasks in split 'empty' of graded"], run.stderr
    assert requests == []


# -- item 13: the endpoint's reason, and the model's own malformed call -----------------------------------------------


def test_the_endpoints_reason_is_kept_in_the_message_and_the_record(graded, tmp_path):
    """What servers answer, as they answer it: FastAPI's `detail` (transformers serve's 400, a 422's list), and
    Starlette's bare "Internal Server Error" in text (transformers serve's 500): the openai client drops all three
    from its message."""
    _server, module = graded
    refusals = {0: (Raw(status=400, body={"detail": "Server is pinned to 'a'; requested 'b'."}),
                    "answered 400: Server is pinned to 'a'; requested 'b'."),
                1: (Raw(status=422, body={"detail": [{"loc": ["body", "n"], "msg": "extra fields not permitted"}]}),
                    'answered 422: {"detail": [{"loc": ["body", "n"], "msg": "extra fields not permitted"}]}'),
                2: (Raw(status=500, body=b"Internal Server Error", content_type="text/plain; charset=utf-8"),
                    "answered 500: Internal Server Error")}

    def refusing(payload):
        return refusals[task_of(payload)][0] if task_of(payload) in refusals else script(payload)

    with serving(refusing) as endpoint:
        run = evaluation.orsgen_eval(str(module), "--base-url", endpoint.url, "--model", "scripted", "--tasks", "0-3",
                                     "--out", "run", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    records = {r["task_index"]: r for r in whole_records(tmp_path / "run")}
    for task, (_, said) in refusals.items():
        assert records[task]["error"] == f"the endpoint at {endpoint.url} {said}", records[task]
        assert records[task]["unscored_reason"] == "endpoint_error"
    assert records[3]["reward"] == 0.0 and records[3]["error"] is None


def vllm_refusal(arguments):
    """vLLM's answer to a conversation holding a call whose arguments are not JSON: its chat preprocessing
    (`_postprocess_messages`) runs json.loads on them, and the error becomes a 400 of `f"{e} {e.__cause__}"`."""
    try:
        json.loads(arguments)
    except ValueError as exc:
        return Error(400, f"{exc} {exc.__cause__}")
    return None


def cut_call(task):
    """The model's call on `task`, cut before its closing brace: arguments that are not JSON."""
    return json.dumps({"text": f"w{task}"})[:-1]


TRANSFORMERS_500 = Raw(status=500, body=b"Internal Server Error", content_type="text/plain; charset=utf-8")


@pytest.mark.parametrize("server_kind", ["vllm", "transformers"])
def test_a_conversation_refused_for_the_models_own_call_is_the_models_failure(graded, tmp_path, server_kind):
    """The model writes each call cut short (its arguments are not JSON); orsgen shows the model TRL's error for it
    and asks again, with the call in the conversation, which the endpoint refuses: vLLM with a 400 saying what
    json.loads said, `transformers serve` (5.24) with a bare 500. Each episode ends there, the model's: counted as
    a failure, its reason in the record; ten of them in a row do not stop the run."""
    server, module = graded
    before = set(server.open_sessions())

    def cut_short(payload):
        if task_of(payload) < 0:
            return script(payload)
        for message in payload["messages"]:
            for call in message.get("tool_calls") or []:
                if server_kind == "transformers":
                    return TRANSFORMERS_500
                return vllm_refusal(call["function"]["arguments"])
        return Reply(tool_calls=[("answer", cut_call(task_of(payload)))])

    with serving(cut_short) as endpoint:
        run = evaluation.orsgen_eval(str(module), "--base-url", endpoint.url, "--model", "scripted", "--tasks", "0-4",
                                     "-k", "2", "--out", "run", cwd=tmp_path)
        asked = episodes_asked(endpoint.payloads())
    assert run.returncode == 0, run.stderr
    assert asked == {t: 2 * 2 for t in range(5)}  # two requests an episode: the refusal is not asked again
    records = whole_records(tmp_path / "run")
    assert len(records) == 10
    status, said = (("400", "Expecting ',' delimiter: line 1 column 14 (char 13) None") if server_kind == "vllm"
                    else ("500", "Internal Server Error"))
    for r in records:
        call = cut_call(r["task_index"])
        assert r["error"] is None and r["unscored_reason"] == "no_tool_scored" and r["reward"] is None, r
        assert r["model_error"] == (f"the endpoint at {endpoint.url} refused the conversation ({status}: {said}): "
                                    f"the model's own call answer({call}) is not a JSON object"), r
        assert r["completion"][-1]["content"].startswith("{'error': 'the arguments of answer are not a JSON object")
    found = evaluation.summary(tmp_path / "run")
    assert found["episodes"] == {"planned": 10, "done": 10, "counted": 10}
    assert found["pass"]["at_1"] == 0.0 and found["unscored"] == {"no_tool_scored": 10}
    assert ("orsgen eval: 10 episodes ended on a conversation the endpoint refused for the model's own tool call "
            "(not JSON): counted as the model's, each record's model_error says why") in run.stderr
    wait_closed(server, before)

    again = evaluation.orsgen_eval("--resume", "run", cwd=tmp_path)
    assert again.returncode == 0 and "10 episodes (5 tasks x 2), 0 to run" in again.stderr, again.stderr


# -- the same refusal from a real endpoint: the tiny model behind `transformers serve` --------------------------------


@pytest.fixture(scope="module")
def echo_served(tmp_path_factory, run_tmp):
    """The echo environment served and its module generated, and the tiny model warmed up on the tools the eval
    offers, behind `transformers serve`: (env server, module path, Served)."""
    from orsgen.evaluate.target import tool_methods
    from transformers.utils import get_json_schema

    from tests.harness.generation import load
    from tests.harness.tiny_serve import serving as serving_model
    from tests.harness.tiny_serve import shared_model_dir

    with servers.running("examples.echo:Echo", env={"ORSGEN_COUNT_REQUESTS": "1"}) as env_server:
        module = tmp_path_factory.mktemp("echo-module") / "echo.py"
        made = in_process(env_server.url, "-o", str(module))
        assert made.returncode == 0, made.stderr
        tools = [get_json_schema(method) for method in tool_methods(load(module).Echo())]
        model_dir = shared_model_dir(run_tmp, tools)  # test_eval_trained.py's model (the same tools)
        with serving_model(model_dir) as served:
            yield env_server, module, served


def forwarded(url, payload):
    """`payload` posted to the real endpoint at `url` (never through a proxy): (status, content type, body bytes)."""
    import urllib.error
    import urllib.request

    request = urllib.request.Request(f"{url}/chat/completions", data=json.dumps(payload).encode(),
                                     headers={"Content-Type": "application/json"})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(request, timeout=120) as answer:
            return answer.status, answer.headers.get("Content-Type"), answer.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers.get("Content-Type"), exc.read()


def test_transformers_serve_refusing_the_models_own_cut_call_is_the_models_failure(echo_served, tmp_path):
    """In front of `transformers serve`, a stand-in forwards each request and cuts the last character off every
    call's arguments, as a server that hands back the model's calls unparsed would: the next request holds that call,
    and `transformers serve` (5.24: `json.loads` of each call's arguments, unguarded) answers a bare 500. orsgen
    counts the episode as the model's failure, with that reason."""
    env_server, module, served = echo_served
    before = set(env_server.open_sessions())
    answered = []  # what the real server answered each forwarded episode request: (task word, status, body)

    def cutting(payload):
        status, kind, body = forwarded(served.url, payload)
        text = first_user_text(payload)
        if text.startswith("Echo the word "):
            answered.append((text.split()[-1], status, body))
        if status != 200:
            return Raw(status=status, body=body, content_type=kind or "text/plain")
        data = json.loads(body)
        for call in data["choices"][0]["message"].get("tool_calls") or []:
            call["function"]["arguments"] = call["function"]["arguments"][:-1]
        return Raw(body=data)

    with serving(cutting, models=(served.model,)) as proxy:
        run = evaluation.orsgen_eval(str(module), "--base-url", proxy.url, "--model", served.model, "--tasks", "0-1",
                                     "--out", "run", cwd=tmp_path)
    assert run.returncode == 0, (run.stderr[-4000:], served.output()[-4000:])
    records = {r["task_index"]: r for r in whole_records(tmp_path / "run")}
    assert sorted(records) == [0, 1]
    for r in records.values():
        word = r["prompt"][0]["content"].split()[-1]
        assert [(status, body) for w, status, body in answered if w == word][1:] == [(500, b"Internal Server Error")]
        assert r["error"] is None and r["reward"] is None and r["unscored_reason"] == "no_tool_scored", r
        assert r["model_error"] == (f"the endpoint at {proxy.url} refused the conversation (500: Internal Server "
                                    f"Error): the model's own call echo({{\"text\": \"{word}\") is not a JSON object"), r
    assert evaluation.summary(tmp_path / "run")["episodes"] == {"planned": 2, "done": 2, "counted": 2}
    wait_closed(env_server, before)
