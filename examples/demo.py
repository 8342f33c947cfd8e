"""The main job, end to end: serve the bundled example environment on loopback, generate its adapter with the
orsgen CLI, use it by hand, then train a tiny model built on the spot with TRL's GRPOTrainer for a few steps.

    python -m examples.demo [--steps 3] [--warmup-steps 300] [--out DIR]
"""

import argparse
import importlib.util
import inspect
import logging
import os
import sys
import tempfile
import time
import warnings
from pathlib import Path
from types import ModuleType
from typing import Any

from examples.tiny import recording, tool_methods

for key, value in {
    "HF_HUB_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "TRL_EXPERIMENTAL_SILENCE": "1",
    "TOKENIZERS_PARALLELISM": "false",
}.items():
    os.environ.setdefault(key, value)
warnings.filterwarnings("ignore", category=FutureWarning)

MAX_TOOL_CALLING_ITERATIONS = 10  # as in the README, the quickstart and the generated module's docstring


def load_module(path: Path) -> ModuleType:
    """Import a generated module from its file, as a user would from their repo."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)
    return module


def shown(entry: dict[str, Any], key: str, spec: str, scale: float = 1.0) -> str:
    """A logged figure as text; "n/a" for None (a step whose episodes nothing scored)."""
    value = entry.get(key, 0)
    return "n/a" if value is None else format(value * scale, spec)


class UnscoredNotice(logging.Filter):
    """Drops TRL's "All reward functions returned None" warning, a dump of one rollout's kwargs for every step with
    an unscored rollout: the demo says what those rollouts are in one line of its own (`unscored_line`)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "All reward functions returned None" not in record.getMessage()


def unscored_line(log_history: list[dict[str, Any]]) -> str | None:
    """One line on the rollouts no tool scored, and why that is expected of a model still learning its tools."""
    steps = [entry for entry in log_history if "reward" in entry]
    unscored = {entry["step"]: int(entry.get("orsgen/unscored/no_tool_scored", 0)) for entry in steps}
    where = [str(step) for step, count in unscored.items() if count]
    if not where:
        return None
    total = sum(int(entry.get("orsgen/episodes", 0)) for entry in steps)
    return (f"      {sum(unscored.values())} of {total} rollouts (step{'s' if len(where) > 1 else ''} "
            f"{', '.join(where)}) called no tool that gives a reward, as expected of a model still learning its "
            "tools: get_reward() is None for them, GRPO leaves them out of their group, TRL's warning is silenced")


def options(argv: list[str] | None, doc: str | None, steps: int, warmup: int = 300) -> argparse.Namespace:
    """The demo's and the quickstart's options."""
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=steps, help=f"GRPO steps (default {steps})")
    p.add_argument("--warmup-steps", type=int, default=warmup, help="most supervised steps teaching the tool-call "
                   f"format (default {warmup})")
    p.add_argument("--out", type=Path, help="where to write the adapter (default: a temporary directory)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = options(argv, __doc__, steps=3)
    start = time.time()

    from orsgen.cli import main as orsgen

    from examples import serve, tiny

    out_dir = args.out or Path(tempfile.mkdtemp(prefix="orsgen-demo-"))
    with serve.running("examples.echo:Echo") as server:
        print(f"[1] example ORS environment 'echo' served at {server.url}")
        path = out_dir / "echo_adapter.py"
        if orsgen([server.url, "-o", str(path)]) != 0:
            return 1
        module = load_module(path)
        print(f"[2] generated {path} (snapshot sha256 {module.SNAPSHOT_SHA256[:12]}...); the model sees:")
        for method in tool_methods(module.Echo()):
            print(f"      {method.__name__}{inspect.signature(method)}")

        train = module.dataset()
        print(f"[3] dataset(): {train.num_rows} tasks, columns {train.column_names}")

        adapter, conversations = module.Echo(), []
        for row in train:
            prompt = adapter.reset(**row)
            result = adapter.echo(text=row["target"])
            conversations.append(tiny.conversation(prompt, "echo", {"text": row["target"]}, result))
        print(f"[4] rollout by hand: reset -> {prompt!r}; echo(text={row['target']!r}) -> {result!r}; "
              f"get_reward() -> {adapter.get_reward()}")
        adapter._close()

        import torch
        from trl import GRPOTrainer

        from examples.progress import Progress

        tok = tiny.tokenizer(conversations, tool_methods(module.Echo()))
        lm = tiny.model(tok)
        print(f"[5] a tiny Qwen3 ({sum(p.numel() for p in lm.parameters()):,} parameters) learns the tool-call format "
              f"from those rollouts: at most {args.warmup_steps} steps")
        torch.set_num_threads(1)  # the model is tiny: one thread is several times faster on 2 busy cores
        warm = tiny.warm_up(lm, tok, [(c, tool_methods(module.Echo())) for c in conversations], args.warmup_steps,
                            say=print)
        torch.set_num_threads(2)
        print(f"      {warm['warm_up_steps']} steps, loss {warm['loss']:.3f}, {warm['tokens_right']:.0%} of the "
              "answer tokens right")

        print(f"[6] GRPOTrainer: {args.steps} steps of 8 rollouts (2 tasks x 4) against the live environment")
        env_class = recording(module.Echo)
        trainer = GRPOTrainer(
            model=lm,
            processing_class=tok,
            args=tiny.grpo_config(str(out_dir / "trainer"), args.steps, learning_rate=5e-5,
                                  max_tool_calling_iterations=MAX_TOOL_CALLING_ITERATIONS),
            train_dataset=train,
            environment_factory=env_class,
            callbacks=[module.EpisodeMetrics()],  # orsgen/... figures in log_history (docs/reference.md: episode metrics)
        )
        notice = UnscoredNotice()  # on the module logger itself: filters skip records of child loggers
        trl_logger = logging.getLogger(GRPOTrainer.__module__)
        trl_logger.addFilter(notice)
        try:
            with Progress(trainer):  # a line every few seconds; TRL's printed log dicts left out
                trainer.train()
        finally:
            trl_logger.removeFilter(notice)
        print(f"[7] {trainer.state.global_step} steps done; tools offered: {[t.__name__ for t in trainer.tools]}")
        for entry in trainer.state.log_history:
            if "reward" in entry:
                print(f"      step {entry['step']}: reward mean {shown(entry, 'reward', '.3f')} "
                      f"(std {shown(entry, 'reward_std', '.3f')}), tool calls per rollout "
                      f"{shown(entry, 'tools/call_frequency', '.2f')}, failures {shown(entry, 'tools/failure_frequency', '.2f')}; "
                      f"scored {shown(entry, 'orsgen/scored_fraction', '.2f')} of {shown(entry, 'orsgen/episodes', '.0f')} "
                      f"episodes, reset p50 {shown(entry, 'orsgen/reset_seconds_p50', '.0f', 1000)} ms")
        line = unscored_line(trainer.state.log_history)
        if line:
            print(line)
        module.close_all()  # GRPOTrainer never closes its environments
        calls = env_class.calls  # type: ignore[attr-defined]
        print(f"      {len(calls)} tool calls reached the environment through the adapter, e.g.:")
        for name, arguments, result in calls[:4]:
            print(f"        {name}({arguments}) -> {result!r}")
    print(f"done in {time.time() - start:.0f}s")
    return 0 if calls else 1


if __name__ == "__main__":
    raise SystemExit(main())
