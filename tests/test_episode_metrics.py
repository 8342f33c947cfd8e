"""Episode metrics (issue 18): a real GRPOTrainer with EpisodeMetrics on a server whose tasks fail to start, fail
their first start and go stale; the figures in the trainer's log_history equal what the server saw, step by step,
on one and on two ranks; an evaluation pass on the test split reports its own and leaves training's alone."""

import pytest

from examples.tiny import tool_methods
from tests.harness import metered, processes, rankfork, records, servers, trainers
from tests.harness.generation import load, orsgen

pytestmark = pytest.mark.trainer  # trains or runs TRL code: also under the oldest TRL (.ci/trl-oldest)

BROKEN, FIRST_FAILS = 1, 2  # tests/envs/metered.py: never starts; its first start fails


@pytest.fixture
def server_and_module(tmp_path):
    """A fresh server per test: the environment counts starts per task in its process."""
    with servers.running("tests.envs.metered:Metered", env={"ORSGEN_COUNT_REQUESTS": "1"}) as server:
        out = tmp_path / "metered.py"
        assert orsgen(server.url, "-o", str(out)).returncode == 0
        yield server, out


def seen(server, marks: list[int]) -> list[dict]:
    """What the server saw between consecutive step ends, per split: sessions created, starts that failed (the
    environment's own rule: every start of train task 1, the first of train task 2), tool calls made, tasks
    started. Dicts keep insertion order: `bodies` is in the order the creates arrived."""
    log, bodies = server.log(), {c["session"]: c["body"] for c in server.creates()}
    first_of_2 = next(s for s, b in bodies.items() if (b["split"], b["index"]) == ("train", FIRST_FAILS))
    windows = []
    for start, end in zip([0, *marks], [*marks, len(log)], strict=True):
        part = log[start:end]
        window = {}
        for split in ("train", "test"):
            created = [e["session"] for e in part if e["request"] == "POST /create"
                       and bodies[e["session"]]["split"] == split]
            ours = set(created) | {s for s, b in bodies.items() if b["split"] == split}
            window[split] = {
                "starts": len(created),
                "start_failures": sum((split, bodies[s]["index"]) == ("train", BROKEN) or s == first_of_2
                                      for s in created),
                "calls": sum(e["request"].endswith("/call") and e["session"] in ours for e in part),
                "tasks": sorted({bodies[s]["index"] for s in created}),
            }
        windows.append(window)
    return windows


def logged(history: list[dict], prefix: str = "orsgen/") -> list[dict]:
    return [{k[len(prefix):]: v for k, v in entry.items() if k.startswith(prefix)} for entry in history
            if prefix + "episodes" in entry]


def agree(figures: dict, server: dict) -> None:
    """The logged figures of one window against the server's view of it."""
    assert figures["starts"] == server["starts"], (figures, server)
    assert figures["start_failures"] == server["start_failures"], (figures, server)
    # every scripted rollout calls `answer` once: the calls that reached the server are those of started episodes
    assert figures["tool_calls_per_episode"] == 1.0
    made = figures["episodes"] * (figures["tool_calls_per_episode"] - figures["tool_failures_per_episode"])
    assert made == server["calls"], (figures, server)
    assert figures["reset_seconds_p50"] <= figures["reset_seconds_p95"]
    assert figures["tool_seconds_p50"] <= figures["tool_seconds_p95"]


