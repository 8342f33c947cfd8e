"""Every tool list of the shared corpora, through the CLI (in this process): the generated module imports, lints,
type-checks, and the schema TRL shows the model (`get_json_schema` of each method) matches the server's schema
wherever a Python signature can express it: tool names, parameter order, required set, JSON types, enums, item and
value types.
"""

import inspect
import json
import keyword
import sys
from pathlib import Path
from typing import Any

import pytest
from transformers.utils import get_json_schema

from tests.harness import ROOT, processes
from tests.harness.generation import in_process, load
from tests.harness.tool_lists import CORPORA
from tests.harness.trainers import tools_by_name

FILES = CORPORA  # copies of the real tool lists (see each SOURCE.txt)


def test_corpora_are_there():
    assert {p.parent.name for p in FILES} == {"openreward-toolsets", "mcp-snapshots"}, CORPORA
    assert len(FILES) >= 20


# --- generation, shared by the per-file tests and the lint tests -------------------------------------------------


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    """generated(file) -> path of the module the CLI wrote for it (each file is generated once per module run)."""
    out_dir = tmp_path_factory.mktemp("corpora")
    done: dict[Path, Path] = {}

    def run(source: Path) -> Path:
        if source not in done:
            out = out_dir / f"{source.parent.name}_{source.stem}".replace("-", "_").replace(".", "_")
            out = out.with_suffix(".py")
            result = in_process(str(source), "--env", source.stem, "-o", str(out))
            assert result.returncode == 0, f"{source.name}: exit {result.returncode}\n{result.stderr}"
            assert out.is_file()
            done[source] = out
        return done[source]

    return run


def tool_specs(source: Path) -> list[dict[str, Any]]:
    """The file's tools as (name, description, schema), whichever key spelling it uses."""
    data = json.loads(source.read_text())
    tools = []
    for raw in data["tools"]:
        schema = raw["input_schema"] if "input_schema" in raw else raw.get("inputSchema")
        tools.append({"name": raw["name"], "schema": schema or {}})
    return tools


def adapter_class(module) -> type:
    found = [
        v for v in vars(module).values()
        if isinstance(v, type) and v.__module__ == module.__name__ and not v.__name__.startswith("_")
        and callable(getattr(v, "reset", None)) and callable(getattr(v, "get_reward", None))
    ]
    assert len(found) == 1, found
    return found[0]


