"""`orsgen ... --report`: per class and per tool, what the model will see next to the original schema, and what was
moved into the argument text or lost. "What the model sees" is `transformers.utils.get_json_schema` of the generated
method, the function TRL itself calls.

Every class of the module is covered: the base class (the shared tools), each task-specific variant class (the tools
it adds) and the terminal tool, which the model never calls. Each lost schema key is tied to the arguments it names
(`dependentRequired`, `anyOf: [{"required": [...]}]`, ...) or to the whole tool (`additionalProperties: false`), and
counted in the summary. Values are printed whole: nothing is cut. `fmt="markdown"` gives one table per class, to
paste into a pull request.
"""

import importlib.util
import json
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orsgen import normalize
from orsgen.model import CARRIED, Adapter, Param, Tool, docs
from orsgen.model.typemap import Converter

JSON_TYPES = {"string", "integer", "number", "boolean", "array", "object", "null"}
# Top-level keys whose value is an object keyed by argument names: each entry belongs to that argument.
KEYED_BY_ARGUMENT = ("dependentRequired", "dependencies", "dependentSchemas", "default")
# Keys inside a lost value that name arguments: {"required": [names]}, {"properties": {name: ...}}.
NAMING_KEYS = ("required", "properties", *KEYED_BY_ARGUMENT)
MARKDOWN_HEADER = "| tool | argument | wire -> python | model sees | in text | lost |"


def seen_schemas(text: str, adapter: Adapter) -> dict[str, dict[str, Any]]:
    """wire tool name -> get_json_schema(method)["function"], from the generated module itself: the base class's
    tools and every variant class's (tool names are unique across the classes of one module)."""
    try:
        from transformers.utils import get_json_schema
    except ImportError:
        from orsgen.errors import OrsgenError

        raise OrsgenError("--report needs transformers (pip install 'orsgen[train]')") from None
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "orsgen_report_module.py"
        path.write_text(text, encoding="utf-8")
        spec = importlib.util.spec_from_file_location(path.stem, path)
        assert spec and spec.loader
        module = importlib.util.module_from_spec(spec)
        sys.modules[path.stem] = module
        try:
            spec.loader.exec_module(module)
        finally:
            sys.modules.pop(path.stem, None)
    found = {}
    for class_name, tools in [(adapter.class_name, adapter.tools), *((v.class_name, v.tools) for v in adapter.variants)]:
        instance = getattr(module, class_name)()
        for tool in tools:
            if tool.wire_name not in found:
                found[tool.wire_name] = get_json_schema(getattr(instance, tool.py_name))["function"]
    return found


def _types(found: set[str]) -> list[str] | None:
    """Sorted JSON types, `integer` folded into `number` (which holds every integer)."""
    kept = found & JSON_TYPES
    if "number" in kept:
        kept.discard("integer")
    return sorted(kept) or None


def signature(schema: dict[str, Any], converter: Converter) -> dict[str, Any]:
    """The comparable facts of one property: type, enum, nullable, items, additionalProperties."""
    resolved, _ = converter.resolve(schema, ())
    resolved = resolved if isinstance(resolved, dict) else {}
    members = resolved.get("anyOf") or resolved.get("oneOf") or [resolved]
    members = [converter.resolve(m, ())[0] for m in members]
    nullable = any(isinstance(m, dict) and m.get("type") == "null" for m in members)
    kept = [m for m in members if isinstance(m, dict) and m.get("type") != "null"]
    types, enum = set(), None
    for m in kept:
        t = m.get("type")
        types.update(t if isinstance(t, list) else [t] if t else [])
        if "enum" in m or "const" in m:
            enum = m.get("enum", [m.get("const")])
    if "null" in types:
        types.discard("null")
        nullable = True
    if enum is not None and None in enum:
        nullable, enum = True, [v for v in enum if v is not None]
    one = kept[0] if len(kept) == 1 else {}
    items = converter.resolve(one.get("items"), ())[0] if isinstance(one.get("items"), dict) else None
    return {
        "type": _types(types),
        "enum": enum,
        "nullable": nullable,
        "items": sorted({items.get("type")} - {None}) if isinstance(items, dict) and "type" in items else None,
    }


def seen_signature(prop: dict[str, Any]) -> dict[str, Any]:
    t = prop.get("type")
    types = t if isinstance(t, list) else [t] if t else []
    items = prop.get("items") if isinstance(prop.get("items"), dict) else None
    return {
        "type": _types(set(types) - {"null"}),
        "enum": prop.get("enum"),
        "nullable": bool(prop.get("nullable")) or "null" in types,
        "items": sorted({items.get("type")} - {None}) if items and "type" in items else None,
    }


