"""`orsgen replay` (issue 46): records made by a real run (`orsgen eval` with the scripted endpoint on the graded
environment; GRPOTrainer's `Trajectories` in the trainer tier) replayed against the same environment are all equal,
on sessions whose calls the server saw as recorded; against a changed environment (tests/envs/revised.py: a tool's
output, or a reward) exactly the affected episodes are reported, with their first difference, and exit 1. The
replayed records keep the schema and the records' identity."""

import contextlib
import io
import json
import re
import subprocess

import pytest
from orsgen import replay

from examples import tiny
from tests.harness import ROOT, evaluation, servers, trainers
from tests.harness.chat_standin import serving
from tests.harness.generation import load, orsgen

COUNTED = {"ORSGEN_COUNT_REQUESTS": "1"}
SAME = ("schema", "run", "step", "rank", "stream", "environment", "split", "task_index", "task_spec", "rollout",
        "model", "prompt", "usage")


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """An `orsgen eval` run's folder on the graded environment (2 episodes per task, seeded), and its module."""
    folder = tmp_path_factory.mktemp("recorded")
    with evaluation.graded(folder) as (_, module), serving(evaluation.script) as endpoint:
        run = evaluation.orsgen_eval(str(module), "--base-url", endpoint.url, "--model", "scripted", "-k", "2",
                                     "--seed", "3", "--out", "run", cwd=folder)
    assert run.returncode == 0, run.stderr
    return folder / "run", module


def run_replay(*argv: str) -> tuple[int, dict]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = replay.main([*argv, "--json"])
    return code, json.loads(out.getvalue())


def replay_apart(*argv: str) -> tuple[int, dict]:
    """`orsgen replay ARGV --json` in a process of its own (a trainer's recorder in this one would record it too)."""
    done = command("replay", *argv, "--json")
    return done.returncode, json.loads(done.stdout)


