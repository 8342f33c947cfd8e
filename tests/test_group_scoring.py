"""group_reward against live SDK servers and a real GRPOTrainer (num_generations=4): what each score_group request
held, as the environment received it; the scores TRL trained on; unsupported and failing judges give None, never 0;
sessions open while scored and closed after; two torchrun ranks."""

import json
import logging
import math

import pytest

from tests.harness import processes, rankfork, records, servers
from tests.harness.generation import orsgen
from tests.harness.group_scoring import ANSWERS, PHASE, SCORES, train
from tests.harness.servers import settle

pytestmark = pytest.mark.trainer  # trains or runs TRL code: also under the oldest TRL (.ci/trl-oldest)
SYSTEM = "You are terse: answer with as few words as you can."


@pytest.fixture
def judged(tmp_path):
    log = tmp_path / "judged.jsonl"
    with servers.running("tests.envs.judged:Judged", env={"ORSGEN_COUNT_REQUESTS": "1", "JUDGED_LOG": str(log)}) as s:
        yield s, log


def failed(stderr: str) -> str:
    """What the worker's process said of its end: when each phase began, then the last of its stderr."""
    return "\n".join([*(line for line in stderr.splitlines() if line.startswith(PHASE)), stderr[-3000:]])


def requests_of(log) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def test_group_reward_trains_on_the_environments_judgement_of_each_group(judged, generate, tmp_path, caplog):
    from orsgen.runtime import groups

    server, log = judged
    mod = generate(server.url, name="judged_train")
    sent = groups.requests["score_group"]
    with caplog.at_level(logging.WARNING, logger="orsgen"):
        trainer, returned, rendered = train(mod, str(tmp_path / "out"), indices=[0, 2])  # task 2's judge raises
    mod.close_all()
    settle()

    # The system turn and the earlier exchange reach the chat template; the task's question is there once.
    first = rendered[0]
    assert first.count(f"<|sys|>{SYSTEM}<|eot|>") == 1 and "<|user|>Warm-up: say hi<|eot|>" in first
    assert first.count("Task 0: the capital of France?") == 1 and first.endswith("<|bot|>")

    # Two steps of two groups: one request per group, on the server, each one group's 4 transcripts in TRL's order.
    seen = requests_of(log)
    # (a step's groups are posted at once: they arrive in either order)
    assert [sorted(r["task"] for r in seen[i:i + 2]) for i in (0, 2)] == [[0, 2]] * 2
    assert groups.requests["score_group"] - sent == 4
    for record in seen:
        candidates = record["candidates"]
        assert [c["metadata"] for c in candidates] == [{"rollout": k} for k in range(4)]
        for k, candidate in enumerate(candidates):
            turns = candidate["messages"]
            assert turns[0] == {"role": "system", "blocks": [{"text": SYSTEM, "detail": None, "type": "text"}],
                                "detail": None}
            assert [t["role"] for t in turns[:4]] == ["system", "user", "assistant", "user"]
            assert turns[3]["blocks"][0]["text"] == f"Task {record['task']}: the " + (
                "capital of France?" if record["task"] == 0 else "judge fails?")
            calls = [b for t in turns for b in t["blocks"] if b["type"] == "tool_call"]
            results = [b for t in turns for b in t["blocks"] if b["type"] == "tool_result"]
            if ANSWERS[k] is None:
                assert not calls and not results
                continue
            assert turns[4]["role"] == "assistant" and calls == [
                {"id": calls[0]["id"], "name": "answer", "input": {"text": ANSWERS[k]}, "detail": None,
                 "type": "tool_call"}]
            right = record["task"] == 0 and k < 2
            assert len(results) == 1 and results[0]["tool_call_id"] == calls[0]["id"]
            assert results[0]["blocks"][0]["text"] == ("correct" if right else "wrong")

    # TRL trained on the scores returned: the judged group's in order, None (not 0) for the group whose judge failed.
    assert returned == [[*SCORES, None, None, None, None]] * 2
    logged = [h["rewards/group_reward/mean"] for h in trainer.state.log_history if "rewards/group_reward/mean" in h]
    assert len(logged) == 2 and all(math.isclose(v, sum(SCORES) / 4) for v in logged)
    failed = [r.getMessage() for r in caplog.records if "is not scored" in r.getMessage()]
    assert len(failed) == 2 and all("task 2" in m and "the judge is down" in m for m in failed)

    # Each group was scored on one of its own sessions while it was open; every session was closed afterwards.
    events = server.log()
    for at, event in enumerate(events):
        if event["request"] == "POST /judged/score_group":
            assert not [e for e in events[:at] if e["request"] == "POST /delete" and e["session"] == event["session"]]
            assert [e for e in events[at:] if e["request"] == "POST /delete" and e["session"] == event["session"]]
    assert server.open_sessions() == []