def differences(original: dict[str, Any] | None, seen: dict[str, Any], params: list[Param]) -> list[tuple[str | None, str]]:
    """(argument wire name, or None for the whole tool; difference) for what a signature should not change: type,
    enum, nullability, item type, required flag, order."""
    schema = original or {}
    converter = Converter(root=schema)
    props = schema.get("properties") or {}
    required = set(schema.get("required") or [])
    seen_props = seen["parameters"].get("properties", {})
    seen_required = set(seen["parameters"].get("required", []))
    found: list[tuple[str | None, str]] = []
    if [p.py_name for p in params] != list(seen_props):
        found.append((None, f"order: {list(props)} -> {list(seen_props)}"))
    for param in params:
        before = signature(props.get(param.wire_name, {}), converter)
        after = seen_signature(seen_props.get(param.py_name, {}))
        for key in ("type", "enum", "nullable", "items"):
            if before[key] is not None and before[key] != after[key] and not (key == "nullable" and not before[key]):
                found.append((param.wire_name, f"{param.wire_name}: {key} {before[key]} -> {after[key]}"))
        if (param.wire_name in required) != (param.py_name in seen_required):
            flags = f"{param.wire_name in required} -> {param.py_name in seen_required}"
            found.append((param.wire_name, f"{param.wire_name}: required {flags}"))
    return found


def compare(original: dict[str, Any] | None, seen: dict[str, Any], params: list[Param]) -> list[str]:
    """Differences a signature should not have: type, enum, nullability, item type, required flag, order."""
    return [text for _, text in differences(original, seen, params)]


def lost_arguments(tool: Tool, schema: Any) -> list[tuple[str, list[str]]]:
    """Each item of `tool.lost` with the argument wire names it belongs to (none: it is about the whole tool).

    `tool.lost` holds the top-level keys of the (normalized) input schema that neither the signature nor the text
    carries, as "key: json"; the key and value are found again in the schema to see which arguments they name."""
    schema = normalize.schema(schema)
    values = {}
    if isinstance(schema, dict):
        values = {f"{k}: {_json(v)}": (k, v) for k, v in schema.items() if k not in CARRIED}
    names = [p.wire_name for p in tool.params]
    out = []
    for item in tool.lost:
        key, value = values.get(item, (None, None))
        named: set[str] = set()
        if item.startswith("cut: "):  # cut by orsgen's bounds: "cut: WIRE_NAME: ..." is that argument's
            named.add(item.split(": ", 2)[1])
        if key in KEYED_BY_ARGUMENT and isinstance(value, dict):
            named.update(value)
            if key in ("dependentRequired", "dependencies"):
                named.update(n for v in value.values() if isinstance(v, list) for n in v if isinstance(n, str))
            _named_inside(list(value.values()), named)
        elif key is not None and key not in ("additionalProperties", "patternProperties", "propertyNames",
                                             "unevaluatedProperties", "minProperties", "maxProperties"):
            _named_inside(value, named)
        out.append((item, [n for n in names if n in named]))
    return out


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


@dataclass
class ArgumentFacts:
    param: Param
    schema: dict[str, Any]  # what the model sees, description left out
    description: str  # the prose part of the description the model sees
    moved: list[str]  # what went into the argument's text
    lost: list[str]  # lost items (whole, as in tool.lost) that name this argument
    with_others: dict[str, list[str]]  # lost item -> the other arguments it names
    differs: list[str]


@dataclass
class ToolFacts:
    tool: Tool
    description: str  # the tool description the model sees
    arguments: list[ArgumentFacts]
    lost: list[str]  # lost items about the whole tool
    differs: list[str]  # differences about the whole tool (order)
    lost_count: int
    tied: int  # lost items tied to an argument
    diff_count: int


@dataclass
class ClassFacts:
    name: str
    header: str
    tools: list[ToolFacts | tuple[Tool, str]] = field(default_factory=list)  # (tool, class it was shown in)


