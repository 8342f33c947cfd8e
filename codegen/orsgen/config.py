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
"""

import argparse
import tomllib
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from orsgen.errors import OrsgenError


@dataclass(frozen=True)
class Option:
    """One generation option: its CLI flag, its [tool.orsgen] key and its Job field are all derived from `name`."""

    name: str  # the key in pyproject.toml, and the flag without "--"
    kind: type  # str, bool or Path
    help: str
    metavar: str | None = None

    @property
    def flag(self) -> str:
        return f"--{self.name}"

    @property
    def field(self) -> str:
        return self.name.replace("-", "_")


# The options a target may set, in the order the header's regenerate command writes them. (--env may be repeated on
# the command line, for several environments of one server: see cli.)
OPTIONS = (
    Option("env", str, "environment of a multi-environment server (default: the first); repeat it for several"),
    Option("class-name", str, "adapter class name (default: the environment's name in PascalCase)"),
    Option("templates", Path, "directory of templates that shadow the built-in ones, by file"),
    Option("task-tools-from", str, "also read the tools these tasks advertise in a session (0,1,5 | 0-9 | all): "
           "each distinct set of task-specific tools gets its own adapter class", "TASKS"),
    Option("pin-tasks", bool, "also write every split's tasks next to the module (FILE.tasks.json): dataset() then "
           "needs no network and is reproducible"),
    Option("async-tools", bool, "tool methods as `async def`: TRL runs the calls of one message concurrently"),
)
KEYS = {"target", "output"} | {o.name for o in OPTIONS}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    for option in OPTIONS:
        if option.kind is bool:
            parser.add_argument(option.flag, action="store_true", help=option.help)
        elif option.name == "env":
            parser.add_argument(option.flag, action="append", help=option.help)
        else:
            parser.add_argument(option.flag, type=option.kind, metavar=option.metavar, help=option.help)


@dataclass
class Job:
    target: str
    output: Path
    env: str | None = None
    class_name: str | None = None
    templates: Path | None = None
    task_tools_from: str | None = None
    pin_tasks: bool = False
    async_tools: bool = False
    fetched: Any = None  # (Source, snapshot) when already fetched (several environments into one directory)

    def command(self) -> str:
        """The command line that regenerates this output (written into its header): every option that made it."""
        words = ["orsgen", self.target]
        for option in OPTIONS:
            value = getattr(self, option.field)
            if option.kind is bool:
                words += [option.flag] if value else []
            elif value is not None:
                words += [option.flag, value.as_posix() if isinstance(value, Path) else str(value)]
        return " ".join([*words, "-o", self.output.as_posix()])


assert {o.field for o in OPTIONS} <= {f.name for f in fields(Job)}


def load(pyproject: Path) -> list[Job]:
    try:
        data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise OrsgenError(f"no TARGET given and no {pyproject} with [tool.orsgen] targets") from None
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise OrsgenError(f"{pyproject}: {exc}") from None
    section = data.get("tool", {}).get("orsgen", {})
    targets = section.get("targets")
    if not isinstance(targets, dict) or not targets:
        raise OrsgenError(f"no TARGET given and {pyproject} has no [tool.orsgen.targets.NAME] tables")
    base = pyproject.parent
    shared = section.get("templates")
    return [_job(name, spec, base, shared, pyproject) for name, spec in targets.items()]


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
    here = base.samefile(Path.cwd())
    values: dict[str, Any] = {}
    for option in OPTIONS:
        value = spec.get(option.name, shared if option.name == "templates" else None)
        if value is None:
            continue
        if option.kind is bool:
            values[option.field] = bool(value)
        elif option.kind is Path:
            values[option.field] = Path(value) if here else base / value
        else:
            values[option.field] = str(value)
    return Job(target=target, output=Path(spec["output"]) if here else base / spec["output"], **values)
