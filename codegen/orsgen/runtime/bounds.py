"""What a tool spec from a server may hold: a bounded depth and bounded text. Generation pins the bounded spec and
the drift check bounds the live one the same way, so a cut tool is not reported as changed.

`canonical` is the snapshot's JSON form, in which the two are compared.

A tool list is input from outside: a schema nested hundreds of levels deep would make the pinned literal too deep
for Python to compile (and every walk over it recurse past the interpreter's limit); a multi-megabyte description
would reach the model's context through `get_json_schema`.
"""

from __future__ import annotations

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
