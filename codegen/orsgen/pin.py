"""Read what a generated module pinned (connection, snapshot, class, the options it recorded in `ORSGEN_OPTIONS`),
and say how two snapshots differ. Nothing here imports or runs the module."""

import ast
import contextlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orsgen import config
from orsgen.errors import OrsgenError
from orsgen.runtime import bounds
from orsgen.source import Source, read_file


@dataclass
class Pinned:
    source: Source
    snapshot: dict[str, Any]
    class_name: str
    options: dict[str, Any]  # what it was made with (ORSGEN_OPTIONS): regenerating it uses them again
    async_tools: bool
    version: str = ""  # ORSGEN_VERSION: the orsgen that wrote it
    sha256: str | None = None  # SNAPSHOT_SHA256: what SNAPSHOT hashed to when written (a hand edit changes it)
    budgets: Any = None  # BUDGETS, if it pins tool budgets


def read(path: Path) -> Pinned:
    """The snapshot, connection and class name embedded in an orsgen module, read with `ast` only."""
    return read_text(read_file(path, str(path)), str(path))


def read_text(text: str, path: str = "<module>") -> Pinned:
    try:
        tree = ast.parse(text)
    except SyntaxError:
        raise OrsgenError(f"{path} is not an orsgen module (not valid Python)") from None
    values: dict[str, Any] = {}
    class_name = None
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and class_name is None and any(_is_adapter(b) for b in node.bases):
            class_name = node.name
            continue
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            name, value = node.target.id, node.value
        elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name, value = node.targets[0].id, node.value
        else:
            continue
        with contextlib.suppress(ValueError, TypeError, SyntaxError, RecursionError):
            values[name] = ast.literal_eval(value)
    needed = ("ORSGEN_VERSION", "TARGET", "URL", "DEPLOYMENT", "ENV", "SPLIT", "SNAPSHOT")
    if class_name is None or any(k not in values for k in needed) or not isinstance(values["SNAPSHOT"], dict):
        raise OrsgenError(f"{path} is not an orsgen module (no embedded snapshot)")
    options = values.get("ORSGEN_OPTIONS")
    if not isinstance(options, dict):  # written by orsgen 0.2.0 or older: the header's command says them
        lines = text.splitlines()
        options = config.from_command(lines[1].removeprefix("#").strip() if len(lines) > 1 else "")
    source = Source(
        target=values["TARGET"],
        url=values["URL"],
        deployment=values["DEPLOYMENT"],
        env=values["ENV"],
        name=class_name,
        split=values["SPLIT"],
        build=values.get("BUILD_SHA"),
    )
    sha = values.get("SNAPSHOT_SHA256")
    return Pinned(source, values["SNAPSHOT"], class_name, options, bool(values.get("ASYNC_TOOLS", False)),
                  str(values["ORSGEN_VERSION"]), sha if isinstance(sha, str) else None, values.get("BUDGETS"))


def _is_adapter(base: ast.expr) -> bool:
    """`runtime.Adapter` (or `_Adapter`, the base of modules written by orsgen 0.1)."""
    return (isinstance(base, ast.Attribute) and base.attr == "Adapter") or (
        isinstance(base, ast.Name) and base.id == "_Adapter"
    )


def tool_changes(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Lines like `+ tool: added`, `- tool: removed`, `~ tool: argument path: type changed`, per argument (the
    runtime's DriftError says them alike: `bounds.changes`), then the snapshot's other keys."""
    lines = bounds.changes(old.get("tools"), new.get("tools"))  # old: perhaps edited by hand
    for key in sorted(set(old) | set(new)):
        if key != "tools" and old.get(key) != new.get(key):
            lines.append(f"~ {key}: {_short(old.get(key))} -> {_short(new.get(key))}")
    return lines


def option_changes(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Lines like `~ option async-tools: (not set) -> true`, `~ option tools.bash.timeout: 30.0 -> 60.0`: what a
    module was made with against what is asked."""
    old, new = _flat(old), _flat(new)
    return [f"~ option {key}: {_short(old[key]) if key in old else '(not set)'} -> "
            f"{_short(new[key]) if key in new else '(not set)'}"
            for key in sorted(_known({**old, **new}), key=_rank) if old.get(key) != new.get(key)]


def _flat(options: dict[str, Any]) -> dict[str, Any]:
    """Options with the per tool budgets one key each, `tools.TOOL.KEY` (a table edited by hand: as it is)."""
    found = {k: v for k, v in options.items() if k != "tools"}
    tools = options.get("tools")
    if isinstance(tools, dict) and all(isinstance(budget, dict) for budget in tools.values()):
        found.update({f"tools.{tool}.{key}": v for tool, budget in tools.items() for key, v in budget.items()})
    elif "tools" in options:
        found["tools"] = tools
    return found


_NAMES = ["target", *(o.name for o in config.OPTIONS)]
_TOOL_KEYS = [o.name for o in config.TOOL_BUDGET_OPTIONS]


def _known(keys: dict[str, Any]) -> list[str]:
    """The option keys orsgen knows (as `config.in_order` keeps them)."""
    return [k for k in keys if k in _NAMES or (k.startswith("tools.") and k.rpartition(".")[2] in _TOOL_KEYS)]


def _rank(key: str) -> tuple[int, str, int]:
    """The order of option keys: OPTIONS' (the header's), per tool budgets by tool, then TOOL_BUDGET_OPTIONS'."""
    head, _, rest = key.partition(".")
    tool, _, name = rest.rpartition(".")
    return _NAMES.index(head), tool, _TOOL_KEYS.index(name) if name in _TOOL_KEYS else -1


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 80 else text[:77] + "..."
