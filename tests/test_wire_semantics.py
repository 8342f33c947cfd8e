"""The CLI's own ORS client (`orsgen.wire`) fails as the SDK 0.1.167 does, and sends what it sends (issue 26.9):
against a recording stub (`tests/harness/stub_ors.py`) in front of the SDK's own Server, standing in for the
platform of a catalog target. A deployment still starting is ridden out (for the SDK's budget, shrunk here by
ORSGEN_WIRE_STARTING_BUDGET), transport errors and answers cut off mid-body are retried, a redirect loop ends;
whatever is left is one line and exit 2, never a traceback (exit 1 is `--check`'s "stale")."""

import asyncio
import base64
import json
import math
import os
import threading

import pytest

from tests.harness import ROOT, servers
from tests.harness.generation import in_process, orsgen
from tests.harness.servers import free_port
from tests.harness.stub_ors import Seen, Stub, cut, redirect_loop, starting, stub

TARGET = "someone/quest"
FAST = {"ORSGEN_WIRE_BACKOFF_SCALE": "0.05"}  # the SDK's waits, a twentieth of them (conftest's default too)
REAL = {"ORSGEN_WIRE_BACKOFF_SCALE": "1"}  # the SDK's waits themselves


@pytest.fixture(scope="module")
def upstream():
    with servers.running("tests.envs.quest:Quest", "tests.envs.quiz:Quiz") as server:
        yield server


def catalog(url: str, **more: str) -> dict[str, str]:
    """The environment of a catalog target whose platform is `url`."""
    return {"OPENREWARD_API_KEY": "k", "OPENREWARD_SESSION_URL": url, **more}


def one_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]


def test_a_cold_deployment_is_ridden_out_by_generation_and_check(upstream, tmp_path):
    """503 + X-Backend-State: starting for 3 s, Retry-After: 1 as the platform sends it (the old client gave up after
    three attempts, about 2 s); generation and `--check` wait it out and succeed, the stub saw the retries."""
    out = tmp_path / "quest.py"
    with stub(upstream.url, starting(3.0, retry_after="1")) as cold:
        run = in_process(TARGET, "-o", str(out), env=catalog(cold.url, **REAL), cwd=ROOT)
        assert run.returncode == 0, run.stderr  # after the 3 s the stub refuses for
        refused = [s for s in cold.seen if s.status == 503]
        assert len(refused) >= 3 and {s.path for s in refused} == {"/create_session"}
        assert refused[-1].at - refused[0].at >= 2.0  # ridden out, about a second apart (a lower bound: the waits)
    with stub(upstream.url, starting(3.0, retry_after="1")) as cold:
        check = in_process(TARGET, "--check", "-o", str(out), env=catalog(cold.url, **REAL), cwd=ROOT)
        assert check.returncode == 0, check.stdout + check.stderr
        assert len([s for s in cold.seen if s.status == 503]) >= 3


def test_a_deployment_starting_past_the_budget_is_one_line_and_exit_2(upstream, tmp_path):
    out = tmp_path / "quest.py"
    with stub(upstream.url) as warm:
        assert in_process(TARGET, "-o", str(out), env=catalog(warm.url), cwd=ROOT).returncode == 0
    budget = {"ORSGEN_WIRE_STARTING_BUDGET": "1", **FAST}
    for argv in ([TARGET, "-o", str(out)], [TARGET, "--check", "-o", str(out)]):
        with stub(upstream.url, starting(math.inf)) as stuck:
            run = in_process(*argv, env=catalog(stuck.url, **budget), cwd=ROOT)
        assert run.returncode == 2, (argv, run.stdout, run.stderr)
        line = one_line(run.stderr)
        assert "still starting after 1 s" in line, line
        assert "ORSGEN_WIRE_STARTING_BUDGET" in line and "HTTP 503" in line
        assert len(stuck.seen) > 3  # it asked again and again, then gave up at its budget (the line says so)


def test_a_body_cut_off_mid_answer_is_retried(upstream, tmp_path):
    """Once each: a JSON answer (behind the 308 of a bare path) and the session stream after its task id, which the
    next attempt resumes (its `task_id`, as resumable_sse sends it)."""
    faults = [cut("/quest/tools", 1), cut("/create_session", 1, keep=-20)]  # the stream without its `end` event
    with stub(upstream.url, lambda seen: faults[0](seen) or faults[1](seen)) as flaky:
        run = in_process(TARGET, "-o", str(tmp_path / "quest.py"), env=catalog(flaky.url, **FAST), cwd=ROOT)
        assert run.returncode == 0, run.stderr
        tools = [s.path for s in flaky.seen if s.path.endswith("/tools")]
        assert tools == ["/tools", "/quest/tools", "/tools", "/quest/tools"]  # the retry starts from the bare path
        opened = [s for s in flaky.seen if s.path == "/create_session"]
        assert json.loads(opened[0].body) == {}
        assert set(json.loads(opened[1].body)) == {"task_id"}  # resumed: the id the cut stream had sent
        assert opened[1].body != opened[2].body


@pytest.mark.parametrize("check", [False, True], ids=["generate", "check"])
def test_a_body_always_cut_off_is_one_line_and_exit_2(upstream, tmp_path, check):
    """As a user runs it (a subprocess): an IncompleteRead used to escape as a traceback, exit 1, which `--check`
    documents as "stale"."""
    out = tmp_path / "quest.py"
    if check:
        with stub(upstream.url) as warm:
            assert in_process(TARGET, "-o", str(out), env=catalog(warm.url), cwd=ROOT).returncode == 0
    with stub(upstream.url, cut("/quest/tools", math.inf)) as broken:
        run = orsgen(TARGET, *(["--check"] if check else []), "-o", str(out), env=catalog(broken.url, **FAST),
                     cwd=ROOT)
        assert [s.path for s in broken.seen].count("/quest/tools") == 3  # the SDK's three attempts
    assert run.returncode == 2, run.stdout + run.stderr
    line = one_line(run.stderr)
    assert "cut off" in line and "(3 attempts)" in line and "/quest/tools" in line, line