def test_figures_equal_what_the_server_saw_step_by_step_and_evaluation_stays_apart(server_and_module, tmp_path):
    server, path = server_and_module
    module = load(path)
    trainer, marks = metered.train(module, str(tmp_path / "out"), server.url, steps=4)
    history = trainer.state.log_history
    train, evals = logged(history), logged(history, "eval_orsgen/")
    windows = seen(server, marks)
    assert len(train) == 4 and len(evals) == 2  # one row per logging step; evaluation at steps 2 and 4
    # training: task 0 starts, task 1 never (1 retry each of 2 rollouts), task 2 on its retry, task 3 goes stale
    assert [w["train"]["tasks"] for w in windows[:4]] == [[0], [1], [2], [3]]  # evaluation took none of its tasks
    assert [w["train"]["starts"] for w in windows[:4]] == [2, 4, 3, 2]
    for figures, window in zip(train, windows, strict=False):
        agree(figures, window["train"])
    assert [f["episodes"] for f in train] == [2, 2, 2, 2]
    assert [f["scored_fraction"] for f in train] == [1.0, 0.0, 1.0, 0.0]
    assert [f["finished_fraction"] for f in train] == [1.0, 0.0, 1.0, 0.0]
    assert [f["unscored/not_started"] for f in train] == [0, 2, 0, 0]
    assert [f["unscored/stale_prompt"] for f in train] == [0, 0, 0, 2]
    assert [f["unscored/no_tool_scored"] for f in train] == [0, 0, 0, 0]
    assert [f["start_retries"] for f in train] == [0, 2, 1, 0]
    assert [f["capacity_refusals"] for f in train] == [0, 0, 0, 0]
    assert [(f["ahead/opened"], f["ahead/taken"], f["ahead/unused"]) for f in train] == [(1, 1, 0)] * 4
    assert [f["sessions_open"] for f in train] == [0, 0, 0, 0]  # closed once TRL read the batch's rewards
    # evaluation: its own rows, on the test split's tasks, after steps 2 and 4; its rewards in TRL's eval logs
    test_windows = [windows[2]["test"], windows[4]["test"]]  # between step 2's end and 3's, after step 4's
    assert [w["tasks"] for w in test_windows] == [[0, 1], [0, 1]]
    for figures, window in zip(evals, test_windows, strict=True):
        agree(figures, window)
        assert figures["episodes"] == 4 and figures["scored_fraction"] == 1.0 and figures["start_failures"] == 0
    assert [e["eval_reward"] for e in history if "eval_reward" in e] == [1.0, 1.0]
    assert all(w["test"]["starts"] == 0 for i, w in enumerate(windows) if i not in (2, 4))


def test_two_ranks_log_the_sums_of_both(server_and_module, tmp_path):
    """2 torchrun workers, one GRPO group each per step: the logged figures are both ranks' (rank 0 alone starts
    tasks 0 and 2, rank 1 tasks 1 and 3), and both ranks log the same."""
    server, path = server_and_module
    argv, env = rankfork.command("tests.harness.metered", str(path), str(tmp_path / "out"), server.url)
    run = processes.run(argv, capture_output=True, text=True, timeout=900, env=env)
    assert run.returncode == 0, run.stderr[-3000:]
    reports = sorted(records(run.stdout, "rank"),
                     key=lambda r: r["rank"])
    assert [r["rank"] for r in reports] == [0, 1]
    train = [logged(r["log_history"]) for r in reports]
    assert train[0] == train[1]  # gathered: every rank logs the same sums
    windows = seen(server, reports[0]["marks"])
    assert [w["train"]["tasks"] for w in windows[:2]] == [[0, 1], [2, 3]]
    for figures, window in zip(train[0], windows, strict=False):
        agree(figures, window["train"])
    assert [f["starts"] for f in train[0]] == [2 + 4, 3 + 2]
    assert [f["episodes"] for f in train[0]] == [4, 4]
    assert [f["scored_fraction"] for f in train[0]] == [0.5, 0.5]
    assert [(f["unscored/not_started"], f["unscored/stale_prompt"]) for f in train[0]] == [(2, 0), (0, 2)]
    evals = logged(reports[0]["log_history"], "eval_orsgen/")
    assert len(evals) == 1 and evals[0]["episodes"] == 4 and evals[0]["starts"] == windows[2]["test"]["starts"] == 4


