"""`orsgen ... --report`: per class and per tool, what the model will see next to the original schema, and what was
moved into the argument text or lost. "What the model sees" is `transformers.utils.get_json_schema` of the generated
method, the function TRL itself calls.

Every class of the module is covered: the base class (the shared tools), each task-specific variant class (the tools
it adds) and the terminal tool, which the model never calls. Each lost schema key is tied to the arguments it names
(`dependentRequired`, `anyOf: [{"required": [...]}]`, ...) or to the whole tool (`additionalProperties: false`), and
counted in the summary. Values are printed whole: nothing is cut. `fmt="markdown"` gives one table per class, to
paste into a pull request. A module with tool budgets gets them too: the environment's, and each tool's effective cap,
kept side, images and timeout (a tool without its own takes the environment's).
"""

import importlib.util
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orsgen.config import TOOL_BUDGET_OPTIONS
from orsgen.model import Adapter, Param, Terminal, Tool, docs
from orsgen.model.lost import as_json
from orsgen.model.typemap import Node
from orsgen.offered import json_schema

JSON_TYPES = {"string", "integer", "number", "boolean", "array", "object", "null"}
MARKDOWN_HEADER = "| tool | argument | wire -> python | model sees | in text | lost |"


def seen_schemas(text: str, adapter: Adapter) -> dict[str, dict[str, Any]]:
    """wire tool name -> get_json_schema(method)["function"], from the generated module itself: the base class's
    tools and every variant class's (tool names are unique across the classes of one module)."""
    try:
        import transformers.utils  # noqa: F401
    except ImportError:
        from orsgen import extras
        from orsgen.errors import OrsgenError

        raise OrsgenError("--report needs transformers (its get_json_schema; no torch, no TRL): "
                          f"{extras.pip('report')} (the report extra)") from None
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
                found[tool.wire_name] = json_schema(getattr(instance, tool.py_name))["function"]
    return found


def _types(found: set[str] | frozenset[str]) -> list[str] | None:
    """Sorted JSON types, `integer` folded into `number` (which holds every integer)."""
    kept = set(found) & JSON_TYPES
    if "number" in kept:
        kept.discard("integer")
    return sorted(kept) or None


