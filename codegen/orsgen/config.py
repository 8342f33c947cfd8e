"""Jobs: one (target -> output) each, from the command line or from `[tool.orsgen]` in pyproject.toml.

    [tool.orsgen]
    templates = "my_templates"          # optional, for every target

    [tool.orsgen.targets.seta]
    target = "Eigent/SETA"
    output = "generated/seta.py"
    env = "seta"                        # optional
    class-name = "Seta"                 # optional
    pin-tasks = true                    # optional: write the task list next to the module
    async-tools = true                  # optional: `async def` tools (TRL gathers them)
    task-tools-from = "0"               # optional: with task-tools-for-all = true, task 0's tools go to every task
    secret = ["GRADER_KEY"]             # optional: environment variables sent as secrets when sessions open
    max-output-chars = 4000             # optional tool budgets (BUDGET_OPTIONS): the module pins them, the runtime
    episode-timeout = 600               #   caps each result and bounds each call and episode with them

    [tool.orsgen.targets.seta.tools.bash]   # optional: one tool's own budgets (TOOL_BUDGET_OPTIONS)
    timeout = 30
    max-output-chars = 8000
"""

import argparse
import contextlib
import math
import os
import shlex
import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from orsgen.errors import OrsgenError
from orsgen.runtime.settings import BUDGET_KEYS, BudgetKey


@dataclass(frozen=True)
class Option:
    """One generation option: its CLI flag, its [tool.orsgen] key and its Job field are all derived from `name`."""

    name: str  # the key in pyproject.toml, and the flag without "--" (unless `flag_name` says otherwise)
    kind: type  # str, bool, Path or list; for tool budgets also int, float (seconds, above 0) and dict (per tool)
    help: str
    metavar: str | None = None
    least: int = 0  # int: the smallest value allowed
    choices: tuple[str, ...] = ()  # str: the values allowed (any, if empty)
    flag_name: str | None = None

    @property
    def flag(self) -> str:
        return f"--{self.flag_name or self.name}"

    @property
    def field(self) -> str:
        return self.name.replace("-", "_")


# Tool budgets, the last options: the module pins them (BUDGETS), the runtime applies them. Their keys, kinds and
# bounds are the runtime's budget table (settings.BUDGET_KEYS), read here and by the runtime's settings alike. A tool's
# own (`[...NAME.tools.TOOL]`, `--tool-budget TOOL:KEY=VALUE`) are checked by the rows of the keys it may set.


def _option(row: BudgetKey) -> Option:
    return Option(row.key, row.kind, row.help, row.metavar, least=row.floor, choices=row.choices)


BUDGET_OPTIONS = (
    *(_option(row) for row in BUDGET_KEYS if row.setting is not None),
    Option("tools", dict, "one tool's budget; repeatable", "TOOL:KEY=VALUE", flag_name="tool-budget"),
)
TOOL_BUDGET_OPTIONS = tuple(_option(row) for row in BUDGET_KEYS if row.per_tool)

# The options a target may set, in the order the header's regenerate command writes them. (--env may be repeated on
# the command line, for several environments of one server: see cli.)
OPTIONS = (
    Option("env", str, "environment of a multi-environment server (default: the first); repeatable", "NAME"),
    Option("class-name", str, "adapter class name (default: the environment's name in PascalCase)", "NAME"),
    Option("templates", Path, "folder of templates that shadow the built-in ones, by file name", "DIR"),
    Option("task-tools-from", str, "read the tools these tasks advertise (0,1,5 | 0-9 | all): one class per set",
           "TASKS"),
    Option("task-tools-for-all", bool, "with --task-tools-from: every task gets the tools those tasks advertise"),
    Option("secret", list, "send env var NAME as the secret NAME of the sessions generation opens; repeatable",
           "NAME"),
    Option("pin-tasks", bool, "also write the splits' tasks to FILE.tasks.json: sessions open on them"),
    Option("async-tools", bool, "tool methods as `async def` (TRL runs one message's calls concurrently)"),
    *BUDGET_OPTIONS,
)
KEYS = {"target", "output"} | {o.name for o in OPTIONS}
NO_TARGETS = ('run `orsgen TARGET -o FILE`, or list them in pyproject.toml, e.g. [tool.orsgen.targets.myenv] '
              'target = "http://127.0.0.1:8010" output = "generated/myenv.py" (one key a line)')


