"""TypedDicts for arguments that are nested objects, made from the same type nodes as the signatures.

`get_json_schema` cannot read a TypedDict, so these live under `if TYPE_CHECKING:` only: type checkers and IDEs
see the fields, TRL sees `dict[str, Any]` (with the fields described in the argument's text).
"""

import ast
import json
import keyword
import re
from dataclasses import dataclass, field
from typing import Any

from orsgen.model import naming
from orsgen.model.typemap import Converter, Node

TYPING_NAMES = frozenset({"Any", "Literal", "NotRequired", "Optional", "Required", "TypeAlias", "Union"})
EXTENSION_NAMES = frozenset({"TypedDict"})  # from typing_extensions, under TYPE_CHECKING only
_CLASS = "$orsgen-class"  # a recursive $ref, resolved to the class being built


@dataclass
class Hints:
    classes: list[str] = field(default_factory=list)  # class sources, prefixed with the tool's name
    fields: dict[str, str] = field(default_factory=dict)  # wire property name -> annotation source


@dataclass(frozen=True)
class Named(Node):
    """A TypedDict class defined by the module."""

    name: str

    def annotation(self) -> str:
        return self.name

    def structured(self) -> bool:
        return True


def for_tool(prefix: str, schema: dict[str, Any], wanted: list[str], taken: set[str]) -> Hints:
    """The TypedDicts of the `wanted` properties of one tool's schema. Class names start with `prefix` and join
    `taken`, which the module's tools share."""
    hinter = _Hinter(root=schema, prefix=prefix, taken=taken)
    props = schema.get("properties") or {}
    fields = {}
    for wire in wanted:
        hinter.field_name = wire
        fields[wire] = hinter.convert(props[wire], []).annotation()
    return Hints(hinter.sources, fields)


@dataclass
class _Hinter(Converter):
    """A converter whose objects with properties become TypedDict classes, one per `$ref` or per inline shape."""

    prefix: str = ""
    taken: set[str] = field(default_factory=set)
    sources: list[str] = field(default_factory=list)  # in the order they are finished: a class after its fields'
    names: dict[str, str] = field(default_factory=dict)  # $ref or the schema's JSON -> class name
    building: set[str] = field(default_factory=set)  # classes whose fields are being made: named in quotes
    field_name: str = ""  # the property being converted: names a class whose schema has no title
    ref: str | None = None  # the $ref the schema being converted came from: one class per $ref

    def resolve(self, node: Any, seen: tuple[str, ...]) -> tuple[Any, tuple[str, ...]]:
        ref = node.get("$ref") if isinstance(node, dict) else None
        if isinstance(ref, str) and ref in seen and ref in self.names:  # recursion: the class itself, not a cut
            return {_CLASS: self.names[ref]}, seen
        return super().resolve(node, seen)

    def convert(self, node: Any, notes: list[str], seen: tuple[str, ...] = (), depth: int = 0) -> Node:
        s, after = self.resolve(node, seen)
        if isinstance(s, dict) and _CLASS in s:
            return Named(s[_CLASS])
        self.ref = after[-1] if len(after) > len(seen) else None  # read by object(), which convert() calls next
        return super().convert(node, notes, seen, depth)

    def object(self, s: dict[str, Any], notes: list[str], seen: tuple[str, ...], depth: int = 0) -> Node:
        props = s.get("properties")
        if isinstance(props, dict) and props:
            return self.typed_dict(s, self.ref, seen, depth)
        return super().object(s, notes, seen, depth)

    def array(self, s: dict[str, Any], notes: list[str], seen: tuple[str, ...], depth: int = 0) -> Node:
        saved, self.field_name = self.field_name, _singular(self.field_name)
        try:
            return super().array(s, notes, seen, depth)
        finally:
            self.field_name = saved

    def typed_dict(self, s: dict[str, Any], ref: str | None, seen: tuple[str, ...], depth: int = 0) -> Node:
        key = ref or json.dumps(s, sort_keys=True, default=str)
        if key in self.names:
            return Named(self.names[key])
        title = s.get("title") if isinstance(s.get("title"), str) else ""
        base = naming.class_name(title or (ref.rsplit("/", 1)[-1] if ref else "") or self.field_name or "item")
        name = naming.unique(self.prefix + base, self.taken)
        self.names[key] = name
        self.building.add(name)
        required = s["required"] if isinstance(s.get("required"), list) else []
        fields = []
        saved = self.field_name
        for wire, prop in s["properties"].items():
            self.field_name = wire
            annotation = self.convert(prop, [], seen, depth + 1).annotation()
            if any(re.search(rf"\b{re.escape(n)}\b", annotation) for n in self.building):
                annotation = repr(annotation)  # names a class not defined yet
            fields.append((wire, annotation if wire in required else f"NotRequired[{annotation}]"))
        self.field_name = saved
        self.building.discard(name)
        self.sources.append(_class_source(name, fields))
        return Named(name)


def _class_source(name: str, fields: list[tuple[str, str]]) -> str:
    used = {w for _, annotation in fields for w in re.findall(r"\w+", annotation)}
    if all(w.isidentifier() and not keyword.iskeyword(w) and not w.startswith("__") and w not in used
           for w, _ in fields):
        return f"class {name}(TypedDict):\n" + "".join(f"    {w}: {a}\n" for w, a in fields)
    # Keys a class body cannot hold (`from`, `a-b`), or that would shadow a type the fields use (`str`)
    items = ", ".join(f"{w!r}: {a}" for w, a in fields)
    return f"{name} = TypedDict({name!r}, {{{items}}})\n"


def _singular(name: str) -> str:
    """The name of a list's items: `edits` -> `edit`, `entries` -> `entry`; otherwise `<name>_item`."""
    if name.endswith("ies") and len(name) > 3:
        return name[:-3] + "y"
    if name.endswith("s") and not name.endswith(("ss", "us", "is")) and len(name) > 1:
        return name[:-1]
    return f"{name}_item"


def names_used(sources: list[str]) -> set[str]:
    return {n.id for src in sources for n in ast.walk(ast.parse(src)) if isinstance(n, ast.Name)}
