"""A GRPOTrainer run on the judged environment (tests/envs/judged.py) with `group_reward` in reward_funcs, used by
tests/test_group_scoring.py in process and, as `torchrun ... -m tests.harness.group_scoring MODULE OUT TASKS
PER_DEVICE`, by its two-rank test: each rank prints what group_reward returned and how many sessions it left open.

Rollout k of a group answers ANSWERS[k] (None: no tool call), so the judge's scores tell the rollouts apart."""

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from tests.harness import emit

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

ANSWERS = ["Paris", "It is Paris", "Rome", None]
SCORES = [1.0, 0.5, 0.25, 0.0]  # what the judge gives them on task 0 (shortest correct answer wins)
STARTED = time.monotonic()  # about when the process started: this module is its main one
PHASE = "group_scoring:"  # the lines that say when each phase began


def train(module: Any, out_dir: str, indices: list[int], per_device: int = 8, steps: int = 2,
          factory: Any = None) -> tuple[Any, list[list[float | None]], list[str]]:
    """(trainer, what group_reward returned at each step, every prompt as the chat template rendered it)."""
    from examples import tiny
    from examples.tiny import tool_methods
    from tests.harness import trainers

    train_rows = module.dataset(indices=indices, prompts=True)
    probe = module.Judged()
    conversations = [[*row["prompt"][:-1], *tiny.conversation(row["task_prompt"], "answer", {"text": a}, "correct")]
                     for row in train_rows for a in ("Paris", "Rome")]
    returned: list[list[float | None]] = []
    rendered: list[str] = []

    def group_reward(**kwargs: Any) -> list[float | None]:
        scores = module.group_reward(**kwargs)
        returned.append(scores)
        return scores

    def rollout(prompts: list[list[dict[str, Any]]], trainer: Any) -> dict[str, Any]:
        tok = trainer.processing_class
        prompt_ids, completion_ids = [], []
        for i, prompt in enumerate(prompts):
            ids = tok.apply_chat_template(prompt, tools=trainer.tools, add_generation_prompt=True, tokenize=True,
                                          return_dict=True)["input_ids"]
            rendered.append(tok.decode(ids))
            prompt_ids.append(ids)
            answer = ANSWERS[i % len(ANSWERS)]
            text = tiny.call_text("answer", {"text": answer}) if answer else "I do not know<|eot|>"
            completion_ids.append(tok(text, add_special_tokens=False)["input_ids"])
        return {"prompt_ids": prompt_ids, "completion_ids": completion_ids, "logprobs": None}

    trainer = trainers.trainer(
        factory or module.Judged, out_dir, steps, threads=1, tools=tool_methods(probe), conversations=conversations,
        train_dataset=train_rows, reward_funcs=[group_reward], rollout_func=rollout,
        per_device_train_batch_size=per_device, num_generations=4, max_completion_length=48,
    )
    trainer.train()
    return trainer, returned, rendered


def main(module_path: str, out_dir: str, tasks: str, per_device: str) -> None:
    from orsgen.runtime import open_sessions

    from tests.harness.generation import load as load_module

    module = load_module(Path(module_path))
    rank = int(os.environ.get("RANK", "0"))
    try:
        trainer, returned, _ = train(module, out_dir, [int(t) for t in tasks.split(",")], int(per_device))
    except RuntimeError as exc:  # the one line a refused layout gives
        emit({"rank": rank, "refused": str(exc)})
        return
    module.close_all()
    emit({"rank": rank, "returned": returned, "open_sessions": open_sessions(),
                      "steps": trainer.state.global_step})


def said(what: str) -> None:
    """When `what` happened, in seconds since the process started, on stderr: what a failure shows of where its time
    went (tests/test_group_scoring.py prints these lines)."""
    print(f"{PHASE} {what} at {time.monotonic() - STARTED:.1f} s", file=sys.stderr, flush=True)


def async_worker(module_path: str, name: str = "Judged") -> None:
    """TRL's AsyncGRPO rollout worker (driven as tests/test_async_grpo.py drives it) with group_reward in its
    reward_funcs, in a process of its own, on tasks 0 and 2 (whose judge fails) of the module's class `name`: the n-th
    rollout of a question answers ANSWERS[n % 4]. Prints how the worker ended and, per sample, its group, answer,
    tool result and group_reward score."""
    import math

    from orsgen.runtime import open_sessions

    from examples import tiny
    from examples.tiny import tool_methods
    from tests.harness.async_worker import run_worker
    from tests.harness.completions import serving
    from tests.harness.generation import load as load_module

    module = load_module(Path(module_path))
    rows = module.dataset(indices=[0, 2], prompts=True)
    tok = tiny.tokenizer([[*row["prompt"][:-1], *tiny.conversation(row["task_prompt"], "answer", {"text": a},
                                                                   "correct")]
                          for row in rows for a in ("Paris", "Rome")], tool_methods(getattr(module, name)()))
    asked: dict[str, int] = {}

    def script(prompt_text: str) -> str:
        if "<|tool|>" in prompt_text:
            return "done<|eot|>"
        question = prompt_text.rsplit("<|user|>", 1)[-1]
        n = asked[question] = asked.get(question, -1) + 1
        answer = ANSWERS[n % len(ANSWERS)]
        return tiny.call_text("answer", {"text": answer}) if answer else "I do not know<|eot|>"

    def two_groups(samples: list[Any]) -> bool:
        return all(sum(s.group_id == g for s in samples) >= 4 for g in (0, 1))

    said("the rows and the tokenizer made")
    with serving(tok, script) as completions:
        run = run_worker(
            two_groups, timeout=90,
            model_name="tiny", dataset=rows, reward_funcs=[module.group_reward], processing_class=tok,
            eos_token_ids=[tok.eos_token_id], environment_factory=getattr(module, name), num_generations=4,
            max_inflight_tasks=4, vllm_server_url=completions.url, max_tokens=64, max_tool_calling_iterations=1,
        )
    said("the worker stopped")
    module.close_all()
    samples = []
    for s in run.samples:
        calls = [c for m in s.completion if m.get("tool_calls") for c in m["tool_calls"]]
        arguments = calls[0]["function"]["arguments"] if calls else None
        arguments = json.loads(arguments) if isinstance(arguments, str) else arguments
        score = s.metrics["rewards/group_reward"]
        results = [m["content"] for m in s.completion if m["role"] == "tool"]
        samples.append({"group": s.group_id, "task": s.prompt[-1]["content"],
                        "answer": arguments.get("text") if arguments else None, "result": results[0] if results else None,
                        "score": None if math.isnan(score) else score})
    emit({"error": type(run.error).__name__, "message": str(run.error), "failed": run.failed,
          "samples": samples, "open_sessions": open_sessions()})


if __name__ == "__main__":
    if sys.argv[1] == "async":
        import faulthandler

        # A hang shows its threads' stacks: after the worker's own bounds (ready 60 s, samples 90 s, stop 60 s) and the
        # set-up before them, each of which fails with its own line, and before the test's (processes.HANG, 600 s).
        faulthandler.dump_traceback_later(480, exit=True)
        async_worker(*sys.argv[2:4])
    else:
        main(*sys.argv[1:5])
