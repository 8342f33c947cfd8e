"""What a tool spec from a server may hold: a bounded depth and bounded text. Generation pins the bounded spec and
the drift check bounds the live one the same way, so a cut tool is not reported as changed.

`canonical` is the snapshot's JSON form, in which the two are compared; `changes` says how they differ, for
`orsgen --check` and the runtime's DriftError alike.

A tool list is input from outside: a schema nested hundreds of levels deep would make the pinned literal too deep
for Python to compile (and every walk over it recurse past the interpreter's limit); a multi-megabyte description
would reach the model's context through `get_json_schema`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

MAX_DEPTH = 48  # JSON levels of an input schema; a deeper object is replaced by {"$comment": DEPTH_CUT} (any value)
MAX_DESCRIPTION = 16_000  # characters of a tool's description
MAX_TEXT = 4_000  # characters of any other text in a schema (a property's description, an example)
DEPTH_CUT = f"cut by orsgen: the schema nests deeper than {MAX_DEPTH} levels"
TEXT_CUT = " [... cut by orsgen: {size} characters in all]"


def tool(spec: dict[str, Any]) -> dict[str, Any]:
    """A tool spec ({"name", "description", "input_schema"}) within the bounds."""
    out = dict(spec)
    if isinstance(out.get("description"), str):
        out["description"] = text(out["description"], MAX_DESCRIPTION)
    if "input_schema" in out:
        out["input_schema"] = value(out["input_schema"])
    return out


def value(node: Any, depth: int = 0, limit: int = MAX_DEPTH) -> Any:
    """A JSON value cut at `limit` levels (objects become {"$comment": DEPTH_CUT}, lists []), long strings cut."""
    if isinstance(node, str):
        return text(node, MAX_TEXT)
    if not isinstance(node, (dict, list)):
        return node
    if depth >= limit:
        return {"$comment": DEPTH_CUT} if isinstance(node, dict) else []
    if isinstance(node, list):
        return [value(x, depth + 1, limit) for x in node]
    return {k: value(v, depth + 1, limit) for k, v in node.items()}


def text(string: str, limit: int) -> str:
    if len(string) <= limit:
        return string
    return string[:limit] + TEXT_CUT.format(size=len(string))


def canonical(node: Any, keep_order: bool = False) -> Any:
    """The snapshot's JSON form: keys sorted, except in `properties`, whose order is the parameters' order."""
    if isinstance(node, list):
        return [canonical(x) for x in node]
    if not isinstance(node, dict):
        return node
    keys = list(node) if keep_order else sorted(node)
    return {k: canonical(node[k], keep_order=k == "properties" and not keep_order) for k in keys}


def changes(pinned: Any, live: Any) -> list[str]:
    """How two tool lists differ, one line per tool and argument: `+ tool: added`, `- tool: removed`,
    `~ tool: argument path: type changed` (`pinned` may have been edited by hand into any shape)."""
    before, after = _by_name(pinned), _by_name(live)
    lines = [f"+ {name}: added" for name in after if name not in before]
    lines += [f"- {name}: removed" for name in before if name not in after]
    for name, spec in after.items():
        old = before.get(name)
        if old is not None and old != spec:
            lines += [f"~ {name}: {change}" for change in _tool_changes(old, spec)]
    return lines


def _by_name(tools: Any) -> dict[str, dict[str, Any]]:
    listed = tools if isinstance(tools, list) else []
    return {t["name"]: t for t in listed if isinstance(t, dict) and isinstance(t.get("name"), str)}


def _tool_changes(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    found = ["description changed"] if old.get("description") != new.get("description") else []
    a, b = _object(old.get("input_schema")), _object(new.get("input_schema"))
    props_a, props_b = _object(a.get("properties")), _object(b.get("properties"))
    found += _fields(a, b, lambda n: f"argument {n}")
    if list(props_a) != list(props_b) and set(props_a) == set(props_b):
        found.append("argument order changed")
    defs_a, defs_b = _object(a.get("$defs")), _object(b.get("$defs"))
    for name in sorted(set(defs_a) | set(defs_b), key=str):
        x, y = defs_a.get(name), defs_b.get(name)
        if x != y:  # a nested argument's class: said by the arguments that use it, field by field
            users = _users(name, props_b or props_a, defs_b or defs_a)
            where = f"argument {', '.join(users)}: " if users else ""
            found += [where + change for change in (_node_changes(str(name), _object(x), _object(y)) if x and y else
                                                    [f"{name} {'added' if y else 'removed'}"])]
    rest = sorted(k for k in set(a) | set(b) if k not in ("properties", "required", "$defs") and a.get(k) != b.get(k))
    found += [f"schema {k} changed" for k in rest]
    found += [f"{k} changed" for k in sorted(set(old) | set(new)) if k not in ("description", "input_schema", "name")
              and old.get(k) != new.get(k)]
    return found or ["changed"]


def _fields(x: dict[str, Any], y: dict[str, Any], named: Callable[[str], str]) -> list[str]:
    """An object schema's fields added, removed, changed (`_node_changes`), now required or optional, each said as
    `named(field)`."""
    fields_x, fields_y = _object(x.get("properties")), _object(y.get("properties"))
    found = [f"{named(n)} added" for n in fields_y if n not in fields_x]
    found += [f"{named(n)} removed" for n in fields_x if n not in fields_y]
    for n in fields_y:
        if n in fields_x and fields_x[n] != fields_y[n]:
            found += _node_changes(named(n), _object(fields_x[n]), _object(fields_y[n]))
    req_x, req_y = set(_names(x.get("required"))), set(_names(y.get("required")))
    found += [f"{named(n)} now required" for n in sorted(req_y - req_x) if n in fields_x]
    found += [f"{named(n)} now optional" for n in sorted(req_x - req_y) if n in fields_y]
    return found


def _node_changes(path: str, x: dict[str, Any], y: dict[str, Any]) -> list[str]:
    """How one schema node changed: an object's fields by name (`path.field added`, `path.field: type changed`),
    then its own keys (`path: type changed`). Its depth is bounded (MAX_DEPTH): so is the recursion."""
    found = _fields(x, y, lambda n: f"{path}.{n}")
    keys = sorted(k for k in set(x) | set(y) if k not in ("properties", "required") and x.get(k) != y.get(k))
    if keys or not found:
        found.append(f"{path}: {', '.join(keys) or 'schema'} changed")
    return found


def _users(name: Any, arguments: dict[str, Any], defs: dict[str, Any]) -> list[str]:
    """The arguments whose schema refers to `$defs/name`, directly or through other definitions."""
    def refs(node: Any) -> set[str]:
        text = json.dumps(node, default=str)
        return {d for d in map(str, defs) if f'"#/$defs/{d}"' in text}

    reach: dict[str, set[str]] = {str(d): refs(defs[d]) for d in defs}
    found = []
    for argument, schema in arguments.items():
        seen, todo = set(), refs(schema)
        while todo:
            d = todo.pop()
            if d not in seen:
                seen.add(d)
                todo |= reach.get(d, set())
        if str(name) in seen:
            found.append(str(argument))
    return found


def _object(node: Any) -> dict[str, Any]:
    return node if isinstance(node, dict) else {}


def _names(node: Any) -> list[str]:
    return [n for n in node if isinstance(n, str)] if isinstance(node, list) else []
