"""JSON Schema -> type nodes: the schema is read here, once; each construct is one node class.

A node spells the method's annotation (`signature()`), the annotation type checkers see (`hint()`: an object becomes
a TypedDict class, see `typeddicts`), the `typing` names it imports and the facts the report compares (`facts()`).
Annotations are limited to what `transformers.utils.get_json_schema` can turn back into JSON Schema (TRL shows the
model that, not the server's schema): scalars, `Literal`, `X | None`, unions, `list[T]`, `tuple[A, B]` and
`dict[str, T]`. Whatever an annotation cannot carry (constraints, formats, choices, nested object fields) the node
says in `text()`, which ends up in the argument's description. A new construct is one node class here, plus the
branch of `Converter.convert` that makes it, plus its golden case.
"""

import json
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, cast

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
    """One JSON Schema construct. The converter reads the schema once into these; everything else asks the nodes.

    `signature()` is the node as the method's annotation spells it (what TRL turns back into JSON Schema),
    `hint()` as type checkers see it (objects become TypedDict classes), `facts()` what the schema said, for the
    report to compare with what the model sees. The public methods answer for the signature.
    """

    def signature(self) -> "Node":
        return self

    def hint(self, classes: "Classes", name: str) -> "Node":
        """The node for type checkers; `name` (the argument's, the field's) names a class made for an object."""
        return self.signature()

    def facts(self) -> "Facts":
        return Facts()

    said: tuple[str, ...] = ()  # what the schema said at this level that no annotation can: "minimum: 0", ...

    def text(self) -> list[str]:
        """What the argument's description says of this value: this level's constraints, its parts', its own."""
        return [*self.said, *self.inner_text(), *self.own_text()]

    def inner_text(self) -> list[str]:
        return []

    def own_text(self) -> list[str]:
        return []

    def annotation(self) -> str:
        return self.signature().spell()

    def imports(self) -> frozenset[str]:
        return self.signature().needs()

    def nullable(self) -> bool:
        return self.signature().holds_none()

    def structured(self) -> bool:
        """Holds an object with known fields, which only a TypedDict (for type checkers) can spell out."""
        return self.signature().has_fields()

    # What a signature node answers for itself (its children are signature nodes too).
    def spell(self) -> str:
        raise NotImplementedError

    def needs(self) -> frozenset[str]:
        return frozenset()

    def holds_none(self) -> bool:
        return False

    def has_fields(self) -> bool:
        return False


class Classes(Protocol):
    """What `hint()` asks for an object: the TypedDict class standing for it (see `typeddicts.Classes`)."""

    def define(self, node: "ObjectType", name: str) -> "Node": ...

    def named(self, ref: str) -> str | None: ...


@dataclass(frozen=True)
class Facts:
    """What a schema said about one value, as the report compares it: JSON types, choices, null, item types."""

    types: frozenset[str] = frozenset()  # JSON types declared at this level
    enum: tuple[Any, ...] | None = None
    null: bool = False
    items: frozenset[str] | None = None  # the declared JSON types of an array's items


@dataclass(frozen=True)
class Scalar(Node):
    name: str  # str, int, float, bool, None
    said: tuple[str, ...] = field(default=(), compare=False)

    def spell(self) -> str:
        return self.name

    def holds_none(self) -> bool:
        return self.name == "None"

    def facts(self) -> Facts:
        return Facts(types=frozenset({JSON_NAMES[self.name]}), null=self.name == "None")


@dataclass(frozen=True)
class AnyType(Node):
    said: tuple[str, ...] = field(default=(), compare=False)

    def spell(self) -> str:
        return "Any"

    def needs(self) -> frozenset[str]:
        return frozenset({"Any"})


@dataclass(frozen=True)
class LiteralType(Node):
    values: tuple[Any, ...]  # str, int, bool or None only: what `Literal` may hold
    said: tuple[str, ...] = field(default=(), compare=False)

    def spell(self) -> str:
        return "Literal[" + ", ".join(repr(v) for v in self.values) + "]"

    def needs(self) -> frozenset[str]:
        return frozenset({"Literal"})

    def holds_none(self) -> bool:
        return None in self.values

    def facts(self) -> Facts:
        return Facts(enum=self.values)