def add_arguments(parser: argparse.ArgumentParser) -> None:
    for option in OPTIONS:
        if option.kind is bool:
            parser.add_argument(option.flag, action="store_true", help=option.help)
        elif option.name == "env" or option.kind is list:
            parser.add_argument(option.flag, action="append", metavar=option.metavar, help=option.help)
        elif option in BUDGET_OPTIONS:  # strings, checked by `budgets` as pyproject's are; one epilog line lists them
            parser.add_argument(option.flag, dest=option.field, action="append" if option.kind is dict else "store",
                                metavar=option.metavar, help=argparse.SUPPRESS)
        else:
            parser.add_argument(option.flag, type=option.kind, metavar=option.metavar, help=option.help)


@dataclass(frozen=True)
class Job:
    """One target -> output and every option that makes it: the one value the stages pass along."""

    target: str
    output: Path
    env: str | None = None
    class_name: str | None = None
    templates: Path | None = None
    task_tools_from: str | None = None
    task_tools_for_all: bool = False
    secret: tuple[str, ...] = ()  # names of environment variables; their values are never stored
    pin_tasks: bool = False
    async_tools: bool = False
    max_output_chars: int | None = None  # the tool budgets, as `budgets` checked them
    max_output_tokens: int | None = None
    tokenizer: str | None = None
    truncate: str | None = None
    max_images: int | None = None
    episode_timeout: float | None = None
    max_tool_calls: int | None = None
    tools: dict[str, dict[str, Any]] = field(default_factory=dict)  # tool -> its own budgets
    fetched: Any = None  # (Source, snapshot) when already fetched (several environments into one directory)
    root: Path | None = None  # the folder of the pyproject.toml that listed it: the header's paths are relative to it
    found_root: bool = False  # root is the project found above a command line's output: paths outside it stay absolute
    offline: bool = False  # regenerate from the output module's own snapshot: no request
    recorded: dict[str, Any] | None = None  # a module's own options, when it is regenerated: kept as they were

    def options(self) -> dict[str, Any]:
        """The options that made this output, as the module records them (`ORSGEN_OPTIONS`): the target and every
        option that is not its default, by its pyproject key, paths as the header writes them."""
        if self.recorded is not None:
            return self.recorded
        found: dict[str, Any] = {"target": self._shown(self.target)}
        for option in OPTIONS:
            value = getattr(self, option.field)
            if option.kind is list and value:
                found[option.name] = list(value)
            elif option.kind is bool and value:
                found[option.name] = True
            elif option.kind is dict and value:
                found[option.name] = {tool: dict(budget) for tool, budget in value.items()}
            elif option.kind in (int, float) and value is not None:
                found[option.name] = value  # a number stays one: ORSGEN_OPTIONS and BUDGETS say it alike
            elif option.kind not in (bool, list, dict) and value is not None:
                found[option.name] = self._shown(value) if isinstance(value, Path) else str(value)
        return found

    def budgets(self) -> dict[str, Any]:
        """The tool budgets this output pins (its BUDGETS; empty: none), in BUDGET_OPTIONS' order."""
        found = {o.name: getattr(self, o.field) for o in BUDGET_OPTIONS}
        return {k: {t: dict(b) for t, b in v.items()} if k == "tools" else v for k, v in found.items()
                if v is not None and v != {}}

    def command(self) -> str:
        """The command line that regenerates this output (written into its header): every option that made it."""
        return command(self.options(), self._shown(self.output))

    def _shown(self, path: str | Path) -> str:
        """A path as the header writes it: relative to the pyproject.toml's folder, so --check agrees from any
        folder."""
        if self.root is None or (isinstance(path, str) and not Path(path).exists()):
            return path if isinstance(path, str) else path.as_posix()
        shown = Path(os.path.relpath(Path(path).resolve(), Path(self.root).resolve()))
        if self.found_root and shown.parts[:1] == ("..",):
            return Path(path).resolve().as_posix()
        return shown.as_posix()

    def module_name(self) -> str:
        """The output's import name, as the module's usage docstring writes it."""
        output = self.output if self.root is None else Path(self._shown(self.output))
        parts = output.with_suffix("").parts
        return ".".join(parts) if not output.is_absolute() and all(p.isidentifier() for p in parts) else output.stem