def recorded_call(instance, method, kwargs: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """(tool name, arguments) that `method(**kwargs)` hands to `_call`, i.e. what would go on the wire."""
    calls: list[tuple[str, dict[str, Any]]] = []
    instance._call = lambda name, arguments: calls.append((name, dict(arguments))) or ""
    try:
        method(**kwargs)
    finally:
        del instance._call
    assert len(calls) == 1
    return calls[0]


# --- the server's schema and get_json_schema's, both reduced to sets of alternatives ------------------------------
#
# A schema becomes the set of value kinds it admits: ("string",), ("integer",), ("number",), ("boolean",),
# ("null",), ("enum", json type, value), ("array", items), ("tuple", (items, ...)), ("object", value kinds), or ANY.
# Both sides are read with the same function, so `anyOf [X, null]` and `X` + `nullable: true` compare equal, as do
# `anyOf [string, integer]` and `type: ["integer", "string"]`. Nested object fields are not expressible in a
# signature and reduce to ("object", ANY); `type` next to `anyOf` narrows it, as JSON Schema says.


class NotExpressible(Exception):
    """The schema holds something no annotation can say (float enum, recursion, open tuple...): skip its type."""


ANY_KIND = ("any",)
ANY = frozenset({ANY_KIND})
SCALAR_TYPES = ("string", "integer", "number", "boolean", "null")


def resolve(node: Any, root: dict[str, Any], seen: tuple[str, ...]) -> tuple[Any, tuple[str, ...]]:
    while isinstance(node, dict):
        if isinstance(node.get("allOf"), list) and len(node["allOf"]) == 1:
            node = {**{k: v for k, v in node.items() if k != "allOf"}, **node["allOf"][0]}
            continue
        ref = node.get("$ref")
        if not isinstance(ref, str):
            break
        if ref in seen or not ref.startswith("#/"):
            raise NotExpressible(f"recursive or external $ref {ref}")
        target: Any = root
        for part in ref[2:].split("/"):
            target = target[part]
        node = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
        seen = seen + (ref,)
    return node, seen


def enum_kind(value: Any) -> tuple[Any, ...]:
    if value is None:
        return ("null",)
    if isinstance(value, bool):
        return ("enum", "boolean", value)
    if isinstance(value, int):
        return ("enum", "integer", value)
    if isinstance(value, str):
        return ("enum", "string", value)
    raise NotExpressible(f"enum value {value!r}: Literal cannot hold it")


def meet(a: tuple[Any, ...], b: tuple[Any, ...]) -> tuple[Any, ...] | None:
    """The kind both `a` and `b` admit, or None."""
    if a == ANY_KIND:
        return b
    if b == ANY_KIND:
        return a
    if a[0] == "enum" and b[0] == "enum":
        return a if a == b else None
    if b[0] == "enum":
        a, b = b, a
    if a[0] == "enum":
        fits = b[0] == a[1] or (b[0] == "number" and a[1] == "integer")
        return a if fits and len(b) == 1 else None
    if {a[0], b[0]} == {"integer", "number"}:
        return ("integer",)
    if a[0] != b[0]:
        return None
    if a[0] in ("array", "object"):
        return (a[0], meet_all([a[1], b[1]]))
    if a[0] == "tuple":
        raise NotExpressible("two tuple shapes")
    return a


def meet_all(sets: list[frozenset]) -> frozenset:
    result = ANY
    for kinds in sets:
        result = frozenset(m for a in result for b in kinds if (m := meet(a, b)) is not None)
    return result


def join(sets: list[frozenset]) -> frozenset:
    if any(kinds == ANY for kinds in sets):
        return ANY
    return frozenset().union(*sets)


def kinds(node: Any, root: dict[str, Any], seen: tuple[str, ...] = ()) -> frozenset:
    node, seen = resolve(node, root, seen)
    if node is True or node == {}:
        return ANY
    if not isinstance(node, dict):
        raise NotExpressible(f"schema {node!r}")
    if "allOf" in node or "not" in node or "if" in node:
        raise NotExpressible("allOf/not/if")
    parts: list[frozenset] = []
    if "type" in node:
        types = node["type"] if isinstance(node["type"], list) else [node["type"]]
        parts.append(frozenset(type_kind(t, node, root, seen) for t in types))
    if "enum" in node:
        parts.append(frozenset(enum_kind(v) for v in node["enum"]))
    if "const" in node:
        parts.append(frozenset({enum_kind(node["const"])}))
    for key in ("anyOf", "oneOf"):
        if isinstance(node.get(key), list):
            parts.append(join([kinds(member, root, seen) for member in node[key]]))
    result = meet_all(parts)
    if node.get("nullable") is True and result != ANY:
        result |= {("null",)}
    if ("number",) in result:  # every integer is a number: `int | float` and `float` say the same
        result -= {("integer",)}
    return result


def type_kind(name: Any, node: dict[str, Any], root: dict[str, Any], seen: tuple[str, ...]) -> tuple[Any, ...]:
    if name in SCALAR_TYPES:
        return (name,)
    if name == "array":
        prefix = node.get("prefixItems")
        if prefix is not None:
            if isinstance(prefix, list) and len(prefix) >= 2 and node.get("items") in (None, False):
                return ("tuple", tuple(kinds(p, root, seen) for p in prefix))
            raise NotExpressible("prefixItems that tuple[A, B, ...] cannot carry")
        return ("array", kinds(node.get("items", {}), root, seen))
    if name == "object":
        extra = node.get("additionalProperties")
        if node.get("properties") or not isinstance(extra, dict):
            return ("object", ANY)  # nested fields live in the description; the values are Any
        return ("object", kinds(extra, root, seen))
    raise NotExpressible(f"type {name!r}")


def shown(kinds_: frozenset) -> str:
    return "Any" if kinds_ == ANY else repr(sorted(kinds_, key=repr))


def test_schema_reading_tells_apart_what_differs():
    def read(node: Any) -> frozenset:
        return kinds(node, {})

    optional_enum = {"anyOf": [{"type": "string", "enum": ["a", "b"]}, {"type": "null"}]}
    assert read(optional_enum) == read({"type": "string", "enum": ["a", "b"], "nullable": True})
    assert read(optional_enum) == read({"type": ["string", "null"], "enum": ["a", "b", None]})
    assert read(optional_enum) != read({"type": "string", "enum": ["a", "b"]})
    assert read(optional_enum) != read({"type": "string", "enum": ["a", "c"], "nullable": True})
    assert read({"anyOf": [{"type": "string"}, {"type": "integer"}]}) == read({"type": ["integer", "string"]})
    assert read({"type": "number"}) != read({"type": "integer"})
    assert read({"type": ["integer", "number"]}) == read({"type": "number"})
    assert read({"type": "array", "items": {"type": "string"}}) != read({"type": "array", "items": {}})
    assert read({"type": "object", "additionalProperties": {"type": "integer"}}) != read({"type": "object"})
    assert read({"type": "object", "properties": {"a": {}}}) == read({"type": "object", "additionalProperties": {}})
    assert read({"type": "string", "anyOf": [{"format": "ipv4"}, {"format": "ipv6"}]}) == read({"type": "string"})
    assert read({}) != read({"type": "string"})
    root = {"$defs": {"A": {"type": "integer"}}}
    assert kinds({"items": {"$ref": "#/$defs/A"}, "type": "array"}, root) == read(
        {"type": "array", "items": {"type": "integer"}}
    )
    with pytest.raises(NotExpressible):
        read({"enum": [1.5, 2]})


# --- the tests ---------------------------------------------------------------------------------------------------


def keeps_its_name(wire: str) -> bool:
    """A property name a keyword-only parameter can carry as is (what the model should see unchanged)."""
    return (
        wire.isidentifier() and not keyword.iskeyword(wire) and not keyword.issoftkeyword(wire)
        and wire != "self" and not wire.startswith("_")
    )


@pytest.mark.parametrize("source", FILES, ids=[f"{p.parent.name}/{p.name}" for p in FILES])
def test_corpus_file(source, generated):
    module = load(generated(source))
    cls = adapter_class(module)
    instance = cls()
    methods = tools_by_name(instance)
    specs = tool_specs(source)
    assert set(methods) == {t["name"] for t in specs}

    problems: list[str] = []
    for spec in specs:
        method = methods[spec["name"]]
        fn = get_json_schema(method)["function"]
        assert fn["name"] == spec["name"]
        schema = spec["schema"]
        wire_props = list(schema.get("properties") or {})
        params = list(inspect.signature(method).parameters.values())
        assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in params), params
        py_names = [p.name for p in params]
        shown_props = fn["parameters"]["properties"]
        assert list(shown_props) == py_names
        assert len(py_names) == len(wire_props), (spec["name"], py_names, wire_props)

        # Wire names come back by position: the method sends exactly the server's property names, in order.
        markers = {py: object() for py in py_names}
        name, arguments = recorded_call(instance, method, markers)
        assert name == spec["name"]
        assert list(arguments) == wire_props
        assert [arguments[w] for w in wire_props] == [markers[py] for py in py_names]

        where = f"{source.name} {spec['name']}"
        for wire, py in zip(wire_props, py_names):
            if keeps_its_name(wire) and py != wire:
                problems.append(f"{where}: parameter {wire!r} is shown to the model as {py!r}")

        required = set(schema.get("required") or []) & set(wire_props)
        shown_required = set(fn["parameters"].get("required", []))
        expected_required = {py for wire, py in zip(wire_props, py_names) if wire in required}
        if shown_required != expected_required:
            problems.append(f"{where}: required {sorted(shown_required)}, expected {sorted(expected_required)}")

        for wire, py in zip(wire_props, py_names):
            try:
                expected = kinds(schema["properties"][wire], schema)
            except NotExpressible:
                continue
            got = kinds(shown_props[py], {})
            if got != expected:
                problems.append(f"{where}.{wire}: shown as {shown(got)}, schema says {shown(expected)}")
    assert not problems, "\n".join(problems)


def test_generated_modules_pass_ruff(generated):
    paths = [str(generated(source)) for source in FILES]
    config = str(ROOT / "pyproject.toml")
    result = processes.run(
        [sys.executable, "-m", "ruff", "check", "--no-cache", "--config", config, *paths],
        capture_output=True, text=True, cwd=ROOT,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_generated_modules_pass_mypy(generated):
    paths = [str(generated(source)) for source in FILES]
    result = processes.run(
        [sys.executable, "-m", "mypy", "--ignore-missing-imports", "--no-incremental", *paths],
        capture_output=True, text=True, cwd=ROOT,
    )
    assert result.returncode == 0, result.stdout + result.stderr
