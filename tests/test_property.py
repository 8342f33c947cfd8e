"""Property tests: any tool list (random JSON Schemas, hostile names and texts) gives a module that compiles, runs
nothing at import, defines only what an adapter module defines, and offers TRL one working method per tool, under
the tool's exact wire name, sending the server's own parameter names.

`from_tools` renders and black-formats a whole module per example (~0.5 s), so example counts are small; set
ORSGEN_PROPERTY_EXAMPLES for a longer search.
"""

import ast
import inspect
import os
import re
import sys
import tempfile
import types
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st
from orsgen.model.typeddicts import parsed  # ast.parse, again after CPython 3.11's thread race (gh-106905)
from orsgen.pipeline import from_tools
from transformers.utils import get_json_schema

from tests.harness.trainers import tools_by_name

EXAMPLES = int(os.environ.get("ORSGEN_PROPERTY_EXAMPLES", "20"))  # raise it for a deeper (slower) search
SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    print_blob=True,  # a failure prints the @reproduce_failure line that replays it
    report_multiple_bugs=False,  # shrink one failure per test: each shrink step renders a whole module
    phases=[Phase.explicit, Phase.generate, Phase.shrink],
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
SENTINEL = Path(tempfile.gettempdir()) / f"orsgen-property-sentinel-{os.getpid()}"
# Hypothesis writes failing examples as patches into its storage directory: keep them out of the repository.
os.environ.setdefault("HYPOTHESIS_STORAGE_DIRECTORY", str(Path(tempfile.gettempdir()) / "orsgen-hypothesis"))

# --- hostile names and texts ------------------------------------------------------------------------------------

HOSTILE_NAMES = [
    "from", "class", "def", "import", "lambda", "None", "True", "False", "async", "await", "match", "case", "type",
    "_", "self", "cls", "reset", "get_reward", "reward", "rewards", "metadata", "finished", "last_output",
    "_call", "_close", "_private", "__init__", "__class__", "__dict__", "__del__", "close_all", "dataset",
    "UNSET", "ToolError", "Any", "Literal", "str", "int", "list", "dict", "id", "format", "print", "a-b", "a_b",
    "a.b", "a b", "a__b",
    "a_b_2", "ünïcödé", "名前", "🚀", "🚀🚀", "", " ", "1abc", "123", "arg", "tool", "tool_2", "x" * 120,
    "web-search", "file.read", "Args", "Returns:",
]
NAMES = st.one_of(st.sampled_from(HOSTILE_NAMES), st.text(max_size=8))

FRAGMENTS = [
    '"""', "'''", '"', "'", "\\", "\\n", "\\x00", "\\u1234", "\\N{BULLET}", "\x00", "\r", "\n", "\r\n", "\t",
    "\x0b", "\x85", "\u2028", "#", "# noqa", "Args:", "Returns:", "Raises:", "\nArgs:\n    x: y\n", "Args :",
    "\n    Returns:\n        ok\n", "(choices: [1])", "(choices: ['a'])", "(Choices: [\"a\", \"b\"])",
    "__import__('os')", f"__import__('os').system('touch {SENTINEL}')",
    f'"""\n__import__("pathlib").Path({str(SENTINEL)!r}).touch()\n"""',
    f"'''); __import__('os').system('touch {SENTINEL}'); ('''", "{{ x }}", "{% raw %}", "%s", "ː", "é", "🚀",
    "\x7f", "  ", "x: y", "self", " ",
]
TEXTS = st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=6)), max_size=6).map("".join)
SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 3), st.floats(allow_nan=False, allow_infinity=False), TEXTS
)

# --- random JSON Schemas ----------------------------------------------------------------------------------------

TYPES = [
    "string", "integer", "number", "boolean", "null", "object", "array", "dict", "float", "any", "Any", "int",
    "str", "list", "bool", "", "mystery", ["string", "null"], ["integer", "dict"], ["null"], 42,
]
REFS = [
    "#/$defs/Node", "#/$defs/Item", "#/$defs/a~1b", "#/$defs/Loop", "#/$defs/A", "#/$defs/Missing",
    "#/definitions/Old", "#", "other.json#/x", "#/properties",
]
LEAVES = st.one_of(
    st.just({}),
    st.just(True),
    st.builds(lambda t: {"type": t}, st.sampled_from(TYPES)),
    st.builds(lambda values: {"enum": values}, st.lists(SCALARS, max_size=4)),
    st.builds(lambda value: {"const": value}, SCALARS),
    st.builds(lambda ref: {"$ref": ref}, st.sampled_from(REFS)),
)


