"""Everything orsgen assumes about TRL, in one place. Other runtime modules ask `place()` where a rollout sits and
never look at TRL themselves.

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
  died while its watcher waited (of any failure), `stop()`, and with it `train()`, waits for ever (`guard_stop`).
  The watcher is a daemon thread named `grpo-mp-stop-watcher` that returns once the event is set.
- A rollout's turns (`rollout_turns`, for trajectory records): `_calculate_rewards(inputs, prompts, completions, ...)`
  holds the batch's prompts (each with what its `reset()` returned appended to the last message) and completions (the
  model's turns and the tool turns TRL's loop appended), parallel to `environments`; the same locals in 1.13-1.16.
"""

from __future__ import annotations

import atexit
import functools
import logging
import os
import sys
import threading
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from typing import Any

log = logging.getLogger("orsgen")

RANGE = ((1, 13), (1, 17))  # (major, minor): the oldest supported release and the first one past the range
SUPPORTED = f">={RANGE[0][0]}.{RANGE[0][1]},<{RANGE[1][0]}.{RANGE[1][1]}"  # as the `train` extra writes it
NEEDS = (
    "environments", "num_generations", "num_iterations", "accelerator.process_index", "accelerator.num_processes",
    "state.global_step", "state.max_steps", "args.gradient_accumulation_steps", "args.steps_per_generation",
    "model.training",
)
FIX = "pass train_dataset=dataset() so every row carries task_index"
NO_ENVIRONMENTS = ("{what} needs the rollouts' environments, which GRPOTrainer passes to reward functions and "
                   "AsyncGRPOTrainer does not: with AsyncGRPOTrainer, train on get_reward() without {what}")
NO_GROUP_PLACE = ("group_reward needs the rollouts' environments, which GRPOTrainer passes to reward functions, or "
                  "AsyncGRPOTrainer's rollout worker, where orsgen sees each rollout end: this call has neither")
NO_GROUP = ("group_reward: AsyncGRPOTrainer's worker asked for the scores of a group whose rollouts orsgen did not see "
            "end there: pass the module's group_reward itself in reward_funcs (under that name), with its environment "
            "class as environment_factory")
_DEPTH = 64  # frames searched above a reset: TRL's call chain from train() to reset() is about 10 deep


@dataclass(frozen=True)
class Slot:
    """Where a rollout sits: the `position`-th group of the run's task stream `stream` ("train" or "eval")."""

    stream: str
    position: int
    window: int = 1  # groups per step: no task repeats within any `window` consecutive positions
    ahead: int = 0  # asked this many rounds before the slot's own (the look-ahead opens the next round's sessions)


@dataclass(frozen=True)
class Batch:
    """This rank's GRPOTrainer batch: its environments and rows, this rollout's place in it, where the batch sits."""

    adapters: list[Any]  # trainer.environments, one per rollout
    rows: list[Mapping[str, Any]]
    index: int  # this rollout's position
    group: int  # GRPO group size (num_generations, or num_generations_eval)
    stream: str  # "train" or "eval"
    first: int  # the run-wide position of this rank's first rollout, rank-major (the order TRL gathers rewards in)
    width: int  # rollouts per generation round, across ranks
    more: bool  # another generation round of this stream follows (training only: the run has steps left)

    @property
    def groups(self) -> int:
        return self.width // self.group

    @property
    def tag(self) -> tuple[str, int]:
        """Identifies the batch: what was opened for it is taken by its own resets only."""
        return self.stream, self.first

    def slot(self, position: int, rounds_ahead: int = 0) -> Slot:
        """The slot of the rollout at `position` (of this batch, or of the one `rounds_ahead` later): a group that
        spans two ranks still gets one task."""
        return Slot(self.stream, (self.first + rounds_ahead * self.width + position) // self.group, self.groups,
                    rounds_ahead)


