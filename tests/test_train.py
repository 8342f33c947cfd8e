"""A real GRPOTrainer run, offline on CPU, whose tools are a generated adapter's methods."""

import re

import pytest

from examples import tiny
from tests.harness import processes, records, servers, trainers
from tests.harness.generation import in_process
from tests.harness.trainers import recording, tool_methods

pytestmark = pytest.mark.trainer  # trains or runs TRL code: also under the oldest TRL (.ci/trl-oldest)


@pytest.mark.parametrize("steps", [2])
def test_grpo_trains_against_generated_adapter(echo_server, generate, tmp_path, steps):
    mod = generate(echo_server.url)
    train = mod.dataset(num_tasks=4)
    probe = mod.Echo()
    conversations = [
        tiny.conversation(probe.reset(**row), "echo", {"text": row["target"]}, row["target"]) for row in train
    ]
    probe._close()
    words = list(train["target"])

    def first_turn(i: int, prompt: str) -> str:
        word = re.search(r"Echo the word (\w+)", prompt).group(1)
        return tiny.call_text("echo", {"text": word if i % 2 == 0 else word + "x"})  # half right, half wrong

    env_class = recording(mod.Echo)
    trainer = trainers.trainer(env_class, str(tmp_path / "out"), steps, tools=tool_methods(probe), threads=2,
                               conversations=conversations, train_dataset=train, first_turn=first_turn)
    assert [t.__name__ for t in trainer.tools] == ["echo", "hint"]
    trainer.train()
    mod.close_all()

    assert trainer.state.global_step == steps
    echo_calls = [(args["text"], result) for name, args, result in env_class.calls if name == "echo"]
    assert len(echo_calls) >= 8 * steps  # every rollout's scripted call went through the adapter to the server
    assert {text for text, _ in echo_calls} >= {words[0], words[0] + "x"}
    logs = [entry for entry in trainer.state.log_history if "rewards/Echo/mean" in entry]
    assert len(logs) == steps
    for entry in logs:
        # the rewards TRL used are the ones get_reward() returned: 1.0 for the right word, 0.0 otherwise
        assert entry["rewards/Echo/mean"] == pytest.approx(0.5)
        assert entry["tools/call_frequency"] >= 1.0
        assert entry["tools/failure_frequency"] == 0.0
    assert sorted(env.get_reward() for env in trainer.environments) == [0.0] * 4 + [1.0] * 4


def test_grpo_on_two_environments_from_a_bundle(multi_server, tmp_path):
    import importlib
    import sys

    result = in_process(multi_server.url, "--env", "echo", "--env", "quiz", "-o", str(tmp_path / "envs"))
    assert result.returncode == 0, result.stderr
    sys.path.insert(0, str(tmp_path))
    try:
        bundle = importlib.import_module("envs.bundle")
    finally:
        sys.path.remove(str(tmp_path))
    mixed = bundle.dataset(num_tasks=2)
    assert sorted(set(mixed["environment"])) == ["echo", "quiz"]
    factories = {name: recording(cls) for name, cls in bundle.ENVIRONMENTS.items()}
    probes = {name: cls() for name, cls in bundle.ENVIRONMENTS.items()}
    conversations = [tiny.conversation(*trainers.ECHO_APPLE),
                     tiny.conversation("What is 2+2?", "answer", {"answer": "4"}, "correct")]

    def first_turn(i: int, prompt: str) -> str:
        word = re.search(r"Echo the word (\w+)", prompt)
        if word:
            return tiny.call_text("echo", {"text": word.group(1)})
        return tiny.call_text("answer", {"answer": "4"})

    trainer = trainers.trainer(factories, str(tmp_path / "out"), 2, threads=2, conversations=conversations,
                               tools=[m for p in probes.values() for m in tool_methods(p)], train_dataset=mixed,
                               first_turn=first_turn, num_generations=2, per_device_train_batch_size=4,
                               callbacks=[bundle.EpisodeMetrics()])
    trainer.train()
    bundle.close_all()
    echo_calls = [c for c in factories["echo"].calls if c[0] == "echo"]
    quiz_calls = [c for c in factories["quiz"].calls if c[0] == "answer"]
    assert echo_calls and quiz_calls  # each environment's own tools ran, on its own server-side env
    assert all(result == args["text"] for _, args, result in echo_calls)
    assert {result for _, _, result in quiz_calls} <= {"correct", "wrong"}
    logged = {k for entry in trainer.state.log_history for k in entry if k.startswith("rewards/")}
    assert {"rewards/Echo/mean", "rewards/Quiz/mean"} <= logged
    # the bundle's EpisodeMetrics counts both environments' episodes: 4 rollouts a step, each one tool call
    figures = [(e["orsgen/episodes"], e["orsgen/tool_calls_per_episode"]) for e in trainer.state.log_history
               if "orsgen/episodes" in e]
    assert figures == [(4, 1.0), (4, 1.0)]


def test_grpo_with_environment_owned_data(echo_server, generate, tmp_path):
    mod = generate(echo_server.url)
    probe = mod.Echo()
    prompts: list[str] = []

    def first_turn(i: int, prompt: str) -> str:
        prompts.append(prompt)
        return tiny.call_text("echo", {"text": re.search(r"Echo the word (\w+)", prompt).group(1)})

    env_class = recording(mod.Echo)
    trainer = trainers.trainer(env_class, str(tmp_path / "out"), 2, tools=tool_methods(probe), threads=2,
                               first_turn=first_turn)  # no train_dataset: the adapter picks the tasks
    trainer.train()
    mod.close_all()
    assert len(prompts) == 16
    groups = [prompts[i:i + 4] for i in range(0, 16, 4)]  # num_generations=4: each group shares its task
    assert all(len(set(g)) == 1 for g in groups), groups
    assert len({g[0] for g in groups}) == 4
    assert all(entry["rewards/Echo/mean"] == 1.0 for entry in trainer.state.log_history if "rewards/Echo/mean" in entry)


def test_two_worker_processes_train_with_their_own_adapter_pools(tmp_path):
    """What `accelerate launch` does on several GPUs, on CPU: torchrun starts 2 DDP workers (gloo); each imports
    the generated module and builds its own pool. (`accelerate launch --cpu` runs one process without MPI.)"""
    import sys

    with servers.running("examples.echo:Echo", env={"ORSGEN_COUNT_REQUESTS": "1"}) as server:
        module = tmp_path / "echo_workers.py"
        assert in_process(server.url, "-o", str(module)).returncode == 0
        run = processes.run(
            [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
             "--master_port", str(servers.free_port()), "-m", "tests.harness.distributed", str(module), str(tmp_path / "out")],
            capture_output=True, text=True,
        )
        assert run.returncode == 0, run.stderr[-3000:]
        reports = sorted(records(run.stdout, "rank"),
                         key=lambda r: r["rank"])
        assert [r["rank"] for r in reports] == [0, 1]
        assert all(r["steps"] == 2 and r["tool_calls"] >= 8 and r["open_sessions"] == 0 for r in reports)
        assert server.open_sessions() == []
