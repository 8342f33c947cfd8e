"""Which task a `reset()` without `task_index` opens, when the environment owns the data (no `train_dataset`).

TRL's placeholder rows do not say which GRPO group a rollout belongs to, so the task is derived from where the
rollout sits in the trainer's generation batch (`trl.place`): (generation round, rank, position) -> group -> a seeded
shuffle of the split. Rounds are counted per trainer, one per batch (`trl._round`): each rank counts its own batches
and ranks generate in lockstep, so they agree; a reset made outside training, an evaluation pass or another trainer
shifts nothing, and a resumed run continues from its global step. An evaluation pass numbers its batches from 0, so
every pass gets the same tasks.

With `task_order = "difficulty"` training's groups are drawn instead by how each task's recent groups rewarded it
(`Difficulty`; evaluation keeps the shuffle). A task is in one of three pools, read from its last `recent` measured
groups (the rewards the trainer got, unscored rollouts left out as GRPO leaves them out):

- normal: one of those groups had a reward spread (the sample standard deviation of its scored rewards above
  `TOLERANCE`, TRL's zero), or none of its groups is measured yet (drawn, its rewards still in the lag);
- easy: no spread in any of them, and every one of them paid at least `solved` (default: the highest reward the run
  has measured, when it measured a lower one too);
- hard: no spread in any of them otherwise (every rollout failed alike, or paid alike below the bar, or too few were
  scored to spread).

Each group of a round is drawn in turn: tasks never drawn first (in the order of the shuffle's first epoch, so a
run's first pass over the split is the shuffle's), then, with probability `floor`, a task of the whole split, else a
pool by its weight (among pools with a task left this round) and a task of it; a round never draws a task twice
while it has others. The draws of round r are a function of (seed, r, the tasks drawn before r, the pools as they
stood when round r-1 began): every rank draws the same, and the next step's sessions opened ahead at round r-1's
first reset (`open_ahead = "next-step"`) are the ones round r resets. The statistics reach the order at each
optimizer step's end, gathered from every rank (curriculum.py), so with one round per step round r's draws use the
groups of rounds 0..r-2.
"""

from __future__ import annotations

import collections
import logging
import math
import random
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from orsgen.runtime import settings
from orsgen.runtime.process import STATE
from orsgen.runtime.trl import Slot

log = logging.getLogger("orsgen")

POOLS = ("normal", "hard", "easy")
ROUTES = ("unseen", *POOLS)  # what a draw came from: the figures' pool/<name>, draws/<name>
TOLERANCE = 1e-8  # a group's reward spread at or below it is none (TRL: torch.isclose(std, 0), atol 1e-8)


class Drawn:
    """Every difficulty draw this process used in line, by pool (and those of them the floor made), and the pools'
    sizes at the last round drawn in line: what EpisodeMetrics reports (orsgen/draws/..., orsgen/pool/...); held by
    process.STATE."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.totals: collections.Counter[str] = collections.Counter()
        self.levels: dict[str, int] = {}
        self.missing_said = False


def _drawn() -> Drawn:
    return STATE.part("tasks", Drawn)


def drawn() -> tuple[collections.Counter[str], dict[str, int]]:
    """The draws so far by route (and "floor"), and the pools' sizes at the last round drawn."""
    found = _drawn()
    with found.lock:
        return collections.Counter(found.totals), dict(found.levels)


