"""TypedDicts for arguments that are nested objects, made by datamodel-code-generator.

`get_json_schema` cannot read a TypedDict, so these live under `if TYPE_CHECKING:` only: type checkers and IDEs
see the fields, TRL sees `dict[str, Any]` (with the fields described in the argument's text).
"""

import ast
import contextlib
import io
import json
import warnings
from dataclasses import dataclass, field
from typing import Any

TYPING_NAMES = frozenset({"Any", "Literal", "NotRequired", "Optional", "Required", "TypeAlias", "Union"})
EXTENSION_NAMES = frozenset({"TypedDict"})  # typing_extensions': dmcg may pass `closed=True`


@dataclass
class Hints:
    classes: list[str] = field(default_factory=list)  # class sources, prefixed with the tool's name
    fields: dict[str, str] = field(default_factory=dict)  # wire property name -> annotation source


# dmcg's code for a schema, by the schema's JSON with the root title left out (its place kept), made with the stand-in
# root name: tools whose schemas differ only in their title (the 100-tool benchmark has 40 such tools and 2 schemas)
# share one dmcg run. dmcg treats the root name as opaque (tests/test_generation_speed.py checks that on the corpora).
_STAND_IN = "OrsgenStandInRootArgs"
_generated: dict[str, str] = {}


def for_tool(prefix: str, schema: dict[str, Any]) -> Hints:
    """TypedDict classes for one tool's parameter schema; raises ValueError when dmcg cannot make them."""
    root = f"{prefix}Args"
    try:
        code = _code(schema, root)
    except Exception as exc:  # noqa: BLE001 - dmcg raises many types; the IDE hints are optional
        raise ValueError(f"datamodel-code-generator: {type(exc).__name__}: {exc}") from None
    tree = ast.parse(code)
    defined = [n.name for n in tree.body if isinstance(n, ast.ClassDef)]
    defined += [d for d in map(_defines, tree.body) if d is not None and d not in defined]
    names = {n: n if n.startswith(prefix) else prefix + n for n in defined}
    _Rename(names, root).visit(tree)
    hints = Hints()
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        if _defines(node) == root:
            hints.fields = _fields(node)
        else:
            hints.classes.append(ast.unparse(node))
    return hints


def _code(schema: dict[str, Any], root: str) -> str:
    key = json.dumps({**schema, "title": None})
    if _STAND_IN in key or root in key or _STAND_IN in root:  # the names could meet: no sharing
        return _generate({**schema, "title": root}, root)
    if key not in _generated:
        try:
            _generated[key] = _generate({**schema, "title": _STAND_IN}, _STAND_IN)
        except Exception:  # noqa: BLE001 - not kept: run again under the real name (its message names the tool)
            return _generate({**schema, "title": root}, root)
    return _generated[key].replace(_STAND_IN, root)


def _generate(schema: dict[str, Any], root: str) -> str:
    from datamodel_code_generator import DataModelType, InputFileType, LiteralType, generate

    with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()):
        warnings.simplefilter("ignore")
        return str(
            generate(
                json.dumps(schema),
                input_file_type=InputFileType.JsonSchema,
                output_model_type=DataModelType.TypingTypedDict,
                enum_field_as_literal=LiteralType.All,
                disable_timestamp=True,
                formatters=[],
                class_name=root,
            )
        )


class _Rename(ast.NodeTransformer):
    def __init__(self, names: dict[str, str], root: str) -> None:
        self.names = names
        self.root = root  # its fields become the parameters' annotations: those stay unquoted

    def visit_Name(self, node: ast.Name) -> ast.Name:
        node.id = self.names.get(node.id, node.id)
        return node

    def visit_ClassDef(self, node: ast.ClassDef) -> ast.ClassDef:
        node.name = self.names.get(node.name, node.name)
        self.generic_visit(node)
        for statement in node.body:  # fields may name classes defined later (or themselves): quote them
            if isinstance(statement, ast.AnnAssign) and node.name != self.root:
                statement.annotation = _Quote(set(self.names.values())).visit(statement.annotation)
        return node

    def visit_Constant(self, node: ast.Constant) -> ast.Constant:  # string forward references
        if isinstance(node.value, str) and node.value in self.names:
            node.value = self.names[node.value]
        return node


class _Quote(ast.NodeTransformer):
    def __init__(self, names: set[str]) -> None:
        self.names = names

    def visit_Name(self, node: ast.Name) -> ast.expr:
        return ast.Constant(node.id) if node.id in self.names else node


def _defines(node: ast.stmt) -> str | None:
    if isinstance(node, ast.ClassDef):
        return node.name
    if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
        return node.targets[0].id
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return node.target.id
    return None


def names_used(sources: list[str]) -> set[str]:
    return {n.id for src in sources for n in ast.walk(ast.parse(src)) if isinstance(n, ast.Name)}


def _fields(node: ast.stmt) -> dict[str, str]:
    """Property name -> annotation source, `NotRequired[...]` removed (the signature says what is optional)."""
    pairs: list[tuple[str, ast.expr]] = []
    if isinstance(node, ast.ClassDef):
        pairs = [(s.target.id, s.annotation) for s in node.body if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)]
    elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and len(node.value.args) > 1:
        mapping = node.value.args[1]
        if isinstance(mapping, ast.Dict):
            pairs = [(k.value, v) for k, v in zip(mapping.keys, mapping.values, strict=True)
                     if isinstance(k, ast.Constant) and isinstance(k.value, str)]
    out = {}
    for name, annotation in pairs:
        if isinstance(annotation, ast.Subscript) and isinstance(annotation.value, ast.Name) and annotation.value.id in ("NotRequired", "Required"):
            annotation = annotation.slice
        out[name] = ast.unparse(annotation)
    return out
