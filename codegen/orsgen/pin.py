"""Read what a generated module pinned, and say how two snapshots differ. Nothing here imports or runs the module."""

import ast
import contextlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orsgen.errors import OrsgenError
from orsgen.source import Source


@dataclass
class Pinned:
    source: Source
    snapshot: dict[str, Any]
    class_name: str
    command: str
    async_tools: bool


def read(path: Path) -> Pinned:
    """The snapshot, connection and class name embedded in an orsgen module, read with `ast` only."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise OrsgenError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise OrsgenError(f"{path}: cannot read: {exc}") from None
    return read_text(text, str(path))


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
    lines = text.splitlines()
    command = lines[1].removeprefix("#").strip() if len(lines) > 1 else ""
    source = Source(
        target=values["TARGET"],
        url=values["URL"],
        deployment=values["DEPLOYMENT"],
        env=values["ENV"],
        name=class_name,
        split=values["SPLIT"],
    )
    return Pinned(source, values["SNAPSHOT"], class_name, command, bool(values.get("ASYNC_TOOLS", False)))


def _is_adapter(base: ast.expr) -> bool:
    """`runtime.Adapter` (or `_Adapter`, the base of modules written by orsgen 0.1)."""
    return (isinstance(base, ast.Attribute) and base.attr == "Adapter") or (
        isinstance(base, ast.Name) and base.id == "_Adapter"
    )


def tool_changes(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Lines like `+ tool added`, `- tool removed`, `~ tool changed (input_schema)`."""
    before = {t["name"]: t for t in old.get("tools", []) if isinstance(t, dict)}
    after = {t["name"]: t for t in new.get("tools", []) if isinstance(t, dict)}
    lines = [f"+ {name}: added" for name in after if name not in before]
    lines += [f"- {name}: removed" for name in before if name not in after]
    for name, tool in after.items():
        old_tool = before.get(name)
        if old_tool is not None and old_tool != tool:
            keys = sorted(k for k in set(old_tool) | set(tool) if old_tool.get(k) != tool.get(k))
            lines.append(f"~ {name}: {', '.join(keys)} changed")
    for key in sorted(set(old) | set(new)):
        if key != "tools" and old.get(key) != new.get(key):
            lines.append(f"~ {key}: {json.dumps(old.get(key))} -> {json.dumps(new.get(key))}")
    return lines
