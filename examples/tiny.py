"""The tiny offline model of the examples, the tests and the benchmark: the model and its chat format are the
package's (`orsgen.tiny`, which `python -m orsgen.tiny` runs for a user's own environment); here are what the tests
and the benchmark add: a class recording its tool calls, scripted first turns, and a GRPOConfig for a CPU run of a few
steps."""

from collections.abc import Callable
from typing import Any, ClassVar

from orsgen.evaluate.target import tool_methods
from orsgen.tiny import *  # the model, its chat format and warm-up are the package's

__all__ = ["grpo_config", "recording", "scripted_rollouts", "tool_methods"]  # and orsgen.tiny's


def recording(adapter_class: type) -> type:
    """A subclass whose tool calls (name, arguments, result or "error: ...") are logged in `calls` through the
    runtime's tool_call hook; its tools and its name are exactly the adapter's (TRL names the reward column after
    the class)."""
    from orsgen.runtime import hooks

    class Recording(adapter_class):  # type: ignore[misc, valid-type]
        calls: ClassVar[list[tuple[str, dict[str, Any], Any]]] = []

    def record(call: hooks.ToolCall) -> None:
        Recording.calls.append((call.name, call.arguments, call.result if call.error is None else f"error: {call.error}"))

    hooks.add("tool_call", record, Recording)
    Recording.__name__ = Recording.__qualname__ = adapter_class.__name__
    return Recording


def scripted_rollouts(first_turn: Callable[[int, str], str]) -> Callable[..., dict[str, Any]]:
    """A `rollout_func` whose first assistant turn is `first_turn(i, prompt_text)`; TRL runs the tools after it."""

    def rollout(prompts: list[list[dict[str, Any]]], trainer: Any) -> dict[str, Any]:
        tok = trainer.processing_class
        prompt_ids, completion_ids = [], []
        for i, prompt in enumerate(prompts):
            ids = tok.apply_chat_template(
                prompt, tools=trainer.tools, add_generation_prompt=True, tokenize=True, return_dict=True
            )["input_ids"]
            prompt_ids.append(ids)
            text = first_turn(i, prompt[-1]["content"])
            completion_ids.append(tok(text, add_special_tokens=False)["input_ids"])
        return {"prompt_ids": prompt_ids, "completion_ids": completion_ids, "logprobs": None}

    return rollout


def grpo_config(output_dir: str, steps: int, **overrides: Any) -> Any:
    """GRPOConfig for a CPU run of a few steps: 2 prompts x 4 generations per step."""
    from trl import GRPOConfig

    settings: dict[str, Any] = {
        "output_dir": output_dir,
        "use_cpu": True,
        "bf16": False,
        "gradient_checkpointing": False,
        "per_device_train_batch_size": 8,
        "num_generations": 4,
        "max_completion_length": 64,
        "max_tool_calling_iterations": 2,
        "max_steps": steps,
        "learning_rate": 1e-3,
        "beta": 0.0,
        "logging_steps": 1,
        "report_to": "none",
        "save_strategy": "no",
        "disable_tqdm": True,
        "dataloader_num_workers": 0,
        "shuffle_dataset": False,
        "seed": 0,
    }
    settings.update(overrides)
    return GRPOConfig(**settings)