assert {o.field for o in OPTIONS} <= {f.name for f in fields(Job)}


def command(options: dict[str, Any], output: str) -> str:
    """`orsgen TARGET [options] -o OUTPUT` for recorded options, in the order of OPTIONS."""
    words = ["orsgen", str(options.get("target", ""))]
    for option in OPTIONS:
        value = options.get(option.name)
        if option.kind is bool:
            words += [option.flag] if value else []
        elif option.kind is list:
            words += [word for name in value or () for word in (option.flag, str(name))]
        elif option.kind is dict:
            words += [word for tool, budget in (value or {}).items() for key, v in budget.items()
                      for word in (option.flag, f"{tool}:{key}={v}")]
        elif value is not None:
            words += [option.flag, str(value)]
    return shlex.join([*words, "-o", output])  # quoted: a path may hold a space


def in_order(options: dict[str, Any]) -> dict[str, Any]:
    """Recorded options in the order the module writes them: the target, then OPTIONS' order."""
    return {k: options[k] for k in ("target", *(o.name for o in OPTIONS)) if k in options}


def from_command(line: str) -> dict[str, Any]:
    """The options of a header's regenerate command: how modules written before `ORSGEN_OPTIONS` record them."""
    words = shlex.split(line)[1:]
    if len(words) >= 2 and words[-2] == "-o":
        words = words[:-2]
    found: dict[str, Any] = {"target": words.pop(0)} if words else {}
    flags = {o.flag: o for o in OPTIONS}
    while words:
        option = flags.get(words.pop(0))
        if option is None:
            continue
        if option.kind is bool:
            found[option.name] = True
        elif words and option.kind in (list, dict):
            found.setdefault(option.name, []).append(words.pop(0))
        elif words:
            found[option.name] = words.pop(0)
    if any(o.name in found for o in BUDGET_OPTIONS):  # strings, as the command line gives them
        found.update(budgets(found, "", flags=True))
    return found


def budgets(values: dict[str, Any], where: str, flags: bool = False) -> dict[str, Any]:
    """The tool budgets among `values` (pyproject keys), checked and in BUDGET_OPTIONS' order, a tool's keys in
    TOOL_BUDGET_OPTIONS' order, tools by name: the same module from the command line or pyproject.toml. `flags`:
    the command line's strings (`tools` a list of TOOL:KEY=VALUE). A bad value is one OrsgenError naming the flag,
    or `where` and the key."""
    found: dict[str, Any] = {}
    for option in BUDGET_OPTIONS:
        value = values.get(option.name)
        if value is None:
            continue
        if option.kind is dict:
            found[option.name] = _tools(value, where, flags)
        else:
            said = option.flag if flags else f"{where}: {option.name}"
            found[option.name] = _budget(option, _parsed(option, value) if flags else value, said)
    found = {k: v for k, v in found.items() if v != {}}
    tokens = "max-output-tokens" in found or any("max-output-tokens" in b for b in found.get("tools", {}).values())
    if tokens and "tokenizer" not in found:  # the runtime could only guess how to count them
        said = "max-output-tokens needs --tokenizer NAME" if flags else (
            f'{where}: max-output-tokens needs tokenizer = "NAME"')
        raise OrsgenError(f"{said} (a Hugging Face tokenizer name or a local path): tokens are counted with it")
    return found