def test_an_environment_without_group_scoring_leaves_groups_unscored_with_one_warning(tmp_path, caplog):
    """A module pinned with group scoring, against a server whose environment no longer scores groups."""
    with servers.running("tests.envs.judged:Unjudged", env={"ORSGEN_COUNT_REQUESTS": "1"}) as server:
        path = tmp_path / "judged_gone.py"
        assert orsgen("tests/golden/judged/tools.json", "--env", "judged", "-o", str(path)).returncode == 0
        from tests.harness.generation import load

        mod = load(path)
        mod.PINNED.url = server.url
        with caplog.at_level(logging.WARNING, logger="orsgen"):
            trainer, returned, _ = train(mod, str(tmp_path / "out"), indices=[0, 1], steps=1)
        mod.close_all()
        settle()
        assert returned == [[None] * 8]
        warned = [r.getMessage() for r in caplog.records if "score_group" in r.getMessage()]
        assert len(warned) == 1 and "not scored (None)" in warned[0], warned
        assert server.requests().get("POST /judged/score_group") == 2  # both groups asked; the server said 404
        assert trainer.state.global_step == 1 and server.open_sessions() == []


def test_without_environments_outside_asyncgrpos_worker_group_reward_refuses_in_one_line(generate, judged):
    """Neither GRPOTrainer's environments nor AsyncGRPOTrainer's worker: no group can be known."""
    server, _ = judged
    mod = generate(server.url, name="judged_async")
    with pytest.raises(RuntimeError, match="this call has neither") as refused:
        mod.group_reward(prompts=[[]], completions=[[]])
    assert "\n" not in str(refused.value)
    with pytest.raises(RuntimeError, match="GRPOTrainer\\(reward_funcs"):  # outside a trainer: no groups known
        mod.group_reward(prompts=[[]], completions=[[]], environments=[mod.Judged()])


def torchrun(module, out, tasks: str, per_device: int) -> list[dict]:
    argv, env = rankfork.command("tests.harness.group_scoring", str(module), str(out), tasks, str(per_device))
    run = processes.run(argv, capture_output=True, text=True, timeout=900, env=env)
    assert run.returncode == 0, run.stderr[-3000:]
    return sorted(records(run.stdout, "rank"),
                  key=lambda r: r["rank"])


def test_two_ranks_score_their_own_groups_and_a_group_split_across_ranks_is_refused(judged, tmp_path):
    server, log = judged
    module = tmp_path / "judged_ranks.py"
    assert orsgen(server.url, "-o", str(module)).returncode == 0
    reports = torchrun(module, tmp_path / "out", "0,1", 4)  # each rank holds one whole group
    assert [r["rank"] for r in reports] == [0, 1] and all(r["steps"] == 2 and r["open_sessions"] == 0
                                                          for r in reports)
    seen = requests_of(log)
    assert len(seen) == 4 and all(len(r["candidates"]) == 4 for r in seen)  # 2 steps x 2 ranks, one group each
    assert sorted(r["task"] for r in seen) == [0, 0, 1, 1]
    for report in reports:  # task 1 (Rome): rollouts 0, 1 answer Paris (wrong), 2 answers Rome: the shortest right
        for scores in report["returned"]:
            assert scores in (SCORES, [0.25, 0.25, 1.0, 0.0])
    settle()
    assert server.open_sessions() == []

    split = torchrun(module, tmp_path / "out2", "0,1", 2)  # 2 rollouts per rank: every group spans both ranks
    refusals = [r.get("refused", "") for r in split]  # each rank refuses, in one line
    assert len(refusals) == 2 and all("split across ranks" in r and "\n" not in r for r in refusals), refusals
    assert len(requests_of(log)) == 4  # nothing was sent for a split group