@dataclass(frozen=True)
class Place:
    """The answer to "where does this rollout sit?": its batch, or why there is none."""

    batch: Batch | None
    inside: str | None = None  # the TRL code found on the stack when the batch cannot be read; None: outside TRL
    why: str = ""  # why the batch cannot be read

    def placeable(self) -> bool:
        """Whether a reset without task_index may get a task here: in a batch, or outside TRL on the main thread
        (a look at a prompt by hand); not inside TRL code that was not read, nor on AsyncGRPOTrainer's threads."""
        return self.batch is not None or (self.inside is None and not rollout_thread())

    def refusal(self) -> str:
        """The one line a reset without task_index gets where it cannot be placed."""
        if self.inside is not None:
            return (f"reset() without task_index inside {self.inside} ({installed()}; orsgen reads the batch of TRL "
                    f"{SUPPORTED}): {self.why}, so the rollout's GRPO group cannot be known: {FIX}")
        thread = threading.current_thread().name
        return (f"reset() without task_index from thread {thread!r}, outside GRPOTrainer's batch (AsyncGRPOTrainer's "
                f"rollout threads): the rollout's GRPO group cannot be known: {FIX}")


def async_tool_thread() -> bool:
    """The thread GRPOTrainer runs async tools on (its own event loop, named so in TRL 1.13-1.16)."""
    return threading.current_thread().name == "GRPOTrainer-AsyncLoop"


def rollout_thread() -> bool:
    """A thread other than the main one: where AsyncGRPOTrainer runs its rollouts (and open-ahead, which would
    compete with its own overlap, does not engage)."""
    return threading.current_thread() is not threading.main_thread()


def installed() -> str:
    try:
        return f"TRL {version('trl')}"
    except PackageNotFoundError:
        return "TRL not installed"


@dataclass
class _Rounds:
    """One trainer's generation rounds, counted at each batch's first reset."""

    state: weakref.ref[Any] | None = None  # the TrainerState of the train() call being counted
    begun: int = 0  # the global step that call began at
    next: int = 0  # the next training round
    counted: int = 0  # rounds counted in that call
    batch: list[Any] | None = None  # the environments list of the last batch placed (the trainer holds it too)
    placed: tuple[int, bool] = (0, False)  # that batch's round and `more`
    eval: tuple[int, int] = (-1, -1)  # without an evaluation loop on the stack: (batch number, global step)


_rounds: weakref.WeakKeyDictionary[Any, _Rounds] = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def place(adapter: Any, row: Mapping[str, Any]) -> Place:
    """Where the rollout of `adapter`, being reset with `row`, sits: read from the trainer on the stack."""
    known = _same_batch(adapter, row)  # the batch's later resets: no walk over the stack
    if known is not None:
        return _read(known[0], adapter, row, [], known[1])
    frame: Any = sys._getframe(1)
    frames: list[Any] = []
    inside: str | None = None
    for _ in range(_DEPTH):
        if frame is None:
            break
        module, code = str(frame.f_globals.get("__name__", "")), frame.f_code
        # Locals are read only where a trainer can be: TRL's own frames and methods (a subclass's `self`). Reading a
        # frame's f_locals makes Python keep a copy of them in the frame while it runs (3.11/3.12): elsewhere that
        # would hold the caller's objects (an adapter it deletes) alive.
        if module.split(".")[0] == "trl" or _method(code):
            frames.append(frame)
            local = frame.f_locals
            trainer = next((v for v in local.values() if _from_trl(type(v)) and _holds(v, adapter)), None)
            if trainer is not None:
                return _read(trainer, adapter, row, frames)
            if inside is None and (module.split(".")[0] == "trl" or _from_trl(type(local.get("self")))):
                inside = f"{module}.{code.co_qualname}"
        frame = frame.f_back
    if inside is not None:
        return Place(None, inside, "this environment is not among the trainer's batch environments")
    return Place(None)


def _method(code: Any) -> bool:
    """A method's frame (its first argument is `self`): one whose locals may be read (see place())."""
    return bool(code.co_argcount) and code.co_varnames[0] == "self"


def _group_size(trainer: Any) -> Any:
    """The GRPO group size of the batch being rolled out: evaluation has its own, when set."""
    if trainer.model.training:
        return trainer.num_generations
    return getattr(trainer, "num_generations_eval", trainer.num_generations)


def _from_trl(cls: type) -> bool:
    return any(str(getattr(c, "__module__", "")).split(".")[0] == "trl" for c in getattr(cls, "__mro__", ()))


def _holds(trainer: Any, adapter: Any) -> bool:
    environments = getattr(trainer, "environments", None)
    return isinstance(environments, list) and any(e is adapter for e in environments)


def _attr(obj: Any, path: str) -> Any:
    for name in path.split("."):
        obj = getattr(obj, name)
    return obj


# The batch the last reset was placed in: (the trainer, weakly; id of its environments list; the rows found).
_last: tuple[weakref.ref[Any], int, list[Mapping[str, Any]]] | None = None


