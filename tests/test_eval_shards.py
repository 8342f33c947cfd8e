"""`orsgen eval --shard I/N` and `--merge` (issue 47): four shards of a run, launched at once as an array job launches
them (one killed mid-run and resumed on its own), merged into one run whose records and figures equal those of the
same run unsharded; shards of another run, a shard given twice or missing, refused in one line.

The graded environment and its scripted model (tests/harness/evaluation.py) make every figure deterministic: with
`--seed`, episode n's requests carry seed + n, so the endpoint shows which episodes each shard asked about."""

import json
import shutil
import signal
from collections import Counter

import pytest

from tests.harness import evaluation, processes
from tests.harness.chat_standin import serving
from tests.harness.processes import wait_until

pytestmark = pytest.mark.slow  # `orsgen eval` run as a user runs it, a fresh interpreter a run: make test-slow

SEED, K, TASKS, SHARDS = 3, 4, 6, 4  # graded: 6 tasks (task 5 never starts); 24 episodes
VOLATILE = ("session", "ended_at", "seconds")  # what differs between two runs of the same episode


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    with evaluation.graded(tmp_path_factory.mktemp("graded")) as found:
        yield found


def same(record):
    """A record as two runs of its episode agree on it: no session id, no clock, no seconds."""
    kept = {k: v for k, v in record.items() if k not in VOLATILE}
    kept["tool_calls"] = [{k: v for k, v in c.items() if k != "seconds"} for c in record.get("tool_calls") or []]
    return json.dumps(kept, sort_keys=True)


def figures_of(folder):
    """summary.json but its clocks (latency) and the folder and endpoint it names."""
    found = evaluation.summary(folder)
    found.pop("latency")
    found["run"].pop("folder")
    found["run"].pop("endpoint")
    return found


def episodes(payloads):
    """The episode numbers the endpoint was asked about (seed - SEED), the probe left out."""
    return Counter(p["seed"] - SEED for p in payloads if evaluation.task_of(p) >= 0)


def one_line(result):
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("orsgen: error: --merge"), result.stderr
    return lines[0]


def test_four_shards_one_killed_and_resumed_merge_into_the_unsharded_run(graded, tmp_path):
    _server, module = graded
    common = (str(module), "--model", "scripted", "-k", str(K), "--seed", str(SEED), "--concurrency", "4")
    (tmp_path / "whole").mkdir()
    (tmp_path / "shards").mkdir()
    with serving(evaluation.script, delay=0.05) as endpoint:
        whole = evaluation.orsgen_eval(*common, "--base-url", endpoint.url, "--out", "run", cwd=tmp_path / "whole")
        assert whole.returncode == 0, whole.stderr
        unsharded = episodes(endpoint.payloads())
    assert set(unsharded) == {t + TASKS * k for t in range(TASKS - 1) for k in range(K)}

    # the four shards at once, as an array job starts them; shard 1's endpoint is slow, and it is killed mid-run
    with serving(evaluation.script, delay=0.05) as fast, serving(evaluation.script, delay=0.5) as slow:
        started = [evaluation.popen(*common, "--base-url", (slow if i == 1 else fast).url, "--shard", f"{i}/{SHARDS}",
                                    "--out", f"s{i}", cwd=tmp_path / "shards") for i in range(SHARDS)]
        try:
            records = tmp_path / "shards" / "s1" / "trajectories.jsonl"
            wait_until(lambda: started[1].poll() is not None or (records.exists() and records.read_bytes().count(b"\n")
                                                                 >= 1), waiting_for="shard 1's first record")
            assert started[1].poll() is None, started[1].communicate()
            started[1].send_signal(signal.SIGKILL)  # preempted: no chance to say anything
            ended = [p.communicate() for p in started]
        finally:
            for p in started:
                processes.stop(p)
        for i, p in enumerate(started):
            assert p.returncode == (-signal.SIGKILL if i == 1 else 0), ended[i][1]
        assert "shard 0/4: 6 of the run's 24 episodes (6 tasks x 4)" in ended[0][1], ended[0][1]
        asked = {0: episodes(fast.payloads()), 1: episodes(slow.payloads())}
        killed = evaluation.records(tmp_path / "shards" / "s1")
        assert 1 <= len(killed) < 6

        with serving(evaluation.script, delay=0.05) as again:  # the killed shard resumed alone
            resumed = evaluation.orsgen_eval("--resume", "s1", "--base-url", again.url, cwd=tmp_path / "shards")
            assert resumed.returncode == 0, resumed.stderr
            asked[2] = episodes(again.payloads())

    # each shard asked about its own episodes only (n % 4 == i), and together about each episode once
    for n in asked[0]:
        assert n % SHARDS in (0, 2, 3), n
    assert all(n % SHARDS == 1 for n in asked[1] | asked[2])
    done_before_kill = {r["rollout"] * TASKS + r["task_index"] for r in killed if r.get("unscored_reason") != "not_started"}
    assert not set(asked[2]) & done_before_kill  # what the killed shard had saved was not asked again
    assert set(asked[0]) | set(asked[1]) | set(asked[2]) == set(unsharded)
    for i in range(SHARDS):
        mine = evaluation.records(tmp_path / "shards" / f"s{i}")
        assert {r["rollout"] * TASKS + r["task_index"] for r in mine} == {n for n in range(TASKS * K) if n % SHARDS == i}

    merged = evaluation.orsgen_eval("--merge", *(f"shards/s{i}" for i in range(SHARDS)), "--out", "merged/run",
                                    cwd=tmp_path)
    assert merged.returncode == 0, merged.stderr
    assert "orsgen eval: merged 4 shards into merged/run: 20 of 24 episodes; orsgen eval --resume merged/run runs " \
           "the rest" in merged.stderr, merged.stderr  # task 5's 4 episodes never start: --resume runs them again
    one = evaluation.records(tmp_path / "whole" / "run")
    latest = {(r["task_index"], r["rollout"]): r for r in evaluation.records(tmp_path / "merged" / "run")}
    assert Counter(map(same, latest.values())) == Counter(map(same, one))
    assert figures_of(tmp_path / "merged" / "run") == figures_of(tmp_path / "whole" / "run")
    run = json.loads((tmp_path / "merged" / "run" / "run.json").read_text())
    assert "shard" not in run["run"] and "plan" not in run


