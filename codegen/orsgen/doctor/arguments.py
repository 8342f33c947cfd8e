"""Tool arguments made from a tool's own input schema: `made(schema, "minimal")` (what a plain model would send:
the required arguments, each a plain value its schema accepts), `made(schema, "empty")` (the emptiest the schema
accepts: "", 0, false, []), a call missing one required argument, and one with a wrong type.

`Made.sure` says whether every value is certainly one the schema accepts: a `pattern`, an unknown `format` or a
construct this reader does not follow (`not`, `if`) makes it unsure, and a server refusing unsure arguments says
nothing about the server.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

FORMATS = {"date-time": "2024-01-01T00:00:00Z", "date": "2024-01-01", "time": "00:00:00", "email": "user@example.com",
           "uri": "https://example.com", "url": "https://example.com", "uuid": "00000000-0000-0000-0000-000000000000",
           "ipv4": "127.0.0.1", "hostname": "example.com", "path": "test", "binary": "test", "password": "test"}
PATTERN_TRIES = ("test", "a", "A", "0", "1", "x", "AB-1", "a1", "test-1", "A1")
UNFOLLOWED = ("not", "if", "then", "else", "dependentSchemas", "patternProperties", "propertyNames")
# Values no lax pydantic field of another type takes (a string that does not look like a number or a boolean).
WRONG = ("orsgen: wrong type", {"orsgen": "wrong type"}, ["orsgen"], 3.5)


@dataclass(frozen=True)
class Made:
    values: dict[str, Any]
    sure: bool = True


class Unmakeable(Exception):
    """No value this reader can make satisfies the schema."""


def made(schema: Any, mode: str = "minimal") -> Made:
    """The required arguments of a tool's input schema (None: a tool without arguments), in `mode`."""
    if not isinstance(schema, dict):
        return Made({})
    maker = _Maker(schema, mode)
    values = maker.object(schema, top=True)
    return Made(values if isinstance(values, dict) else {}, maker.sure)


def without_required(schema: Any, minimal: Made) -> tuple[str, dict[str, Any]] | None:
    """(the dropped argument, the minimal arguments without it): a call missing a required argument; None when the
    tool requires none."""
    required = [name for name in _required(schema) if name in minimal.values]
    if not required:
        return None
    return required[0], {k: v for k, v in minimal.values.items() if k != required[0]}


def wrong_type(schema: Any, minimal: Made) -> tuple[str, Any, dict[str, Any]] | None:
    """(the argument, its wrong value, the arguments): the minimal arguments with one of a type its schema refuses;
    required arguments first. None when no argument has a type to get wrong (no arguments, or only `Any`)."""
    if not isinstance(schema, dict):
        return None
    properties = _properties(schema)
    order = [*_required(schema), *(name for name in properties if name not in _required(schema))]
    for name in order:
        node = properties.get(name)
        if not isinstance(node, dict) or not _typed(node, schema):
            continue
        for value in WRONG:
            if not accepts(node, value, schema):
                return name, value, {**minimal.values, name: value}
    return None


def accepts(node: Any, value: Any, root: dict[str, Any], depth: int = 0) -> bool:
    """Whether `value` has a type (or enum value) the schema node allows; constraints are not read."""
    if depth > 32 or not isinstance(node, dict):
        return True
    node = resolved(node, root)
    if "const" in node:
        return bool(value == node["const"])
    if isinstance(node.get("enum"), list):
        return value in node["enum"]
    branches = node.get("anyOf") or node.get("oneOf")
    if isinstance(branches, list) and branches:
        return any(accepts(b, value, root, depth + 1) for b in branches)
    if isinstance(node.get("allOf"), list) and node["allOf"]:
        return all(accepts(b, value, root, depth + 1) for b in node["allOf"])
    types = node.get("type")
    if types is None:
        return True
    return any(_is(t, value) for t in (types if isinstance(types, list) else [types]))


def _is(kind: Any, value: Any) -> bool:
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    return {"string": str, "boolean": bool, "array": list, "object": dict, "null": type(None)}.get(kind, object) \
        in type(value).__mro__


def _typed(node: dict[str, Any], root: dict[str, Any]) -> bool:
    """The node restricts the type (or the values) of what it takes."""
    return any(not accepts(node, value, root) for value in WRONG)


def _properties(node: dict[str, Any]) -> dict[str, Any]:
    found = node.get("properties")
    return found if isinstance(found, dict) else {}


def _int(value: Any, default: int | None) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _required(schema: Any) -> list[str]:
    found = schema.get("required") if isinstance(schema, dict) else None
    return [name for name in found if isinstance(name, str)] if isinstance(found, list) else []


def resolved(node: dict[str, Any], root: dict[str, Any]) -> dict[str, Any]:
    """A `$ref` node as its target (`#/$defs/X`, `#/definitions/X`), its sibling keys over it."""
    seen = 0
    while isinstance(node.get("$ref"), str) and seen < 32:
        ref, seen = node["$ref"], seen + 1
        target: Any = root
        for part in ref.removeprefix("#/").split("/") if ref.startswith("#/") else [None]:
            target = target.get(part) if isinstance(target, dict) and part is not None else None
        if not isinstance(target, dict):
            return {k: v for k, v in node.items() if k != "$ref"}
        node = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
    return node


