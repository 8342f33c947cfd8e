"""Generation rounds as TRL ran them, next to the tasks the server opened: for tests/test_generation_rounds.py and
tests/test_trl_contract.py.

`watching(adapter_class)` gives a subclass whose resets are recorded (the episode_start hook) with what the trainer
itself says at that moment, not the runtime's bookkeeping: TRL's micro-step counter (`_step`, the count its
`_prepare_inputs` decides generation by), whether the model is training, and the rollout's position in
`trainer.environments`; with the task the adapter chose and its session id. `rounds()` groups training's resets by the
micro-step that generated them and checks each against the server's log of `POST /create`.
"""

from __future__ import annotations

from typing import Any, ClassVar

from orsgen.runtime import episode_of

from tests.harness import servers


def watching(adapter_class: type, **attributes: Any) -> type:
    """A subclass of `adapter_class` (with `attributes` set on it, e.g. open_ahead) recording every reset in
    `Watched.resets`; set `Watched.trainer` once the trainer is built."""
    from orsgen.runtime import hooks

    class Watched(adapter_class):  # type: ignore[misc, valid-type]
        trainer: ClassVar[Any] = None
        resets: ClassVar[list[dict[str, Any]]] = []

    for name, value in attributes.items():
        setattr(Watched, name, value)

    def record(start: hooks.EpisodeStart) -> None:
        trainer = Watched.trainer
        Watched.resets.append({
            "micro_step": getattr(trainer, "_step", None),  # TRL's own count of training micro-steps
            "global_step": trainer.state.global_step,
            "training": bool(trainer.model.training),
            "position": next(i for i, env in enumerate(trainer.environments) if env is start.adapter),
            "split": start.split,
            "task_index": start.task_index,
            "session": getattr(episode_of(start.adapter).session, "sid", None),
            "error": start.error,
        })

    hooks.add("episode_start", record, Watched)
    Watched.__name__ = Watched.__qualname__ = adapter_class.__name__
    return Watched


def opened_tasks(server: servers.Served, since: int) -> dict[str, tuple[str, int]]:
    """session id -> (split, index) of every `POST /create` the server answered from log entry `since` on."""
    log = server.creates()[since:]
    assert all(entry["status"] == 200 for entry in log), log
    by_session = {entry["session"]: (entry["body"]["split"], entry["body"]["index"]) for entry in log}
    assert len(by_session) == len(log)  # one /create per session
    return by_session


def checked(resets: list[dict[str, Any]], server: servers.Served, since: int) -> list[dict[str, Any]]:
    """`resets`, each checked against the server: its session was created on the task the adapter reported."""
    opened = opened_tasks(server, since)
    for r in resets:
        assert r["error"] is None and opened.get(r["session"]) == (r["split"], r["task_index"]), (r, opened)
    return resets


def rounds(resets: list[dict[str, Any]]) -> list[list[int]]:
    """Training's resets as generation rounds (the tasks of one round, by position), split where TRL's micro-step
    changed: TRL generates once per micro-step at most. Every round resets positions 0, 1, ... of its batch once."""
    training = [r for r in resets if r["training"]]
    found: list[list[dict[str, Any]]] = []
    for r in training:
        if not found or found[-1][0]["micro_step"] != r["micro_step"]:
            found.append([])
        found[-1].append(r)
    assert all([r["position"] for r in batch] == list(range(len(found[0]))) for batch in found), training
    return [[r["task_index"] for r in batch] for batch in found]


def groups(round_tasks: list[int], group: int) -> list[int]:
    """The task of each GRPO group of a round, after checking the group's rollouts share it."""
    split = [round_tasks[i:i + group] for i in range(0, len(round_tasks), group)]
    assert all(len(set(g)) == 1 for g in split), split
    return [g[0] for g in split]


def generations(trainer: Any) -> int:
    """How many times TRL generated in a fresh run: once every steps_per_generation x num_iterations of its
    micro-steps (its `_step`, the training_step calls), from the first."""
    every = trainer.args.steps_per_generation * trainer.num_iterations
    return -(-trainer._step // every)


def ahead_counts(module: Any) -> dict[str, int]:
    """The module's sessions opened ahead, taken and left unused (its `Ahead`'s counts)."""
    return {name: getattr(module.PINNED.ahead, name) for name in ("opened", "taken", "unused")}


def order_of(split: str, size: int, stream: str, window: int, count: int, seed: int = 0) -> list[int]:
    """The first `count` tasks of the runtime's task order for a stream, as a fresh run computes them: what
    consecutive rounds must open, none skipped."""
    from orsgen.runtime.tasks import Order
    from orsgen.runtime.trl import Slot

    order = Order()
    return [order.task(split, size, seed, Slot(stream, p, window)) for p in range(count)]
