"""JSON Schema -> type nodes. Each node renders its own annotation and names the `typing` imports it needs.

Annotations are limited to what `transformers.utils.get_json_schema` can turn back into JSON Schema (TRL shows the
model that, not the server's schema): scalars, `Literal`, `X | None`, unions, `list[T]`, `tuple[A, B]` and
`dict[str, T]`. Whatever an annotation cannot carry (defaults, constraints, formats, nested object fields) is
returned as notes, which end up in the argument's description.
"""

import json
from dataclasses import dataclass, field
from typing import Any

CONSTRAINTS = (
    "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf",
    "minLength", "maxLength", "pattern", "format", "minItems", "maxItems", "uniqueItems",
    "minProperties", "maxProperties",
)
SHAPE_KEYS = ("type", "items", "prefixItems", "properties", "required", "additionalProperties")
SCALARS = {"string": "str", "integer": "int", "number": "float", "boolean": "bool", "null": "None"}
MAX_NOTE = 1500  # characters of nested-schema text per argument
MAX_TYPE_DEPTH = 16  # nested types (list in list, union in dict, ...) an annotation spells; deeper ones are Any


class Node:
    def annotation(self) -> str:
        raise NotImplementedError

    def imports(self) -> frozenset[str]:
        return frozenset()

    def nullable(self) -> bool:
        return False

    def structured(self) -> bool:
        """Holds an object with known fields, which only a TypedDict (for type checkers) can spell out."""
        return False


@dataclass(frozen=True)
class Scalar(Node):
    name: str  # str, int, float, bool, None

    def annotation(self) -> str:
        return self.name

    def nullable(self) -> bool:
        return self.name == "None"


@dataclass(frozen=True)
class AnyType(Node):
    def annotation(self) -> str:
        return "Any"

    def imports(self) -> frozenset[str]:
        return frozenset({"Any"})


@dataclass(frozen=True)
class LiteralType(Node):
    values: tuple[Any, ...]  # str, int, bool or None only: what `Literal` may hold

    def annotation(self) -> str:
        return "Literal[" + ", ".join(repr(v) for v in self.values) + "]"

    def imports(self) -> frozenset[str]:
        return frozenset({"Literal"})

    def nullable(self) -> bool:
        return None in self.values


@dataclass(frozen=True)
class ListType(Node):
    item: Node

    def annotation(self) -> str:
        return f"list[{self.item.annotation()}]"

    def imports(self) -> frozenset[str]:
        return self.item.imports()

    def structured(self) -> bool:
        return self.item.structured()


@dataclass(frozen=True)
class TupleType(Node):
    items: tuple[Node, ...]  # two or more: get_json_schema rejects tuple[A]

    def annotation(self) -> str:
        return "tuple[" + ", ".join(i.annotation() for i in self.items) + "]"

    def imports(self) -> frozenset[str]:
        return frozenset().union(*(i.imports() for i in self.items))

    def structured(self) -> bool:
        return any(i.structured() for i in self.items)


@dataclass(frozen=True)
class DictType(Node):
    value: Node
    fields: bool = False  # an object with properties, shown to the model as text

    def annotation(self) -> str:
        return f"dict[str, {self.value.annotation()}]"

    def imports(self) -> frozenset[str]:
        return self.value.imports()

    def structured(self) -> bool:
        return self.fields or self.value.structured()


@dataclass(frozen=True)
class UnionType(Node):
    members: tuple[Node, ...]

    def annotation(self) -> str:
        return " | ".join(m.annotation() for m in self.members)

    def imports(self) -> frozenset[str]:
        return frozenset().union(*(m.imports() for m in self.members))

    def nullable(self) -> bool:
        return any(m.nullable() for m in self.members)

    def structured(self) -> bool:
        return any(m.structured() for m in self.members)