class _Maker:
    def __init__(self, root: dict[str, Any], mode: str) -> None:
        self.root, self.mode, self.sure = root, mode, True

    def value(self, node: Any, depth: int = 0) -> Any:
        if depth > 24:
            raise Unmakeable("nested too deep")
        if not isinstance(node, dict):
            return "test"
        node = resolved(node, self.root)
        if any(key in node for key in UNFOLLOWED):
            self.sure = False
        if "const" in node:
            return node["const"]
        if isinstance(node.get("enum"), list) and node["enum"]:
            choices = [v for v in node["enum"] if v is not None] or node["enum"]
            return choices[0]
        if self.mode == "minimal" and isinstance(node.get("examples"), list) and node["examples"]:
            return node["examples"][0]
        branches = node.get("anyOf") or node.get("oneOf")
        if isinstance(branches, list) and branches:
            nullable = any(isinstance(b, dict) and b.get("type") == "null" for b in branches)
            if self.mode == "empty" and nullable:
                return None
            chosen = next((b for b in branches if not (isinstance(b, dict) and b.get("type") == "null")), branches[0])
            return self.value(chosen, depth + 1)
        if isinstance(node.get("allOf"), list) and node["allOf"]:
            if len(node["allOf"]) > 1:
                self.sure = False
            return self.value({**node["allOf"][0], **{k: v for k, v in node.items() if k != "allOf"}}, depth + 1)
        kind = node.get("type")
        if isinstance(kind, list):
            kinds = [k for k in kind if k != "null"]
            if self.mode == "empty" and "null" in kind:
                return None
            kind = kinds[0] if kinds else "null"
        if kind is None:
            kind = "object" if "properties" in node else "array" if "items" in node else None
        maker = {"string": self.string, "integer": self.integer, "number": self.number, "boolean": lambda n: False,
                 "null": lambda n: None, "array": lambda n: self.array(n, depth), "object": lambda n: self.object(
                     n, depth=depth)}.get(str(kind))
        if maker is None:
            return "test"  # any type: a plain string
        return maker(node)

    def object(self, node: dict[str, Any], top: bool = False, depth: int = 0) -> dict[str, Any]:
        properties = _properties(node)
        values = {}
        for name in _required(node):
            if name in properties:
                values[name] = self.value(properties[name], depth + 1)
            else:  # required, but not described: whatever it takes
                self.sure = False
                values[name] = "test"
        count = node.get("minProperties")
        if isinstance(count, int) and count > len(values):
            for name in [n for n in properties if n not in values][: count - len(values)]:
                values[name] = self.value(properties[name], depth + 1)
        return values

    def string(self, node: dict[str, Any]) -> str:
        low, high = _int(node.get("minLength"), 0), _int(node.get("maxLength"), None)
        text = "" if self.mode == "empty" else "test"
        form = node.get("format")
        if isinstance(form, str) and self.mode == "minimal":
            if form in FORMATS:
                text = FORMATS[form]
            else:
                self.sure = False
        pattern = node.get("pattern")
        if isinstance(pattern, str):
            tries = [t for t in (text, *PATTERN_TRIES) if _matches(pattern, t)]
            if tries:
                text = tries[0]
            else:
                self.sure = False
        if low is not None and len(text) < low:
            text += "x" * (low - len(text))
        if high is not None and len(text) > high:
            text = text[:high]
        return text

    def integer(self, node: dict[str, Any]) -> int:
        return int(self._number(node, integer=True))

    def number(self, node: dict[str, Any]) -> float:
        return float(self._number(node, integer=False))

    def _number(self, node: dict[str, Any], integer: bool) -> float:
        value: float = 0 if self.mode == "empty" else 1
        low, high = node.get("minimum"), node.get("maximum")
        above, below = node.get("exclusiveMinimum"), node.get("exclusiveMaximum")
        step = 1 if integer else 0.5
        if isinstance(low, int | float) and value < low:
            value = math.ceil(low) if integer else low
        if isinstance(above, int | float) and not isinstance(above, bool) and value <= above:
            value = math.floor(above) + 1 if integer else above + step
        if isinstance(high, int | float) and value > high:
            value = math.floor(high) if integer else high
        if isinstance(below, int | float) and not isinstance(below, bool) and value >= below:
            value = math.ceil(below) - 1 if integer else below - step
        multiple = node.get("multipleOf")
        if isinstance(multiple, int | float) and multiple > 0 and value % multiple:
            value = math.ceil(value / multiple) * multiple
            self.sure = self.sure and not isinstance(high, int | float)
        return value

    def array(self, node: dict[str, Any], depth: int) -> list[Any]:
        prefix = node.get("prefixItems")
        if isinstance(prefix, list):
            return [self.value(item, depth + 1) for item in prefix]
        items = [self.value(node.get("items"), depth + 1) for _ in range(_int(node.get("minItems"), 0) or 0)]
        if node.get("uniqueItems") and len({repr(i) for i in items}) < len(items):
            self.sure = False
        return items


def _matches(pattern: str, text: str) -> bool:
    try:
        return re.search(pattern, text) is not None
    except re.error:
        return False
