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

import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orsgen.errors import OrsgenError

KEYS = {"target", "output", "env", "class-name", "templates", "pin-tasks", "task-tools-from", "async-tools"}


@dataclass
class Job:
    target: str
    output: Path
    env: str | None = None
    class_name: str | None = None
    templates: Path | None = None
    pin_tasks: bool = False
    task_tools_from: str | None = None
    async_tools: bool = False
    fetched: Any = None  # (Source, snapshot) when already fetched (several environments into one directory)

    def command(self) -> str:
        """The command line that regenerates this output (written into its header)."""
        words = ["orsgen", self.target]
        words += ["--env", self.env] if self.env else []
        words += ["--class-name", self.class_name] if self.class_name else []
        words += ["--task-tools-from", self.task_tools_from] if self.task_tools_from else []
        words += ["--pin-tasks"] if self.pin_tasks else []
        words += ["--async-tools"] if self.async_tools else []
        return " ".join([*words, "-o", self.output.as_posix()])


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
    templates = spec.get("templates", shared)
    target = spec["target"]
    if not target.startswith(("http://", "https://")) and (base / target).exists():
        target = str(base / target)
    return Job(
        target=target,
        output=base / spec["output"] if not base.samefile(Path.cwd()) else Path(spec["output"]),
        env=spec.get("env"),
        class_name=spec.get("class-name"),
        templates=base / templates if templates else None,
        pin_tasks=bool(spec.get("pin-tasks", False)),
        task_tools_from=str(spec["task-tools-from"]) if "task-tools-from" in spec else None,
        async_tools=bool(spec.get("async-tools", False)),
    )
