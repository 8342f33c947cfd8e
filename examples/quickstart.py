"""Quickstart, on a laptop: serve the bundled example environment on 127.0.0.1, generate its adapter with orsgen,
and train one GRPO step of a tiny model built on the spot (CPU, offline), then print the rewards the environment
gave. From the clone, after `make setup`:

    .venv/bin/python -m examples.quickstart [--steps 1] [--out DIR]
"""

import argparse
import importlib.util
import os
import sys
import tempfile
import warnings
from pathlib import Path
from types import ModuleType

for key, value in {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                   "TRL_EXPERIMENTAL_SILENCE": "1", "TOKENIZERS_PARALLELISM": "false"}.items():
    os.environ.setdefault(key, value)  # nothing is downloaded: the model is built here
warnings.filterwarnings("ignore", category=FutureWarning)

MAX_TOOL_CALLING_ITERATIONS = 10  # as in the README and the generated module's docstring


def load(path: Path) -> ModuleType:
    """Import the generated module from its file (in your project: `from generated.echo import Echo, dataset`)."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)
    return module


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=1, help="GRPO steps (default 1)")
    p.add_argument("--warmup-steps", type=int, default=300, help="supervised steps teaching the tool-call format")
    p.add_argument("--out", type=Path, help="folder for the adapter and the trainer (default: a temporary one)")
    args = p.parse_args(argv)

    from orsgen.cli import main as orsgen

    from examples import serve, tiny

    out = args.out or Path(tempfile.mkdtemp(prefix="orsgen-quickstart-"))
    with serve.running("examples.echo:Echo") as server:  # the SDK's own Server under uvicorn, 127.0.0.1 only
        path = out / "echo.py"
        print(f"$ orsgen {server.url} -o {path}")
        if orsgen([server.url, "-o", str(path)]) != 0:
            return 1
        echo = load(path)

        # An episode no tool scored is unscored (None) by default and teaches GRPO nothing; count it as a failure.
        class Echo(echo.Echo):  # type: ignore[misc, name-defined]
            unscored_reward = 0.0

        train = echo.dataset()  # prompt (an empty user message: reset() completes it), task_index, split, metadata
        tools = [Echo().echo, Echo().hint]  # the tools TRL offers the model: the adapter's public methods
        conversations = []  # one rollout per task, by hand: what the tiny model learns the tool-call format from
        for row in train:
            env = Echo()
            prompt = env.reset(**row)
            conversations.append(tiny.conversation(prompt, "echo", {"text": row["target"]}, env.echo(text=row["target"])))
        echo.close_all()

        import torch
        from trl import GRPOTrainer

        torch.set_num_threads(2)
        tok = tiny.tokenizer(conversations, tools)
        lm = tiny.model(tok)
        tiny.warm_up(lm, tok, conversations, tools, args.warmup_steps)
        trainer = GRPOTrainer(
            model=lm,
            processing_class=tok,
            args=tiny.grpo_config(str(out / "trainer"), args.steps, learning_rate=5e-5,
                                  max_tool_calling_iterations=MAX_TOOL_CALLING_ITERATIONS),
            train_dataset=train,
            environment_factory=Echo,  # the adapter class is the factory; rewards come from get_reward()
        )
        trainer.train()
        echo.close_all()  # GRPOTrainer never closes its environments
    logged = [entry for entry in trainer.state.log_history if "reward" in entry]
    for entry in logged:
        print(f"step {entry['step']}: reward mean {entry['reward']:.3f}, std {entry.get('reward_std', 0.0):.3f}, "
              f"tool calls per rollout {entry.get('tools/call_frequency', 0.0):.2f}")
    return 0 if len(logged) == args.steps else 1


if __name__ == "__main__":
    raise SystemExit(main())
