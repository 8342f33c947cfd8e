"""`orsgen doctor` (issue 46) against environments served on 127.0.0.1: each defect of the issue, built into an
environment of its own (tests/envs/doctor_*.py), is flagged by its check and by no other, in one line; the example
environment and environments written in other styles pass; every session the doctor opened is closed, on the
server's own log; each check holds to its bounds; bad input is one line and exit 2."""

import contextlib
import io
import json
import subprocess

import pytest
from orsgen import doctor

from tests.harness import ROOT, evaluation, servers
from tests.harness.chat_standin import serving
from tests.harness.generation import in_process

COUNTED = {"ORSGEN_COUNT_REQUESTS": "1"}
DEFECTS = [  # (environment, the check that flags it, what its line says)
    ("tests.envs.doctor_contract:Chess", "contract", "tool 'move' has no description"),
    ("tests.envs.doctor_shared:Scratchpad", "isolation", "state is shared between sessions"),
    ("tests.envs.doctor_hackable:Capitals", "reward probes", "hackable: no call (an empty final message) earns 1"),
    ("tests.envs.doctor_crash:Elements", "tools answer", "lookup raised: 'test'"),
    ("tests.envs.doctor_hang:Oracle", "tools answer", "think gave no answer: no answer within 3 s"),
    ("tests.envs.doctor_traceback:Counter", "tools answer", "with a traceback: Traceback (most recent call last)"),
    ("tests.envs.doctor_schema:Library", "tools answer", "for want of 'query', which its schema says is optional"),
    ("tests.envs.doctor_random:Essays", "determinism", "call 1, grade, gave reward"),
    ("tests.envs.doctor_undead:Guessing", "lifecycle", "after guess finished the episode, guess still ran"),
    ("tests.envs.doctor_lenient:Walk", "bad arguments", "move answered 'at 1' for a call missing its required 'steps'"),
]
HONEST = [  # (environment, the warnings it may get): written in different styles, none with a defect
    ("examples.echo:Echo", set()),
    ("tests.envs.quiz:Quiz", set()),  # keyword and aliased arguments, Literal, extra="forbid", negative rewards
    ("tests.envs.quest:Quest", set()),  # a terminal tool, tools some tasks add, shared=False tools
    ("tests.envs.sketchy:Sketchy", set()),  # image results Pillow cannot read
    ("tests.envs.judged:Judged", set()),  # group scoring (score_group)
    ("tests.envs.studio:Studio", {"reward probes"}),  # no call made from a schema is paid: nothing to compare
    ("tests.envs.quirks:Picky", {"tools answer"}),  # a constraint only a validator knows: not held against it
]


def run_doctor(*argv: str) -> tuple[int, dict]:
    """`orsgen doctor ARGV --json` in this process: (exit code, the document)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = doctor.main([*argv, "--json"])
    return code, json.loads(out.getvalue())


def command(*argv: str) -> subprocess.CompletedProcess[str]:
    """`orsgen ARGV` as a user runs it, from the clone (forked with the SDK imported: evaluation.orsgen_command)."""
    return evaluation.orsgen_command(*argv, cwd=ROOT)


def assert_all_closed(server, found: dict | None = None) -> None:
    """Every session the server created was deleted, and (`found`) they are the sessions the doctor says it opened."""
    log = server.log()
    created = {e["session"] for e in log if e["request"] == "POST /create"}
    deleted = {e["session"] for e in log if e["request"] == "POST /delete"}
    assert server.open_sessions() == []
    assert created and created <= deleted
    if found is not None:
        assert len(created) == found["sessions"]["opened"] == found["sessions"]["closed"]


@pytest.mark.parametrize(("spec", "check", "said"), DEFECTS, ids=[d[0].split(":")[1] for d in DEFECTS])
def test_each_defect_is_flagged_by_its_check_in_one_line(spec, check, said):
    with servers.running(spec, env=COUNTED) as server:
        code, found = run_doctor(server.url, "--timeout", "3")
        assert_all_closed(server, found)
    checks = {c["name"]: c for c in found["checks"]}
    assert code == found["exit"] == 1
    assert [c["name"] for c in found["checks"] if c["status"] in ("failed", "error")] == [check]
    flagged = checks[check]
    assert said in flagged["summary"], flagged["summary"]
    assert flagged["fix"] and "\n" not in flagged["summary"] + flagged["fix"]


@pytest.mark.parametrize(("spec", "warned"), HONEST, ids=[h[0].split(":")[1] for h in HONEST])
def test_honest_environments_pass(spec, warned):
    with servers.running(spec, env=COUNTED) as server:
        code, found = run_doctor(server.url)
        assert_all_closed(server, found)
    statuses = {c["name"]: c["status"] for c in found["checks"]}
    assert {n for n, s in statuses.items() if s not in ("passed", "skipped")} == warned, found["checks"]
    assert code == 0
    assert list(statuses) == ["contract", "tools answer", "bad arguments", "isolation", "determinism",
                              "reward probes", "lifecycle", "latency and size"]


@pytest.mark.slow
def test_the_example_served_by_the_doctor_itself_passes_every_check(tmp_path):
    """`orsgen doctor examples.echo:Echo` as a user runs it: served on 127.0.0.1 for the check, one line per check,
    every one passed, and the server itself counts no session open at the end."""
    done = command("doctor", "examples.echo:Echo")
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("orsgen doctor: echo at http://127.0.0.1:")
    checks = lines[1:-1]
    assert [line.split()[0] for line in checks] == ["passed"] * 8, done.stdout
    assert "0 open on the server" in next(line for line in checks if " lifecycle " in line)
    assert lines[-1].startswith("orsgen doctor: 8 passed in ") and lines[-1].endswith(", all closed")
    assert done.stderr == ""


def test_a_generated_module_with_a_model_behind_an_endpoint(tmp_path):
    """A generated module as TARGET, --endpoint: `orsgen eval` runs the scripted model (right on graded tasks 0
    and 1, wrong on 2 and 3, task 4 by a seeded coin, task 5 never starts); the tasks it always or never passes are
    flagged, and the model's best reward is what the trivial policies are held to."""
    with evaluation.graded(tmp_path) as (server, module), serving(evaluation.script) as endpoint:
        code, found = run_doctor(str(module), "--endpoint", endpoint.url, "--model", "scripted", "-n", "6", "-k", "4")
        assert_all_closed(server)  # the doctor's sessions and orsgen eval's
    checks = {c["name"]: c for c in found["checks"]}
    coins = [evaluation.coin(rollout * 6 + evaluation.COIN) for rollout in range(4)]  # --seed 0: episode i, seed i
    assert 0 < sum(coins) < 4
    assert checks["learnable"]["status"] == "warning"
    assert checks["learnable"]["figures"]["pass_rates"] == {"train/0": 1.0, "train/1": 1.0, "train/2": 0.0,
                                                           "train/3": 0.0, "train/4": sum(coins) / 4}
    assert "4 of 5 tasks always or never passed" in checks["learnable"]["summary"]
    assert checks["reward probes"]["status"] == "passed" and checks["reward probes"]["figures"]["best_model"] == 1.0
    assert code == 0