def command(*argv: str, cwd=ROOT, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`orsgen ARGV` as a user runs it (forked with the SDK imported: evaluation.orsgen_command)."""
    return evaluation.orsgen_command(*argv, cwd=cwd, env=env)


def replayed(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_against_the_same_environment_every_episode_is_equal(recorded, tmp_path):
    folder, _ = recorded
    records = evaluation.records(folder)
    started = [r for r in records if r["session"]]
    assert len(records) == 12 and len(started) == 10  # task 5 never starts
    with servers.running("tests.envs.graded:Graded", env=COUNTED) as server:
        code, found = run_replay(str(folder / "trajectories.jsonl"), "--against", server.url, "--out",
                                 str(tmp_path / "again.jsonl"))
        log = server.log()
        assert server.open_sessions() == []
    assert code == found["exit"] == 0
    assert (found["equal"], found["differ"], found["not_replayable"]) == (10, 0, {"never started": 2})
    again = replayed(tmp_path / "again.jsonl")
    assert len(again) == 10
    for old, new in zip(started, again, strict=True):
        assert {k: new[k] for k in SAME} == {k: old[k] for k in SAME}
        assert [(c["name"], c["arguments"], c["result"], c["error"], c["reward"]) for c in new["tool_calls"]] == \
            [(c["name"], c["arguments"], c["result"], c["error"], c["reward"]) for c in old["tool_calls"]]
        assert (new["reward"], new["scored"], new["completion"]) == (old["reward"], old["scored"], old["completion"])
        assert new["session"] != old["session"]
        # what the server saw on the replayed session: a call per recorded call that reached it, then its close
        mine = [e["request"] for e in log if e["session"] == new["session"]]
        assert mine.count("POST /graded/call") == sum(1 for c in old["tool_calls"] if c["error"] is None)
        assert mine[-2:] == ["POST /delete", "POST /delete_session"]


@pytest.mark.slow
@pytest.mark.parametrize("change", ["output", "reward"])
def test_against_a_changed_environment_every_affected_episode_is_reported(recorded, tmp_path, change):
    """REVISED=output: a right answer now says "correct"; REVISED=reward: a wrong answer now pays 0.25. The episodes
    reported are exactly those with such an answer, each with its first difference."""
    folder, _ = recorded
    started = [r for r in evaluation.records(folder) if r["session"]]
    old = "right" if change == "output" else "wrong"
    affected = {(r["task_index"], r["rollout"]) for r in started
                if any(c["result"] == old for c in r["tool_calls"])}
    assert 0 < len(affected) < len(started)
    with servers.running("tests.envs.revised:RevisedGraded", env={**COUNTED, "REVISED": change}) as server:
        code, found = run_replay(str(folder), "--against", server.url, "--out", str(tmp_path / "again.jsonl"))
        assert server.open_sessions() == []
    assert code == 1
    assert found["differ"] == len(affected) and found["equal"] == len(started) - len(affected)
    records = {d["where"]: d for d in found["differences"]}
    lines = {int(where.rsplit(":", 1)[1]) for where in records}
    all_records = evaluation.records(folder)
    assert {(all_records[n - 1]["task_index"], all_records[n - 1]["rollout"]) for n in lines} == affected
    said = {d["difference"] for d in found["differences"]}
    assert said == ({'call 1, answer: result "right" -> "correct"'} if change == "output" else
                    {"call 1, answer: reward 0.0 -> 0.25"})
    again = replayed(tmp_path / "again.jsonl")
    if change == "reward":  # re-scored without a model: the new rewards are in the replayed records
        assert sorted(r["reward"] for r in again) == sorted(1.0 if (r["task_index"], r["rollout"]) not in affected
                                                            else 0.25 for r in started)


@pytest.mark.slow
def test_as_a_user_runs_it_against_a_module_and_a_served_class(recorded, tmp_path):
    """The command's own lines and exit codes: the generated module as TARGET (its server must be up), then
    MODULE:CLASS, which replay serves on 127.0.0.1 itself."""
    folder, module = recorded
    env = evaluation.environ()
    with servers.running("tests.envs.graded:Graded") as server:
        env["OPENREWARD_SESSION_URL"] = server.url  # the module pins the server that recorded: this one stands in
        done = command("replay", str(folder), "--against", str(module), "--out", str(tmp_path / "a.jsonl"),
                       cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    assert re.fullmatch(r"orsgen replay: 12 episodes against graded at http://127\.0\.0\.1:\d+: 10 equal, 0 differ, "
                        r"2 not replayable \(2 never started\)\n", done.stdout), done.stdout
    del env["OPENREWARD_SESSION_URL"]
    done = command("replay", str(folder / "trajectories.jsonl"), "--against", "tests.envs.revised:RevisedGraded",
                   "--out", str(tmp_path / "b.jsonl"), env={**env, "REVISED": "output"})
    assert done.returncode == 1, done.stderr
    right = sum(1 for r in evaluation.records(folder) if any(c["result"] == "right" for c in r["tool_calls"]))
    lines = done.stdout.splitlines()
    assert lines[0].endswith(f": {10 - right} equal, {right} differ, 2 not replayable (2 never started)"), lines[0]
    assert len(lines) == 1 + right
    assert all(re.fullmatch(r'  differs: train task [0-4] \(\S+trajectories\.jsonl:\d+, rollout [01]\): call 1, '
                            r'answer: result "right" -> "correct"', line) for line in lines[1:]), done.stdout


@pytest.mark.parametrize(("text", "said"), [
    ("not json\n", "none of the 1 records could be replayed (1 not trajectory records)"),
    ("", "no record to replay"),
], ids=["not-records", "empty"])
def test_nothing_to_replay_is_exit_2(tmp_path, echo_server, text, said):
    path = tmp_path / "records.jsonl"
    path.write_text(text, encoding="utf-8")
    done = command("replay", str(path), "--against", echo_server.url, cwd=tmp_path)
    assert done.returncode == 2
    assert said in done.stdout + done.stderr
    assert not (tmp_path / "replayed.jsonl").exists()


@pytest.mark.trainer
def test_training_records_replayed(tmp_path):
    """GRPOTrainer's own records (`Trajectories`, one step of 8 rollouts on the echo environment, every other one
    echoing a wrong word) replayed against the same environment: all equal; against one where a right echo pays
    0.5: exactly the right ones differ. (Replayed by the command, in a process of its own: the trainer's recorder
    still listens in this one.)"""
    with servers.running("examples.echo:Echo", env=COUNTED) as server:
        out = tmp_path / "echo.py"
        assert orsgen(server.url, "-o", str(out)).returncode == 0
        module = load(out)

        def first_turn(i: int, prompt: str) -> str:
            word = re.search(r"Echo the word (\w+)", prompt)
            return tiny.call_text("echo", {"text": word.group(1) if word and i % 2 == 0 else "nope"})

        trainer = trainers.trainer(module.Echo, str(tmp_path / "out"), 1, tools=trainers.tool_methods(module.Echo()),
                                   train_dataset=module.dataset(), per_device_train_batch_size=8, num_generations=4,
                                   first_turn=first_turn, callbacks=[module.Trajectories(str(tmp_path / "traj"))])
        trainer.train()
        module.close_all()
        code, found = replay_apart(str(tmp_path / "traj"), "--against", server.url, "--out", str(tmp_path / "a.jsonl"))
        assert server.open_sessions() == []
    records = [json.loads(line) for line in (tmp_path / "traj" / "trajectories-rank0.jsonl").read_text().splitlines()]
    right = {n for n, r in enumerate(records, 1) if r["reward"] == 1.0}
    assert 0 < len(right) < len(records)
    assert (code, found["equal"], found["differ"]) == (0, len(records), 0)
    with servers.running("tests.envs.revised:RevisedEcho", env={**COUNTED, "REVISED": "reward"}) as server:
        code, found = replay_apart(str(tmp_path / "traj"), "--against", server.url, "--out", str(tmp_path / "b.jsonl"))
    assert code == 1
    assert {int(d["where"].rsplit(":", 1)[1]) for d in found["differences"]} == right
    assert {d["difference"] for d in found["differences"]} == {"call 1, echo: reward 1.0 -> 0.5"}
