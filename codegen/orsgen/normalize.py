"""Bring odd inputs into one shape before the main parser sees them.

Accepted: an ORS `/tools` response (`{"tools": [{"name", "description", "input_schema"}]}`), an MCP
`tools/list` result (`inputSchema`), a bare list of tools, or an orsgen snapshot. Schema dialects seen in the
wild (`"dict"`, `"float"`, `"any"`, ...) become standard JSON Schema here, so `types` only knows the standard.
"""

import json
import sys
import threading
from typing import Any

from orsgen.errors import OrsgenError
from orsgen.runtime import bounds

# Non-standard `type` values found in real tool lists (BFCL, hand-written MCP servers, Java-style specs).
TYPE_ALIASES = {
    "dict": "object", "map": "object", "hashmap": "object", "object": "object",
    "float": "number", "double": "number", "decimal": "number", "number": "number",
    "int": "integer", "long": "integer", "integer": "integer",
    "str": "string", "char": "string", "string": "string",
    "bool": "boolean", "boolean": "boolean",
    "list": "array", "tuple": "array", "arraylist": "array", "array": "array",
    "null": "null", "none": "null",
}
ANY_TYPES = {"any", "anytype", ""}
MAX_DEPTH = 64  # deeper schemas are cut: nothing a model could use lives down there


READ_DEPTH = 500_000  # JSON nesting read at all (its parser needs a stack this deep); deeper input is refused
_BIG_STACK = 512 * 1024 * 1024


def loads(text: str | bytes, source: str) -> Any:
    """JSON of any depth up to READ_DEPTH: Python's parser stops at a few hundred levels on the caller's stack."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise OrsgenError(f"{source}: not valid JSON: {exc}") from None
    except RecursionError:
        pass
    found: dict[str, Any] = {}

    def parse() -> None:
        try:
            found["value"] = json.loads(text)
        except (ValueError, RecursionError) as exc:
            found["error"] = exc

    limit, size = sys.getrecursionlimit(), threading.stack_size()
    try:
        sys.setrecursionlimit(READ_DEPTH + 100)
        threading.stack_size(_BIG_STACK)
        reader = threading.Thread(target=parse, name="orsgen-deep-json")
        reader.start()
        reader.join()
    finally:
        threading.stack_size(size)
        sys.setrecursionlimit(limit)
    if isinstance(found.get("error"), RecursionError):
        raise OrsgenError(f"{source}: nests deeper than {READ_DEPTH} levels: not read") from None
    if "error" in found:
        raise OrsgenError(f"{source}: not valid JSON: {found['error']}") from None
    return found["value"]


def tool_list(data: Any, source: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """(tools, rest): tools as `{"name", "description", "input_schema"}`, within the bounds of `runtime.bounds`;
    rest = other top-level keys."""
    if isinstance(data, list):
        data = {"tools": data}
    if not isinstance(data, dict) or not isinstance(data.get("tools"), list):
        raise OrsgenError(f"{source}: expected a JSON object with a 'tools' list (the ORS /tools response shape)")
    tools = []
    for i, raw in enumerate(data["tools"]):
        if not isinstance(raw, dict) or not isinstance(raw.get("name"), str):
            raise OrsgenError(f"{source}: tools[{i}] has no string 'name'")
        schema = raw.get("input_schema", raw.get("inputSchema", raw.get("parameters")))
        description = raw.get("description")
        tools.append(bounds.tool({
            "name": raw["name"],
            "description": description if isinstance(description, str) else "",
            "input_schema": schema,
        }))
    # The rest (terminal tool, a snapshot's task tools) holds tool specs a few levels down: bounded a little deeper.
    rest = {k: bounds.value(v, limit=bounds.MAX_DEPTH + 8) for k, v in data.items() if k != "tools"}
    return tools, rest


def schema(node: Any, depth: int = 0) -> Any:
    """A copy of a JSON Schema with non-standard type names mapped and absurd depth cut."""
    if depth > MAX_DEPTH:
        return {}
    if isinstance(node, list):
        return [schema(x, depth + 1) for x in node]
    if not isinstance(node, dict):
        return node
    out = {}
    for key, value in node.items():
        if key == "type":
            value = _type(value)
            if value is None:
                continue
        elif key in ("properties", "$defs", "definitions", "patternProperties"):
            value = {k: schema(v, depth + 1) for k, v in value.items()} if isinstance(value, dict) else value
        elif key in ("enum", "const", "default", "examples", "example"):
            pass  # data, not schema
        else:
            value = schema(value, depth + 1)
        out[key] = value
    if out.get("optional") is True and "required" not in out:
        out.pop("optional")  # BFCL-style flag on a property; `required` on the parent decides
    return out


def _type(value: Any) -> Any:
    if isinstance(value, list):
        mapped = [_type(v) for v in value]
        return None if None in mapped else list(dict.fromkeys(mapped))
    if not isinstance(value, str):
        return None
    low = value.lower()
    if low in ANY_TYPES:
        return None
    return TYPE_ALIASES.get(low, value)