def test_shards_of_another_run_a_shard_twice_or_missing_are_refused(graded, tmp_path):
    _server, module = graded
    with serving(evaluation.script) as endpoint:  # four runs at once
        started = [evaluation.popen(str(module), "--model", "scripted", "--base-url", endpoint.url, "--tasks", "0-3",
                                    *extra, "--out", out, cwd=tmp_path)
                   for extra, out in ((("--shard", "0/2"), "a0"), (("--shard", "1/2"), "a1"),
                                      (("--shard", "1/2", "--pass-threshold", "0.5"), "b1"), ((), "whole"))]
        try:
            ended = [p.communicate(timeout=processes.HANG)[1] for p in started]
        finally:
            for p in started:
                processes.stop(p)
    assert all(p.returncode == 0 for p in started), ended

    def merge(*folders):
        return evaluation.orsgen_eval("--merge", *folders, "--out", "merged", cwd=tmp_path)

    assert "--merge: b1 is a shard of another run than a0: --pass-threshold 0.5 against 1.0" in one_line(merge("a0", "b1"))
    shutil.copytree(tmp_path / "a1", tmp_path / "c1")
    saved = json.loads((tmp_path / "c1" / "run.json").read_text())
    saved["environments"][0]["snapshot"] = "0" * 64
    (tmp_path / "c1" / "run.json").write_text(json.dumps(saved))
    assert "(another module pin)" in one_line(merge("a0", "c1"))
    saved["environments"] = json.loads((tmp_path / "a1" / "run.json").read_text())["environments"]
    saved["run"]["model"] = "other"
    (tmp_path / "c1" / "run.json").write_text(json.dumps(saved))
    assert "--model 'other' against 'scripted'" in one_line(merge("a0", "c1"))
    assert "shard 0/2 is given twice (a0, a0)" in one_line(merge("a0", "a0"))
    assert "the run has 2 shards and 1/2 is not given: give every shard's folder" in one_line(merge("a0"))
    assert "--merge whole: a whole run, not a shard" in one_line(merge("a0", "whole"))
    assert not (tmp_path / "merged").exists()
    ok = merge("a0", "a1")
    assert ok.returncode == 0, ok.stderr
    assert "merged 2 shards into merged: 4 of 4 episodes" in ok.stderr
    assert sorted(map(same, evaluation.records(tmp_path / "merged"))) == \
        sorted(map(same, ({**r, "run": "merged"} for r in evaluation.records(tmp_path / "whole"))))
    again = merge("a0", "a1")  # into a folder holding a run: refused, nothing replaced
    assert again.returncode == 2 and "holds files orsgen eval did not write" in again.stderr, again.stderr
