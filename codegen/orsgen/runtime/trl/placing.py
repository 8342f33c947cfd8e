"""Where a rollout sits in GRPOTrainer's batch (`place`): the trainer on the stack, its `environments` and rows, its
generation rounds counted here (see the package's docstring for what is assumed)."""

from __future__ import annotations

import sys
import threading
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from orsgen.runtime import trl as release
from orsgen.runtime.trl.stack import find, frames, from_trl, has, method, of_trl, owner

NEEDS = (
    "environments", "num_generations", "num_iterations", "accelerator.process_index", "accelerator.num_processes",
    "state.global_step", "state.max_steps", "args.gradient_accumulation_steps", "args.steps_per_generation",
    "model.training",
)
FIX = "pass train_dataset=dataset() so every row carries task_index"


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
            return (f"reset() without task_index inside {self.inside} ({release.installed()}; orsgen reads the batch of "
                    f"TRL {release.SUPPORTED}): {self.why}, so the rollout's GRPO group cannot be known: {FIX}")
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


class Memory:
    """What placing remembers between resets, kept by its caller (the runtime's process holder): each trainer's
    generation rounds, and the batch the last reset was placed in (the trainer, weakly; the id of its environments
    list; the rows found), whose later resets need no walk over the stack."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.rounds: weakref.WeakKeyDictionary[Any, _Rounds] = weakref.WeakKeyDictionary()
        self.last: tuple[weakref.ref[Any], int, list[Mapping[str, Any]]] | None = None


def place(adapter: Any, row: Mapping[str, Any], memory: Memory) -> Place:
    """Where the rollout of `adapter`, being reset with `row`, sits: read from the trainer on the stack."""
    known = _same_batch(adapter, row, memory)  # the batch's later resets: no walk over the stack
    if known is not None:
        return _read(known[0], adapter, row, [], memory, known[1])
    read: list[Any] = []
    inside: str | None = None
    for frame in frames(sys._getframe(1)):
        if of_trl(frame) or method(frame.f_code):  # only there may a trainer be (stack.py: what is read)
            read.append(frame)
            local = frame.f_locals
            trainer = next((v for v in local.values() if from_trl(type(v)) and _holds(v, adapter)), None)
            if trainer is not None:
                return _read(trainer, adapter, row, read, memory)
            if inside is None and (of_trl(frame) or from_trl(type(local.get("self")))):
                inside = f"{frame.f_globals.get('__name__', '')}.{frame.f_code.co_qualname}"
    if inside is not None:
        return Place(None, inside, "this environment is not among the trainer's batch environments")
    return Place(None)


def group_size(trainer: Any) -> Any:
    """The GRPO group size of the batch being rolled out: evaluation has its own, when set."""
    if trainer.model.training:
        return trainer.num_generations
    return getattr(trainer, "num_generations_eval", trainer.num_generations)


def _holds(trainer: Any, adapter: Any) -> bool:
    environments = getattr(trainer, "environments", None)
    return isinstance(environments, list) and any(e is adapter for e in environments)


def placed_trainer(memory: Memory) -> Any | None:
    """The trainer the last placed reset's batch belongs to (None if it is gone)."""
    last = memory.last
    return last[0]() if last is not None else None


def _same_batch(adapter: Any, row: Mapping[str, Any], memory: Memory) -> tuple[Any, list[Mapping[str, Any]]] | None:
    """(trainer, rows) when this reset belongs to the batch the last one was placed in: the trainer still holds
    that environments list, this adapter is in it and the rows hold this reset's row at its position."""
    last = memory.last
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


def _read(trainer: Any, adapter: Any, row: Mapping[str, Any], read: list[Any], memory: Memory,
          rows: list[Mapping[str, Any]] | None = None) -> Place:
    where = f"{type(trainer).__name__}"
    missing = [path for path in NEEDS if not has(trainer, path)]
    if missing:
        return Place(None, where, f"the trainer has no {', '.join(missing)}")
    adapters: list[Any] = trainer.environments
    index = next(i for i, e in enumerate(adapters) if e is adapter)
    rows = rows or _rows(read, len(adapters), index, row)
    if rows is None:
        return Place(None, where, "the batch's rows are not on the stack")
    memory.last = (weakref.ref(trainer), id(adapters), rows)
    training = bool(trainer.model.training)
    group = group_size(trainer)
    rank, world = trainer.accelerator.process_index, trainer.accelerator.num_processes
    if not isinstance(group, int) or group < 1 or (world * len(rows)) % group:
        return Place(None, where, f"a batch of {world} x {len(rows)} rollouts does not split into groups of {group}")
    release.check_version()
    round_, more = _round(trainer, adapters, memory)
    width = world * len(rows)
    batch = Batch(adapters, rows, index, group, "train" if training else "eval", round_ * width + rank * len(rows),
                  width, more)
    return Place(batch)


def _rows(read: list[Any], size: int, index: int, row: Mapping[str, Any]) -> list[Mapping[str, Any]] | None:
    """The batch's rows: the closest list on the stack as long as the batch whose entry at `index` is this reset's
    row (TRL's multi-environment mode passes the row without its `environment` column)."""
    for frame in read:
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


def _round(trainer: Any, adapters: list[Any], memory: Memory) -> tuple[int, bool]:
    """(round, more) of the batch whose environments are `adapters`: counted at its first reset, the same for the
    rest of its resets (and a stray one while it lasts)."""
    with memory.lock:
        rounds = memory.rounds.get(trainer)
        if rounds is None:
            rounds = memory.rounds[trainer] = _Rounds()
        if rounds.batch is not adapters:
            rounds.batch = adapters
            rounds.placed = _next_round(trainer, rounds) if trainer.model.training else (_eval_batch(trainer, rounds),
                                                                                         False)
        return rounds.placed


def _next_round(trainer: Any, rounds: _Rounds) -> tuple[int, bool]:
    """The training round a new batch is, and whether another follows (under the memory's lock)."""
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
    """The batch number within the current evaluation pass (under the memory's lock): every pass the same tasks."""
    step = _evaluation_step(trainer)
    if step is None:  # no evaluation loop of this trainer on the stack: numbered on within the global step
        number, at = rounds.eval
        step = number + 1 if at == trainer.state.global_step else 0
    rounds.eval = (step, trainer.state.global_step)
    return step


def _evaluation_step(trainer: Any) -> int | None:
    """The `step` of the trainer's evaluation_loop on the stack: its batch number in this pass (see the docstring)."""
    def loop(frame: Any) -> bool:
        return (frame.f_code.co_name == "evaluation_loop" and owner(frame) is trainer
                and isinstance(frame.f_locals.get("step"), int))

    found = find(sys._getframe(1), loop)
    return None if found is None else int(found.f_locals["step"])