def budget_fields(found: dict[str, Any]) -> dict[str, Any]:
    """Checked budgets (`budgets`) as Job fields."""
    return {o.field: found[o.name] for o in BUDGET_OPTIONS if o.name in found}


def _tools(value: Any, where: str, flags: bool) -> dict[str, dict[str, Any]]:
    """Per tool budgets, {tool: {key: value}}, from pyproject's `tools.TOOL` tables or --tool-budget's
    TOOL:KEY=VALUE; a bad one is named as it was written (`tools.bash.timeout`, `--tool-budget bash:timeout`)."""
    keys = {o.name: o for o in TOOL_BUDGET_OPTIONS}
    known = ", ".join(keys)
    if flags:  # `bash:timeout=30`: a tool's name may hold ":" or "=", a key and a value do not
        tables: dict[str, dict[str, Any]] = {}
        for item in value:
            head, equals, text = str(item).rpartition("=")
            tool, colon, key = head.rpartition(":")
            if not (equals and colon and tool):
                raise OrsgenError(f"--tool-budget {item}: give TOOL:KEY=VALUE (e.g. bash:timeout=30; KEY: {known})")
            tables.setdefault(tool, {})[key] = text
        value = tables
    if not isinstance(value, dict) or not all(isinstance(b, dict) for b in value.values()):
        raise OrsgenError(f"{where}: tools must hold one table per tool ([...tools.TOOL] with {known})")
    found: dict[str, dict[str, Any]] = {}
    for tool in sorted(value):
        budget = {}
        for key, text in value[tool].items():
            said = f"--tool-budget {tool}:{key}" if flags else f"{where}: tools.{tool}.{key}"
            if key not in keys:
                raise OrsgenError(f"{said}: unknown key {key!r} (a tool's budget keys: {known})")
            budget[key] = _budget(keys[key], _parsed(keys[key], text) if flags else text, said)
        if budget:
            found[tool] = {k: budget[k] for k in keys if k in budget}
    return found


def _parsed(option: Option, text: Any) -> Any:
    """A command-line string as the number its option takes (left as is when it is none: `_budget` says so); a
    whole number stays an int until `_budget` makes seconds floats, so a refusal shows it as typed."""
    for kind in {int: (int,), float: (int, float)}.get(option.kind, ()):
        with contextlib.suppress(ValueError):
            return kind(text)
    return text


def _budget(option: Option, value: Any, said: str) -> Any:
    """One budget value, checked: ints at least `least`, seconds a number above 0 (kept as a float)."""
    if option.kind is int and (type(value) is not int or value < option.least):  # bool is an int subclass
        raise OrsgenError(f"{said} must be a whole number of at least {option.least}, not {value!r}")
    if option.kind is float:
        if type(value) not in (int, float) or not math.isfinite(value) or value <= 0:
            raise OrsgenError(f"{said} must be a number of seconds above 0, not {value!r}")
        return float(value)
    if option.kind is str and (not isinstance(value, str) or not value.strip()
                               or (option.choices and value not in option.choices)):
        wanted = f"one of {', '.join(option.choices)}" if option.choices else "a non-empty string"
        raise OrsgenError(f"{said} must be {wanted}, not {value!r}")
    return value


def project_root(output: Path) -> Path:
    """The folder a command line's header paths are relative to, whatever their spelling: the nearest one above the
    output holding a pyproject.toml (the project's root, where `from gen.echo import Echo` imports), else the
    current folder."""
    for folder in Path(output).resolve().parents:
        if (folder / "pyproject.toml").is_file():
            return folder
    return Path.cwd().resolve()


def find(start: Path) -> Path:
    """The nearest pyproject.toml with a [tool.orsgen] table, in `start` or a parent folder (as ruff and black do)."""
    for folder in [start, *start.parents]:
        candidate = folder / "pyproject.toml"
        if candidate.is_file() and "[tool.orsgen" in candidate.read_text(encoding="utf-8", errors="replace"):
            return candidate
    return start / "pyproject.toml"


