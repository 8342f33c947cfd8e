"""GRPOTrainer's reward computation as the runtime reads it: the batch's last reward read (`rewards_read`), a
rollout's turns as reward functions get them (`rollout_turns`), and the GRPO group layout of the environments TRL
passes reward functions (`group_layout`); what AsyncGRPOTrainer passes instead (see the package's docstring)."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from orsgen.runtime import trl as release
from orsgen.runtime.trl.placing import NEEDS, group_size
from orsgen.runtime.trl.stack import find, from_trl, has, owner

NO_ENVIRONMENTS = ("{what} needs the rollouts' environments, which GRPOTrainer passes to reward functions and "
                   "AsyncGRPOTrainer does not: with AsyncGRPOTrainer, train on get_reward() without {what}")
NO_GROUP_PLACE = ("group_reward needs the rollouts' environments, which GRPOTrainer passes to reward functions, or "
                  "AsyncGRPOTrainer's rollout worker, where orsgen sees each rollout end: this call has neither")
NO_GROUP = ("group_reward: AsyncGRPOTrainer's worker asked for the scores of a group whose rollouts orsgen did not see "
            "end there: pass the module's group_reward itself in reward_funcs (under that name), with its environment "
            "class as environment_factory")


def _rewards_frame(frame: Any, depth: int) -> tuple[Any, dict[str, Any]] | None:
    """GRPOTrainer's class and the locals of its `_calculate_rewards` frame, at most `depth` frames above `frame`."""
    grpo = sys.modules.get("trl.trainer.grpo_trainer")
    cls = getattr(grpo, "GRPOTrainer", None)
    method = getattr(cls, "_calculate_rewards", None)
    code = getattr(getattr(method, "__wrapped__", method), "__code__", None)  # under TRL's profiling decorator
    if code is None:
        return None
    found = find(frame, lambda f: f.f_code is code, depth)
    return None if found is None else (cls, found.f_locals)


def rewards_read(adapter: Any) -> list[Any] | None:
    """The batch's environments when this `get_reward()` of `adapter` is the last use TRL's reward computation makes
    of them (see the docstring); None anywhere else, or when a subclass overrides where it is made."""
    found = _rewards_frame(sys._getframe(1), 8)  # get_reward (a generated override too), TRL's wrapper, its listcomp
    if found is None:
        return None
    cls, local = found
    trainer, environments = local.get("self"), local.get("reward_kwargs", {}).get("environments")
    if any(getattr(type(trainer), name, None) is not getattr(cls, name)
           for name in ("_calculate_rewards", "_generate_and_score_completions")):
        return None
    if not release.check_version() or local.get("async_funcs_info"):
        return None
    last = local.get("i") == len(getattr(trainer, "reward_funcs", ())) - 1
    return environments if last and isinstance(environments, list) and environments and environments[-1] is adapter else None


def rollout_turns(adapter: Any) -> tuple[Any, Any] | None:
    """`adapter`'s rollout as GRPOTrainer passes it to reward functions (`prompts[i]`, `completions[i]`, `i` its
    place in `environments`), when a reward function of `_calculate_rewards` (get_reward, or one of the runtime's)
    reads it on this thread; None anywhere else."""
    found = _rewards_frame(sys._getframe(1), 16)
    if found is None:
        return None
    local = found[1]
    environments, prompts, completions = (local.get("reward_kwargs", {}).get("environments"), local.get("prompts"),
                                          local.get("completions"))
    if not isinstance(environments, list) or not isinstance(prompts, list) or not isinstance(completions, list):
        return None
    at = next((i for i, env in enumerate(environments) if env is adapter), None)
    if at is None or at >= len(prompts) or at >= len(completions):
        return None
    return prompts[at], completions[at]



def group_layout(environments: Sequence[Any]) -> tuple[int, int]:
    """(GRPO group size, position of this rank's first rollout within its group) for the batch whose environments
    TRL passed to a reward function, read from the trainer on the stack (the one holding that very list)."""
    def holder(frame: Any) -> bool:
        trainer = owner(frame)
        return trainer is not None and from_trl(type(trainer)) and getattr(trainer, "environments", None) is environments

    found = find(sys._getframe(1), holder)
    trainer = None if found is None else owner(found)
    if trainer is not None and all(has(trainer, path) for path in NEEDS):
        group = group_size(trainer)
        rank = trainer.accelerator.process_index
        return int(group), (rank * len(environments)) % int(group)
    raise RuntimeError("group_reward is a reward function for GRPOTrainer(reward_funcs=[...]): called elsewhere, the "
                       "GRPO groups of the rollouts cannot be known")
