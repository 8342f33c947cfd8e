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
from orsgen.source import Source, read_file


@dataclass
class Pinned:
    source: Source
    snapshot: dict[str, Any]
    class_name: str
    options: dict[str, Any]  # what it was made with (ORSGEN_OPTIONS): regenerating it uses them again
    async_tools: bool


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
    return Pinned(source, values["SNAPSHOT"], class_name, options, bool(values.get("ASYNC_TOOLS", False)))


def _is_adapter(base: ast.expr) -> bool:
    """`runtime.Adapter` (or `_Adapter`, the base of modules written by orsgen 0.1)."""
    return (isinstance(base, ast.Attribute) and base.attr == "Adapter") or (
        isinstance(base, ast.Name) and base.id == "_Adapter"
    )


def tool_changes(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Lines like `+ tool: added`, `- tool: removed`, `~ tool: argument path: type changed`, per argument."""
    before, after = _by_name(old.get("tools")), _by_name(new.get("tools"))  # old: perhaps edited by hand
    lines = [f"+ {name}: added" for name in after if name not in before]
    lines += [f"- {name}: removed" for name in before if name not in after]
    for name, tool in after.items():
        old_tool = before.get(name)
        if old_tool is not None and old_tool != tool:
            lines += [f"~ {name}: {change}" for change in _tool_changes(old_tool, tool)]
    for key in sorted(set(old) | set(new)):
        if key != "tools" and old.get(key) != new.get(key):
            lines.append(f"~ {key}: {_short(old.get(key))} -> {_short(new.get(key))}")
    return lines


def _by_name(tools: Any) -> dict[str, dict[str, Any]]:
    listed = tools if isinstance(tools, list) else []
    return {t["name"]: t for t in listed if isinstance(t, dict) and isinstance(t.get("name"), str)}


def _tool_changes(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    found = ["description changed"] if old.get("description") != new.get("description") else []
    a, b = old.get("input_schema") or {}, new.get("input_schema") or {}
    props_a, props_b = a.get("properties") or {}, b.get("properties") or {}
    found += [f"argument {n} added" for n in props_b if n not in props_a]
    found += [f"argument {n} removed" for n in props_a if n not in props_b]
    for n in props_b:
        if n in props_a and props_a[n] != props_b[n]:
            keys = sorted(k for k in set(props_a[n]) | set(props_b[n]) if props_a[n].get(k) != props_b[n].get(k))
            found.append(f"argument {n}: {', '.join(keys)} changed")
    req_a, req_b = set(a.get("required") or []), set(b.get("required") or [])
    found += [f"argument {n} now required" for n in sorted(req_b - req_a) if n in props_a]
    found += [f"argument {n} now optional" for n in sorted(req_a - req_b) if n in props_b]
    if list(props_a) != list(props_b) and set(props_a) == set(props_b):
        found.append("argument order changed")
    rest = sorted(k for k in set(a) | set(b) if k not in ("properties", "required") and a.get(k) != b.get(k))
    found += [f"schema {k} changed" for k in rest]
    found += [f"{k} changed" for k in sorted(set(old) | set(new)) if k not in ("description", "input_schema", "name")
              and old.get(k) != new.get(k)]
    return found or ["changed"]


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 80 else text[:77] + "..."
