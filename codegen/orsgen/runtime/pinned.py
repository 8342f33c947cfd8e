"""What a generated module pinned about its environment (connection, snapshot, task list) and what is derived from
it once per process: the drift check, split sizes, the task order, the start failures in a row. The dataset's rows
are read by `rows`."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from orsgen.runtime import bounds, client, rows
from orsgen.runtime.ahead import Ahead
from orsgen.runtime.errors import DriftError, WrongServer
from orsgen.runtime.tasks import Order

log = logging.getLogger("orsgen")

if TYPE_CHECKING:
    import datasets
    from openreward.api.environments.client import AsyncEnvironment

class InARow:
    """Start failures of one environment since its last start that worked. "The environment is down" is a judgement
    over time: no start has worked for a while (`down_after` seconds since the first failure, after its retries) and
    at least a floor of tasks failed. A count alone says nothing: 32 rollouts in flight fail at one moment of downtime.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.count = 0
        self.last: tuple[str, int] | None = None
        self.since: float | None = None  # when the first failure since the last start that worked was counted

    def started(self) -> None:
        with self.lock:
            self.count, self.last, self.since = 0, None, None

    def failed(self, task: tuple[str, int], in_batch: bool) -> tuple[int, float]:
        """Count a task that could not start: (failures in a row so far, seconds since the first of them). In a
        trainer, the rollouts of a GRPO group reset one after the other on the same task: a task that fails for all
        of them counts once, so one broken task does not look like an environment that is down."""
        with self.lock:
            now = time.monotonic()
            if self.since is None:
                self.since = now
            if self.last != task or not in_batch:
                self.count += 1
            self.last = task
            return self.count, now - self.since


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
    _drift_checked: set[str] = field(default_factory=set, repr=False)
    _sizes: dict[tuple[str | None, str], int] = field(default_factory=dict, repr=False)
    _builds_seen: set[str] = field(default_factory=set, repr=False)
    _serves_env: set[str] = field(default_factory=set, repr=False)  # servers known to serve the environment
    _tasks: dict[str, list[Any]] | None = field(default=None, repr=False)
    _drift_lock: asyncio.Lock | None = field(default=None, repr=False)  # made on the runtime's loop
    order: Order = field(default_factory=Order, repr=False)
    ahead: Ahead = field(default_factory=Ahead, repr=False)
    failures: InARow = field(default_factory=InARow, repr=False)  # start failures in a row, of this environment
    conversations: set[tuple[str, int]] = field(default_factory=set, repr=False)  # tasks served as turns (messages)

    def server(self, url: str | None) -> str | None:
        """The session server: the adapter's, else OPENREWARD_SESSION_URL, else the pinned one (None: the SDK's)."""
        return url or os.environ.get("OPENREWARD_SESSION_URL") or self.url

    def environment(self, url: str | None, api_key: str | None) -> AsyncEnvironment:
        return client.loop().environment(self.deployment, self.env, self.server(url), api_key)

    async def check_drift(self, env: AsyncEnvironment, url: str | None) -> None:
        """Compare the live tool list with the snapshot, once per process and server (on the runtime's loop)."""
        where = self.server(url) or self.deployment
        if self._drift_lock is None:
            self._drift_lock = asyncio.Lock()
        async with self._drift_lock:
            if where in self._drift_checked:
                return
            tools = await asyncio.wait_for(env.list_tools(), client.timeout("reset"))
            live = {t.name: canonical(bounds.tool({"description": t.description or "", "input_schema": t.input_schema,
                                                   "name": t.name})) for t in tools}
            pinned = {t["name"]: t for t in self.snapshot["tools"]}
            changes = [f"+ {n} (new on the server)" for n in live if n not in pinned]
            changes += [f"- {n} (gone from the server)" for n in pinned if n not in live]
            changes += [f"~ {n} (schema or description changed)" for n in live if n in pinned and live[n] != pinned[n]]
            if changes:
                raise DriftError(
                    f"the tools at {where} differ from those pinned in {self.module} ({self.target}): "
                    f"{'; '.join(changes)}. Regenerate the module, or set ORSGEN_DRIFT_CHECK=0 to train anyway."
                )
            self._drift_checked.add(where)

    def check_server(self, url: str | None, exc: BaseException) -> None:
        """Raise WrongServer, one line, when a 404 came from a session server that does not serve the environment
        this module pins (`url=` or OPENREWARD_SESSION_URL pointing elsewhere)."""
        server = self.server(url)
        if client.status(exc) != 404 or server is None or self.env is None or server in self._serves_env:
            return
        served = client.served(server)
        if served is None or self.env.lower() in {name.lower() for name in served}:
            self._serves_env.add(server)  # asked once per server: its other 404s are the tasks' own
            return
        raise WrongServer(
            f"{server} serves {', '.join(served) or 'no environment'}, not {self.env!r}, which {self.module} pins "
            f"(target {self.target}): point url= or OPENREWARD_SESSION_URL at the server of {self.env!r}, or "
            "regenerate the module for this server"
        ) from None

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
        key = (self.server(url), split)
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

    async def check_build(self, session: Any, url: str | None) -> None:
        """Warn once per server when its build is not the one the module was generated against."""
        where = self.server(url) or self.deployment
        if self.build is None or where in self._builds_seen:
            return
        self._builds_seen.add(where)
        live = (await asyncio.wait_for(session.version(), client.timeout("reset"))).get("build_sha")
        if live != self.build:
            log.warning("orsgen: %s was generated against build %s of %s, the server now runs %s: the tools are "
                        "checked, but tasks, prompts or rewards may have changed", self.module, self.build,
                        self.target, live)

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
    ) -> datasets.Dataset:
        """The tasks of a split as a ``datasets.Dataset`` for ``GRPOTrainer(train_dataset=...)``.

        Rows hold ``prompt`` (an empty user message: ``reset()`` supplies the task's prompt), ``task_index``,
        ``split`` and, with ``include_metadata``, one column per task-spec key. When tasks advertise their own tools,
        an ``environment`` column names each row's class: train with ``environment_factory=ENVIRONMENTS``.
        ``num_tasks`` takes the first N tasks, ``indices`` the ones named; the default is the whole split.
        ``prompts=True`` also stores each task's prompt in a ``task_prompt`` column (one short session per task,
        8 at a time), for adapters with ``open_in_background``. Asking for more tasks than the split has, or for a
        split the module did not pin, raises ValueError (TRL's OpenRewardSpec caps instead: orsgen says so).
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
        try:
            return rows.dataset(self, split, num_tasks, indices, include_metadata, prompts, url, api_key)
        except Exception as exc:
            self.check_server(url, exc)
            raise


def canonical(node: Any, keep_order: bool = False) -> Any:
    """The snapshot's JSON form: keys sorted, except in `properties`, whose order is the parameters' order."""
    if isinstance(node, list):
        return [canonical(x) for x in node]
    if not isinstance(node, dict):
        return node
    keys = list(node) if keep_order else sorted(node)
    return {k: canonical(node[k], keep_order=k == "properties" and not keep_order) for k in keys}
