"""`orsgen eval` with many episodes at once (issue 47), on the graded environment's tasks that start (0-4) and its
scripted model (tests/harness/evaluation.py), against the server's own log: nothing raised, one session per episode,
each closed once, never more open at once than episodes run (`--concurrency`) or than the sessions budget
(`--max-sessions`, its wait in the summary); a soft limit on open files too low for the concurrency raised before
anything starts, a hard one refused in one line. How fast is bench/eval_scale.py's (docs/speed.md)."""

import sys
from collections import Counter

import pytest

from tests.harness import evaluation, processes
from tests.harness.chat_standin import serving

pytestmark = pytest.mark.slow  # `orsgen eval` run as a user runs it, a fresh interpreter a run: make test-slow


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    with evaluation.graded(tmp_path_factory.mktemp("graded")) as found:
        yield found


def checked(server, before, result, folder, episodes):
    """The run ended well and the server saw each episode's session opened once and closed once: its records."""
    assert result.returncode == 0, result.stderr
    records = evaluation.records(folder)
    assert len(records) == episodes
    assert [r for r in records if r.get("error") or r.get("start_error") or r.get("model_error")] == []
    log = server.log()[before:]
    created = Counter(e["session"] for e in log if e["request"] == "POST /create")
    deleted = Counter(e["session"] for e in log if e["request"] == "POST /delete")
    assert len(created) == episodes and set(created.values()) == {1}
    assert deleted == created  # every session closed, once
    assert {r["session"] for r in records} == set(created)
    return records


def test_many_at_once_raise_nothing_and_leave_no_session_open(graded, tmp_path):
    server, module = graded
    before = len(server.log())
    server.peak_sessions()
    with serving(evaluation.script, delay=0.2) as endpoint:
        result = evaluation.orsgen_eval(str(module), "--base-url", endpoint.url, "--model", "scripted", "--seed", "0",
                                        "--tasks", "0-4", "-k", "16", "--concurrency", "40", "--out", "run",
                                        cwd=tmp_path)
        peak_chats = endpoint.peak_concurrency()
    checked(server, before, result, tmp_path / "run", 80)
    assert server.open_sessions() == []
    assert 1 < peak_chats <= 40 and 1 < server.peak_sessions() <= 40
    assert evaluation.summary(tmp_path / "run")["latency"]["episodes_waited"] == 0


def test_the_sessions_budget_bounds_what_the_server_holds_and_its_wait_is_reported(graded, tmp_path):
    server, module = graded
    before = len(server.log())
    server.peak_sessions()  # from here on
    with serving(evaluation.script, delay=0.2) as endpoint:
        result = evaluation.orsgen_eval(str(module), "--base-url", endpoint.url, "--model", "scripted", "--seed", "0",
                                        "--tasks", "0-4", "-k", "4", "--concurrency", "16", "--max-sessions", "3",
                                        "--out", "run", cwd=tmp_path)
    records = checked(server, before, result, tmp_path / "run", 20)
    assert server.peak_sessions() == 3  # the server's own count: never more open at once
    latency = evaluation.summary(tmp_path / "run")["latency"]
    assert latency["episodes_waited"] == sum(1 for r in records if r["seconds"]["waited"] > 0) > 0
    assert latency["session_wait_total"] > 0
    assert f"{latency['episodes_waited']} episodes waited" in result.stdout and "(--max-sessions)" in result.stdout


def limited(soft, hard, *args, cwd):
    """`orsgen eval ARGS` with its limits on open files set as `ulimit -Sn soft -Hn hard` would."""
    return processes.run(["bash", "-c", f'ulimit -Sn {soft} && ulimit -Hn {hard} && exec "$@"', "bash", sys.executable,
                          "-m", "orsgen", "eval", *args], capture_output=True, text=True, cwd=cwd,
                         env=evaluation.environ())


def test_a_soft_limit_on_open_files_too_low_is_raised_and_a_hard_one_refused_before_anything_starts(graded, tmp_path):
    server, module = graded
    with serving(evaluation.script, delay=0.2) as endpoint:
        common = (str(module), "--base-url", endpoint.url, "--model", "scripted", "--seed", "0", "--tasks", "0-4", "-k", "8",
                  "--concurrency", "40")
        before = len(server.log())
        raised = limited(24, 20000, *common, "--out", "raised", cwd=tmp_path)
        checked(server, before, raised, tmp_path / "raised", 40)

        before, asked = len(server.log()), len(endpoint.requests)
        refused = limited(200, 200, *common, "--out", "refused", cwd=tmp_path)
        assert refused.returncode == 2, refused.stderr
        assert refused.stderr.strip().splitlines() == [(
            "orsgen: error: --concurrency 40 needs up to 248 open files, and this process may open 200 at most (its "
            "hard limit, ulimit -Hn): lower --concurrency to 24, or raise the hard limit")]
        assert "POST /create" not in [e["request"] for e in server.log()[before:]]  # no episode's session
        assert len(endpoint.requests) == asked
        assert not (tmp_path / "refused" / "trajectories.jsonl").exists()
