"""What `orsgen eval` measures: the environments of a generated module, of a bundle, or of a [tool.orsgen] target,
imported as training imports them, each with the tools TRL would offer the model."""

from __future__ import annotations

import importlib
import inspect
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from orsgen import config, spelling
from orsgen.errors import OrsgenError


@dataclass(eq=False)
class Member:
    """One environment: its module, adapter classes (`ENVIRONMENTS`: several when tasks advertise their own tools)
    and the tools of each class as TRL shows them to the model."""

    module: ModuleType
    _schemas: dict[type, list[dict[str, Any]]] = field(default_factory=dict)

    @property
    def name(self) -> str:
        pinned = self.module.PINNED
        return str(pinned.env or pinned.deployment)

    @property
    def split(self) -> str:
        return str(self.module.PINNED.split)

    @property
    def snapshot(self) -> str:
        return str(self.module.SNAPSHOT_SHA256)

    def adapter_class(self, row: dict[str, Any]) -> type:
        classes = self.module.ENVIRONMENTS
        return classes.get(row.get("environment"), classes[self.module.PINNED.default_class])  # type: ignore[no-any-return]

    def check(self) -> None:
        """OrsgenError, one line, when no episode could run: the environment out of reach, or serving other tools
        than the module pinned (the runtime's drift check, which its first reset would otherwise make)."""
        from orsgen.runtime import client, settings
        from orsgen.runtime.errors import DriftError
        from orsgen.runtime.sessions import Connection

        sessions, limit = self.module.PINNED.sessions, settings.resolve(None).reset_timeout
        env = sessions.environment(Connection(None, None, None))
        try:
            if settings.resolve(None).check_drift:
                client.loop().run(sessions.check_drift(env, None, limit), "reset")
            else:
                client.loop().run(env.list_tools(), "reset", limit)
        except DriftError as exc:
            raise OrsgenError(str(exc)) from None
        except Exception as exc:  # noqa: BLE001 - whatever kept the request from being answered
            where = sessions.server(None) or self.module.PINNED.deployment
            raise OrsgenError(f"the environment {self.name} at {where} cannot run an episode: "
                              f"{client.describe(exc)}") from None

    def schemas(self, cls: type) -> list[dict[str, Any]]:
        """`get_json_schema` of each tool method, in the order TRL lists them (what the model is offered)."""
        if cls not in self._schemas:  # every class's, on the main thread before the episodes (evaluate.measure)
            from orsgen.offered import json_schema

            self._schemas[cls] = [json_schema(method) for method in tool_methods(cls())]
        return self._schemas[cls]


def tool_methods(instance: Any) -> list[Any]:
    """The tools GRPOTrainer finds on an environment: the class's public functions but `reset` and `get_reward`,
    by name, bound to `instance` (trl-contract §2.1)."""
    members = inspect.getmembers(type(instance), predicate=inspect.isfunction)
    return [getattr(instance, name) for name, _ in members
            if not name.startswith("_") and name not in ("reset", "get_reward")]


def members(target: str) -> list[Member]:
    """The environments `target` names, their modules imported; OrsgenError, one line, when it names none."""
    path = _path(target)
    module = _import(path)
    bundled = getattr(module, "_MODULES", None)
    found = list(bundled.values()) if isinstance(bundled, dict) else [module]
    if not all(hasattr(m, "PINNED") and hasattr(m, "ENVIRONMENTS") for m in found):
        raise OrsgenError(f"{path} is not an orsgen module or bundle (it has no PINNED and ENVIRONMENTS): give the "
                          "module orsgen wrote")
    return [Member(m) for m in found]


def _path(target: str) -> Path:
    path = Path(target)
    if path.suffix == ".py":
        if not path.is_file():
            raise OrsgenError(f"{target}: no such file ({spelling.did_you_mean(path)}a TARGET is a generated module, "
                              "a bundle, or a [tool.orsgen] target name)")
        return path
    pyproject = config.find(Path.cwd())
    try:
        targets = config.read(pyproject)["tool"]["orsgen"]["targets"]
    except (OSError, KeyError, TypeError):
        raise OrsgenError(f"{target}: not a .py module, and no pyproject.toml here or above lists [tool.orsgen] "
                          "targets to look it up in") from None
    if target not in targets:
        raise OrsgenError(f"{target}: {pyproject} has no [tool.orsgen.targets.{target}] (it has "
                          f"{', '.join(targets) or 'none'})")
    job = config.load(pyproject)[list(targets).index(target)]
    if not Path(job.output).is_file():
        raise OrsgenError(f"{target}: its module {job.output} does not exist yet: run orsgen to generate it")
    return Path(job.output)


def _import(path: Path) -> ModuleType:
    """The module at `path` imported under its package's name (a bundle imports its members relatively): the
    folders above it with an __init__.py make the package, the one above them goes on sys.path, as does the
    current folder (a user's own subclasses import from there)."""
    path = path.resolve()
    parts, folder = [path.stem], path.parent
    while (folder / "__init__.py").is_file() and folder.parent != folder:
        parts.insert(0, folder.name)
        folder = folder.parent
    for entry in (str(folder), os.getcwd()):
        if entry not in sys.path:
            sys.path.insert(0, entry)
    name = ".".join(parts)
    try:
        module = importlib.import_module(name)
    except ImportError as exc:
        raise OrsgenError(f"{path}: importing {name} failed: {exc}") from None
    if Path(str(getattr(module, "__file__", ""))).resolve() != path:
        raise OrsgenError(f"{path}: the name {name} imports {module.__file__} instead: run orsgen eval from another "
                          "folder, or rename the module")
    return module