@dataclass(frozen=True)
class Choices(Node):
    """An enum `Literal` cannot hold (floats, objects): the signature keeps the type, the text lists the choices."""

    kind: Node  # a Scalar, or Any
    values: tuple[Any, ...]
    said: tuple[str, ...] = field(default=(), compare=False)

    def signature(self) -> Node:
        return self.kind

    def own_text(self) -> list[str]:
        return [f"one of: {_compact(list(self.values))}"]

    def facts(self) -> Facts:
        return Facts(enum=self.values)


@dataclass(frozen=True)
class ListType(Node):
    item: Node
    in_order: str | None = field(default=None, compare=False)  # prefixItems no tuple can spell, as text
    said: tuple[str, ...] = field(default=(), compare=False)

    def signature(self) -> Node:
        return ListType(_element(self.item.signature()))

    def inner_text(self) -> list[str]:
        return self.item.text()

    def own_text(self) -> list[str]:
        return [f"items in order: {self.in_order}"] if self.in_order is not None else []

    def hint(self, classes: Classes, name: str) -> Node:
        return ListType(_element(self.item.hint(classes, _singular(name))))

    def facts(self) -> Facts:
        item = self.item.facts().types - {"null"}
        return Facts(types=frozenset({"array"}), items=item or None)

    def spell(self) -> str:
        return f"list[{self.item.spell()}]"

    def needs(self) -> frozenset[str]:
        return self.item.needs()

    def has_fields(self) -> bool:
        return self.item.has_fields()


@dataclass(frozen=True)
class TupleType(Node):
    items: tuple[Node, ...]  # two or more: get_json_schema rejects tuple[A]
    said: tuple[str, ...] = field(default=(), compare=False)

    def signature(self) -> Node:
        return TupleType(tuple(_element(i.signature()) for i in self.items))

    def inner_text(self) -> list[str]:
        return [note for i in self.items for note in i.text()]

    def hint(self, classes: Classes, name: str) -> Node:
        return TupleType(tuple(_element(i.hint(classes, _singular(name))) for i in self.items))

    def facts(self) -> Facts:
        return Facts(types=frozenset({"array"}))

    def spell(self) -> str:
        return "tuple[" + ", ".join(i.spell() for i in self.items) + "]"

    def needs(self) -> frozenset[str]:
        return frozenset().union(*(i.needs() for i in self.items))

    def has_fields(self) -> bool:
        return any(i.has_fields() for i in self.items)


@dataclass(frozen=True)
class DictType(Node):
    value: Node
    fields: bool = False  # an object with properties, shown to the model as text
    said: tuple[str, ...] = field(default=(), compare=False)

    def signature(self) -> Node:
        return DictType(_element(self.value.signature()), self.fields)

    def inner_text(self) -> list[str]:
        return self.value.text()

    def hint(self, classes: Classes, name: str) -> Node:
        return DictType(_element(self.value.hint(classes, name)), self.fields)

    def facts(self) -> Facts:
        return Facts(types=frozenset({"object"}))

    def spell(self) -> str:
        return f"dict[str, {self.value.spell()}]"

    def needs(self) -> frozenset[str]:
        return self.value.needs()

    def has_fields(self) -> bool:
        return self.fields or self.value.has_fields()


@dataclass(frozen=True)
class Field:
    wire: str
    required: bool
    type: Node


@dataclass(frozen=True)
class ObjectType(Node):
    """An object with properties: `dict[str, Any]` in the signature (its fields described in the argument's text),
    a TypedDict class for type checkers, one per `$ref` or per distinct inline shape."""

    fields: tuple[Field, ...]
    key: str  # the $ref it came from, or its schema's JSON: one class per key
    title: str  # names the class: its title, else its $ref's last part, else the argument or field
    shown: str  # the fields as the argument's text shows them (theirs whole: no text of their own)
    said: tuple[str, ...] = field(default=(), compare=False)

    def signature(self) -> Node:
        return DictType(AnyType(), fields=True)

    def own_text(self) -> list[str]:
        return [f"object: {self.shown}"]

    def hint(self, classes: Classes, name: str) -> Node:
        return classes.define(self, name)

    def facts(self) -> Facts:
        return Facts(types=frozenset({"object"}))