class Order:
    """A seeded shuffle of a split's tasks, reshuffled every epoch; the same on every rank. A step's groups never
    repeat a task across an epoch boundary: the tasks that ended an epoch do not start the next one. With
    `order="difficulty"`, training's groups come from a `Difficulty` instead, one per (split, size, seed, width)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.epochs: dict[tuple[str, int, str, int], tuple[int, list[int]]] = {}  # the last epoch made, per stream
        self.curricula: dict[tuple[str, int, int, int], Difficulty] = {}

    def task(self, split: str, size: int, seed: int, at: Slot, order: str = "shuffle",
             pools: Mapping[str, Any] | None = None) -> int:
        if order == "difficulty" and at.stream == "train":
            return self.difficulty(split, size, seed, at.window, pools).task(at)
        epoch, offset = divmod(at.position, size)
        key = (split, seed, at.stream, at.window)
        with self.lock:
            made, order_ = self.epochs.get(key, (-1, []))
            if made > epoch:  # an earlier epoch again (a resumed or replayed run): made afresh from the first
                made, order_ = -1, []
            while made < epoch:  # shuffled once per epoch, not at every reset
                made += 1
                order_ = self._shuffle(size, seed, at.stream, made, order_, at.window)
            self.epochs[key] = (made, order_)
        return order_[offset]

    def difficulty(self, split: str, size: int, seed: int, width: int,
                   pools: Mapping[str, Any] | None = None) -> Difficulty:
        """The difficulty order of a split's training stream (made at its first use)."""
        with self.lock:
            found = self.curricula.get((split, size, seed, width))
            if found is None:
                found = self.curricula[split, size, seed, width] = Difficulty(size, seed, width, pools)
            elif pools is not None:
                found.pools = Pools.of(pools)
            return found

    def measured(self, split: str, groups: Sequence[tuple[int, int, Sequence[float | None]]]) -> None:
        """Groups of the split's training stream whose rewards were read on every rank: (group, task, rewards)."""
        with self.lock:
            curricula = [c for (s, *_), c in self.curricula.items() if s == split]
        for curriculum in curricula:
            curriculum.measured(groups)

    def restart(self) -> None:
        """A new training run begins: its difficulty orders begin from nothing measured."""
        with self.lock:
            self.curricula.clear()

    def state(self) -> list[dict[str, Any]]:
        """The difficulty orders' state, JSON-ready (saved with each checkpoint)."""
        with self.lock:
            return [{"split": key[0], "size": key[1], "seed": key[2], "width": key[3], **c.state()}
                    for key, c in self.curricula.items()]

    def restore(self, saved: Iterable[Mapping[str, Any]]) -> None:
        """The difficulty orders as `state()` saved them."""
        with self.lock:
            self.curricula.clear()
            for one in saved:
                key = (str(one["split"]), int(one["size"]), int(one["seed"]), int(one["width"]))
                self.curricula[key] = Difficulty.restored(one)

    @staticmethod
    def _shuffle(size: int, seed: int, stream: str, epoch: int, before: list[int], window: int) -> list[int]:
        order = list(range(size))
        random.Random(seed * 1_000_003 + epoch * 2 + (stream != "train")).shuffle(order)
        if before and 1 < window and 2 * (window - 1) <= size:
            ended = set(before[size - (window - 1):])
            early = [t for t in order if t not in ended][: window - 1]
            order = early + [t for t in order if t not in early]
        return order


# -- the difficulty-aware order ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Pools:
    """`task_pools` (settings.POOLS, resolved): the pools' weights, the floor, the groups per task that decide its
    pool, the reward from which a flat task is easy."""

    normal: float = settings.POOLS["normal"]
    hard: float = settings.POOLS["hard"]
    easy: float = settings.POOLS["easy"]
    floor: float = settings.POOLS["floor"]
    recent: int = settings.POOLS["recent"]
    solved: float | None = settings.POOLS["solved"]

    @classmethod
    def of(cls, given: Mapping[str, Any] | None) -> Pools:
        values = {**settings.POOLS, **(given or {})}
        return cls(float(values["normal"]), float(values["hard"]), float(values["easy"]), float(values["floor"]),
                   int(values["recent"]), None if values["solved"] is None else float(values["solved"]))

    def weight(self, pool: str) -> float:
        return float(getattr(self, pool))


@dataclass(frozen=True)
class Group:
    """One measured group of a task: whether its scored rewards spread, their lowest and highest (None: none
    scored)."""

    spread: bool
    low: float | None
    high: float | None

    @classmethod
    def of(cls, rewards: Iterable[float | None]) -> Group:
        scored = [float(r) for r in rewards if r is not None and math.isfinite(r)]
        return cls(spreads(scored), min(scored, default=None), max(scored, default=None))


def spreads(rewards: Sequence[float | None]) -> bool:
    """Whether a group's rewards spread, as GRPO sees it: the sample standard deviation of the scored ones above
    TOLERANCE (fewer than two scored: no spread; GRPO's advantage is 0 there too)."""
    scored = [float(r) for r in rewards if r is not None and math.isfinite(r)]
    if len(scored) < 2:
        return False
    mean = math.fsum(scored) / len(scored)
    return math.sqrt(math.fsum((r - mean) ** 2 for r in scored) / (len(scored) - 1)) > TOLERANCE


@dataclass(frozen=True)
class View:
    """The pools as they stood when a round began: the tasks measured hard and easy (every other task drawn before
    is normal)."""

    hard: frozenset[int] = frozenset()
    easy: frozenset[int] = frozenset()

    def pool(self, task: int) -> str:
        return "hard" if task in self.hard else "easy" if task in self.easy else "normal"