def _branches(key: str, members: list[Any], nullable: bool) -> dict[str, Any]:
    return {key: members + ([{"type": "null"}] if nullable else [])}


def _extend(child: st.SearchStrategy) -> st.SearchStrategy:
    extra = st.one_of(st.booleans(), child)
    return st.one_of(
        st.builds(
            lambda props, extra, req: {"type": "object", "properties": props, "additionalProperties": extra,
                                       "required": list(props)[:req]},
            st.dictionaries(NAMES, child, max_size=3), extra, st.integers(0, 3),
        ),
        st.builds(lambda extra: {"type": "object", "additionalProperties": extra}, extra),
        st.builds(lambda items: {"type": "array", "items": items}, child),
        st.builds(lambda items: {"items": items}, child),
        st.builds(
            lambda prefix, more: {"type": "array", "prefixItems": prefix, **more},
            st.lists(child, max_size=3), st.sampled_from([{}, {"items": False}, {"items": True}]),
        ),
        st.builds(_branches, st.sampled_from(["anyOf", "oneOf"]), st.lists(child, min_size=1, max_size=3),
                  st.booleans()),
        st.builds(lambda inner: {"allOf": [inner]}, child),
        st.builds(lambda inner, text, default: {**inner, "description": text, "title": text, "default": default}
                  if isinstance(inner, dict) else inner, child, TEXTS, SCALARS),
    )


SCHEMAS = st.recursive(LEAVES, _extend, max_leaves=6)


@st.composite
def input_schemas(draw) -> Any:
    """A tool's input schema: usually an object with properties and $defs (recursive ones too), sometimes junk."""
    kind = draw(st.sampled_from(["object"] * 6 + ["none", "empty", "junk"]))
    if kind == "none":
        return None
    if kind == "empty":
        return {}
    if kind == "junk":
        return draw(st.sampled_from(["string", [], 5, {"properties": []}, {"properties": None}, {"type": "dict"}]))
    props = draw(st.dictionaries(NAMES, SCHEMAS, max_size=4))
    required = [name for name in props if draw(st.booleans())] + draw(st.lists(NAMES, max_size=1))
    node = {"type": "object", "properties": props, "required": required}
    if draw(st.booleans()):  # optional, so that shrinking can drop them
        node["$defs"] = {
            "Node": {
                "type": "object",
                "properties": {
                    "value": draw(SCHEMAS),
                    "children": {"type": "array", "items": {"$ref": "#/$defs/Node"}},
                    "next": {"anyOf": [{"$ref": "#/$defs/Node"}, {"type": "null"}], "default": None},
                },
            },
            "Item": draw(SCHEMAS),
            "a/b": {"enum": draw(st.lists(SCALARS, min_size=1, max_size=3))},
            "Loop": {"$ref": "#/$defs/Loop"},
            "A": {"$ref": "#/$defs/B"},
            "B": {"allOf": [{"$ref": "#/$defs/A"}]},
        }
        node["definitions"] = {"Old": draw(SCHEMAS)}
    if draw(st.booleans()):
        node["description"] = draw(TEXTS)
    if draw(st.booleans()):
        node["additionalProperties"] = draw(st.booleans())
    return node


@st.composite
def tool_lists(draw, schemas: st.SearchStrategy) -> Any:
    """An ORS /tools response, an MCP list or a bare list; tool names repeat now and then."""
    tools = []
    for _ in range(draw(st.integers(1, 5))):
        tool = {"name": draw(NAMES)}
        description = draw(st.one_of(st.none(), TEXTS))
        if description is not None:
            tool["description"] = description
        tool[draw(st.sampled_from(["input_schema", "inputSchema"]))] = draw(schemas)
        tools.append(tool)
    if draw(st.booleans()):
        tools.append({**draw(st.sampled_from(tools)), "description": "second definition"})
    return draw(st.sampled_from([{"tools": tools}, tools]))


# --- what a generated module is allowed to be ---------------------------------------------------------------------

SECTION = re.compile(r"^\s*(Args|Arguments|Parameters|Returns|Raises)\s*:\s*$")
BASELINE_TOOLS = [
    {"name": "t", "description": "d", "input_schema": {
        "type": "object", "properties": {"a": {"type": "string"}, "b": {"enum": ["x", "y"]}}, "required": ["a"]}},
]


def module_names(namespace: types.ModuleType) -> set[str]:
    return {k for k in vars(namespace) if not (k.startswith("__") and k.endswith("__"))}


