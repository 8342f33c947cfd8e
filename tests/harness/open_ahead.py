"""GRPO on the slow echo environment (tests/envs/slow_echo.py), for tests/test_open_ahead.py and the crash scripts it
runs in a subprocess: 8 rollouts a step in groups of GROUP, with a dataset of 4 tasks or the environment owning the
data."""

from typing import Any

from tests.harness import trainers

GROUP = 4


def train(mod: Any, out: Any, steps: int = 2, env_class: type | None = None, owned: bool = False) -> Any:
    """Train `steps` steps of GRPO on `env_class` (default: the module's Slowecho) and return the trainer."""
    trainer = trainers.trainer(env_class or mod.Slowecho, str(out), steps, tools=trainers.tool_methods(mod.Slowecho()),
                               threads=1, train_dataset=None if owned else mod.dataset(num_tasks=4),
                               num_generations=GROUP)
    trainer.train()
    return trainer