def test_asyncgrpo_rollout_worker_scores_each_group_once_on_one_of_its_sessions(judged, tmp_path):
    """TRL's AsyncGRPO rollout worker, run for real as tests/test_async_grpo.py runs it (in a process of its own
    here), with group_reward in its reward_funcs: it passes no `environments`, so each rollout is matched to its
    episode when it ends (scoring.py). One request per group, its candidates the group's rollouts in the order TRL
    scores them, the scores TRL trained on index-aligned; None (not 0) for the group whose judge failed."""
    server, log = judged
    path = tmp_path / "judged_worker.py"  # sync tools: TRL 1.13's worker refuses async ones
    assert orsgen(server.url, "-o", str(path)).returncode == 0
    argv, env = rankfork.python("-m", "tests.harness.group_scoring", "async", str(path))
    run = processes.run(argv, env=env, capture_output=True, text=True)
    assert run.returncode == 0, failed(run.stderr)
    (line,) = records(run.stdout, "error")
    assert line["error"] == "NoneType" and not line["failed"], line
    assert line["open_sessions"] == 0
    seen = requests_of(log)
    by_group: dict[int, list[dict]] = {}
    for sample in line["samples"]:
        by_group.setdefault(sample["group"], []).append(sample)
    worth = {"Paris": 1.0, "It is Paris": 0.5, "Rome": 0.25, None: 0.0}  # the judge, on task 0 (tests/envs/judged.py)
    assert sorted(map(str, (s["answer"] for s in by_group[0]))) == sorted(map(str, ANSWERS))
    assert all(s["score"] == worth[s["answer"]] for s in by_group[0]), by_group[0]
    assert all(s["score"] is None for s in by_group[1]), by_group[1]  # the failing judge: None, never 0
    # One request per group TRL scored, in the order it scored them, each holding that group's rollouts.
    assert [r["task"] for r in seen[:2]] == [0, 2]
    assert len(seen) - len(by_group) in (0, 1, 2), (len(seen), sorted(by_group))  # later groups, scored at the stop
    first = seen[0]["candidates"]  # every rollout started: all four are candidates, in the samples' order
    assert [c["metadata"] for c in first] == [{"rollout": k} for k in range(4)]
    sent = [next((b["input"]["text"] for t in c["messages"] for b in t["blocks"] if b["type"] == "tool_call"), None)
            for c in first]
    assert sent == [s["answer"] for s in by_group[0]]
    # Each request went out on a session of its group that was still open; every session was closed afterwards.
    events = server.log()
    posted = [(at, e) for at, e in enumerate(events) if e["request"] == "POST /judged/score_group"]
    assert len(posted) == len(seen)
    for at, event in posted:
        assert not [e for e in events[:at] if e["request"] == "POST /delete" and e["session"] == event["session"]]
    settle()
    assert server.open_sessions() == []


def judge(answers: list[str | None], right: str) -> list[float]:
    """tests/envs/judged.py's judgement: 1.0 for the shortest correct answer(s), 0.5 for a longer correct one, 0.25
    for a wrong one, 0.0 for none."""
    correct = [a for a in answers if a is not None and right in a.lower()]
    best = min(map(len, correct)) if correct else None
    return [0.0 if a is None else 0.25 if a not in correct else 1.0 if len(a) == best else 0.5 for a in answers]


def test_asyncgrpo_worker_leaves_a_rollout_that_never_started_out_of_its_groups_request(tmp_path):
    """The second reset on task 0 never starts (tests/envs/judged_flaky.py): that rollout is not sent and gets None;
    its group's three others are compared among themselves, on one of their sessions."""
    log = tmp_path / "judged.jsonl"
    counted = {"ORSGEN_COUNT_REQUESTS": "1", "JUDGED_LOG": str(log), "JUDGED_SETUPS": str(tmp_path / "setups")}
    with servers.running("tests.envs.judged_flaky:JudgedFlaky", env=counted) as server:
        path = tmp_path / "judged_flaky_worker.py"
        assert orsgen(server.url, "-o", str(path)).returncode == 0
        argv, env = rankfork.python("-m", "tests.harness.group_scoring", "async", str(path), "Judgedflaky")
        run = processes.run(argv, env=env, capture_output=True, text=True)
        assert run.returncode == 0, failed(run.stderr)
        (line,) = records(run.stdout, "error")
        assert line["error"] == "NoneType" and not line["failed"], line
        first = [s for s in line["samples"] if s["group"] == 0]
        never = [k for k, s in enumerate(first) if "could not start" in (s["result"] or "")]
        assert len(first) == 4 and len(never) == 1, first
        started = [k for k in range(4) if k not in never]
        (request, *_) = requests_of(log)
        assert request["task"] == 0 and [c["metadata"] for c in request["candidates"]] == [{"rollout": k} for k in started]
        expected = judge([first[k]["answer"] for k in started], "paris")
        assert [first[k]["score"] for k in started] == expected and first[never[0]]["score"] is None
        settle()
        assert server.open_sessions() == []