def execute(text: str) -> types.ModuleType:
    """Compile and run a generated module in a fresh namespace; nothing may be imported or touched on the way."""
    code = compile(text, "<generated>", "exec")
    before = set(sys.modules)
    namespace = types.ModuleType("orsgen_property_generated")
    namespace.__file__ = str(Path(tempfile.gettempdir()) / "orsgen_property_generated.py")  # never written
    exec(code, namespace.__dict__)  # noqa: S102 - running the generated module is the point
    assert set(sys.modules) - before == set()
    assert not SENTINEL.exists(), "a description was executed"
    return namespace


BASELINE = execute(from_tools(BASELINE_TOOLS, env="env", class_name="Baseline")[0])
MODULE_NAMES = module_names(BASELINE) - {"Baseline"}  # what every generated module defines


def same_binding(value: Any, baseline: Any) -> bool:
    """`value` is what `baseline` is in the baseline module: the same import, the same kind of definition."""
    if inspect.ismodule(baseline) or (
        (inspect.isclass(baseline) or inspect.isfunction(baseline)) and baseline.__module__ != BASELINE.__name__
    ):
        return value is baseline
    if inspect.isclass(baseline):
        mro = [c.__qualname__ for c in baseline.__mro__]
        return inspect.isclass(value) and [c.__qualname__ for c in value.__mro__] == mro
    if inspect.isfunction(baseline):
        return inspect.isfunction(value) and value.__qualname__ == baseline.__qualname__
    return type(value).__qualname__ == type(baseline).__qualname__


def is_annotation(value: Any) -> bool:
    """A type, a parametrised generic or a typing construct: what a module may bind besides its own definitions."""
    return isinstance(value, (type, types.GenericAlias, types.UnionType)) or type(value).__module__ in (
        "typing", "typing_extensions"
    )


def squash(text: str) -> str:
    """Whitespace dropped and the docstring's look-alike colon (U+02D0) read as a colon."""
    return "".join(text.replace("\u02d0", ":").split())


def prose(description: str) -> str:
    """The part of a description a docstring keeps as prose: everything before a line that is a section header
    (orsgen lifts an embedded `Args:`/`Returns:` block out of the prose, by design)."""
    lines = []
    for line in description.splitlines():
        if SECTION.match(line):
            break
        lines.append(line)
    return squash("\n".join(lines))


def parse(data: Any) -> list[dict[str, Any]]:
    """The tools as the test wrote them: name, description, schema."""
    raw = data["tools"] if isinstance(data, dict) else data
    return [
        {"name": t["name"], "description": t.get("description") or "",
         "schema": t.get("input_schema", t.get("inputSchema"))}
        for t in raw
    ]