@dataclass
class Draw:
    """One round's draws: each group's task, the pool it came from, whether the floor drew it; the pools' sizes."""

    tasks: list[int]
    routes: list[str]
    floors: list[bool]
    sizes: dict[str, int]


class Difficulty:
    """The difficulty-aware order of one training stream (module docstring): the measured groups, which round drew
    each task first, the pools at each round's start, and the rounds drawn."""

    def __init__(self, size: int, seed: int, width: int, pools: Mapping[str, Any] | Pools | None = None) -> None:
        self.size, self.seed, self.width = size, seed, max(width, 1)  # width: groups per round
        self.pools = pools if isinstance(pools, Pools) else Pools.of(pools)
        self.recent: dict[int, collections.deque[Group]] = {}  # per task, its last measured groups
        self.best: float | None = None  # the highest and lowest reward measured in the run
        self.worst: float | None = None
        self.first: dict[int, int] = {}  # task -> the round that drew it first
        self.begun = -1  # the last round whose resets began in line
        self.views: dict[int, View] = {}  # round q -> the pools when round q began
        self.rounds: dict[int, Draw] = {}
        self.counted = -1  # the last round counted in `totals`
        self.lock = threading.Lock()
        first_epoch = list(range(size))
        random.Random(seed * 1_000_003).shuffle(first_epoch)  # the shuffle order's first epoch (Order._shuffle)
        self.unseen_order = first_epoch

    # -- drawing -------------------------------------------------------------------------------------------------

    def task(self, at: Slot) -> int:
        """The task of the group at `at` (`at.ahead`: asked that many rounds before its own, by the look-ahead)."""
        round_, group = divmod(at.position, self.width)
        with self.lock:
            self._begin(round_ - at.ahead)
            draw = self._drawn(round_)
            if at.ahead == 0 and round_ > self.counted:
                self.counted = round_
                _count(draw)
            return draw.tasks[group]

    def draw(self, round_: int) -> Draw:
        """Round `round_`'s draws (made once, then kept while the run is near it)."""
        with self.lock:
            return self._drawn(round_)

    def begin(self, round_: int) -> None:
        """Round `round_`'s resets begin (what its first reset does): the pools as they stand are its view."""
        with self.lock:
            self._begin(round_)

    def _begin(self, now: int) -> None:
        """Rounds up to `now` began: each takes the pools as they stand (under the lock)."""
        while self.begun < now:
            self.begun += 1
            self.views[self.begun] = self._view()
        for old in [q for q in self.views if q < self.begun - 2]:
            del self.views[old]
        for old in [r for r in self.rounds if r < self.begun - 2]:
            del self.rounds[old]

    def _view(self) -> View:
        bar = self.pools.solved
        if bar is None and self.best is not None and self.worst is not None and self.best - self.worst > TOLERANCE:
            bar = self.best
        hard, easy = set(), set()
        for task, groups in self.recent.items():
            if not groups or any(g.spread for g in groups):
                continue
            if bar is not None and all(g.low is not None and g.low >= bar - TOLERANCE for g in groups):
                easy.add(task)
            else:
                hard.add(task)
        return View(frozenset(hard), frozenset(easy))

    def _drawn(self, round_: int) -> Draw:
        found = self.rounds.get(round_)
        if found is None:
            earlier = max((r for r in self.rounds if r < round_), default=None)
            for missing in range(round_ if earlier is None else earlier + 1, round_):  # in order: `first` needs them
                self.rounds[missing] = self._make(missing)
            found = self.rounds[round_] = self._make(round_)
        return found

    def _make(self, round_: int) -> Draw:
        view = self.views.get(round_ - 1)
        if view is None and round_ > 0:  # a resumed run whose checkpoint held no order: the pools as they stand
            _once_missing(round_)
            view = self._view()
        view = view or View()
        before = sorted(t for t, r in self.first.items() if r < round_)
        member = {task: view.pool(task) for task in before}  # every task drawn before round_, and its pool
        unseen = (t for t in self.unseen_order if t not in member)
        pools: dict[str, list[int]] = {pool: [] for pool in POOLS}
        for known in before:
            pools[member[known]].append(known)
        sizes = {"unseen": self.size - len(before), **{pool: len(pools[pool]) for pool in POOLS}}
        rng = random.Random(f"orsgen/difficulty/{self.seed}/{round_}")
        tasks: list[int] = []
        routes: list[str] = []
        floors: list[bool] = []
        used: set[int] = set()
        for _ in range(self.width):
            task = next(unseen, None)
            route, floored = "unseen", False
            if task is None:
                for fresh in tasks:  # what this round drew unseen is drawn now: normal, not measured yet
                    if fresh not in member:
                        member[fresh] = "normal"
                        pools["normal"].append(fresh)
                left = {pool: len(pools[pool]) - sum(member[t] == pool for t in used) for pool in POOLS}
                if not any(left.values()):  # a round wider than the split: its tasks again
                    used.clear()
                    left = {pool: len(pools[pool]) for pool in POOLS}
                weights = [self.pools.weight(pool) if left[pool] else 0.0 for pool in POOLS]
                if rng.random() < self.pools.floor or not any(weights):
                    floored = True
                    task = _pick(rng, [t for pool in POOLS for t in pools[pool]], used)
                    route = member[task]
                else:
                    route = rng.choices(POOLS, weights)[0]
                    task = _pick(rng, pools[route], used)
            tasks.append(task)
            routes.append(route)
            floors.append(floored)
            used.add(task)
            self.first.setdefault(task, round_)
        return Draw(tasks, routes, floors, sizes)

    # -- what was measured ---------------------------------------------------------------------------------------

    def measured(self, groups: Iterable[tuple[int, int, Sequence[float | None]]]) -> None:
        """Measured groups (group number, task, the rewards the trainer got), the same on every rank: in the pools
        from the next round that begins."""
        with self.lock:
            for _, task, rewards in sorted(groups, key=lambda g: g[0]):
                if not 0 <= task < self.size:
                    continue
                group = Group.of(rewards)
                kept = self.recent.get(task)
                if kept is None or kept.maxlen != self.pools.recent:
                    kept = self.recent[task] = collections.deque(kept or (), maxlen=self.pools.recent)
                kept.append(group)
                if group.high is not None:
                    self.best = group.high if self.best is None else max(self.best, group.high)
                if group.low is not None:
                    self.worst = group.low if self.worst is None else min(self.worst, group.low)

    # -- saved with checkpoints ----------------------------------------------------------------------------------

    def state(self) -> dict[str, Any]:
        with self.lock:
            return {
                "pools": {key: getattr(self.pools, key) for key in settings.POOLS},
                "recent": {str(t): [[g.spread, g.low, g.high] for g in groups] for t, groups in self.recent.items()},
                "best": self.best, "worst": self.worst,
                "first": {str(t): r for t, r in self.first.items()},
                "begun": self.begun,
                "views": {str(q): {"hard": sorted(v.hard), "easy": sorted(v.easy)} for q, v in self.views.items()},
            }

    @classmethod
    def restored(cls, saved: Mapping[str, Any]) -> Difficulty:
        made = cls(int(saved["size"]), int(saved["seed"]), int(saved["width"]), saved.get("pools"))
        recent = made.pools.recent
        made.recent = {int(t): collections.deque((Group(bool(s), lo, hi) for s, lo, hi in groups), maxlen=recent)
                       for t, groups in saved["recent"].items()}
        made.best, made.worst = saved["best"], saved["worst"]
        made.first = {int(t): int(r) for t, r in saved["first"].items()}
        made.begun = made.counted = int(saved["begun"])
        made.views = {int(q): View(frozenset(v["hard"]), frozenset(v["easy"])) for q, v in saved["views"].items()}
        return made


def _pick(rng: random.Random, candidates: list[int], used: set[int]) -> int:
    """A task of `candidates` not in `used` (there is one), uniformly."""
    while True:
        task = candidates[rng.randrange(len(candidates))]
        if task not in used:
            return task


def _count(draw: Draw) -> None:
    found = _drawn()
    with found.lock:
        for route, floored in zip(draw.routes, draw.floors, strict=True):
            found.totals[route] += 1
            found.totals["floor"] += floored
        found.levels.clear()
        found.levels.update(draw.sizes)


def _once_missing(round_: int) -> None:
    found = _drawn()
    if not found.missing_said:
        found.missing_said = True
        log.warning("orsgen: task_order='difficulty': the pools of round %d's start are unknown (a resumed run "
                    "whose checkpoint holds no orsgen_task_order.json): its draws use the pools as they stand",
                    round_ - 1)
