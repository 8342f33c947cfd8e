"""TypedDicts for arguments that are nested objects: the `hint()` of the same type nodes the signatures spell.

`get_json_schema` cannot read a TypedDict, so these live under `if TYPE_CHECKING:` only: type checkers and IDEs
see the fields, TRL sees `dict[str, Any]` (with the fields described in the argument's text).
"""

import ast
import keyword
import re
from dataclasses import dataclass, field

from orsgen.model import naming
from orsgen.model.typemap import Named, Node, ObjectType

TYPING_NAMES = frozenset({"Any", "Literal", "NotRequired", "Optional", "Required", "TypeAlias", "Union"})
EXTENSION_NAMES = frozenset({"TypedDict"})  # from typing_extensions, under TYPE_CHECKING only


@dataclass
class Classes:
    """The TypedDict classes of one tool. Names start with `prefix` and join `taken`, which the module's tools
    share; sources are kept in the order the classes are finished (a class after its fields')."""

    prefix: str
    taken: set[str]
    sources: list[str] = field(default_factory=list)
    names: dict[str, str] = field(default_factory=dict)  # ObjectType.key -> class name
    building: set[str] = field(default_factory=set)  # classes whose fields are being written: named in quotes

    def annotation(self, node: Node, name: str) -> str:
        """The annotation type checkers see for an argument (or field) called `name` of type `node`."""
        return node.hint(self, name).annotation()

    def named(self, ref: str) -> str | None:
        return self.names.get(ref)

    def define(self, node: ObjectType, name: str) -> Named:
        if node.key in self.names:
            return Named(self.names[node.key])
        cls = naming.unique(self.prefix + naming.class_name(node.title or name or "item"), self.taken)
        self.names[node.key] = cls
        self.building.add(cls)
        fields = []
        for f in node.fields:
            annotation = self.annotation(f.type, f.wire)
            if any(re.search(rf"\b{re.escape(n)}\b", annotation) for n in self.building):
                annotation = repr(annotation)  # names a class not defined yet
            fields.append((f.wire, annotation if f.required else f"NotRequired[{annotation}]"))
        self.building.discard(cls)
        self.sources.append(_class_source(cls, fields))
        return Named(cls)


def _class_source(name: str, fields: list[tuple[str, str]]) -> str:
    used = {w for _, annotation in fields for w in re.findall(r"\w+", annotation)}
    if all(w.isidentifier() and not keyword.iskeyword(w) and not w.startswith("__") and w not in used
           for w, _ in fields):
        return f"class {name}(TypedDict):\n" + "".join(f"    {w}: {a}\n" for w, a in fields)
    # Keys a class body cannot hold (`from`, `a-b`), or that would shadow a type the fields use (`str`)
    items = ", ".join(f"{w!r}: {a}" for w, a in fields)
    return f"{name} = TypedDict({name!r}, {{{items}}})\n"


def names_used(sources: list[str]) -> set[str]:
    return {n.id for src in sources for n in ast.walk(parsed(src)) if isinstance(n, ast.Name)}


def parsed(src: str) -> ast.Module:
    """ast.parse, once more after CPython 3.11's spurious "AST constructor recursion depth mismatch" SystemError
    (gh-106905: the count can be thrown off by another thread's parse; seen here while a test's threads ran)."""
    try:
        return ast.parse(src)
    except SystemError as exc:
        if "recursion depth mismatch" not in str(exc):
            raise
        return ast.parse(src)