def placed_trainer() -> Any | None:
    """The trainer the last placed reset's batch belongs to (None if it is gone)."""
    last = _last
    return last[0]() if last is not None else None


def on_training_end(trainer: Any, call: Callable[[], None]) -> None:
    """Call `call()` when `trainer`'s training ends: a callback on its handler, holding nothing of the trainer."""
    from transformers import TrainerCallback

    class TrainingEnd(TrainerCallback):  # type: ignore[misc]
        def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            call()

    trainer.add_callback(TrainingEnd())


def _same_batch(adapter: Any, row: Mapping[str, Any]) -> tuple[Any, list[Mapping[str, Any]]] | None:
    """(trainer, rows) when this reset belongs to the batch the last one was placed in: the trainer still holds
    that environments list, this adapter is in it and the rows hold this reset's row at its position."""
    last = _last
    trainer = last[0]() if last is not None else None
    if last is None or trainer is None:
        return None
    adapters = getattr(trainer, "environments", None)
    if not isinstance(adapters, list) or id(adapters) != last[1] or len(adapters) != len(last[2]):
        return None
    index = next((i for i, e in enumerate(adapters) if e is adapter), None)
    if index is None or not _same_row(last[2][index], row):
        return None
    return trainer, last[2]


def _read(trainer: Any, adapter: Any, row: Mapping[str, Any], frames: list[Any],
          rows: list[Mapping[str, Any]] | None = None) -> Place:
    global _last
    where = f"{type(trainer).__name__}"
    missing = [path for path in NEEDS if not _has(trainer, path)]
    if missing:
        return Place(None, where, f"the trainer has no {', '.join(missing)}")
    adapters: list[Any] = trainer.environments
    index = next(i for i, e in enumerate(adapters) if e is adapter)
    rows = rows or _rows(frames, len(adapters), index, row)
    if rows is None:
        return Place(None, where, "the batch's rows are not on the stack")
    _last = (weakref.ref(trainer), id(adapters), rows)
    training = bool(trainer.model.training)
    group = _group_size(trainer)
    rank, world = trainer.accelerator.process_index, trainer.accelerator.num_processes
    if not isinstance(group, int) or group < 1 or (world * len(rows)) % group:
        return Place(None, where, f"a batch of {world} x {len(rows)} rollouts does not split into groups of {group}")
    _check_version()
    round_, more = _round(trainer, adapters)
    width = world * len(rows)
    batch = Batch(adapters, rows, index, group, "train" if training else "eval", round_ * width + rank * len(rows),
                  width, more)
    return Place(batch)


def _has(obj: Any, path: str) -> bool:
    try:
        _attr(obj, path)
    except AttributeError:
        return False
    return True


def _rows(frames: list[Any], size: int, index: int, row: Mapping[str, Any]) -> list[Mapping[str, Any]] | None:
    """The batch's rows: the closest list on the stack as long as the batch whose entry at `index` is this reset's
    row (TRL's multi-environment mode passes the row without its `environment` column)."""
    for frame in frames:
        for value in frame.f_locals.values():
            if (isinstance(value, list) and len(value) == size and all(isinstance(r, Mapping) for r in value)
                    and _same_row(value[index], row)):
                return value
    return None


def _same_row(candidate: Mapping[str, Any], row: Mapping[str, Any]) -> bool:
    if candidate is row:
        return True
    try:
        return {k: v for k, v in candidate.items() if k != "environment"} == {
            k: v for k, v in row.items() if k != "environment"}
    except Exception:  # noqa: BLE001 - a column whose == is not a bool (arrays): not this row
        return False


def _round(trainer: Any, adapters: list[Any]) -> tuple[int, bool]:
    """(round, more) of the batch whose environments are `adapters`: counted at its first reset, the same for the
    rest of its resets (and a stray one while it lasts)."""
    with _lock:
        rounds = _rounds.get(trainer)
        if rounds is None:
            rounds = _rounds[trainer] = _Rounds()
        if rounds.batch is not adapters:
            rounds.batch = adapters
            rounds.placed = _next_round(trainer, rounds) if trainer.model.training else (_eval_batch(trainer, rounds),
                                                                                         False)
        return rounds.placed


