"""The adapter's settings: one table (`SETTINGS`), each row naming where a value may come from, resolved at every
reset (`resolve`) into one `Settings` value the episode and the session opener read.

A value comes from, first to last: the constructor (``Adapter(settings={...})``, or its own keyword such as
``check_drift=``), the environment variable, the adapter class attribute, the default. The attributes `Adapter`
declares are runtime API 1's public names and never grow: a new setting is a row and a field of `Settings`; one read
from a class attribute too (the tool budgets') is read where a subclass sets it, never declared on `Adapter` (a tool
method of that name would clash with it). A value no episode could run with is refused in one line, before any
request.

The tool budgets' table is here too (`BUDGET_KEYS`: one row per key, read by a module's pinned `budgets`, by
`tool_budgets`, by the settings that override them and by the generator's options), so a value is refused the same
way wherever it comes from; budgets.py merges them.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Literal

Source = Literal["argument", "variable", "attribute"]

_WORDS: dict[str, bool] = {"0": False, "false": False, "no": False, "off": False,
                           "1": True, "true": True, "yes": True, "on": True}
ORDERS = ("shuffle", "difficulty")  # task_order: the seeded shuffle, or the difficulty-aware order (tasks.py)
# task_pools' keys and defaults: the pools' weights (any numbers >= 0, used in proportion), the floor (the share of
# draws made uniformly over every task), the recent groups per task that decide its pool, and the reward at or above
# which a task whose groups have no spread is easy (None: the highest reward the run has seen).
POOLS: dict[str, Any] = {"normal": 0.9, "hard": 0.05, "easy": 0.05, "floor": 0.02, "recent": 4, "solved": None}


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
    max_sessions: int | None = None  # the sessions budget per environment and process (slots.py); None: none
    # Tool budgets (budgets.py): None is the module's pinned value.
    max_output_chars: int | None = None
    max_output_tokens: int | None = None
    tokenizer: str | None = None
    truncate: str | None = None
    max_images: int | None = None
    max_tool_calls: int | None = None
    tool_budgets: Mapping[str, Mapping[str, Any]] | None = None
    # The task order of resets without task_index (tasks.py).
    task_order: str = "shuffle"
    task_pools: Mapping[str, Any] = field(default_factory=lambda: dict(POOLS))


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


def _at_least(least: int) -> Callable[[Any, Source], int | None]:
    """A whole number, at least `least` (a variable's text is read as one); None: unset."""

    def parse(value: Any, source: Source) -> int | None:
        if value is None:
            return None
        if source == "variable" and isinstance(value, str):
            try:
                value = int(value.strip())
            except ValueError:
                pass
        if not isinstance(value, int) or isinstance(value, bool) or value < least:
            raise Refused(f"a whole number, {least} or more")
        return value

    return parse


def _timeout(value: Any, source: Source) -> float | None:
    if value is None:
        return None
    seconds = float(value) if isinstance(value, int | float) and not isinstance(value, bool) else math.nan
    if not 0 < seconds < math.inf:
        raise Refused("a number of seconds above 0")
    return seconds


SIDES = ("head", "tail", "middle")  # what a cut keeps: the start, the end, both (the middle is cut)


@dataclass(frozen=True)
class BudgetKey:
    """One row of the budget table: a key spelt alike in pyproject.toml, on the command line (`--KEY`), in a module's
    pinned BUDGETS and in `tool_budgets`; the setting that overrides it environment-wide at run time; and one way its
    values are read, wherever they come from (the generator's options and the runtime's settings both read this)."""

    key: str
    kind: type  # int: a whole number >= `least`; float: seconds above 0; str: one of `choices`, else any text
    help: str  # the generator's option text
    metavar: str
    least: int = 0  # int: the smallest value any source may give
    # int: the smallest the generator pins; a run-time setting (or a module written by hand) may go down to `least`
    generated: int | None = None
    choices: tuple[str, ...] = ()
    setting: str | None = None  # the `Settings` field that overrides it environment-wide; None: a tool's own only
    per_tool: bool = False  # also a tool's own key (`[...tools.TOOL]`, `--tool-budget`, `tool_budgets`)
    said: str | None = None  # how a refusal names the setting when it was given (None: "the <setting> setting")
    text: str = "a non-empty text"  # str without choices: what a value must be

    def read(self, value: Any, source: Source = "attribute") -> Any:
        """A value as given, checked (Refused or TypeError: why not); None stays None (unset)."""
        if value is None:
            return None
        if self.kind is int:
            return _at_least(self.least)(value, source)
        if self.kind is float:
            return _timeout(value, source)
        if self.choices:
            if value in self.choices:
                return value
            raise Refused(f"one of {', '.join(map(repr, self.choices))}")
        if not isinstance(value, str | os.PathLike) or not str(value).strip():
            raise Refused(self.text)
        return str(value)

    @property
    def floor(self) -> int:
        """What the generator accepts at least (int rows)."""
        return self.least if self.generated is None else self.generated


# The budget table. A new pinnable limit is a row here, its `Settings` field and `SETTINGS` row below, the `Job`
# field the generator records it in (config.py), and where it applies (episode.py reads `Budgets.limit(key)`).
BUDGET_KEYS = (
    BudgetKey("max-output-chars", int, "cap each tool result at N characters", "N", least=1, generated=100,
              setting="max_output_chars", per_tool=True),
    BudgetKey("max-output-tokens", int, "cap each tool result at N tokens of --tokenizer", "N", least=1, generated=10,
              setting="max_output_tokens", per_tool=True),
    BudgetKey("tokenizer", str, "what --max-output-tokens counts with: a Hugging Face tokenizer name or a local path",
              "NAME", setting="tokenizer", text="a tokenizer's name or local path"),
    BudgetKey("truncate", str, "the part of a long result kept: head, tail or middle (default)", "SIDE", choices=SIDES,
              setting="truncate", per_tool=True),
    BudgetKey("max-images", int, "image blocks kept per tool result", "N", setting="max_images", per_tool=True),
    BudgetKey("episode-timeout", float, "seconds one episode may take", "S", setting="episode_timeout",
              said="ORSGEN_EPISODE_TIMEOUT"),
    BudgetKey("max-tool-calls", int, "tool calls one episode may make", "N", least=1, setting="max_tool_calls"),
    BudgetKey("timeout", float, "seconds one call may take", "S", per_tool=True),  # replaces tool_timeout
)
BUDGET_BY_KEY = {row.key: row for row in BUDGET_KEYS}
TOOL_KEYS = tuple(row.key for row in BUDGET_KEYS if row.per_tool)


def budget(key: str, value: Any) -> Any:
    """One budget value as pinned or given per tool (Refused/TypeError: why not)."""
    if key not in BUDGET_BY_KEY:
        raise Refused(f"no budget {key!r}")
    return BUDGET_BY_KEY[key].read(value)


def _budget_setting(key: str) -> Callable[[Any, Source], Any]:
    """The parse of the setting that overrides budget `key`: the table's."""
    return lambda value, source: BUDGET_BY_KEY[key].read(value, source)


def _tool_budgets(value: Any, source: Source) -> Mapping[str, Mapping[str, Any]] | None:
    if value is None:
        return None
    if not isinstance(value, Mapping) or not all(isinstance(v, Mapping) for v in value.values()):
        raise Refused(f"{{tool name: {{key: value}}}}, the keys among {', '.join(TOOL_KEYS)}")
    parsed: dict[str, dict[str, Any]] = {}
    for tool, keys in value.items():
        parsed[str(tool)] = {}
        for key, given in keys.items():
            if key not in TOOL_KEYS:
                raise Refused(f"tool {tool!r}: no budget {key!r}: one of {', '.join(TOOL_KEYS)}")
            try:
                parsed[str(tool)][key] = budget(key, given)
            except (Refused, TypeError) as exc:
                raise Refused(f"tool {tool!r}: {key}: {exc}") from None
    return parsed


def _order(value: Any, source: Source) -> str:
    word = str(value).strip().lower() if source == "variable" else value
    if word not in ORDERS:
        raise Refused(f"one of {', '.join(map(repr, ORDERS))}")
    return str(word)


def _pools(value: Any, source: Source) -> Mapping[str, Any]:
    """task_pools: the defaults (POOLS), overridden key by key."""
    if not isinstance(value, Mapping):
        raise Refused(f"{{key: value}}, the keys among {', '.join(POOLS)}")
    parsed = dict(POOLS)
    for key, given in value.items():
        if key not in POOLS:
            raise Refused(f"no key {key!r}: one of {', '.join(POOLS)}")
        number = isinstance(given, int | float) and not isinstance(given, bool) and math.isfinite(given)
        if key == "recent":
            if not (isinstance(given, int) and not isinstance(given, bool) and given >= 1):
                raise Refused("recent: the groups per task that decide its pool, 1 or more")
        elif key == "solved":
            if given is not None and not number:
                raise Refused("solved: a reward (a number), or None: the highest reward the run has seen")
        elif key == "floor":
            if not (number and 0 <= given <= 1):
                raise Refused("floor: the share of draws made over every task, between 0 and 1")
        elif not (number and given >= 0):
            raise Refused(f"{key}: a weight, a number 0 or more")
        parsed[key] = given
    if not any(parsed[pool] > 0 for pool in ("normal", "hard", "easy")) and parsed["floor"] == 0:
        raise Refused("every weight is 0 and the floor too: no task could be drawn")
    return parsed


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
    Setting("episode_timeout", _limit, "seconds from the episode's start (its session open, its prompt read): a "
            "tool call after them voids the episode (unscored timed_out) and fails, as every later one does; None: "
            "the module's episode-timeout",
            variable="ORSGEN_EPISODE_TIMEOUT"),
    Setting("batch_calls", _flag, "the first tool call of a GRPOTrainer turn starts the turn's calls of the batch's "
            "later rollouts at once (sync tools)", variable="ORSGEN_BATCH_CALLS"),
    Setting("max_sessions", _at_least(1), "sessions of one environment a process holds open or opening at once, "
            "starts and open-ahead included (`orsgen eval --max-sessions`): a start past it waits for one to close, "
            "counted in orsgen/slot_wait_seconds; None: no bound. At least the rollouts of a process's batch",
            variable="ORSGEN_MAX_SESSIONS"),
    Setting("max_output_chars", _budget_setting("max-output-chars"), "characters of a tool's result the model reads: the rest is cut, "
            "with a line saying so; None: the module's max-output-chars", attribute="max_output_chars",
            variable="ORSGEN_MAX_OUTPUT_CHARS"),
    Setting("max_output_tokens", _budget_setting("max-output-tokens"), "the same in tokens of `tokenizer`; None: the module's "
            "max-output-tokens", attribute="max_output_tokens"),
    Setting("tokenizer", _budget_setting("tokenizer"), "what max-output-tokens counts with: a name or local path, loaded once with "
            "AutoTokenizer; None: the module's", attribute="tokenizer"),
    Setting("truncate", _budget_setting("truncate"), "what a cut result keeps: 'head' (its start), 'tail' (its end), 'middle' (both); "
            "None: the module's, else 'middle'", attribute="truncate"),
    Setting("max_images", _budget_setting("max-images"), "images of a tool's result the model sees (the first ones); None: the "
            "module's max-images", attribute="max_images"),
    Setting("max_tool_calls", _budget_setting("max-tool-calls"), "tool calls per episode: the next voids it (unscored too_many_calls) "
            "and fails, as every later one does; None: the module's max-tool-calls", attribute="max_tool_calls",
            variable="ORSGEN_MAX_TOOL_CALLS"),
    Setting("tool_budgets", _tool_budgets, "{tool: {key: value}}, keys max-output-chars, max-output-tokens, "
            "truncate, max-images, timeout (replaces tool_timeout): over the module's per-tool budgets and the "
            "settings above", attribute="tool_budgets"),
    Setting("task_order", _order, "environment-owned data: 'shuffle' (a seeded shuffle of the split per epoch) or "
            "'difficulty' (training's groups drawn by how their tasks' recent groups rewarded them: Train on tasks "
            "that teach)", attribute="task_order", variable="ORSGEN_TASK_ORDER"),
    Setting("task_pools", _pools, "task_order = 'difficulty': the pools' weights (normal: rewards spread, hard, "
            "easy), floor (a share of draws over every task), recent (groups per task that decide its pool), "
            "solved (a flat task's reward from which it is easy; None: the best seen); keys override the defaults",
            attribute="task_pools"),
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
assert all(row.setting in BY_NAME for row in BUDGET_KEYS if row.setting), "a budget's setting is a row of SETTINGS"
