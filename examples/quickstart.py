"""Quickstart, on a laptop: serve the bundled example environment on 127.0.0.1, generate its adapter with orsgen,
build a tiny model that calls its tools (`python -m orsgen.tiny`, on the CPU, offline), train one GRPO step of it
against the live environment, then print the rewards the environment gave. From the clone, after `make setup`:

    .venv/bin/python -m examples.quickstart [--steps 1] [--warmup-steps 600] [--out DIR]
"""

import tempfile
from pathlib import Path

# importing the demo also sets HF_HUB_OFFLINE & co: nothing is downloaded
from examples.demo import MAX_TOOL_CALLING_ITERATIONS, load_module, options


def main(argv: list[str] | None = None) -> int:
    args = options(argv, __doc__, steps=1, warmup=600)

    from orsgen import tiny
    from orsgen.cli import main as orsgen

    from examples import serve
    from examples.progress import Progress
    from examples.tiny import grpo_config

    out = args.out or Path(tempfile.mkdtemp(prefix="orsgen-quickstart-"))
    with serve.running("examples.echo:Echo") as server:  # the SDK's own Server under uvicorn, 127.0.0.1 only
        path = out / "echo.py"
        print(f"$ orsgen {server.url} -o {path}")
        if orsgen([server.url, "-o", str(path)]) != 0:
            return 1
        print(f"$ python -m orsgen.tiny {path} -o {out / 'tiny'}")
        tiny.build(str(path), out / "tiny", steps=args.warmup_steps)  # plays the tasks by hand, teaches the calls
        echo = load_module(path)  # in your project: from generated.echo import Echo, dataset

        # An episode no tool scored is unscored (None) by default and teaches GRPO nothing; count it as a failure.
        class Echo(echo.Echo):  # type: ignore[misc, name-defined]
            unscored_reward = 0.0

        print(f"GRPOTrainer: {args.steps} step{'s' * (args.steps != 1)} of 8 rollouts (2 tasks x 4) on the CPU")
        from trl import GRPOTrainer

        trajectories = echo.Trajectories(out / "trajectories")  # one JSON line per episode: what the model did
        trainer = GRPOTrainer(
            model=str(out / "tiny"),  # the folder python -m orsgen.tiny saved; yours: "Qwen/Qwen3-4B"
            args=grpo_config(str(out / "trainer"), args.steps, learning_rate=5e-5,
                             max_tool_calling_iterations=MAX_TOOL_CALLING_ITERATIONS),
            train_dataset=echo.dataset(),  # prompt (an empty user message: reset() completes it), task, metadata
            environment_factory=Echo,  # the adapter class is the factory; rewards come from get_reward()
            callbacks=[echo.EpisodeMetrics(), trajectories],  # orsgen/... figures in log_history; the records
        )
        with Progress(trainer):  # a line every few seconds; TRL's printed log dicts left out
            trainer.train()
        echo.close_all()  # GRPOTrainer never closes its environments
        trajectories.close()
    logged = [entry for entry in trainer.state.log_history if "reward" in entry]
    for entry in logged:
        print(f"step {entry['step']}: reward mean {entry['reward']:.3f}, std {entry.get('reward_std', 0.0):.3f}, "
              f"tool calls per rollout {entry.get('tools/call_frequency', 0.0):.2f}")
    records = trajectories.path.read_text().count("\n")
    print(f"{records} episode records in {trajectories.path}: jq -c '{{task_index, reward, calls: "
          f"[.tool_calls[].name]}}' {trajectories.path}")
    return 0 if len(logged) == args.steps and records else 1


if __name__ == "__main__":
    raise SystemExit(main())
