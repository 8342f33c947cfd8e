"""Our TypedDicts against datamodel-code-generator's, the reference JSON Schema -> Python generator.

For every argument that is an object (or holds objects) in the corpora, the golden cases and the benchmark's 100-tool
environment, both generators' annotations are expanded into the same shape: each class replaced by its fields, which
are required, and their own shapes. The shapes must be equal (classes named differently, defined in another order
or quoted otherwise are the same shape).
"""

import ast
import contextlib
import io
import json
import warnings
from typing import Any

import pytest
from orsgen import normalize
from orsgen.model import typeddicts
from orsgen.model.typemap import Converter

from tests.harness.tool_lists import CORPORA, GOLDEN, wide_tools


def dmcg(schema: dict[str, Any], root: str) -> str:
    from datamodel_code_generator import DataModelType, InputFileType, LiteralType, generate

    with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()):
        warnings.simplefilter("ignore")
        return str(generate(json.dumps({**schema, "title": root}), input_file_type=InputFileType.JsonSchema,
                            output_model_type=DataModelType.TypingTypedDict, enum_field_as_literal=LiteralType.All,
                            disable_timestamp=True, formatters=[], class_name=root))


def definitions(code: str) -> dict[str, Any]:
    """Class name -> {field: (required, annotation AST)}; alias name -> annotation AST."""
    found: dict[str, Any] = {}
    for node in ast.parse(code).body:
        if isinstance(node, ast.ClassDef):
            found[node.name] = {s.target.id: _field(s.annotation) for s in node.body
                                if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)}
        elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and len(node.value.args) > 1:
            mapping = node.value.args[1]
            assert isinstance(mapping, ast.Dict)
            found[node.targets[0].id] = {k.value: _field(v) for k, v in zip(mapping.keys, mapping.values)}
        elif isinstance(node, (ast.AnnAssign, ast.Assign)) and node.value is not None:
            target = node.target if isinstance(node, ast.AnnAssign) else node.targets[0]
            found[target.id] = node.value
    return found


def _field(annotation: ast.expr) -> tuple[bool, ast.expr]:
    wrapped = isinstance(annotation, ast.Subscript) and isinstance(annotation.value, ast.Name)
    if wrapped and annotation.value.id in ("NotRequired", "Required"):
        return annotation.value.id == "Required", annotation.slice
    return True, annotation


def shape(node: ast.expr, defs: dict[str, Any], path: tuple[str, ...] = ()) -> Any:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):  # a quoted annotation
        return shape(ast.parse(node.value, mode="eval").body, defs, path)
    if isinstance(node, ast.Name) and node.id in defs:
        if node.id in path:
            return ("recursive", path.index(node.id))
        target = defs[node.id]
        if isinstance(target, dict):
            return ("class", tuple((k, req, shape(a, defs, (*path, node.id))) for k, (req, a) in target.items()))
        return shape(target, defs, path)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        return ("union", frozenset(_members(node, defs, path)))
    if isinstance(node, ast.Subscript):
        inner = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        return (ast.unparse(node.value), tuple(shape(x, defs, path) for x in inner))
    return ast.unparse(node)


def _members(node: ast.expr, defs: dict[str, Any], path: tuple[str, ...]) -> list[Any]:
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        return _members(node.left, defs, path) + _members(node.right, defs, path)
    return [shape(node, defs, path)]


def structured() -> list[tuple[str, dict[str, Any], list[str]]]:
    """(case, schema, the arguments our model types as objects)."""
    cases = []
    sources = [(p.parent.name + "/" + p.name, json.loads(p.read_text())["tools"]) for p in CORPORA + GOLDEN]
    sources.append(("bench/wide", wide_tools()["tools"]))
    for name, tools in sources:
        for tool in tools:
            schema = normalize.schema(tool.get("input_schema") or tool.get("inputSchema"))
            if not isinstance(schema, dict) or not isinstance(schema.get("properties"), dict):
                continue
            converter = Converter(root=schema)
            wanted = [k for k, v in schema["properties"].items() if converter.convert(v).structured()]
            if wanted:
                cases.append((f"{name}:{tool['name']}", schema, wanted))
    return cases


CASES = structured()


def test_there_are_cases():
    assert len(CASES) > 20


@pytest.mark.parametrize(("schema", "wanted"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_our_typeddicts_have_dmcgs_shapes(schema, wanted):
    classes = typeddicts.Classes("T", set())
    converter = Converter(root=schema)
    ours = {wire: classes.annotation(converter.convert(schema["properties"][wire]), wire) for wire in wanted}
    our_defs = definitions("\n".join(classes.sources))
    theirs = definitions(dmcg(schema, "TArgs"))
    for wire in wanted:
        mine = shape(ast.parse(ours[wire], mode="eval").body, our_defs)
        _, annotation = theirs["TArgs"][wire]  # required or not: the signature says it
        assert mine == shape(annotation, theirs), wire
