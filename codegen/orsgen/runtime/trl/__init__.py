"""Everything orsgen assumes about TRL, in one package that imports no other runtime module. Other runtime modules ask
it (`place()`: where a rollout sits, ...) and never look at TRL themselves. Its modules: `stack` (the one walk over the
stack), `placing` (a batch and its generation rounds), `tools` (a turn of the tool loop), `rewards` (the reward
computation), `worker` (AsyncGRPOTrainer's rollout worker), `trainer` and `callback` (what is read of a trainer; the
callbacks' base, which finds its trainer), `rollout` (what GRPOTrainer does with a rollout, which `orsgen eval` does
too); here, the releases read and their check.

What is assumed (TRL 1.13 to 1.16, read from their code and tested against the oldest and the newest):
- GRPOTrainer resets a batch's rollouts one after another on the trainer's thread, from a method of the trainer or
  below one (`_generate_and_score_completions` today; the name is not relied on), after drawing the batch's
  environments into `trainer.environments`. A rollout's position is the index of its environment in that list (by
  identity), and the batch's rows are the list of rows on the stack, as long as that list, whose entry at that
  position is the row the reset received.
- The trainer attributes in `NEEDS` (public ones of GRPOTrainer and transformers' Trainer): the GRPO group size, the
  rank and world size, the global step, and the schedule that turns steps into generation rounds. Evaluation is
  `trainer.model.training == False`, as TRL itself decides it.
- Every batch has an `environments` list of its own (TRL builds a new one per generation), so a batch is known by that
  list. Generation rounds are counted here, one per training batch, not derived from the schedule: TRL generates at
  every `steps_per_generation * num_iterations`-th micro-step (training_step call), which need not fall on an
  optimizer step. Each `train()` call has a `TrainerState` of its own and TRL's micro-step count starts at 0 in a new
  trainer: the count starts again there, after ceil(micro-steps done / every) rounds (a resume: the micro-steps of
  its global steps), and another round follows while rounds counted * every < the call's micro-steps left. The
  micro-steps of a run are transformers' optimizer steps of gradient_accumulation_steps batches, but the last of an
  epoch (`callback_handler.train_dataloader`'s length in batches), which has the rest: an environment-owned run's
  placeholder epoch may be shorter than one accumulation. Each rank counts its own batches: ranks generate in
  lockstep, so they agree. Evaluation's batches and other trainers do not move a trainer's count; a stop
  (`should_training_stop`) leaves the look-ahead of a round that did not come to the next batch or close_all().
- An evaluation pass is one call of transformers' `Trainer.evaluation_loop` (`evaluate()` and `predict()` run it)
  whose `step` local numbers the pass's batches from 0: that number places the batch, so every pass evaluates the
  same tasks (only the int is read; nothing of the frame is kept). Without that frame, batches at one global step are
  numbered on from the first.
- Rewards are gathered rank-major and normalised in consecutive chunks of the group size, so a group may span ranks.
- A resumed train() call (`resumed_from`): transformers' `Trainer._inner_training_loop(..., resume_from_checkpoint,
  ...)` (5.16 to 5.24) is on the stack of every reset of a training batch, its `resume_from_checkpoint` local the
  checkpoint folder it resumed from (a path; `True` was resolved before it), or None.
- Trainer callbacks run on the trainer's thread, called from a trainer method; GRPOTrainer and AsyncGRPOTrainer keep
  `_metrics[mode]`, lists of values per name that `log()` reduces (a one-value list stays that value) and clears.
  AsyncGRPOTrainer (it has `rollout_worker`) runs its rollouts, and so the environments, in a spawned process.
- transformers' Trainer calls every callback of `trainer.callback_handler` (added by `trainer.add_callback`) at
  `on_train_end` when training ends, at max_steps or stopped early (`should_training_stop`), not when train() raises:
  what is opened ahead for a trainer is closed then (`on_training_end`), or when the trainer is collected.
- Anything else from TRL on the stack (an AsyncGRPO rollout worker, a trainer whose batch cannot be read) is a place
  where a reset without `task_index` cannot be placed: it is refused, never given "the first task". So is a reset on
  a thread other than the main one outside any trainer: AsyncGRPOTrainer's rollout threads.
- GRPOTrainer passes reward functions the batch's `environments`; AsyncGRPOTrainer passes none (`NO_ENVIRONMENTS`).
- A turn's tool calls (`tool_turn`; read from TRL 1.13, 1.14, 1.15 and 1.16, where this part of the loop is the same
  text): `GRPOTrainer._tool_call_loop` calls each sync tool from its own frame, `sync_tool_dict[name](**arguments)`,
  rollout by rollout in ascending batch order (`idxs_with_tool`, and `tool_calls` parallel to it), each rollout's
  calls in the order the model wrote them; a rollout in a turn's set has every call attempted in that turn (the
  iteration limit is checked before a turn, the rollback of an overlong rollout after it). Its locals `self`, `idx`,
  `idxs_with_tool`, `tool_calls`, `tool_call` and `iteration_num` say where the loop is; the trainer's
  `environments[i]`, `_sync_tool_dicts[i]` (keyed by the tool's `__name__`, bound methods of that environment) say
  what each later call runs. Only an exception escaping the loop stops a later call: a call dict without `type`, or
  of type `function` without a `function` dict holding a `str` name, is read outside TRL's `try`, so a turn holding
  one is not read. Async tools run on TRL's loop thread, out of sight of that frame; AsyncGRPOTrainer has a loop
  of its own in another process: neither is read.
- A batch's last reward read (`rewards_read`; read from TRL 1.13 and 1.16, where `_calculate_rewards` differs only
  in how it tells an async function): `GRPOTrainer._calculate_rewards` (under TRL's profiling decorator) runs the sync reward functions in the order
  of `reward_funcs` (its local `i`), each over the whole batch (`reward_kwargs["environments"]`), then gathers the
  async ones it set aside (`async_funcs_info`). An environment that defines `get_reward` has a sync function of
  TRL's appended to `reward_funcs`, which calls it environment by environment, in batch order. Once the last
  function has read the batch's last environment, and nothing async is left, `_generate_and_score_completions`
  does not touch the batch's environments again: the next use is the next batch's resets.
- AsyncGRPOTrainer's rollout worker (`worker`; read from TRL 1.13 and 1.16, where both are the same text): TRL's
  `async_rollout_worker._child_main(loop_cls, loop_kwargs, samples_queue, model_version_value, ..., metrics_queue)`
  is on the stack of the spawned worker's main thread for as long as the worker runs; `metrics_queue` takes dicts of
  figures (a value, or a `(numerator, denominator)` rate), never blocking the worker (`put_nowait`, dropped when
  full), and `model_version_value` (an `mp.Value`) is the policy version the worker generates with (the trainer's
  weight-sync count). The trainer's `log()` drains `trainer.rollout_worker.metrics_queue` (`get_nowait()` until
  `queue.Empty`) into `_metrics["train"]`, one list per name, on the main process only (`worker_figures`).
  `_child_main`'s `rollout_loop` (the `_AsyncRolloutLoop`) runs its asyncio loop (`_loop`); on it, the task of
  `_AsyncRolloutLoop._generate_loop` resets each rollout's environment and, once the rollout ended, calls its
  `get_reward()`, one environment at a time, awaiting each call (sync ones: in a thread pool from 1.16, inline in
  1.13; `worker_rollout`). While it does, its locals say which: `environment` (the one called), `group_id` (its GRPO
  group: `num_generations` rollouts of one dataset row, numbered from 0 by the worker), and at get_reward() `prompt`
  and `completion`, the very objects its `_score_group` later hands the reward functions, in the group's
  `prompts` and `completions` lists, once the group's `num_generations` rollouts have all ended.
  `_child_main`'s `stop_event` (an `mp.Event`) is waited on by the child's stop watcher thread and set by the trainer's
  `AsyncRolloutWorker.stop()`; a multiprocessing Event's `set()` waits until every waiter has woken, so once a child
  died while its watcher waited (of any failure), `stop()`, and with it `train()`, waits for ever (`stop_event`).
  The watcher is a daemon thread named `grpo-mp-stop-watcher` that returns once the event is set.
- A rollout's turns (`rollout_turns`, for trajectory records): `_calculate_rewards(inputs, prompts, completions, ...)`
  holds the batch's prompts (each with what its `reset()` returned appended to the last message) and completions (the
  model's turns and the tool turns TRL's loop appended), parallel to `environments`; the same locals in 1.13-1.16.
"""