@dataclass(frozen=True)
class Recursive(Node):
    """A `$ref` to a schema it is inside of: any value in the signature, the enclosing class for type checkers."""

    ref: str

    def signature(self) -> Node:
        return AnyType()

    def hint(self, classes: Classes, name: str) -> Node:
        named = classes.named(self.ref)
        return Named(named) if named else AnyType()


@dataclass(frozen=True)
class Named(Node):
    """A TypedDict class defined by the module (type checkers only)."""

    name: str

    def spell(self) -> str:
        return self.name

    def has_fields(self) -> bool:
        return True


@dataclass(frozen=True)
class UnionType(Node):
    members: tuple[Node, ...]

    def spell(self) -> str:
        return " | ".join(m.spell() for m in self.members)

    def needs(self) -> frozenset[str]:
        return frozenset().union(*(m.needs() for m in self.members))

    def holds_none(self) -> bool:
        return any(m.holds_none() for m in self.members)

    def has_fields(self) -> bool:
        return any(m.has_fields() for m in self.members)


@dataclass(frozen=True)
class Alternatives(Node):
    """`anyOf`/`oneOf` branches, or a list of types, as the schema gives them; `union()` makes each view of them."""

    members: tuple[Node, ...]
    branches: bool = True  # anyOf/oneOf; False: `"type": [...]`, which declares its types at this level
    exactly_one: bool = False  # oneOf of two or more non-null alternatives: the text says so
    said: tuple[str, ...] = field(default=(), compare=False)

    def signature(self) -> Node:
        return union([m.signature() for m in self.members])

    def inner_text(self) -> list[str]:
        return [note for m in self.members for note in m.text()] if self.branches else []

    def own_text(self) -> list[str]:
        return ["exactly one of the alternatives"] if self.exactly_one else []

    def hint(self, classes: Classes, name: str) -> Node:
        return union([m.hint(classes, name) for m in self.members])

    def facts(self) -> Facts:
        """As one level: the members' own types (a member's branches are not looked into), the last choices."""
        found = [m.facts() for m in self.members if not (isinstance(m, Alternatives) and m.branches)]
        enums = [f.enum for f in found if f.enum is not None]
        kept = [m for m in self.members if m != Scalar("None")]
        return Facts(types=frozenset().union(*(f.types for f in found)), enum=enums[-1] if enums else None,
                     null=any(f.null for f in found),
                     items=kept[0].facts().items if len(kept) == 1 else None)


