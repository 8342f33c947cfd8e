"""GRPOTrainer set-ups for tests: a real trainer with the tiny offline model (examples/tiny.py) and a scripted first
assistant turn, so what a run sends the environment is known; the tools TRL finds on an environment class; a class
that records every tool call. Imported by the test modules and by the harness's torchrun workers (no pytest here).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

from examples import tiny
from examples.tiny import recording, tool_methods

__all__ = ["ECHO_APPLE", "echo_the_word", "recording", "tool_methods", "tools_by_name", "trainer"]

# The one conversation the tokenizer is trained on when a test gives none: a rollout of the example environment.
ECHO_APPLE = ("Echo the word apple", "echo", {"text": "apple"}, "apple")
# Set by tests/conftest.py while a test without the `trainer` marker runs: the fast tier builds no trainer.
FAST_TIER = False


def tools_by_name(instance: Any) -> dict[str, Any]:
    """`tool_methods(instance)` keyed by the name the model sees (`__name__`); two tools may not share one."""
    methods = tool_methods(instance)
    by_name = {m.__name__: m for m in methods}
    assert len(by_name) == len(methods), f"two methods share a __name__: {[m.__name__ for m in methods]}"
    return by_name


def echo_the_word(i: int, prompt: str) -> str:
    """The scripted first turn on the echo environments: echo the task's word ("x" if the prompt names none)."""
    word = re.search(r"Echo the word (\w+)", prompt)
    return tiny.call_text("echo", {"text": word.group(1) if word else "x"})


def trainer(
    factory: Any,
    out_dir: str,
    steps: int,
    *,
    tools: Sequence[Callable[..., Any]],
    conversations: Sequence[list[dict[str, Any]]] | None = None,
    train_dataset: Any = None,
    eval_dataset: Any = None,
    first_turn: Callable[[int, str], str] = echo_the_word,
    threads: int | None = None,
    trainer_class: type | None = None,
    callbacks: Sequence[Any] = (),
    reward_funcs: Any = None,
    rollout_func: Callable[..., Any] | None = None,
    **config: Any,
) -> Any:
    """A real GRPOTrainer on `factory` (`environment_factory`): the tiny model with a tokenizer trained on
    `conversations` (default: ECHO_APPLE) and `tools`, rollouts whose first turn is `first_turn(i, prompt)`, and
    `tiny.grpo_config(out_dir, steps, max_tool_calling_iterations=1, **config)`. No `train_dataset`: the environment
    owns the data. `threads` sets torch's thread count first; `callbacks`, `reward_funcs` and `rollout_func` (instead of the scripted first turn) are the trainer's."""
    if FAST_TIER:
        raise RuntimeError("a GRPOTrainer in a test without @pytest.mark.trainer: mark it (the fast tier builds none)")
    import torch
    from trl import GRPOTrainer

    if threads is not None:
        torch.set_num_threads(threads)
    tok = tiny.tokenizer(conversations or [tiny.conversation(*ECHO_APPLE)], tools)
    return (trainer_class or GRPOTrainer)(
        model=tiny.model(tok),
        processing_class=tok,
        args=tiny.grpo_config(out_dir, steps, **{"max_tool_calling_iterations": 1, **config}),
        train_dataset=train_dataset,
        eval_dataset=eval_dataset,
        environment_factory=factory,
        reward_funcs=reward_funcs,
        rollout_func=rollout_func or tiny.scripted_rollouts(first_turn),
        callbacks=list(callbacks),
    )