def signature(node: Node) -> dict[str, Any]:
    """The comparable facts of one argument, as its schema said them: type, enum, nullable, items."""
    said = node.facts()
    enum = list(said.enum) if said.enum is not None else None
    nullable = said.null or "null" in said.types
    if enum is not None and None in enum:
        nullable, enum = True, [v for v in enum if v is not None]
    return {
        "type": _types(said.types - {"null"}),
        "enum": enum,
        "nullable": nullable,
        "items": sorted(said.items) if said.items else None,
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


def differences(seen: dict[str, Any], params: list[Param]) -> list[tuple[str | None, str]]:
    """(argument wire name, or None for the whole tool; difference) for what a signature should not change: type,
    enum, nullability, item type, required flag, order."""
    seen_props = seen["parameters"].get("properties", {})
    seen_required = set(seen["parameters"].get("required", []))
    found: list[tuple[str | None, str]] = []
    if [p.py_name for p in params] != list(seen_props):
        found.append((None, f"order: {[p.wire_name for p in params]} -> {list(seen_props)}"))
    for param in params:
        before = signature(param.type)
        after = seen_signature(seen_props.get(param.py_name, {}))
        for key in ("type", "enum", "nullable", "items"):
            if before[key] is not None and before[key] != after[key] and not (key == "nullable" and not before[key]):
                found.append((param.wire_name, f"{param.wire_name}: {key} {before[key]} -> {after[key]}"))
        if param.required != (param.py_name in seen_required):
            flags = f"{param.required} -> {param.py_name in seen_required}"
            found.append((param.wire_name, f"{param.wire_name}: required {flags}"))
    return found


def compare(seen: dict[str, Any], params: list[Param]) -> list[str]:
    """Differences a signature should not have: type, enum, nullability, item type, required flag, order."""
    return [text for _, text in differences(seen, params)]


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


def facts(adapter: Adapter, seen: dict[str, dict[str, Any]]) -> list[ClassFacts]:
    count = len(adapter.tools)
    classes = [ClassFacts(adapter.class_name, f"class {adapter.class_name}: the shared tools ({count}), offered on every "
                          "task" + (" (the variant classes below add their own)" if adapter.variants else ""))]
    classes[0].tools = [_tool_facts(t, seen[t.wire_name]) for t in adapter.tools]
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
                one.tools.append(_tool_facts(tool, seen[tool.wire_name]))
        classes.append(one)
    return classes


def _tool_facts(tool: Tool, seen: dict[str, Any]) -> ToolFacts:
    found = differences(seen, tool.params)
    lost = [(item.text, list(item.arguments)) for item in tool.lost]
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


def render(text: str, adapter: Adapter, fmt: str = "text", budgets: dict[str, Any] | None = None) -> tuple[str, int]:
    """(report text, number of differences in type, enum, nullability, item type, required flag or order); the lost
    items are counted in the report's summary line, not in that number. `budgets`: the module's BUDGETS."""
    classes = facts(adapter, seen_schemas(text, adapter))
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
    terminal = adapter.terminal
    if terminal:
        summary += f"; terminal tool {terminal.name} (not offered to the model)"
    if adapter.group_scoring is not None:
        summary += (f"; group scoring: group_reward posts each GRPO group to score_group (candidate blocks: "
                    f"{', '.join(adapter.group_scoring)})")
    shown = _budgets(adapter, budgets or {})
    if fmt == "markdown":
        return _markdown(classes, adapter, summary, shown), diffs
    return _text(classes, adapter, summary, shown), diffs


@dataclass
class BudgetFacts:
    environment: str  # the environment's budgets, one line
    tools: list[tuple[str, list[str]]]  # (wire name, [cap, truncate, images, timeout]), a tool's own marked


TRUNCATED = {"head": "keeps the head", "tail": "keeps the tail", "middle": "keeps head and tail"}
TOOL_KEYS = tuple(o.name for o in TOOL_BUDGET_OPTIONS)


def _budgets(adapter: Adapter, budgets: dict[str, Any]) -> BudgetFacts | None:
    """What the runtime applies to each tool: its own budget, else the environment's, key by key."""
    if not budgets:
        return None
    units = {"episode-timeout": " s"}
    said = [f"{k} {v}{units.get(k, '')}" for k, v in budgets.items() if k != "tools"]
    tools = []
    terminal = [str(adapter.terminal.name)] if adapter.terminal and str(adapter.terminal.name) in budgets.get(
        "tools", {}) else []  # shown when it has its own budget: the model never reads its result
    for wire in dict.fromkeys([*(t.wire_name for t in adapter.all_tools()), *terminal]):
        own = budgets.get("tools", {}).get(wire, {})
        value = {k: own.get(k, budgets.get(k)) for k in TOOL_KEYS}
        mark = {k: " (its own)" if k in own else "" for k in TOOL_KEYS}
        caps = [f"{value[k]} {unit}{mark[k]}" for k, unit in (("max-output-chars", "characters"), (
            "max-output-tokens", f"tokens of {budgets.get('tokenizer')}")) if value[k] is not None]
        tools.append((wire, [
            " and ".join(caps) or "none",
            TRUNCATED[value["truncate"] or "middle"] + mark["truncate"] if caps else "(no cap)",
            f"{value['max-images']}{mark['max-images']}" if value["max-images"] is not None else "all",
            f"{value['timeout']} s{mark['timeout']}" if value["timeout"] is not None else "none",
        ]))
    return BudgetFacts(", ".join(said) or "none (per tool only)", tools)


def _count(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def _text(classes: list[ClassFacts], adapter: Adapter, summary: str, budgets: BudgetFacts | None = None) -> str:
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
                lines.append(f"    {name}: {flag}, model sees {as_json(arg.schema)}")
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
    if budgets:
        lines.append(f"tool budgets: {budgets.environment}; per tool (a tool without its own takes the environment's):")
        lines += [f"  {wire}: cap {cap}; {side}; images {images}; timeout {timeout}"
                  for wire, (cap, side, images, timeout) in budgets.tools]
    terminal = adapter.terminal
    if terminal:
        lines.append(f"terminal tool {terminal.name}: not offered to the model, which never calls it; "
                     f"{_terminal_use(terminal)}")
        if terminal.description:
            lines += _block("description", str(terminal.description), "    ")
    lines += [f"WARNING {warning}" for warning in adapter.warnings()]
    return "\n".join([*lines, summary]) + "\n"


def _terminal_use(terminal: Terminal) -> str:
    arg = terminal.arg
    if arg:
        return f"terminal_reward sends the model's final plain message to it as argument {arg!r}"
    return "the model's final plain message ends the episode; terminal_reward calls it with no arguments"


def _block(label: str, text: str, indent: str) -> list[str]:
    """`label: text`, further lines of `text` indented under it."""
    first, *rest = text.splitlines() or [""]
    return [f"{indent[:-2]}{label}: {first}", *(f"{indent}{line}" for line in rest)]


def _markdown(classes: list[ClassFacts], adapter: Adapter, summary: str, budgets: BudgetFacts | None = None) -> str:
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
                seen = "<br>".join(x for x in (_code(as_json(arg.schema)), _cell(arg.description)) if x)
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
    if budgets:
        out += ["### Tool budgets", "", _cell(f"The environment's: {budgets.environment}. A tool without its own "
                                              "takes the environment's."), "",
                "| tool | cap | truncate | images | timeout |", "|---|---|---|---|---|"]
        out += [_row(_code(wire), *map(_cell, cells)) for wire, cells in budgets.tools]
        out.append("")
    terminal = adapter.terminal
    if terminal:
        out += [f"### Terminal tool `{terminal.name}`", "",
                _cell(f"Not offered to the model, which never calls it; {_terminal_use(terminal)}."
                      + (f" Description: {terminal.description}" if terminal.description else "")), ""]
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
