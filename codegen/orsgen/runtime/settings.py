"""The adapter's settings: one table (`SETTINGS`), each row naming where a value may come from, resolved at every
reset (`resolve`) into one `Settings` value the episode and the session opener read.

A value comes from, first to last: the constructor (``Adapter(settings={...})``, or its own keyword such as
``check_drift=``), the environment variable, the adapter class attribute, the default. Class attributes are runtime
API 1's public names and never grow: a new setting is a row with a variable and a key, and a field of `Settings`.
A value no episode could run with is refused in one line, before any request.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any, Literal

Source = Literal["argument", "variable", "attribute"]

_WORDS: dict[str, bool] = {"0": False, "false": False, "no": False, "off": False,
                           "1": True, "true": True, "yes": True, "on": True}


@dataclass(frozen=True)
class Settings:
    """One adapter's settings for one episode (what `SETTINGS` resolved)."""

    open_in_background: bool = False
    task_seed: int = 0
    unscored_reward: float | None = None
    start_failures: str = "skip"
    start_retries: int = 2
    down_after: float = 300.0
    max_start_failures: int = 8
    open_ahead: bool | str = True
    check_drift: bool = True
    reset_timeout: float = 120.0
    tool_timeout: float = 900.0
    close_timeout: float = 10.0
    episode_timeout: float | None = None
    batch_calls: bool = True


DEFAULTS = Settings()


class Refused(ValueError):
    """A setting's value, refused: the resolver prefixes where it came from (`TypeError` when the type is wrong)."""


@dataclass(frozen=True)
class Setting:
    """One row: the `Settings` field (and `settings={...}` key) it fills and where its value may come from."""

    name: str
    parse: Callable[[Any, Source], Any]  # the value as given -> the setting's value; Refused/TypeError: its tail
    doc: str
    attribute: str | None = None  # the adapter class attribute (API 1's names only)
    variable: str | None = None  # the environment variable

    @property
    def default(self) -> Any:
        return getattr(DEFAULTS, self.name)


def _flag(value: Any, source: Source) -> bool:
    if isinstance(value, bool):
        return value
    word = str(value).strip().lower()
    if source == "variable" and word in _WORDS:
        return _WORDS[word]
    raise Refused("one of 0 (off), 1 (on)" if source == "variable" else "True or False")


def _ahead(value: Any, source: Source) -> bool | str:
    if source != "variable":
        if isinstance(value, bool) or value == "next-step":
            return value  # type: ignore[no-any-return]
        raise Refused("one of True, False, 'next-step'")
    word = str(value).strip().lower()
    if word in _WORDS:
        return _WORDS[word]
    if word == "next-step":
        return word
    raise Refused("one of 0 (off), 1 (on), next-step")


def _seconds(default: float) -> Callable[[Any, Source], float]:
    def parse(value: Any, source: Source) -> float:
        try:
            seconds = float(value)
        except (TypeError, ValueError):
            seconds = math.nan
        if not 0 < seconds < math.inf:  # 0, negative or nan: every wait times out at once; inf overflows them
            raise Refused(f"a number of seconds above 0 is needed (default {default:g})" if default < math.inf else
                          "a number of seconds above 0 is needed (unset: no limit)")
        return seconds

    return parse


def _limit(value: Any, source: Source) -> float | None:
    return None if value is None else _seconds(math.inf)(value, source)


def _retries(value: Any, source: Source) -> int:
    if not isinstance(value, int) or value < 0:
        raise Refused("0 or more further attempts at a failed start")
    return value


def _failures(value: Any, source: Source) -> str:
    if value not in ("skip", "raise"):
        raise Refused("'skip' or 'raise'")
    return str(value)


def _seed(value: Any, source: Source) -> int:
    if isinstance(value, (str, bytes)):  # read from a config or the environment, unconverted
        raise TypeError("an int (the seed of the task order)")
    return int(value)


def _number(value: Any, source: Source) -> float:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise TypeError("a number")
    return float(value)


def _reward(value: Any, source: Source) -> float | None:
    return None if value is None else _number(value, source)


def _count(value: Any, source: Source) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise Refused("1 or more")
    return value


