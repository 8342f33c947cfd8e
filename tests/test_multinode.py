"""Training across nodes (issue 47): two torchrun launches on one machine as two nodes of 2 processes each, against
one served echo environment (its own log: every `POST /create`, its peak of open sessions), with environment-owned
tasks (open_ahead "next-step") and with a dataset. Across nodes: one task per GRPO group, rounds on disjoint tasks, one
trajectory file per global rank, the `orsgen/` figures summed over all 4 ranks (every rank logs the same); with
ORSGEN_MAX_SESSIONS=2 the server never holds more than 2 x 4 sessions at once. With environment-owned tasks (orsgen's
own order across ranks), the same tasks group by group and the same figures as one node of 4: a third launch, not
made with a dataset, where TRL's sampler deals the rows (4 more ranks: some 70 s of CPU). A batch larger than the
budget is refused in one line.

CPU-heavy on 2 cores: the tiny model, 2 steps of 2 rollouts per process, groups of 2."""

import json
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from tests.harness import owned_data, processes, rankfork, records, servers
from tests.harness.generation import load, served

pytestmark = pytest.mark.trainer

STEPS, PER_DEVICE, GENERATIONS, BUDGET, WORLD = 2, 2, 2, 2, 4


@pytest.fixture(scope="module")
def counted(tmp_path_factory):
    with served("examples.echo:Echo", tmp_path_factory.mktemp("multinode"), "echo_nodes") as (server, module):
        yield server, Path(module.__file__)


def launch(path, out, data, nodes, env):
    """`nodes` torchrun launches of WORLD / nodes processes each, as nodes of one run (node 0 hosts the rendezvous):
    their reports, resets and the server's peak of open sessions during the run."""
    server, module_path = path
    port, per_node = servers.free_port(), WORLD // nodes
    server.peak_sessions()  # from here on
    launches = [rankfork.command("tests.harness.multinode", str(module_path), str(out), str(STEPS), str(PER_DEVICE),
                                 str(GENERATIONS), data, nproc=per_node, port=port, node=(node, nodes), env=env)
                for node in range(nodes)]
    started = [processes.popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environ)
               for argv, environ in launches]
    try:
        ended = [p.communicate(timeout=processes.HANG) for p in started]
    finally:
        for p in started:
            processes.stop(p)
    for p, (_, err) in zip(started, ended, strict=True):
        assert p.returncode == 0, err[-3000:]
    lines = [line for out_, _ in ended for line in records(out_, "reset", "rank")]
    reports = sorted((line for line in lines if "rank" in line), key=lambda r: r["rank"])
    resets = [line["reset"] for line in lines if "reset" in line]
    servers.settle()
    return reports, resets, server.peak_sessions()


def groups_of(resets):
    """Each step's GRPO groups' tasks, from where each reset sat in the global batch (rank-major)."""
    where = {(r["step"], r["rank"], r["position"]): r["task_index"] for r in resets}
    assert len(where) == len(resets) == STEPS * WORLD * PER_DEVICE  # each (step, rank, position) reset once
    steps = []
    for step in range(STEPS):
        batch = [where[(step, rank, p)] for rank in range(WORLD) for p in range(PER_DEVICE)]
        steps.append([batch[i:i + GENERATIONS] for i in range(0, len(batch), GENERATIONS)])
    return steps


@pytest.mark.parametrize("data", ["owned", "dataset"])
def test_two_nodes_of_two_train_as_one_node_of_four_within_the_sessions_budget(counted, tmp_path, data):
    server, _ = counted
    ahead = {"ORSGEN_OPEN_AHEAD": "next-step" if data == "owned" else "1"}
    before = len(server.creates())
    reports, resets, peak = launch(counted, tmp_path / "nodes", data, 2, {**ahead, "ORSGEN_MAX_SESSIONS": str(BUDGET)})
    created = server.creates()[before:]

    # four global ranks, two per node, each ran every step and left nothing open
    assert [(r["rank"], r["node"], r["local_rank"], r["world"]) for r in reports] == \
        [(0, 0, 0, 4), (1, 0, 1, 4), (2, 1, 0, 4), (3, 1, 1, 4)]
    assert all(r["steps"] == STEPS and r["resets"] == STEPS * PER_DEVICE and r["open_sessions"] == 0
               for r in reports), reports
    # one task per group, the groups of a step on different tasks, rounds on disjoint tasks (8 tasks, 8 groups)
    steps = groups_of(resets)
    assert all(len(set(g)) == 1 for groups in steps for g in groups), steps
    rounds = [{g[0] for g in groups} for groups in steps]
    assert all(len(r) == len(groups) for r, groups in zip(rounds, steps, strict=True)), steps
    assert not rounds[0] & rounds[1], rounds
    # every session the server opened is one a reset took
    assert sorted(c["session"] for c in created if c["status"] == 200) == sorted(r["session"] for r in resets)

    # the figures: every rank logs the sums over all four, the same as one node of four
    figures = [r["figures"] for r in reports]
    assert all(f == figures[0] for f in figures), figures
    assert [f["episodes"] for f in figures[0]] == [WORLD * PER_DEVICE] * STEPS
    assert [f["scored_fraction"] for f in figures[0]] == [1.0] * STEPS
    assert sum(f["starts"] for f in figures[0]) == len(created)

    # one trajectory file per global rank, each holding its rank's episodes
    folder = tmp_path / "nodes" / "traj"
    assert sorted(p.name for p in folder.iterdir()) == [f"trajectories-rank{r}.jsonl" for r in range(WORLD)]
    for rank in range(WORLD):
        written = [json.loads(line) for line in (folder / f"trajectories-rank{rank}.jsonl").read_text().splitlines()]
        assert {w["rank"] for w in written} == {rank}
        assert sorted(w["session"] for w in written) == sorted(r["session"] for r in resets if r["rank"] == rank)

    # the sessions budget, held across ranks on the server's own count
    assert 0 < peak <= BUDGET * WORLD, peak

    if data == "owned":  # orsgen's own task order across ranks (with a dataset, TRL's sampler deals the rows)
        # the same tasks as one node of four, group by group, and the same figures
        one_reports, one_resets, _ = launch(counted, tmp_path / "one", data, 1, ahead)
        assert Counter(r["task_index"] for r in resets) == Counter(r["task_index"] for r in one_resets)
        assert steps == groups_of(one_resets)
        keep = ("episodes", "scored_fraction", "tool_calls_per_episode", "unscored/not_started")
        assert [{k: f[k] for k in keep} for f in figures[0]] == \
            [{k: f[k] for k in keep} for f in one_reports[0]["figures"]]


def test_a_batch_larger_than_the_sessions_budget_is_refused_in_one_line(counted, tmp_path, monkeypatch):
    _, path = counted
    monkeypatch.setenv("ORSGEN_MAX_SESSIONS", "3")
    module = load(path)
    trainer = owned_data.trainer(module, module.Echo, str(tmp_path / "out"), 1, threads=1,
                                 per_device_train_batch_size=4, num_generations=2)
    with pytest.raises(ValueError) as refused:
        trainer.train()
    assert str(refused.value) == (f"max_sessions = 3 (ORSGEN_MAX_SESSIONS) is below the 4 rollouts of {module.PINNED.target}"
                                  " in this process's batch, which hold their sessions until the batch's rewards are "
                                  "read: raise it to at least 4, or lower per_device_train_batch_size")
    module.close_all()
    assert counted[0].open_sessions() == []