def test_a_redirect_loop_ends_in_one_line(tmp_path):
    with stub(None, redirect_loop) as looping:
        run = in_process(TARGET, "-o", str(tmp_path / "quest.py"), env=catalog(looping.url, **FAST), cwd=ROOT)
        assert len(looping.seen) == 11  # the request and aiohttp's 10 redirects
    assert run.returncode == 2
    assert "redirect loop" in one_line(run.stderr)
    assert not (tmp_path / "quest.py").exists()


def test_a_refused_connection_is_retried_until_the_server_is_up(upstream, tmp_path):
    """The session server comes up a second after the first attempt: the SDK's waits (0.5 s, 1 s, 2 s for the
    session stream) reach it; a server that never comes up is one line after the SDK's four attempts."""
    port = free_port()
    late: list = []
    timer = threading.Timer(1.0, lambda: late.append(Stub(upstream.url, port=port).start()))
    timer.start()
    try:
        run = in_process(TARGET, "-o", str(tmp_path / "quest.py"), env=catalog(f"http://127.0.0.1:{port}", **REAL),
                         cwd=ROOT)
        assert run.returncode == 0, run.stderr
        assert late and late[0].seen[0].path == "/create_session"
    finally:
        timer.cancel()
        for running in late:
            running.stop()
    down = in_process(TARGET, "-o", str(tmp_path / "down.py"), env=catalog(f"http://127.0.0.1:{free_port()}", **FAST),
                      cwd=ROOT)
    assert down.returncode == 2
    line = one_line(down.stderr)
    assert "connection refused" in line and "(4 attempts)" in line, line


# What the two clients may send differently, and why: nothing else may differ.
DIFFERENT = {
    "user-agent": "names the client: openreward-sdk/0.1.167 and orsgen",
    "accept-encoding": "aiohttp offers gzip and deflate; urllib decompresses nothing, so it sends identity",
    "connection": "urllib closes each connection (close); aiohttp keeps them alive (HTTP/1.1's default, no header)",
}
KEEPALIVE = "/ping"  # the SDK pings a session as it opens and every 10 s; generation's sessions last milliseconds


def _comparable(seen: list[Seen]) -> list[tuple]:
    """Method, path, headers and body of each request, session ids named by order of appearance."""
    sids: dict[str, str] = {}
    rows = []
    for s in seen:
        if s.path == KEEPALIVE:
            continue
        headers = {k: v for k, v in s.headers.items() if k not in DIFFERENT}
        if "x-session-id" in headers:
            headers["x-session-id"] = sids.setdefault(headers["x-session-id"], f"sid{len(sids)}")
        rows.append((s.method, s.path, sorted(headers.items()), s.body))
    return rows


async def _sdk_generation(secrets: dict) -> None:
    """What orsgen's generation reads, in its order, through the SDK (`environments.get(TARGET)`: no variant). The
    SDK reads /version only in a session; an env-level read is its own `matrix_sid_provider` around the request."""
    from openreward import AsyncOpenReward
    from openreward.api._session.http import request_retryable
    from openreward.api.environments.client import matrix_sid_provider

    api = AsyncOpenReward().environments
    env = api.get(TARGET)
    async with matrix_sid_provider(env.client, env.deployment_name, env.api_key) as sid:
        await request_retryable(env.client, "GET", "/version", expect_json=True, sid=sid,
                                deployment=env.deployment_name, token=env.api_key)
    await env._tools_response()
    await env.list_splits()
    await env.num_tasks("train")
    async with env.session(split="train", index=1, secrets=secrets) as session:
        await session.list_tools()
    await env.get_task_range("train")
    await api.aclose()


def test_a_catalog_target_sends_what_the_sdk_sends(upstream, tmp_path, monkeypatch):
    """The same requests, paths, headers and bodies, X-Secrets byte for byte (the API key allowed the SDK's domains,
    the user's secret none, as the SDK sends a `(value, [])` secret), every request of the platform with a session
    id but the session opens."""
    with stub(upstream.url) as recording:
        env = catalog(recording.url, GRADER_KEY="g")
        run = in_process(TARGET, "--task-tools-from", "1", "--pin-tasks", "--secret", "GRADER_KEY", "-o",
                         str(tmp_path / "quest.py"), env=env, cwd=ROOT)
        assert run.returncode == 0, run.stderr
        ours = list(recording.seen)
        recording.seen.clear()
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        for name in ("OPENREWARD_URL", "OPENREWARD_API_URL", "OPENREWARD_WEB_SEARCH_URL", "OPENREWARD_WEB_FETCH_URL"):
            monkeypatch.delenv(name, raising=False)
        asyncio.run(_sdk_generation({"GRADER_KEY": ("g", [])}))
        sdk = list(recording.seen)
    assert _comparable(ours) == _comparable(sdk)
    assert {s.headers["user-agent"] for s in ours} == {"orsgen"}
    assert all("x-session-id" in s.headers for s in ours if s.path != "/create_session")
    assert not any(s.path.startswith("/quest/") for s in ours if s.status != 200 or s.path.endswith("_session"))
    secrets = json.loads(base64.b64decode(next(s for s in ours if s.path == "/create").headers["x-secrets"]))
    assert secrets["api_key"]["allowed_domains"] == ["127.0.0.1", "api.openreward.ai", "search.openreward.ai",
                                                     "127.openreward.internal", "api.openreward.internal",
                                                     "search.openreward.internal"]
    assert os.environ.get("OPENREWARD_API_KEY") == "k"
