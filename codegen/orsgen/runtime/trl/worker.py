"""AsyncGRPOTrainer's rollout worker, seen from inside it: TRL's `_child_main` on one of this process's threads
(`worker`), the rollout its `_generate_loop` is resetting or scoring (`worker_rollout`), the stop event its exit must
set (`stop_event`), and the queue the trainer's `log()` drains its figures from (`worker_figures`); see the package's
docstring for what is assumed."""

from __future__ import annotations

import sys
import threading
from dataclasses import dataclass
from typing import Any

from orsgen.runtime.trl.stack import frames, named


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
    ends, and another may follow in the same process; none while TRL's worker module is not loaded."""
    if WORKER_MODULE not in sys.modules:
        return None
    tops: Any = list(sys._current_frames().values())
    frame: Any = None
    try:
        for top in tops:
            for frame in frames(top):
                if named(frame, "_child_main"):
                    local = frame.f_locals
                    if "metrics_queue" in local and "model_version_value" in local:
                        return Worker(local["metrics_queue"], local["model_version_value"], local.get("rollout_loop"),
                                      local.get("stop_event"))
        return None
    finally:  # this very frame is among them: kept in its own locals, it would keep every caller's locals alive
        tops = top = frame = None


WORKER_MODULE = "trl.experimental.async_grpo.async_rollout_worker"  # where TRL's `_child_main` is (1.13 to 1.16)
STOP_WATCHER = "grpo-mp-stop-watcher"  # the name of the worker's stop watcher thread (`_spawn_stop_watcher`)


def stop_event() -> Any | None:
    """In AsyncGRPOTrainer's worker, the stop event its exit must set (`release_stop_watcher`), so that the trainer's
    stop() returns whatever the child died of: its stop watcher waits on that event, and the trainer's `stop()` sets
    it, which waits until every waiter has woken; a watcher that died waiting never wakes, and `stop()` (and `train()`
    with it) waits for ever. Set by the child on its way out, while the watcher still runs (a daemon thread: exit hooks
    run before such threads are stopped), the event has no waiter left behind. None outside a worker."""
    found = worker()
    return None if found is None else found.stop


def release_stop_watcher(event: Any) -> None:
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
        return named(frame, "_generate_loop") and frame.f_locals.get("environment") is environment

    found = next((frame for frame in frames(sys._getframe(1)) if handles(frame)), None)
    if found is not None:
        return found
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




_stop_watcher_released = release_stop_watcher  # (the name the tests' harness registers)