def test_a_catalog_name_is_checked_where_and_as_the_sdk_sends_it(monkeypatch):
    """`owner/name` with OPENREWARD_API_KEY: the platform's session server (here OPENREWARD_SESSION_URL, a server on
    127.0.0.1 standing in for it), every request carrying the deployment and the key, as the SDK sends them."""
    with servers.running("examples.echo:Echo", env=COUNTED) as server:
        monkeypatch.setenv("OPENREWARD_SESSION_URL", server.url)
        monkeypatch.setenv("OPENREWARD_API_KEY", "canary-key-d0c70r")
        code, found = run_doctor("someone/echo")
        assert_all_closed(server, found)
        sent = [(r["request"], r["headers"].get("x-deployment"), r["headers"].get("x-api-key"))
                for r in server.headers() if r["request"] in ("POST /create", "POST /call")]  # bare: no variant
    assert code == 0 and found["environment"] == "someone/echo" and found["url"] is None
    assert {r for r, _, _ in sent} == {"POST /create", "POST /call"}
    assert {(d, k) for _, d, k in sent} == {("someone/echo", "canary-key-d0c70r")}


def test_every_check_holds_to_its_session_bound(monkeypatch, echo_server):
    """At most doctor.SESSIONS sessions per check: a check that needs more stops at the bound and says so, and what
    it opened is closed."""
    monkeypatch.setattr(doctor, "SESSIONS", 2)
    with servers.running("examples.echo:Echo", env=COUNTED) as server:
        code, found = run_doctor(server.url)
        assert_all_closed(server, found)
    stopped = {c["name"]: c["summary"] for c in found["checks"] if c["summary"].startswith("stopped at its session "
                                                                                           "bound")}
    assert set(stopped) == {"bad arguments", "isolation", "reward probes"}, found["checks"]
    assert all(c["sessions"] <= 2 for c in found["checks"])
    assert code == 0  # a bound is a warning: the environment did nothing wrong


@pytest.mark.parametrize(("argv", "said"), [
    (["http://127.0.0.1:9"], "cannot reach ORS server at http://127.0.0.1:9"),
    (["tests.envs.nowhere:Nothing"], ("orsgen serve tests.envs.nowhere:Nothing did not start: no module named "
                                       "tests.envs.nowhere")),
    (["examples.echo:Echo", "--model", "m"], "--endpoint and --model go together"),
    (["a/b/c"], "is not a URL, a catalog owner/name, a generated module or MODULE:CLASS"),
], ids=["unreachable", "no-module", "model-alone", "not-a-target"])
def test_bad_input_is_one_line_and_exit_2(argv, said):
    done = command("doctor", *argv)
    assert done.returncode == 2
    assert done.stdout == ""
    assert said in done.stderr and done.stderr.count("\n") == 1, done.stderr


def test_the_report_of_a_tool_is_the_generators(echo_server):
    """contract carries the fidelity report `orsgen URL --report` prints, byte for byte."""
    code, found = run_doctor(echo_server.url)
    report = in_process(echo_server.url, "--report")
    contract = next(c for c in found["checks"] if c["name"] == "contract")
    assert contract["figures"]["fidelity"]["report"] == report.stdout
    assert code == 0
