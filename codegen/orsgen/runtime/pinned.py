"""What a generated module pinned about its environment (connection, snapshot, task list), and the objects that live
once per environment and process: its session opener (`sessions`: drift check, start failures in a row), the store
of what is opened ahead (`ahead`), the task order (`order`). The dataset's rows are read by `rows`."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from orsgen.runtime import client, rows
from orsgen.runtime.ahead import Ahead
from orsgen.runtime.sessions import Connection, InARow, Sessions
from orsgen.runtime.tasks import Order

if TYPE_CHECKING:
    import datasets
    from openreward.api.environments.client import AsyncEnvironment

@dataclass(eq=False)
class Pinned:
    """One environment as a generated module pinned it. The module's adapter classes and `dataset` use it."""

    module: str  # the generated module's __name__ (for messages)
    target: str
    url: str | None  # session server; None: OPENREWARD_SESSION_URL or the platform's
    deployment: str
    env: str | None
    split: str
    snapshot: dict[str, Any]
    build: str | None = None  # the server's build when the module was generated (None: it reports none)
    tasks_file: str | None = None  # FILE.tasks.json beside the module (written by --pin-tasks), if it exists
    task_classes: dict[int, str] = field(default_factory=dict)  # task -> adapter class (task-specific tools)
    task_tools_split: str | None = None
    default_class: str = ""
    # Tool budgets the module pinned (`[tool.orsgen.targets.NAME]` max-output-chars, ..., and per tool under "tools"):
    # {"max-output-chars": 20000, "truncate": "middle", ..., "tools": {"bash": {"timeout": 30.0}}}; empty: none.
    budgets: dict[str, Any] = field(default_factory=dict)
    _sizes: dict[tuple[str | None, str], int] = field(default_factory=dict, repr=False)
    _tasks: dict[str, list[Any]] | None = field(default=None, repr=False)
    order: Order = field(default_factory=Order, repr=False)
    ahead: Ahead = field(default_factory=Ahead, repr=False)
    conversations: set[tuple[str, int]] = field(default_factory=set, repr=False)  # tasks served as turns (messages)
    sessions: Sessions = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.sessions = Sessions(self)

    @property
    def failures(self) -> InARow:
        """Start failures in a row, of this environment."""
        return self.sessions.failures

    def secret_names(self) -> list[str]:
        """The environment variables the module was generated with as secrets (`--secret NAME`): recorded in its
        ORSGEN_OPTIONS, read by the adapter at run time."""
        options = getattr(sys.modules.get(self.module), "ORSGEN_OPTIONS", None)
        names = options.get("secret") if isinstance(options, dict) else None
        return [str(name) for name in names] if isinstance(names, list) else []

    def generated_secrets(self, who: str) -> dict[str, Any] | None:
        """The secrets the module was generated with (`--secret NAME`), read from the same environment variables; a
        well-known name as the SDK takes it, any other allowed no domain, as generation sent it."""
        names = self.secret_names()
        if not names:
            return None
        missing = [name for name in names if name not in os.environ]
        if missing:
            raise ValueError(f"{who}: {self.module} was generated with --secret {missing[0]}: set the environment "
                             f"variable {missing[0]} (its value is sent as the secret of that name when a session "
                             "opens), or pass secrets=")
        from openreward.api.sandboxes.secrets import WELL_KNOWN_SECRETS

        return {name: os.environ[name] if name in WELL_KNOWN_SECRETS else (os.environ[name], []) for name in names}

    def refuse_split(self, split: str, who: str) -> None:
        """ValueError, one line, for a split the module did not pin (one that pinned none accepts any; a split its
        pinned task file holds is pinned too): every episode of such a split would go unscored."""
        pinned = self.splits()
        if pinned and split not in pinned and split not in (self.pinned_tasks() or {}):
            raise ValueError(f"{who}: {self.env or self.deployment} has no split {split!r}: {self.module} pinned "
                             f"{', '.join(map(repr, pinned))}")

    def splits(self) -> list[str]:
        """The split names the module pinned (empty: it pinned none)."""
        found = self.snapshot.get("splits") or []
        return [s if isinstance(s, str) else str(s.get("name")) for s in found if isinstance(s, (str, dict))]

    def num_tasks(self, env: AsyncEnvironment, split: str, url: str | None) -> int:
        """The split's size: the pinned task file's when it holds the split (sessions open on its specs, so a task
        order over the live split would open tasks it does not pin, or never reach some it does), else the server's."""
        pinned = self.pinned_tasks()
        if pinned is not None and split in pinned:
            return len(pinned[split])
        key = (self.sessions.server(url), split)
        if key not in self._sizes:
            self._sizes[key] = int(client.loop().run(env.num_tasks(split), "reset"))
        return self._sizes[key]

    def pinned_tasks(self) -> dict[str, list[Any]] | None:
        """The task list written by --pin-tasks beside the module, read once; None when there is none."""
        if self._tasks is None and self.tasks_file and os.path.exists(self.tasks_file):
            with open(self.tasks_file, encoding="utf-8") as f:
                self._tasks = json.load(f)["splits"]
        return self._tasks

    def pinned_spec(self, split: str, index: int) -> Any | None:
        """The pinned spec of a task: sessions open on it, so a row's metadata and its episode always agree."""
        splits = self.pinned_tasks()
        if splits is None or split not in splits or not 0 <= index < len(splits[split]):
            return None
        return splits[split][index]

    def dataset(
        self,
        split: str | None = None,
        num_tasks: int | None = None,
        indices: Sequence[int] | None = None,
        include_metadata: bool = True,
        *,
        prompts: bool = False,
        url: str | None = None,
        api_key: str | None = None,
        pass_rates: str | os.PathLike[str] | Mapping[Any, float] | None = None,
        keep: tuple[float, float] = (0.0, 1.0),
        weight: bool | int = False,
    ) -> datasets.Dataset:
        """The tasks of a split as a ``datasets.Dataset`` for ``GRPOTrainer(train_dataset=...)``.

        Rows hold ``prompt`` (an empty user message: ``reset()`` supplies the task's prompt), ``task_index``,
        ``split`` and, with ``include_metadata``, one column per task-spec key. When tasks advertise their own tools,
        an ``environment`` column names each row's class: train with ``environment_factory=ENVIRONMENTS``.
        ``num_tasks`` takes the first N tasks, ``indices`` the ones named; the default is the whole split.
        ``prompts=True`` also stores each task's prompt in a ``task_prompt`` column (one short session per task,
        8 at a time), for adapters with ``open_in_background``. Asking for more tasks than the split has, or for a
        split the module did not pin, raises ValueError (TRL's OpenRewardSpec caps instead: orsgen says so).

        ``pass_rates`` (an ``orsgen eval --out`` folder, its ``summary.json``, a JSON file of task index -> pass rate,
        or such a mapping) keeps the tasks whose measured pass rate lies strictly between ``keep``'s bounds: by
        default those the model sometimes solves. It says how many it kept; unmeasured tasks are left out.
        ``weight=True`` repeats each kept task's row in proportion to p(1-p), the reward variance of its groups
        (4 rows at p = 0.5, at least 1; an int sets that 4), and says how many rows that made.
        """
        split = split or self.split
        pinned = self.splits()
        if pinned and split not in pinned and self.pinned_tasks() is None:
            raise ValueError(f"dataset(): {self.env or self.deployment} has no split {split!r}: {self.module} pinned "
                             f"{', '.join(map(repr, pinned))}")
        if num_tasks is not None and indices is not None:
            raise ValueError("dataset(): pass num_tasks or indices, not both")
        if num_tasks is not None and num_tasks < 0:
            raise ValueError(f"dataset(): num_tasks must be >= 0, got {num_tasks}")
        measured = None if pass_rates is None else rows.pass_rates(pass_rates, self.env or self.deployment, split)
        try:
            made = rows.dataset(self, split, num_tasks, indices, include_metadata, prompts, Connection(url, api_key))
        except Exception as exc:
            self.sessions.check_server(url, exc)
            raise
        if measured is None:
            if weight is not False:
                raise ValueError("dataset(weight=...): weights come from measured pass rates: pass pass_rates= too")
            return made
        return rows.kept(made, measured, keep, split, weight)