def facts(adapter: Adapter, snap: dict[str, Any], seen: dict[str, dict[str, Any]]) -> list[ClassFacts]:
    originals: dict[str, Any] = {}
    task_tools = snap.get("task_tools")
    extra = task_tools.get("tools") or [] if isinstance(task_tools, dict) else []
    for spec in [*snap["tools"], *extra]:
        originals.setdefault(spec["name"], spec.get("input_schema"))
    count = len(adapter.tools)
    classes = [ClassFacts(adapter.class_name, f"class {adapter.class_name}: the shared tools ({count}), offered on every "
                          "task" + (" (the variant classes below add their own)" if adapter.variants else ""))]
    classes[0].tools = [_tool_facts(t, originals.get(t.wire_name), seen[t.wire_name]) for t in adapter.tools]
    shown: dict[str, str] = {}
    for variant in adapter.variants:
        added = ", ".join(t.wire_name for t in variant.tools)
        one = ClassFacts(variant.class_name, f"class {variant.class_name}({adapter.class_name}): tasks "
                         f"{', '.join(str(i) for i in variant.tasks)} (split {adapter.task_tools_split}); the shared "
                         f"tools plus {added}")
        for tool in variant.tools:
            if tool.wire_name in shown:
                one.tools.append((tool, shown[tool.wire_name]))
            else:
                shown[tool.wire_name] = variant.class_name
                one.tools.append(_tool_facts(tool, originals.get(tool.wire_name), seen[tool.wire_name]))
        classes.append(one)
    return classes


def _tool_facts(tool: Tool, original: Any, seen: dict[str, Any]) -> ToolFacts:
    found = differences(original if isinstance(original, dict) else None, seen, tool.params)
    lost = lost_arguments(tool, original)
    seen_props = seen["parameters"].get("properties", {})
    arguments = []
    for param in tool.params:
        shown = dict(seen_props.get(param.py_name, {}))
        description = str(shown.pop("description", ""))
        notes = docs.one_line(f"({'; '.join(param.moved)})") if param.moved else ""
        if notes and description.endswith(notes):
            description = description[: -len(notes)].rstrip()
        mine = [(item, named) for item, named in lost if param.wire_name in named]
        arguments.append(ArgumentFacts(
            param, shown, description, list(param.moved), [item for item, _ in mine],
            {item: [n for n in named if n != param.wire_name] for item, named in mine},
            [text for arg, text in found if arg == param.wire_name],
        ))
    return ToolFacts(
        tool, str(seen.get("description") or ""), arguments, [item for item, named in lost if not named],
        [text for arg, text in found if arg is None], len(lost), sum(1 for _, named in lost if named), len(found),
    )


def render(text: str, adapter: Adapter, snap: dict[str, Any], fmt: str = "text") -> tuple[str, int]:
    """(report text, number of differences in type, enum, nullability, item type, required flag or order); the lost
    items are counted in the report's summary line, not in that number."""
    classes = facts(adapter, snap, seen_schemas(text, adapter))
    tools = [t for c in classes for t in c.tools if isinstance(t, ToolFacts)]
    diffs = sum(t.diff_count for t in tools)
    lost = sum(t.lost_count for t in tools)
    tied = sum(t.tied for t in tools)
    summary = (
        f"{_count(len(classes), 'class', 'classes')}, {_count(len(tools), 'tool', 'tools')}, "
        f"{_count(sum(len(t.arguments) for t in tools), 'argument', 'arguments')}: {diffs} differences in type, enum, nullability, item type, "
        f"required flag or order; {lost} lost (schema keys neither the signature nor the text carries: {tied} tied to "
        f"an argument, {lost - tied} to a whole tool)"
    )
    terminal = adapter.terminal_tool
    if terminal:
        summary += f"; terminal tool {terminal.get('name')} (not offered to the model)"
    if snap.get("supports_score_group"):
        summary += (f"; group scoring: group_reward posts each GRPO group to score_group (candidate blocks: "
                    f"{', '.join(snap.get('message_block_types') or [])})")
    if fmt == "markdown":
        return _markdown(classes, adapter, summary), diffs
    return _text(classes, adapter, summary), diffs