from __future__ import annotations

import functools
import logging
from importlib.metadata import PackageNotFoundError, version

from orsgen.runtime.trl.placing import (
    FIX,
    NEEDS,
    Batch,
    Memory,
    Place,
    Slot,
    async_tool_thread,
    place,
    placed_trainer,
    rollout_thread,
)
from orsgen.runtime.trl.rewards import (
    NO_ENVIRONMENTS,
    NO_GROUP,
    NO_GROUP_PLACE,
    group_layout,
    rewards_read,
    rollout_turns,
)
from orsgen.runtime.trl.tools import Call, Turn, tool_turn
from orsgen.runtime.trl.trainer import (
    gather,
    metrics_window,
    on_training_end,
    resumed_from,
    rollouts_elsewhere,
    trainer_of,
    training,
)
from orsgen.runtime.trl.worker import (
    STOP_WATCHER,
    Worker,
    WorkerRollout,
    _stop_watcher_released,
    release_stop_watcher,
    stop_event,
    worker,
    worker_figures,
    worker_rollout,
)

log = logging.getLogger("orsgen")

RANGE = ((1, 13), (1, 17))  # (major, minor): the oldest supported release and the first one past the range
SUPPORTED = f">={RANGE[0][0]}.{RANGE[0][1]},<{RANGE[1][0]}.{RANGE[1][1]}"  # as the `train` extra writes it