def check_module(data: Any, env: str = "env") -> tuple[types.ModuleType, dict[str, Any], list[dict[str, Any]]]:
    """Every property shared by all tests; returns (module, methods by wire name, the tools as written)."""
    text, adapter = from_tools(data, env=env)
    tree = parsed(text)
    code_names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    code_names |= {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    assert not code_names & {"__import__", "system", "touch"}, "description text became code"

    module = execute(text)
    assert adapter.class_name not in MODULE_NAMES, f"class {adapter.class_name} rebinds a module name"
    rebound = [
        n for n in MODULE_NAMES if hasattr(module, n) and not same_binding(getattr(module, n), getattr(BASELINE, n))
    ]
    assert not rebound, f"names the module defines are bound to something else: {rebound}"
    extra = module_names(module) - MODULE_NAMES - {adapter.class_name, "TYPE_CHECKING"}  # imported when TypedDicts are
    assert all(is_annotation(getattr(module, n)) for n in extra), f"unexpected module names: {sorted(extra)}"
    cls = getattr(module, adapter.class_name)
    assert isinstance(cls, type) and callable(cls.reset) and callable(cls.get_reward)
    assert issubclass(module.ToolError, RuntimeError)

    instance = cls()
    methods = tools_by_name(instance)
    tools = parse(data)
    first: dict[str, dict[str, Any]] = {}
    for tool in tools:
        first.setdefault(tool["name"], tool)
    assert set(methods) <= set(first)
    warnings = adapter.warnings()
    for name, tool in first.items():
        if name not in methods:
            assert any(w.startswith(f"tool {name!r} skipped") for w in warnings), (name, warnings)
            continue
        check_method(module, instance, methods[name], tool)
    return module, methods, tools


def check_method(module: types.ModuleType, instance: Any, method: Any, tool: dict[str, Any]) -> None:
    fn = get_json_schema(method)["function"]
    assert fn["name"] == tool["name"]
    schema = tool["schema"]
    props = schema.get("properties") if isinstance(schema, dict) else None
    wire = list(props) if isinstance(props, dict) else []
    required = schema.get("required") if isinstance(schema, dict) else None
    required = required if isinstance(required, list) else []

    params = list(inspect.signature(method).parameters.values())
    py = [p.name for p in params]
    assert len(py) == len(wire), (py, wire)
    assert list(fn["parameters"]["properties"]) == py
    assert set(fn["parameters"].get("required", [])) == {p for w, p in zip(wire, py) if w in required}
    for w, p in zip(wire, params):
        assert p.kind is inspect.Parameter.KEYWORD_ONLY
        assert p.default is (inspect.Parameter.empty if w in required else module.UNSET), (w, p)

    # The description reaches both the docstring and what the model is shown, as text.
    expected = prose(tool["description"])
    assert expected in squash(inspect.getdoc(method) or ""), (expected, inspect.getdoc(method))
    assert expected in squash(fn["description"]), (expected, fn["description"])

    # Wire names round-trip: the method hands `_call` the tool's name and the schema's property names, in order.
    calls: list[tuple[str, dict[str, Any]]] = []
    instance._call = lambda name, arguments: calls.append((name, dict(arguments))) or ""
    markers = [object() for _ in py]
    try:
        method(**dict(zip(py, markers)))
    finally:
        del instance._call
    assert len(calls) == 1
    assert calls[0][0] == tool["name"]
    assert list(calls[0][1]) == wire
    assert list(calls[0][1].values()) == markers

    # Without a session, the real `_call` refuses with the module's ToolError.
    try:
        method(**dict(zip(py, markers)))
    except module.ToolError:
        pass
    else:
        raise AssertionError(f"{tool['name']}: a call without a session did not raise ToolError")


# --- the properties -----------------------------------------------------------------------------------------------


@SETTINGS
@given(data=tool_lists(input_schemas()))
def test_any_schema_gives_working_methods(data):
    check_module(data)
    assert not SENTINEL.exists()


def _string_params(names: list[str], texts: list[str], defaults: list[Any]) -> dict[str, Any]:
    return {
        name: {"type": "string", "description": text, "title": text, "default": default}
        for name, text, default in zip(names, texts, defaults)
    }


@st.composite
def hostile_string_schemas(draw) -> dict[str, Any]:
    names = draw(st.lists(NAMES, max_size=4))
    props = _string_params(
        names, draw(st.lists(TEXTS, min_size=len(names), max_size=len(names))),
        draw(st.lists(TEXTS, min_size=len(names), max_size=len(names))),
    )
    if draw(st.booleans()):
        props[draw(NAMES)] = {"type": "string", "enum": draw(st.lists(TEXTS, min_size=1, max_size=3))}
    return {"type": "object", "properties": props, "required": [n for n in props if draw(st.booleans())]}


@SETTINGS
@given(data=tool_lists(hostile_string_schemas()))
def test_hostile_text_stays_text(data):
    _, methods, tools = check_module(data)
    assert set(methods) == {t["name"] for t in tools}, "a tool with a plain schema was skipped"
    first: dict[str, dict[str, Any]] = {}
    for tool in tools:
        first.setdefault(tool["name"], tool)
    for tool in first.values():
        fn = get_json_schema(methods[tool["name"]])["function"]
        for shown, prop in zip(fn["parameters"]["properties"].values(), tool["schema"]["properties"].values()):
            assert shown["type"] == "string" and "nullable" not in shown
            if "enum" in prop:
                assert shown["enum"] == list(dict.fromkeys(prop["enum"]))
                continue
            assert "enum" not in shown, f"a description became an enum: {shown}"
            assert squash(prop["description"]) in squash(shown["description"])
    assert not SENTINEL.exists()


@pytest.mark.parametrize("name", ["str", "int", "float", "bool", "list", "dict", "Any", "Literal", "UNSET"])
def test_tool_named_like_a_type_leaves_other_methods_alone(name):
    """A tool's attribute lives in the class body, where the later methods' annotations and defaults are looked up."""
    data = [
        {"name": name},
        {"name": "after", "input_schema": {"type": "object", "properties": {
            "s": {"type": "string"}, "n": {"type": "number"}, "flag": {"type": "boolean"}, "k": {"type": "integer"},
            "xs": {"type": "array", "items": {}}, "d": {"type": "object"}, "e": {"enum": ["a", "b"]}, "v": {},
        }}},
    ]
    check_module(data)


DEFS = {
    "Node": {"type": "object", "properties": {"children": {"type": "array", "items": {"$ref": "#/$defs/Node"}}}},
    "Loop": {"$ref": "#/$defs/Loop"},
}
CORNER_CASES = {
    "items_null": {"type": "array", "items": {"type": "null"}},
    "values_null": {"type": "object", "additionalProperties": {"type": "null"}},
    "tuple_with_null": {"type": "array", "prefixItems": [{"type": "null"}, {"type": "string"}]},
    "one_prefix_item": {"type": "array", "prefixItems": [{"type": "string"}]},
    "open_tuple": {"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}], "items": {}},
    "list_of_null_union": {"type": "array", "items": {"anyOf": [{"type": "null"}]}},
    "recursive_ref": {"$ref": "#/$defs/Node"},
    "ref_loop": {"$ref": "#/$defs/Loop"},
    "missing_ref": {"$ref": "#/$defs/Nowhere"},
    "float_enum": {"enum": [0.5, 1, "a", None]},
    "object_enum": {"enum": [{"a": 1}, [1]]},
    "empty_enum": {"enum": []},
    "const_null": {"const": None},
    "dialect_types": {"type": ["dict", "float", "any"]},
    "empty_any_of": {"anyOf": []},
    "true_schema": True,
    "false_schema": False,
    "no_schema": None,
}


def test_schema_corner_cases_give_working_methods():
    """One tool per corner case, all in one module (one render): each is a working method or a reported skip."""
    tools = [
        {"name": f"case_{case}", "input_schema": {"type": "object", "properties": {"value": schema}, "$defs": DEFS}}
        for case, schema in CORNER_CASES.items()
    ]
    text, adapter = from_tools(tools)
    module = execute(text)
    instance = getattr(module, adapter.class_name)()
    methods = tools_by_name(instance)
    failures = []
    for tool in parse(tools):
        try:
            if tool["name"] in methods:
                check_method(module, instance, methods[tool["name"]], tool)
            else:
                assert any(w.startswith(f"tool {tool['name']!r} skipped") for w in adapter.warnings())
        except Exception as exc:  # noqa: BLE001 - every failing case is reported, not just the first
            failures.append(f"{tool['name']} {CORNER_CASES[tool['name'][5:]]}: {type(exc).__name__}: {exc}"[:300])
    assert not failures, "\n".join(failures)


SIMPLE_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-2, 2), st.sampled_from(["a", "1", "", "None"]))


