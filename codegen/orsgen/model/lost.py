"""What a tool's schema says that neither the signature nor the argument text carries, each tied to the arguments it
names (`dependentRequired`, `anyOf: [{"required": [...]}]`, ...) or to the whole tool (`additionalProperties`)."""

import json
from dataclasses import dataclass
from typing import Any

# Top-level schema keys the signature or the docstring carries (or that mean nothing to the model).
CARRIED = {"type", "properties", "required", "title", "description", "$defs", "definitions", "$schema"}
# Top-level keys whose value is an object keyed by argument names: each entry belongs to that argument.
KEYED_BY_ARGUMENT = ("dependentRequired", "dependencies", "dependentSchemas", "default")
# Keys inside a lost value that name arguments: {"required": [names]}, {"properties": {name: ...}}.
NAMING_KEYS = ("required", "properties", *KEYED_BY_ARGUMENT)
# Keys about the object as a whole: whatever they hold, no argument is theirs.
WHOLE = ("additionalProperties", "patternProperties", "propertyNames", "unevaluatedProperties", "minProperties",
         "maxProperties")


@dataclass(frozen=True)
class Lost:
    text: str  # "key: json", or "cut: ARGUMENT: what" for what orsgen's bounds cut
    arguments: tuple[str, ...]  # the wire names of the arguments it is about, in their order; none: the whole tool


def keys(schema: dict[str, Any], arguments: list[str]) -> list[Lost]:
    """The top-level keys of a (normalized) input schema that nothing carries."""
    return [Lost(f"{k}: {as_json(v)}", _tied(k, v, arguments)) for k, v in schema.items() if k not in CARRIED]


def cut(argument: str, what: str) -> Lost:
    return Lost(f"cut: {argument}: {what}", (argument,))


def _tied(key: str, value: Any, arguments: list[str]) -> tuple[str, ...]:
    named: set[str] = set()
    if key in KEYED_BY_ARGUMENT and isinstance(value, dict):
        named.update(value)
        if key in ("dependentRequired", "dependencies"):
            named.update(n for v in value.values() if isinstance(v, list) for n in v if isinstance(n, str))
        _named_inside(list(value.values()), named)
    elif key not in WHOLE:
        _named_inside(value, named)
    return tuple(n for n in arguments if n in named)


def _named_inside(value: Any, named: set[str], depth: int = 0) -> None:
    """Argument names a nested schema names: `required` lists, `properties` keys, keyed objects."""
    if depth > 32:
        return
    if isinstance(value, list):
        for x in value:
            _named_inside(x, named, depth + 1)
        return
    if not isinstance(value, dict):
        return
    for k, v in value.items():
        if k == "required" and isinstance(v, list):
            named.update(n for n in v if isinstance(n, str))
        elif k in NAMING_KEYS and isinstance(v, dict):
            named.update(v)
        if k not in ("properties", "default", "const", "enum", "examples"):
            _named_inside(v, named, depth + 1)


def as_json(value: Any) -> str:
    """One line of JSON, as the report and the argument texts write a value."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