def _count(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def _text(classes: list[ClassFacts], adapter: Adapter, summary: str) -> str:
    lines: list[str] = []
    for one in classes:
        lines.append(one.header)
        for item in one.tools:
            if not isinstance(item, ToolFacts):
                tool, where = item
                lines.append(f"  {tool.wire_name}: as shown in class {where} above")
                continue
            tool = item.tool
            lines.append(f"  {tool.wire_name}" + (f"  (attribute {tool.py_name})" if tool.renamed else ""))
            lines += _block("model sees", item.description, "      ")
            for arg in item.arguments:
                param = arg.param
                name = param.wire_name if param.py_name == param.wire_name else f"{param.wire_name} (as {param.py_name})"
                flag = "required" if param.required else "optional"
                lines.append(f"    {name}: {flag}, model sees {_json(arg.schema)}")
                if arg.description:
                    lines += _block("described as", arg.description, "          ")
                if arg.moved:
                    joined = "; ".join(arg.moved)
                    if len(joined) <= 100:
                        lines.append(f"        in its text: {joined}")
                    else:
                        lines.append("        in its text:")
                        lines += [f"          {m}" for m in arg.moved]
                if param.hint:
                    lines.append(f"        type checkers see: {param.hint}")
                for lost_item in arg.lost:
                    others = arg.with_others[lost_item]
                    lines.append(f"        LOST {lost_item}" + (f"  (together with {', '.join(others)})" if others else ""))
                lines += [f"        DIFFERS {d}" for d in arg.differs]
            lines += [f"    LOST {lost_item}  (the whole tool, no single argument)" for lost_item in item.lost]
            lines += [f"    DIFFERS {d}" for d in item.differs]
    terminal = adapter.terminal_tool
    if terminal:
        lines.append(f"terminal tool {terminal.get('name')}: not offered to the model, which never calls it; "
                     f"{_terminal_use(terminal)}")
        if terminal.get("description"):
            lines += _block("description", str(terminal["description"]), "    ")
    lines += [f"WARNING {warning}" for warning in adapter.warnings()]
    return "\n".join([*lines, summary]) + "\n"


def _terminal_use(terminal: dict[str, Any]) -> str:
    arg = terminal.get("arg")
    if arg:
        return f"terminal_reward sends the model's final plain message to it as argument {arg!r}"
    return "the model's final plain message ends the episode; terminal_reward calls it with no arguments"


def _block(label: str, text: str, indent: str) -> list[str]:
    """`label: text`, further lines of `text` indented under it."""
    first, *rest = text.splitlines() or [""]
    return [f"{indent[:-2]}{label}: {first}", *(f"{indent}{line}" for line in rest)]


def _markdown(classes: list[ClassFacts], adapter: Adapter, summary: str) -> str:
    out = ["## orsgen report", ""]
    for one in classes:
        out += [f"### `{one.name}`", "", _cell(one.header), "", MARKDOWN_HEADER, "|---|---|---|---|---|---|"]
        for item in one.tools:
            if not isinstance(item, ToolFacts):
                tool, where = item
                out.append(_row(_code(tool.wire_name), "", "", f"as in `{where}` above", "", ""))
                continue
            tool = item.tool
            name = _code(tool.wire_name) + (f" (attribute {_code(tool.py_name)})" if tool.renamed else "")
            tool_cell = "<br>".join(x for x in (name, _cell(item.description)) if x)
            whole = [f"whole tool: {_code(x)}" for x in item.lost] + [f"**differs:** {_cell(d)}" for d in item.differs]
            if not item.arguments:
                out.append(_row(tool_cell, "(no arguments)", "", "", "", "<br>".join(whole)))
            for i, arg in enumerate(item.arguments):
                param = arg.param
                seen = "<br>".join(x for x in (_code(_json(arg.schema)), _cell(arg.description)) if x)
                seen += "".join(f"<br>**differs:** {_cell(d)}" for d in arg.differs)
                lost = [_code(x) + (f" (with {', '.join(arg.with_others[x])})" if arg.with_others[x] else "")
                        for x in arg.lost]
                out.append(_row(
                    tool_cell if i == 0 else "",
                    f"{_code(param.wire_name)} ({'required' if param.required else 'optional'})",
                    f"{_code(param.wire_name)} -> {_code(param.py_name)}",
                    seen,
                    "<br>".join(_code(m) for m in arg.moved),
                    "<br>".join(lost + (whole if i == 0 else [])),
                ))
        out.append("")
    terminal = adapter.terminal_tool
    if terminal:
        out += [f"### Terminal tool `{terminal.get('name')}`", "",
                _cell(f"Not offered to the model, which never calls it; {_terminal_use(terminal)}."
                      + (f" Description: {terminal['description']}" if terminal.get("description") else "")), ""]
    warnings = adapter.warnings()
    if warnings:
        out += ["### Warnings", "", *(f"- {_cell(w)}" for w in warnings), ""]
    out.append(f"**Summary:** {_cell(summary)}")
    return "\n".join(out) + "\n"


def _row(*cells: str) -> str:
    return "| " + " | ".join(cells) + " |"


def _cell(text: str) -> str:
    """Plain text for one table cell: pipes escaped, lines joined with <br>, no raw HTML."""
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("|", "\\|")
    return "<br>".join(line.strip() for line in text.splitlines())


def _code(text: str) -> str:
    """`text` as a code span inside a table cell: whole, pipes escaped, backticks fenced."""
    text = " ".join(text.splitlines()).replace("|", "\\|")
    fence = "`"
    while fence in text:
        fence += "`"
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