@pytest.fixture
def echo_training(tmp_path):
    """train(train_dataset=..., eval_dataset=..., **config) -> (trainer, module, server): GRPO on the echo
    environment (served with request counting, adapter generated) with EpisodeMetrics and the scripted first turn;
    the server is still up."""
    with servers.running("examples.echo:Echo", env={"ORSGEN_COUNT_REQUESTS": "1"}) as server:
        out = tmp_path / "echo_metrics.py"
        assert orsgen(server.url, "-o", str(out)).returncode == 0
        module = load(out)

        def train(train_dataset=None, eval_dataset=None, **config):
            trainer = trainers.trainer(module.Echo, str(tmp_path / "out"), 2, tools=tool_methods(module.Echo()),
                                       train_dataset=train_dataset(module) if train_dataset else None,
                                       eval_dataset=eval_dataset, callbacks=[module.EpisodeMetrics()], **config)
            trainer.train()
            module.close_all()
            return trainer, module, server

        yield train


def test_environment_owned_data_evaluates_on_the_test_split(echo_training):
    """No train_dataset: training draws tasks from the train split's order; an eval_dataset of placeholder rows
    naming the test split draws from the order's evaluation stream on that split, the same tasks every pass, and
    leaves training's positions alone."""
    from datasets import Dataset
    from orsgen.runtime.tasks import Order
    from orsgen.runtime.trl import Slot

    placeholders = Dataset.from_dict({"prompt": [[{"role": "user", "content": ""}]] * 2, "split": ["test"] * 2})
    trainer, module, server = echo_training(eval_dataset=placeholders, per_device_train_batch_size=4,
                                            num_generations=2, per_device_eval_batch_size=4, eval_strategy="steps",
                                            eval_steps=1)
    creates = [c["body"] for c in server.creates()]
    sizes = {split: len(module.dataset(split=split)) for split in ("train", "test")}
    order = Order()  # what a fresh run computes: the positions training and evaluation draw from
    train = [order.task("train", sizes["train"], 0, Slot("train", p, 2)) for p in range(4)]
    evaluated = sorted(order.task("test", sizes["test"], 0, Slot("eval", p, 2)) for p in range(2))
    train_creates = [c["index"] for c in creates if c["split"] == "train"]
    test_creates = [c["index"] for c in creates if c["split"] == "test"]
    # step 1's 4 rollouts, an evaluation pass, step 2's, another pass: 2 rollouts per group
    assert sorted(train_creates[:4]) == sorted(train[:2] * 2) and sorted(train_creates[4:]) == sorted(train[2:] * 2)
    assert sorted(test_creates[:4]) == sorted(test_creates[4:]) == sorted(evaluated * 2)
    history = trainer.state.log_history
    assert [e["orsgen/episodes"] for e in history if "orsgen/episodes" in e] == [4, 4]
    assert [e["orsgen/starts"] for e in history if "orsgen/starts" in e] == [4, 4]
    assert [(e["eval_orsgen/episodes"], e["eval_orsgen/starts"], e["eval_orsgen/scored_fraction"], e["eval_reward"])
            for e in history if "eval_orsgen/episodes" in e] == [(4, 4, 1.0, 1.0)] * 2


def test_a_logging_window_of_two_steps_sums_both(echo_training):
    """logging_steps=2: one row for both steps, its counts the sum of the two steps' (TRL averages the window's
    values: each figure is written as the window's one value)."""
    trainer, _, server = echo_training(lambda module: module.dataset(num_tasks=4), logging_steps=2)
    created = len(server.creates())
    calls = sum(e["request"].endswith("/call") for e in server.log())
    rows = logged(trainer.state.log_history)
    assert len(rows) == 1 and rows[0]["episodes"] == 16 and rows[0]["starts"] == created == 16
    assert rows[0]["tool_calls_per_episode"] * rows[0]["episodes"] == calls == 16
    assert (rows[0]["ahead/opened"], rows[0]["ahead/taken"], rows[0]["scored_fraction"]) == (14, 14, 1.0)