JSON_NAMES = {v: k for k, v in SCALARS.items()}


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

    def convert(self, node: Any, seen: tuple[str, ...] = (), depth: int = 0) -> Node:
        """The node for `node`."""
        own = node.get("$ref") if isinstance(node, dict) else None
        recursive = Recursive(own) if isinstance(own, str) and own in seen else None  # a $ref it is inside of
        if depth > MAX_TYPE_DEPTH:  # an annotation this deep says nothing to a model, and Python cannot parse ~200
            if not self.cuts:
                self.warnings.append(f"types nested deeper than {MAX_TYPE_DEPTH} levels are any value there")
            self.cuts += 1
            return recursive or AnyType()
        if recursive:
            return recursive
        s, after = self.resolve(node, seen)
        if not isinstance(s, dict):
            if s is not True:
                self.warnings.append(f"schema {s!r} is not an object, treated as any value")
            return AnyType()
        ref = after[-1] if len(after) > len(seen) else None  # the $ref this schema came from: one class per $ref
        said = tuple(f"{k}: {_compact(s[k])}" for k in CONSTRAINTS if k in s)
        shape = self.shape(s, after, depth, ref)
        return replace(cast(Any, shape), said=said) if said else shape  # every shape node is a dataclass

    def shape(self, s: dict[str, Any], seen: tuple[str, ...], depth: int, ref: str | None) -> Node:
        if "const" in s:
            return self.literal([s["const"]])
        if isinstance(s.get("enum"), list) and s["enum"]:
            return self.literal(s["enum"])
        for key in ("anyOf", "oneOf"):
            if isinstance(s.get(key), list) and s[key]:
                # Keys beside the alternatives apply to each of them: {"type": "string", "anyOf": [{"format": ...}]}
                shared = {k: v for k, v in s.items() if k in SHAPE_KEYS}
                members = tuple(self.convert({**shared, **b} if shared and isinstance(b, dict) else b, seen,
                                             depth + 1) for b in s[key])
                one = key == "oneOf" and len([m for m in members if m.signature() != Scalar("None")]) > 1
                return Alternatives(members, exactly_one=one)
        t = s.get("type")
        if isinstance(t, list):
            return Alternatives(tuple(self.convert({**s, "type": x}, seen, depth + 1) for x in t) or (AnyType(),),
                                branches=False)
        if t in SCALARS:
            return Scalar(SCALARS[t])
        if t == "array" or (t is None and ("items" in s or "prefixItems" in s)):
            return self.array(s, seen, depth)
        if t == "object" or (t is None and ("properties" in s or "additionalProperties" in s)):
            return self.object(s, seen, depth, ref)
        if t is not None:
            self.warnings.append(f"unknown type {t!r}, treated as any value")
        return AnyType()

    def literal(self, values: list[Any]) -> Node:
        if all(v is None or isinstance(v, (str, bool, int)) for v in values):
            return LiteralType(_distinct(values))
        # Literal cannot hold floats or objects: keep the type, list the choices in text.
        kinds = {SCALARS.get(_json_type(v), "Any") for v in values}
        kind = Scalar(kinds.pop()) if len(kinds) == 1 and "Any" not in kinds else AnyType()
        return Choices(kind, tuple(values))

    def array(self, s: dict[str, Any], seen: tuple[str, ...], depth: int = 0) -> Node:
        prefix = s.get("prefixItems")
        if isinstance(prefix, list) and len(prefix) >= 2 and s.get("items") in (None, False):
            return TupleType(tuple(self.convert(p, seen, depth + 1) for p in prefix))
        if isinstance(prefix, list) and prefix:
            return ListType(AnyType(), in_order=_compact(self.plain(prefix, seen)))
        items = s.get("items")
        if items is None or items is True or items == {}:
            return ListType(AnyType())
        return ListType(self.convert(items, seen, depth + 1))

    def object(self, s: dict[str, Any], seen: tuple[str, ...], depth: int = 0, ref: str | None = None) -> Node:
        props = s.get("properties")
        extra = s.get("additionalProperties")
        if isinstance(props, dict) and props:
            shown = {"properties": self.plain(props, seen)}
            if s.get("required"):
                shown["required"] = s["required"]
            if extra is False:
                shown["additionalProperties"] = False
            return ObjectType(self.fields(s, seen, depth), ref or json.dumps(s, sort_keys=True, default=str),
                              _title(s, ref), _compact(shown, MAX_NOTE))
        if isinstance(extra, dict) and extra:
            return DictType(self.convert(extra, seen, depth + 1))
        return DictType(AnyType())

    def fields(self, s: dict[str, Any], seen: tuple[str, ...], depth: int) -> tuple[Field, ...]:
        """An object's fields, for its TypedDict only: what they would warn of is not the argument's (the text
        shows the fields whole)."""
        inner = Converter(root=self.root)
        required = s["required"] if isinstance(s.get("required"), list) else []
        return tuple(Field(wire, wire in required, inner.convert(prop, seen, depth + 1))
                     for wire, prop in s["properties"].items())

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


def _title(s: dict[str, Any], ref: str | None) -> str:
    title = s.get("title") if isinstance(s.get("title"), str) else ""
    return title or (ref.rsplit("/", 1)[-1] if ref else "")


def _singular(name: str) -> str:
    """The name of a list's items: `edits` -> `edit`, `entries` -> `entry`; otherwise `<name>_item`."""
    if name.endswith("ies") and len(name) > 3:
        return name[:-3] + "y"
    if name.endswith("s") and not name.endswith(("ss", "us", "is")) and len(name) > 1:
        return name[:-1]
    return f"{name}_item"


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
