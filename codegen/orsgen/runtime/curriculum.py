"""The difficulty-aware task order's trainer side (`task_order = "difficulty"`, tasks.py): what every rank measured,
gathered at each optimizer step's end, and the order's state saved with each checkpoint.

The user writes only the setting: the first reset of a training batch that draws by difficulty adds one callback to
the trainer it is placed in (`follow`). At each `on_step_end` (every rank reaches it at once) the callback gathers,
from every rank, the rewards the trainer got for the episodes that ended there since the last one (the
`episode_end` hook: the reward `get_reward()` or the module's reward functions gave; None for an unscored one), by
GRPO group (`Episode.group`: a group may span ranks), and hands each group to its environment's order: every rank
holds the same statistics after each step. At each `on_save` the main process writes the orders' state as
`orsgen_task_order.json` into the checkpoint folder transformers just wrote (`output_dir/checkpoint-N`); a train()
call that begins at a global step above 0 (a resume) reads it back from the checkpoint it resumes from, at its first
reset, before any draw. A train() call that begins at step 0 begins the order afresh.

This module imports transformers only when it builds the callback (inside a trainer, where it is installed).
"""

from __future__ import annotations

import json
import logging
import os
import threading
import weakref
from typing import Any

from orsgen.runtime import client, hooks, trl
from orsgen.runtime.process import STATE
from orsgen.runtime.tasks import Order

log = logging.getLogger("orsgen")
FILE = "orsgen_task_order.json"  # in each checkpoint folder
VERSION = 1


class Follower:
    """One trainer's difficulty orders: their environments' orders (by target), the episodes this rank saw end since
    the last step's end, the train() call being followed."""

    def __init__(self, trainer: Any) -> None:
        self.trainer = weakref.ref(trainer)
        self.orders: dict[str, Order] = {}  # the environment's target (the same on every rank) -> its order
        self.ready: set[str] = set()  # the targets begun or restored in the train() call followed
        self.run: weakref.ref[Any] | None = None  # that call's TrainerState
        self.since: list[tuple[str, str, int, int, float | None]] = []  # (target, split, group, task, reward)
        self.lock = threading.Lock()
        me = weakref.ref(self)

        def listener(record: hooks.EpisodeEnd[Any]) -> None:
            follower = me()
            if follower is None:
                hooks.remove("episode_end", listener)
            else:
                follower.seen(record)

        hooks.add("episode_end", listener)

    def track(self, pinned: Any) -> None:
        """At a difficulty-ordered reset: the environment's order is followed, begun afresh at a train() call's
        step 0 or restored at a resume's first reset."""
        trainer = self.trainer()
        if trainer is None:
            return
        state = trainer.state
        with self.lock:
            if self.run is None or self.run() is not state:  # a train() call begins
                self.run, self.ready = weakref.ref(state), set()
            self.orders[pinned.target] = pinned.order
            if pinned.target in self.ready:
                return
            self.ready.add(pinned.target)
        if state.global_step == 0:
            pinned.order.restart()
        else:
            self._restore(trainer, pinned)

    def seen(self, record: hooks.EpisodeEnd[Any]) -> None:
        group = getattr(record.episode, "group", None)
        pinned = getattr(record.adapter, "pinned", None)
        if record.stream != "train" or group is None or record.task_index is None or pinned is None:
            return
        with self.lock:
            if self.orders.get(pinned.target) is pinned.order:
                self.since.append((pinned.target, record.split, group, record.task_index, record.reward))

    def flush(self) -> None:
        """At an optimizer step's end, on every rank: what every rank saw, by group, to the orders."""
        trainer = self.trainer()
        if trainer is None:
            return
        with self.lock:
            mine, self.since = self.since, []
        merged: dict[tuple[str, str, int], tuple[int, list[float | None]]] = {}
        for part in trl.gather(trainer, mine):  # a collective: every rank calls it at the same step
            for target, split, group, task, reward in part:
                merged.setdefault((target, split, group), (task, []))[1].append(reward)
        by_order: dict[tuple[str, str], list[tuple[int, int, list[float | None]]]] = {}
        for (target, split, group), (task, rewards) in sorted(merged.items(), key=lambda item: item[0]):
            by_order.setdefault((target, split), []).append((group, task, rewards))
        for (target, split), groups in by_order.items():
            order = self.orders.get(target)
            if order is not None:
                order.measured(split, groups)

    def save(self, args: Any, state: Any) -> None:
        """Into the checkpoint folder transformers just wrote (its main process)."""
        if not getattr(args, "should_save", state.is_world_process_zero):
            return
        folder = os.path.join(args.output_dir, f"checkpoint-{state.global_step}")
        if not os.path.isdir(folder):
            return
        saved = {"version": VERSION, "global_step": state.global_step,
                 "orders": {target: order.state() for target, order in sorted(self.orders.items())}}
        path = os.path.join(folder, FILE)
        with open(path + ".tmp", "w", encoding="utf-8") as f:
            json.dump(saved, f)
        os.replace(path + ".tmp", path)

    def _restore(self, trainer: Any, pinned: Any) -> None:
        step = trainer.state.global_step
        folder = trl.resumed_from(trainer) or os.path.join(trainer.args.output_dir, f"checkpoint-{step}")
        path = os.path.join(str(folder), FILE)
        try:
            with open(path, encoding="utf-8") as f:
                saved = json.load(f)
            orders = saved["orders"][pinned.target]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            client.once(f"task-order-resume-{path}", logging.WARNING, "orsgen: task_order='difficulty': a run resumed "
                        "at step %d without the order's state (%s: %s): it begins afresh, every task unseen", step,
                        path, exc.__class__.__name__ if not isinstance(exc, OSError) else "not found")
            pinned.order.restart()
            return
        pinned.order.restore(orders)
        log.info("orsgen: task_order='difficulty': the order's state restored from %s", path)


class Followers:
    """Each trainer's follower (by trainer, weakly), held by process.STATE."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.by_trainer: weakref.WeakKeyDictionary[Any, Follower] = weakref.WeakKeyDictionary()


def follow(trainer: Any | None, pinned: Any) -> None:
    """A difficulty-ordered reset in one of `trainer`'s training batches: the trainer gets its callback (once) and
    the environment's order is followed (`Follower.track`). Each trainer's follower is held by process.STATE."""
    if trainer is None:
        return
    followers = STATE.part("followers", Followers)
    with followers.lock:
        follower = followers.by_trainer.get(trainer)
        if follower is None:
            from orsgen.runtime.trl.callback import Calls  # (transformers: inside a trainer, it is loaded)

            follower = followers.by_trainer[trainer] = Follower(trainer)
            trainer.add_callback(Calls(step_end=follower.flush, save=follower.save))
    follower.track(pinned)