def read(pyproject: Path) -> dict[str, Any]:
    """pyproject.toml's tables; OrsgenError, one line, for a file TOML cannot read (not UTF-8: which byte, where).
    OSError when it cannot be opened."""
    data = pyproject.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise OrsgenError(f"{pyproject}: not UTF-8 (a TOML file is): byte 0x{data[exc.start]:02x} at offset "
                          f"{exc.start} (line {line})") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise OrsgenError(f"{pyproject}: {exc}") from None


def load(pyproject: Path) -> list[Job]:
    try:
        data = read(pyproject)
    except FileNotFoundError:
        raise OrsgenError(f"no TARGET given and no {pyproject} with [tool.orsgen] targets: {NO_TARGETS}") from None
    except OSError as exc:
        raise OrsgenError(f"{pyproject}: {exc}") from None
    tool = data.get("tool")
    section = tool.get("orsgen") if isinstance(tool, dict) else None
    targets = section.get("targets") if isinstance(section, dict) else None
    if not isinstance(section, dict) or not isinstance(targets, dict) or not targets:
        raise OrsgenError(f"no TARGET given and {pyproject} has no [tool.orsgen.targets.NAME] tables: {NO_TARGETS}")
    base = Path(os.path.relpath(pyproject.parent.resolve(), Path.cwd().resolve()))  # "." when run beside it
    shared = section.get("templates")
    if shared is not None and not isinstance(shared, str):
        raise OrsgenError(f"{pyproject} [tool.orsgen]: templates must be a string (a folder)")
    found = [_job(name, spec, base, shared, pyproject) for name, spec in targets.items()]
    _one_target_an_output(found, list(targets), pyproject)
    return found


def _one_target_an_output(found: list[Job], names: list[str], pyproject: Path) -> None:
    """Two targets writing one module: the second would replace the first, and --check would call one stale."""
    seen: dict[str, str] = {}
    for name, job in zip(names, found):
        where = os.path.normcase(Path(job.output).resolve())
        if where in seen:
            raise OrsgenError(f"{pyproject}: targets {seen[where]} and {name} both write {job.output}: give each "
                              "its own output")
        seen[where] = name


def _job(name: str, spec: Any, base: Path, shared: Any, pyproject: Path) -> Job:
    where = f"{pyproject} [tool.orsgen.targets.{name}]"
    if not isinstance(spec, dict) or not isinstance(spec.get("target"), str) or not isinstance(spec.get("output"), str):
        raise OrsgenError(f"{where} needs string keys 'target' and 'output'")
    unknown = set(spec) - KEYS
    if unknown:
        raise OrsgenError(f"{where}: unknown keys {sorted(unknown)} (known: {sorted(KEYS)})")
    target = spec["target"]
    if not target.startswith(("http://", "https://")) and (base / target).exists():
        target = str(base / target)
    values: dict[str, Any] = budget_fields(budgets(spec, where))
    for option in OPTIONS:
        value = spec.get(option.name, shared if option.name == "templates" else None)
        if value is None or option in BUDGET_OPTIONS:
            continue
        if option.kind is bool:
            if not isinstance(value, bool):  # bool("false") is True
                raise OrsgenError(f"{where}: {option.name} must be true or false, not {value!r}")
            values[option.field] = value
        elif option.kind is list:
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise OrsgenError(f"{where}: {option.name} must be a list of names")
            values[option.field] = tuple(value)
        elif not isinstance(value, str) and not (option.name == "task-tools-from" and type(value) is int):
            raise OrsgenError(f"{where}: {option.name} must be a string, not {value!r}")
        elif option.kind is Path:
            values[option.field] = base / str(value)
        else:
            values[option.field] = str(value)
    return Job(target=target, output=base / spec["output"], root=base, **values)