def _next_round(trainer: Any, rounds: _Rounds) -> tuple[int, bool]:
    """The training round a new batch is, and whether another follows (under rounds' lock)."""
    state = trainer.state
    every = trainer.args.steps_per_generation * trainer.num_iterations  # micro-steps per generation round
    if rounds.state is None or rounds.state() is not state:  # a train() call begins: from its global step
        rounds.state, rounds.begun, rounds.counted = weakref.ref(state), state.global_step, 0
        rounds.next = -(-_micro_steps(trainer, 0, state.global_step) // every)
    round_ = rounds.next
    rounds.next += 1
    rounds.counted += 1
    return round_, rounds.counted * every < _micro_steps(trainer, rounds.begun, state.max_steps)


def _micro_steps(trainer: Any, first: int, last: int) -> int:
    """The micro-steps (training_step calls) of optimizer steps first..last-1, as transformers' Trainer runs them:
    gradient_accumulation_steps each, but the last of each epoch of len(train dataloader) batches, which has the
    rest (a dataloader without a length: none shorter)."""
    accumulation = trainer.args.gradient_accumulation_steps
    try:
        per_epoch = len(getattr(trainer.callback_handler, "train_dataloader", None))  # type: ignore[arg-type]
    except TypeError:
        return (last - first) * accumulation
    updates = max(-(-per_epoch // accumulation), 1)
    short = accumulation - max(per_epoch - (updates - 1) * accumulation, 1)  # what an epoch's last step lacks
    return (last - first) * accumulation - (last // updates - first // updates) * short


def _eval_batch(trainer: Any, rounds: _Rounds) -> int:
    """The batch number within the current evaluation pass (under rounds' lock): every pass the same tasks."""
    step = _evaluation_step(trainer)
    if step is None:  # no evaluation loop of this trainer on the stack: numbered on within the global step
        number, at = rounds.eval
        step = number + 1 if at == trainer.state.global_step else 0
    rounds.eval = (step, trainer.state.global_step)
    return step


def _evaluation_step(trainer: Any) -> int | None:
    """The `step` of the trainer's evaluation_loop on the stack: its batch number in this pass (see the docstring)."""
    frame: Any = sys._getframe(1)
    for _ in range(_DEPTH):
        if frame is None:
            return None
        if frame.f_code.co_name == "evaluation_loop" and _method(frame.f_code):
            local = frame.f_locals
            step = local.get("step")
            if local.get("self") is trainer and isinstance(step, int):
                return step
        frame = frame.f_back
    return None


@functools.cache
def _check_version() -> None:
    """Once per process: TRL's version does not change under a running trainer."""
    try:
        found = version("trl")
    except PackageNotFoundError:
        return
    if not _in_range(found):
        log.warning("orsgen: TRL %s is outside the range orsgen is tested with (%s): the batch was read through the "
                    "trainer attributes it checks, but nothing else of this release is known", found, SUPPORTED)


def _in_range(found: str) -> bool:
    parts = []
    for piece in found.split(".")[:2]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits or 0))
    return RANGE[0] <= (parts[0], parts[1] if len(parts) > 1 else 0) < RANGE[1]


@dataclass(frozen=True)
class Call:
    """A call TRL's tool loop makes later in this turn: `method` (a bound sync tool of `adapter`) with `arguments`."""

    position: int  # the rollout's index in the batch (trainer.environments)
    adapter: Any
    method: Callable[..., Any]
    arguments: dict[str, Any]


@dataclass(frozen=True)
class Turn:
    """The turn of GRPOTrainer's tool loop a call is made in, and the calls of the later rollouts of that turn."""

    key: tuple[int, int]  # the turn's `tool_calls` list (held in `calls`) and number
    calls: Any  # TRL's list: held, so its id names this turn only
    later: list[list[Call]]  # each later rollout's calls, in TRL's order; a prefix: up to one that cannot be known


def tool_turn(adapter: Any) -> Turn | str | None:
    """The turn of GRPOTrainer's tool loop this call of `adapter`'s is made in (see the docstring); None outside
    that loop (a call by hand, async tools, AsyncGRPOTrainer), the reason when the loop is there but cannot be read
    for certain (a subclass's own loop, another release, a call dict TRL would fail on)."""
    grpo = sys.modules.get("trl.trainer.grpo_trainer")
    loop = getattr(getattr(grpo, "GRPOTrainer", None), "_tool_call_loop", None)
    code = getattr(loop, "__code__", None)
    frame: Any = sys._getframe(1)
    for _ in range(8):  # the generated method, Adapter._call and this: TRL's loop is right above them
        if frame is None or code is None:
            return None
        if frame.f_code is code:
            break
        if frame.f_code.co_name == "_tool_call_loop" and _from_trl(type(frame.f_locals.get("self"))):
            return f"{type(frame.f_locals['self']).__name__} has a tool loop of its own"
        frame = frame.f_back
    else:
        if threading.current_thread().name.startswith("grpo-tool") or _in_trl(sys._getframe(1)):
            return "AsyncGRPOTrainer (or TRL code other than GRPOTrainer's tool loop) makes this call"
        return None
    local = frame.f_locals
    trainer = local.get("self")
    if type(trainer)._tool_call_loop is not loop:
        return f"{type(trainer).__name__} overrides GRPOTrainer's tool loop"
    if not _in_range(installed().removeprefix("TRL ")):
        return f"{installed()} is outside the releases whose tool loop was read ({SUPPORTED})"
    try:
        idx, rollouts, calls, current = local["idx"], local["idxs_with_tool"], local["tool_calls"], local["tool_call"]
        environments, tools, number = trainer.environments, trainer._sync_tool_dicts, int(local["iteration_num"])
        if environments[rollouts[idx]] is not adapter or not any(c is current for c in calls[idx]):
            return "the call running is not the one TRL's loop is at"
    except (KeyError, IndexError, AttributeError, TypeError):
        return "TRL's tool loop does not hold what it held in the releases read"
    if not all(_well_formed(call) for rollout in calls[idx:] for call in rollout):
        return "a call of this turn is one TRL's loop fails on"
    later = []
    for k in range(idx + 1, len(rollouts)):
        position = rollouts[k]
        env, found = environments[position], []
        for call in calls[k]:
            function = call["function"] if call["type"] == "function" else {}
            method, arguments = tools[position].get(function.get("name")), function.get("arguments")
            if method is None or getattr(method, "__self__", None) is not env or type(arguments) is not dict:
                break  # TRL's own call fails, or runs something else: nothing after it is started ahead
            if not _binds(method, arguments):
                break
            found.append(Call(position, env, method, arguments))
        later.append(found)
    return Turn((id(calls), number), calls, later)


def _rewards_frame(frame: Any, depth: int) -> tuple[Any, dict[str, Any]] | None:
    """GRPOTrainer's class and the locals of its `_calculate_rewards` frame, at most `depth` frames above `frame`."""
    grpo = sys.modules.get("trl.trainer.grpo_trainer")
    cls = getattr(grpo, "GRPOTrainer", None)
    method = getattr(cls, "_calculate_rewards", None)
    code = getattr(getattr(method, "__wrapped__", method), "__code__", None)  # under TRL's profiling decorator
    for _ in range(depth):
        if frame is None or code is None:
            return None
        if frame.f_code is code:
            return cls, frame.f_locals
        frame = frame.f_back
    return None


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
    if not _in_range(installed().removeprefix("TRL ")) or local.get("async_funcs_info"):
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


def _in_trl(frame: Any) -> bool:
    for _ in range(_DEPTH):
        if frame is None:
            return False
        if str(frame.f_globals.get("__name__", "")).split(".")[0] == "trl":
            return True
        frame = frame.f_back
    return False


def _well_formed(call: Any) -> bool:
    if not isinstance(call, Mapping) or "type" not in call:
        return False
    function = call.get("function")
    return call["type"] != "function" or (isinstance(function, Mapping) and isinstance(function.get("name"), str))


def _binds(method: Any, arguments: dict[str, Any]) -> bool:
    import inspect

    try:
        inspect.signature(method).bind(**arguments)
    except TypeError:
        return False
    return True


def training(trainer: Any | None) -> str:
    """The stream the trainer is in, as TRL decides it: "eval" when its model is not training."""
    return "train" if getattr(getattr(trainer, "model", None), "training", True) else "eval"


def metrics_window(trainer: Any, mode: str) -> dict[str, list[float]] | None:
    """The trainer's window of figures for `mode` (`_metrics[mode]`: lists of values per name, which `log()`
    averages and clears), None when it keeps none."""
    found = getattr(trainer, "_metrics", None)
    return found[mode] if isinstance(found, dict) and isinstance(found.get(mode), dict) else None


def gather(trainer: Any, value: Any) -> list[Any]:
    """`value` of every rank, in rank order (one process: [value]); a collective, so every rank calls it."""
    if trainer.accelerator.num_processes == 1:
        return [value]
    from accelerate.utils import gather_object

    return list(gather_object([value]))


def rollouts_elsewhere(trainer: Any) -> bool:
    """The trainer's environments live in another process (AsyncGRPOTrainer's rollout worker)."""
    return hasattr(trainer, "rollout_worker")


@dataclass(frozen=True)
class Worker:
    """AsyncGRPOTrainer's rollout worker, seen from inside it: where its figures go, its policy version, its loop."""

    metrics: Any  # the worker's metrics queue (put_nowait a dict of figures)
    version: Any  # an mp.Value: the policy version the worker generates with
    loop: Any  # the `_AsyncRolloutLoop`: its reward functions, group size and asyncio loop
    stop: Any = None  # the mp.Event the trainer's stop() sets and the child's stop watcher waits on

    def policy_version(self) -> int | None:
        try:
            return int(self.version.value)
        except (AttributeError, TypeError, ValueError):
            return None


def worker() -> Worker | None:
    """This process's AsyncGRPO rollout worker, when TRL's `_child_main` is running on one of its threads (the main
    one in the spawned worker), else None. Looked up at each call (a few frames per thread): a worker run in a thread
    ends, and another may follow in the same process."""
    tops: Any = list(sys._current_frames().values())
    frame: Any = None
    try:
        for top in tops:
            frame = top
            for _ in range(_DEPTH):
                if frame is None:
                    break
                if frame.f_code.co_name == "_child_main" and str(frame.f_globals.get("__name__", "")).startswith("trl."):
                    local = frame.f_locals
                    if "metrics_queue" in local and "model_version_value" in local:
                        return Worker(local["metrics_queue"], local["model_version_value"], local.get("rollout_loop"),
                                      local.get("stop_event"))
                frame = frame.f_back
        return None
    finally:  # this very frame is among them: kept in its own locals, it would keep every caller's locals alive
        tops = top = frame = None


_guarded: list[Any] = []  # the stop events guard_stop() sets at this process's exit
STOP_WATCHER = "grpo-mp-stop-watcher"  # the name of the worker's stop watcher thread (`_spawn_stop_watcher`)


def guard_stop() -> None:
    """In AsyncGRPOTrainer's worker, set its stop event at this process's exit, so that the trainer's stop() returns
    whatever the child died of. Its stop watcher waits on that event, and the trainer's `stop()` sets it, which waits
    until every waiter has woken: a watcher that died waiting never wakes, and `stop()` (and `train()` with it) waits
    for ever. Set by the child on its way out, while the watcher still runs (a daemon thread: exit hooks run before
    such threads are stopped), the event has no waiter left behind. Nothing outside a worker."""
    found = worker()
    if found is None or found.stop is None or any(event is found.stop for event in _guarded):
        return
    _guarded.append(found.stop)
    atexit.register(_stop_watcher_released, found.stop)


def _stop_watcher_released(event: Any) -> None:
    """Set the worker's stop event, and wait (bounded) until its stop watcher has returned: woken, the watcher takes
    the event's lock again, and a daemon thread stopped by the interpreter's exit while it holds that lock would hang
    the trainer's `set()` on the lock instead."""
    event.set()
    for thread in threading.enumerate():
        if thread.name == STOP_WATCHER and thread is not threading.current_thread():
            thread.join(5)


@dataclass(frozen=True)
class WorkerRollout:
    """A rollout of AsyncGRPOTrainer's worker, as its `_generate_loop` holds it at the environment's reset() or
    get_reward()."""

    group: int  # TRL's group id: `size` rollouts of one dataset row
    size: int  # num_generations
    prompt: Any  # at get_reward(): the prompt TRL generated from, the object reward functions get in `prompts`
    completion: Any  # at get_reward(): the rollout's completion, the object reward functions get in `completions`
    reward_funcs: tuple[Any, ...]  # the worker's reward functions
    run: int  # the worker's run (its loop's id): a new one numbers its groups from 0 again


def worker_rollout(environment: Any, ended: bool) -> WorkerRollout | None:
    """In AsyncGRPOTrainer's worker, the rollout whose reset() (`ended` False) or get_reward() (`ended` True) TRL's
    `_generate_loop` is awaiting for `environment`; None elsewhere, or when that loop cannot be read."""
    found = worker()
    if found is None or found.loop is None:
        return None
    frame = _generating(found.loop, environment)
    if frame is None:
        return None
    local = frame.f_locals
    group, owner = local.get("group_id"), local.get("self")
    if not isinstance(group, int) or not isinstance(getattr(owner, "num_generations", None), int):
        return None
    return WorkerRollout(group, owner.num_generations, local.get("prompt") if ended else None,
                         local.get("completion") if ended else None, tuple(getattr(owner, "reward_funcs", ()) or ()),
                         id(owner))


def _generating(rollout_loop: Any, environment: Any) -> Any | None:
    """The frame of TRL's `_generate_loop` handling `environment`: on this thread's stack (a call it makes inline),
    else suspended in its task on the worker's asyncio loop (a call it awaits in a thread pool)."""

    def handles(frame: Any) -> bool:
        return (frame.f_code.co_name == "_generate_loop" and str(frame.f_globals.get("__name__", "")).startswith("trl.")
                and frame.f_locals.get("environment") is environment)

    frame: Any = sys._getframe(1)
    for _ in range(_DEPTH):
        if frame is None:
            break
        if handles(frame):
            return frame
        frame = frame.f_back
    import asyncio

    loop = getattr(rollout_loop, "_loop", None)
    if not isinstance(loop, asyncio.AbstractEventLoop):
        return None
    try:
        tasks = asyncio.all_tasks(loop)
    except RuntimeError:  # the loop's task set changed while read: once more
        tasks = asyncio.all_tasks(loop)
    for task in tasks:
        suspended = getattr(task.get_coro(), "cr_frame", None)
        if suspended is not None and handles(suspended):
            return suspended
    return None


def worker_figures(trainer: Any) -> Any | None:
    """The holder of the queue the trainer's `log()` drains the worker's figures from (`trainer.rollout_worker`, which
    has `metrics_queue`), on the process that drains it (the main one), else None."""
    holder = getattr(trainer, "rollout_worker", None)
    if holder is None or not hasattr(holder, "metrics_queue"):
        return None
    return holder if getattr(trainer.accelerator, "is_main_process", True) else None


def trainer_of(callback: Any) -> Any | None:
    """The trainer calling `callback` (a TrainerCallback gets no trainer): the first `self` up the stack whose
    callback handler holds it. EpisodeMetrics writes into that trainer's `_metrics[mode]`, the window of figures
    GRPOTrainer and AsyncGRPOTrainer gather, average over the logging window and log (with "eval_" in evaluation)."""
    frame: Any = sys._getframe(1)
    for _ in range(_DEPTH):
        if frame is None:
            return None
        owner = frame.f_locals.get("self") if _method(frame.f_code) else None
        handler = getattr(owner, "callback_handler", None)
        if any(c is callback for c in getattr(handler, "callbacks", ())):
            return owner
        frame = frame.f_back
    return None


def resumed_from(trainer: Any) -> str | None:
    """The checkpoint folder the trainer's running train() call resumed from (see the docstring), None when it
    began afresh or the loop is not on the stack."""
    frame: Any = sys._getframe(1)
    for _ in range(_DEPTH):
        if frame is None:
            return None
        if frame.f_code.co_name == "_inner_training_loop" and _method(frame.f_code):
            local = frame.f_locals
            if local.get("self") is trainer:
                found = local.get("resume_from_checkpoint")
                return str(found) if isinstance(found, str | os.PathLike) else None
        frame = frame.f_back
    return None


def group_layout(environments: Sequence[Any]) -> tuple[int, int]:
    """(GRPO group size, position of this rank's first rollout within its group) for the batch whose environments
    TRL passed to a reward function, read from the trainer on the stack (the one holding that very list)."""
    frame: Any = sys._getframe(1)
    for _ in range(_DEPTH):
        if frame is None:
            break
        trainer = frame.f_locals.get("self") if _method(frame.f_code) else None
        if trainer is not None and _from_trl(type(trainer)) and getattr(trainer, "environments", None) is environments:
            if not all(_has(trainer, path) for path in NEEDS):
                break
            group = _group_size(trainer)
            rank = trainer.accelerator.process_index
            return int(group), (rank * len(environments)) % int(group)
        frame = frame.f_back
    raise RuntimeError("group_reward is a reward function for GRPOTrainer(reward_funcs=[...]): called elsewhere, the "
                       "GRPO groups of the rollouts cannot be known")