SETTINGS = (
    Setting("open_in_background", lambda v, s: bool(v), "with rows of dataset(prompts=True), reset() returns the "
            "pinned prompt at once and the session opens in the background", attribute="open_in_background"),
    Setting("task_seed", _seed, "seed of the task order of resets without task_index", attribute="task_seed"),
    Setting("unscored_reward", _reward, "what get_reward() gives an episode no tool scored",
            attribute="unscored_reward"),
    Setting("start_failures", _failures, '"skip": an episode that cannot start is unscored; "raise": reset raises',
            attribute="start_failures"),
    Setting("start_retries", _retries, "further attempts at a start that failed for a transient reason",
            attribute="start_retries"),
    Setting("down_after", _number, "seconds without a start that worked (and max_start_failures tasks failed in "
            "a row) before the run stops", attribute="down_after"),
    Setting("max_start_failures", _count, "tasks that must fail in a row before the run stops",
            attribute="max_start_failures"),
    Setting("open_ahead", _ahead, "a batch's first reset opens the batch's sessions; next-step: the next step's "
            "too (environment-owned data)", attribute="open_ahead", variable="ORSGEN_OPEN_AHEAD"),
    Setting("check_drift", _flag, "compare the live tools with the pinned ones at the first start per server",
            variable="ORSGEN_DRIFT_CHECK"),
    Setting("reset_timeout", _seconds(DEFAULTS.reset_timeout), "bound on a session's start and prompt",
            variable="ORSGEN_RESET_TIMEOUT"),
    Setting("tool_timeout", _seconds(DEFAULTS.tool_timeout), "bound on a tool call (and a group's scoring)",
            variable="ORSGEN_TOOL_TIMEOUT"),
    Setting("close_timeout", _seconds(DEFAULTS.close_timeout), "bound on closing a session",
            variable="ORSGEN_CLOSE_TIMEOUT"),
    Setting("episode_timeout", _limit, "seconds from reset: a tool call after them voids the episode (unscored "
            "timed_out) and fails, as every later one does", variable="ORSGEN_EPISODE_TIMEOUT"),
    Setting("batch_calls", _flag, "the first tool call of a GRPOTrainer turn starts the turn's calls of the batch's "
            "later rollouts at once (sync tools)", variable="ORSGEN_BATCH_CALLS"),
)
BY_NAME = {row.name: row for row in SETTINGS}


def _tool(value: Any) -> bool:
    """A class attribute a tool method of that name shadows (a module generated before the setting existed)."""
    return callable(value)


def value(row: Setting, owner: type | None = None, given: Mapping[str, Any] | None = None) -> Any:
    """One setting's value for an adapter class (`owner`) and its constructor's `given` settings."""
    try:
        if given is not None and row.name in given:
            where = f"{owner.__name__ if owner else 'Adapter'}(settings={{{row.name!r}: {given[row.name]!r}}})"
            return row.parse(given[row.name], "argument")
        raw = os.environ.get(row.variable) if row.variable else None
        if raw is not None:
            where = f"{row.variable}={raw!r}"
            return row.parse(raw, "variable")
        found = getattr(owner, row.attribute, row.default) if owner is not None and row.attribute else row.default
        if found is row.default or _tool(found):
            return row.default
        where = f"{owner.__name__ if owner else 'Adapter'}.{row.attribute} = {found!r}"
        return row.parse(found, "attribute")
    except Refused as exc:
        raise ValueError(f"{where}: {exc}") from None
    except TypeError as exc:
        raise TypeError(f"{where}: {exc}") from None


def resolve(owner: type | None, given: Mapping[str, Any] | None = None) -> Settings:
    """Every setting of an adapter class (None: no class, the variables and defaults) for one episode; ValueError
    (TypeError), one line, for a bad one."""
    unknown = sorted(set(given or ()) - set(BY_NAME))
    if unknown:
        raise ValueError(f"{owner.__name__ if owner else 'Adapter'}(settings=...): no setting {unknown[0]!r}: one "
                         f"of {', '.join(BY_NAME)}")
    return Settings(**{row.name: value(row, owner, given) for row in SETTINGS})


def variable(name: str) -> Any:
    """A setting read from its environment variable alone (what is read where no adapter is: closing, scoring)."""
    return value(BY_NAME[name])


def table() -> str:
    """The settings table of docs/reference.md (tests/test_runtime_objects.py compares the two)."""
    lines = ["| setting | class attribute | variable | default | what it does |", "|---|---|---|---|---|"]
    for row in SETTINGS:
        lines.append(f"| `{row.name}` | {f'`{row.attribute}`' if row.attribute else ''} | "
                     f"{f'`{row.variable}`' if row.variable else ''} | `{row.default!r}` | {row.doc} |")
    return "\n".join(lines)


assert [row.name for row in SETTINGS] == [f.name for f in fields(Settings)], "one row per Settings field"