@settings(SETTINGS, max_examples=max(EXAMPLES // 2, 10))
@example(values=[1, True], typed=False)
@example(values=[False, 0, None], typed=False)
@given(values=st.lists(SIMPLE_SCALARS, min_size=1, max_size=5, unique_by=lambda v: (type(v), v)),
       typed=st.booleans())
def test_enum_values_survive(values, typed):
    """Every value of an enum of str/int/bool/None is shown to the model, with its JSON type (1 is not true)."""
    prop: dict[str, Any] = {"enum": values}
    kinds = sorted({type(v).__name__ for v in values if v is not None})
    if typed and len(kinds) == 1:
        prop["type"] = {"str": "string", "int": "integer", "bool": "boolean"}[kinds[0]]
    data = [{"name": "pick", "input_schema": {"type": "object", "properties": {"choice": prop}}}]
    _, methods, _ = check_module(data)
    shown = get_json_schema(methods["pick"])["function"]["parameters"]["properties"]["choice"]
    got = {(type(v), v) for v in shown.get("enum", [])}
    if shown.get("nullable") or shown.get("type") == "null":
        got.add((type(None), None))
    assert got == {(type(v), v) for v in values}, shown


@settings(SETTINGS, max_examples=max(EXAMPLES // 2, 10))
@example(env="none")  # class None
@example(env="tool-error")  # class ToolError, the module's exception
@example(env="sequence")  # class Sequence, used in dataset()'s signature
@example(env="mapping")
@given(env=st.one_of(
    st.sampled_from(HOSTILE_NAMES + ["none", "true", "tool-error", "drift-error", "sequence", "mapping", "unset"]),
    TEXTS,
))
def test_any_environment_name_gives_a_working_module(env):
    """The class name is derived from the environment's name: whatever that is, the module must still work."""
    module, _, _ = check_module(BASELINE_TOOLS, env=env)
    assert module.ENV == env