def union(members: list[Node]) -> Node:
    """Flattened, de-duplicated union with `None` last; one member is returned as is."""
    flat: list[Node] = []
    for m in members:
        for x in m.members if isinstance(m, UnionType) else (m,):
            if isinstance(x, AnyType):
                return x
            if x not in flat:
                flat.append(x)
    literals = [x for x in flat if isinstance(x, LiteralType)]
    if len(literals) > 1:  # Literal["a"] | Literal["b"] -> Literal["a", "b"]
        merged = LiteralType(_distinct([v for lit in literals for v in lit.values]))
        flat = [merged if x is literals[0] else x for x in flat if x not in literals[1:]]
    if Scalar("float") in flat and Scalar("int") in flat:  # JSON's number holds every integer: `float` says both
        flat.remove(Scalar("int"))
    if Scalar("None") in flat and len(flat) > 1:  # `None` goes last, once
        flat.remove(Scalar("None"))
        if not any(x.nullable() for x in flat):
            flat.append(Scalar("None"))
    return flat[0] if len(flat) == 1 else UnionType(tuple(flat))


@dataclass
class Converter:
    """Converts the schemas of one tool; `$defs`/`definitions` come from that tool's root schema."""

    root: dict[str, Any]
    warnings: list[str] = field(default_factory=list)
    cuts: int = 0  # types nested deeper than MAX_TYPE_DEPTH that became Any

    def resolve(self, node: Any, seen: tuple[str, ...]) -> tuple[Any, tuple[str, ...]]:
        """Follow `$ref` (and `allOf: [one]`) to a schema; a ref already on the path is cut to `{}`."""
        for _ in range(64):
            if not isinstance(node, dict):
                return node, seen
            if isinstance(node.get("allOf"), list) and len(node["allOf"]) == 1:
                node = {**{k: v for k, v in node.items() if k != "allOf"}, **_as_dict(node["allOf"][0])}
                continue
            ref = node.get("$ref")
            if not isinstance(ref, str):
                return node, seen
            if ref in seen:
                return {"description": f"(recursive: same shape as {ref.rsplit('/', 1)[-1]})"}, seen
            target = self.lookup(ref)
            if target is None:
                self.warnings.append(f"unresolved $ref {ref!r}, treated as any value")
                target = {}
            node = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
            seen = seen + (ref,)
        return {}, seen

    def lookup(self, ref: str) -> Any:
        if not ref.startswith("#/"):
            return None
        node: Any = self.root
        for part in ref[2:].split("/"):
            part = part.replace("~1", "/").replace("~0", "~")
            if not isinstance(node, dict) or part not in node:
                return None
            node = node[part]
        return node if isinstance(node, dict) else None

    def convert(self, node: Any, notes: list[str], seen: tuple[str, ...] = (), depth: int = 0) -> Node:
        """The annotation node for `node`; what it cannot express is appended to `notes`."""
        if depth > MAX_TYPE_DEPTH:  # an annotation this deep says nothing to a model, and Python cannot parse ~200
            if not self.cuts:
                self.warnings.append(f"types nested deeper than {MAX_TYPE_DEPTH} levels are any value there")
            self.cuts += 1
            return AnyType()
        s, seen = self.resolve(node, seen)
        if not isinstance(s, dict):
            if s is not True:
                self.warnings.append(f"schema {s!r} is not an object, treated as any value")
            return AnyType()
        notes.extend(f"{k}: {_compact(s[k])}" for k in CONSTRAINTS if k in s)
        if "const" in s:
            return self.literal([s["const"]], s, notes)
        if isinstance(s.get("enum"), list) and s["enum"]:
            return self.literal(s["enum"], s, notes)
        for key in ("anyOf", "oneOf"):
            if isinstance(s.get(key), list) and s[key]:
                # Keys beside the alternatives apply to each of them: {"type": "string", "anyOf": [{"format": ...}]}
                shared = {k: v for k, v in s.items() if k in SHAPE_KEYS}
                members = [self.convert({**shared, **b} if shared and isinstance(b, dict) else b, notes, seen,
                                        depth + 1) for b in s[key]]
                if key == "oneOf" and len([m for m in members if m != Scalar("None")]) > 1:
                    notes.append("exactly one of the alternatives")
                return union(members)
        t = s.get("type")
        if isinstance(t, list):
            return union([self.convert({**s, "type": x}, [], seen, depth + 1) for x in t] or [AnyType()])
        if t in SCALARS:
            return Scalar(SCALARS[t])
        if t == "array" or (t is None and ("items" in s or "prefixItems" in s)):
            return self.array(s, notes, seen, depth)
        if t == "object" or (t is None and ("properties" in s or "additionalProperties" in s)):
            return self.object(s, notes, seen, depth)
        if t is not None:
            self.warnings.append(f"unknown type {t!r}, treated as any value")
        return AnyType()

    def literal(self, values: list[Any], s: dict[str, Any], notes: list[str]) -> Node:
        if all(v is None or isinstance(v, (str, bool, int)) for v in values):
            return LiteralType(_distinct(values))
        # Literal cannot hold floats or objects: keep the type, list the choices in text.
        notes.append(f"one of: {_compact(values)}")
        kinds = {SCALARS.get(_json_type(v), "Any") for v in values}
        return Scalar(kinds.pop()) if len(kinds) == 1 and "Any" not in kinds else AnyType()

    def array(self, s: dict[str, Any], notes: list[str], seen: tuple[str, ...], depth: int = 0) -> Node:
        prefix = s.get("prefixItems")
        if isinstance(prefix, list) and len(prefix) >= 2 and s.get("items") in (None, False):
            return TupleType(tuple(_element(self.convert(p, notes, seen, depth + 1)) for p in prefix))
        if isinstance(prefix, list) and prefix:
            notes.append(f"items in order: {_compact(self.plain(prefix, seen))}")
            return ListType(AnyType())
        items = s.get("items")
        if items is None or items is True or items == {}:
            return ListType(AnyType())
        return ListType(_element(self.convert(items, notes, seen, depth + 1)))

    def object(self, s: dict[str, Any], notes: list[str], seen: tuple[str, ...], depth: int = 0) -> Node:
        props = s.get("properties")
        extra = s.get("additionalProperties")
        if isinstance(props, dict) and props:
            fields = {"properties": self.plain(props, seen)}
            if s.get("required"):
                fields["required"] = s["required"]
            if extra is False:
                fields["additionalProperties"] = False
            notes.append(f"object: {_compact(fields, MAX_NOTE)}")
            return DictType(AnyType(), fields=True)
        if isinstance(extra, dict) and extra:
            return DictType(_element(self.convert(extra, notes, seen, depth + 1)))
        return DictType(AnyType())

    def plain(self, node: Any, seen: tuple[str, ...], depth: int = 0) -> Any:
        """`node` with refs inlined (recursion cut) and titles dropped: the text form of a nested schema."""
        if depth > 12:
            return {}
        if isinstance(node, list):
            return [self.plain(x, seen, depth + 1) for x in node]
        if not isinstance(node, dict):
            return node
        node, seen = self.resolve(node, seen)
        if not isinstance(node, dict):
            return node
        out = {}
        for k, v in node.items():
            if k in ("title", "$defs", "definitions", "$schema"):
                continue
            if k == "properties" and isinstance(v, dict):
                out[k] = {name: self.plain(p, seen, depth + 1) for name, p in v.items()}
            elif k in ("enum", "const", "default", "examples", "required"):
                out[k] = v
            else:
                out[k] = self.plain(v, seen, depth + 1)
        return out


def _distinct(values: list[Any]) -> tuple[Any, ...]:
    """Values without repeats, where `1`, `1.0` and `True` are different values (they are equal in Python)."""
    seen: set[tuple[type, Any]] = set()
    return tuple(v for v in values if (type(v), v) not in seen and not seen.add((type(v), v)))  # type: ignore[func-returns-value]


def _element(node: Node) -> Node:
    """`get_json_schema` reads a bare `None` only at the top: inside `list[...]` it must be `Literal[None]`."""
    return LiteralType((None,)) if node == Scalar("None") else node


def _as_dict(node: Any) -> dict[str, Any]:
    return node if isinstance(node, dict) else {}


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    return "string" if isinstance(value, str) else "object"


def _compact(value: Any, limit: int = 200) -> str:
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=False, default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"