__all__ = [
    "FIX",
    "NEEDS",
    "NO_ENVIRONMENTS",
    "NO_GROUP",
    "NO_GROUP_PLACE",
    "RANGE",
    "STOP_WATCHER",
    "SUPPORTED",
    "Batch",
    "Call",
    "Memory",
    "Place",
    "Slot",
    "Turn",
    "Worker",
    "WorkerRollout",
    "_stop_watcher_released",
    "async_tool_thread",
    "check_version",
    "gather",
    "group_layout",
    "in_range",
    "installed",
    "metrics_window",
    "on_training_end",
    "place",
    "placed_trainer",
    "release_stop_watcher",
    "resumed_from",
    "rewards_read",
    "rollout_thread",
    "rollout_turns",
    "rollouts_elsewhere",
    "stop_event",
    "tool_turn",
    "trainer_of",
    "training",
    "worker",
    "worker_figures",
    "worker_rollout",
]


def installed() -> str:
    try:
        return f"TRL {version('trl')}"
    except PackageNotFoundError:
        return "TRL not installed"


def in_range(found: str) -> bool:
    parts = []
    for piece in found.split(".")[:2]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits or 0))
    return RANGE[0] <= (parts[0], parts[1] if len(parts) > 1 else 0) < RANGE[1]


@functools.cache
def check_version() -> bool:
    """Whether the installed TRL is a release read here (None installed: no), once per process: TRL's version does
    not change under a running trainer, and reading it takes a millisecond. One outside the range is named once."""
    try:
        found = version("trl")
    except PackageNotFoundError:
        return False
    if not in_range(found):
        log.warning("orsgen: TRL %s is outside the range orsgen is tested with (%s): the batch was read through the "
                    "trainer attributes it checks, but nothing else of this release is known", found, SUPPORTED)
        return False
    return True


_check_version, _in_range = check_version, in_range  # (the names the tests read: they clear the check's cache)
