"""The intermediate model: tool specs -> `Adapter(Tool(Param))`. All naming and typing decisions live here.

Each argument's schema is read once, into a type node (`typemap`): the node gives the signature's annotation, its
TypedDicts (`typeddicts`), the `typing` imports and the facts `--report` compares; the argument's text and what is
lost (`lost`) are made in the same pass. The templates and the report read this model, never the raw schema. A tool
whose schema is broken becomes a warning; the rest of the module still generates.
"""

from dataclasses import dataclass, field, replace
from typing import Any

from orsgen import normalize
from orsgen.model import docs, lost, naming, typeddicts, typemap
from orsgen.model.lost import Lost, as_json
from orsgen.model.typemap import Converter, Node
from orsgen.runtime import bounds


@dataclass(frozen=True)
class Param:
    wire_name: str  # the property name the server expects
    py_name: str  # the keyword the model sees and Python accepts
    type: Node  # renders the annotation, the TypedDicts and the facts the report compares
    required: bool
    doc: str  # one line, safe for the Args block
    moved: tuple[str, ...] = ()  # what only the description carries: "default: 1", "minimum: 0", ...
    alias: str | None = None  # module-level name of the annotation, when type checkers get a TypedDict
    hint: str | None = None  # that TypedDict annotation (under TYPE_CHECKING)


@dataclass
class Tool:
    wire_name: str  # exactly the server's name; also the method's __name__, i.e. what the model sees
    py_name: str  # the attribute on the adapter class
    description: str
    returns: str
    params: list[Param]
    warnings: list[str] = field(default_factory=list)
    lost: list[Lost] = field(default_factory=list)  # what neither the signature nor the text carries
    classes: list[str] = field(default_factory=list)  # TypedDict sources for type checkers

    @property
    def renamed(self) -> bool:
        return self.py_name != self.wire_name

    def imports(self) -> frozenset[str]:
        return frozenset().union(*(p.type.imports() for p in self.params))


@dataclass
class Variant:
    """The adapter for the tasks that advertise task-specific tools: the shared tools plus these."""

    class_name: str
    tools: list[Tool]
    tasks: list[int]


@dataclass(frozen=True)
class Terminal:
    """The environment's @terminal tool: the model never calls it, `terminal_reward` sends it the final message."""

    name: Any  # as the server names it
    arg: Any  # the argument the final message goes to; none: it takes no arguments
    description: Any
    spec: dict[str, Any]  # the whole description, pinned in the module for the runtime

    @classmethod
    def of(cls, spec: Any) -> "Terminal | None":
        if not isinstance(spec, dict) or not spec:
            return None
        return cls(spec.get("name"), spec.get("arg"), spec.get("description"), spec)


@dataclass
class Adapter:
    class_name: str
    env: str | None
    tools: list[Tool]
    skipped: list[tuple[str, str]]  # (tool name, reason): what could not be generated, reported by the CLI
    variants: list[Variant] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # other warnings (e.g. a tool whose schema differs by task)
    task_tools_split: str | None = None  # the split the task-specific tools were read from
    unread: list[int] = field(default_factory=list)  # tasks of that split whose tools were not read: the base class
    to_all: list[str] = field(default_factory=list)  # tools read from some tasks and given to every task (the base)
    terminal: Terminal | None = None
    group_scoring: list[str] | None = None  # block types score_group candidates may carry; None: it scores no groups

    def unread_spans(self) -> str:
        """The unread tasks as spans: "0, 2-5, 9"."""
        spans: list[list[int]] = []
        for i in self.unread:
            if spans and spans[-1][1] == i - 1:
                spans[-1][1] = i
            else:
                spans.append([i, i])
        return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)

    def all_tools(self) -> list[Tool]:
        return self.tools + [t for v in self.variants for t in v.tools]

    def imports(self) -> list[str]:
        """Names the module imports from `typing` (the TypedDicts' included)."""
        runtime = frozenset().union(*(t.imports() for t in self.all_tools()))
        return sorted(runtime | (typeddicts.names_used(self.hint_sources()) & typeddicts.TYPING_NAMES))

    def extension_imports(self) -> list[str]:
        """Names the TypedDicts import from `typing_extensions`, under TYPE_CHECKING."""
        return sorted(typeddicts.names_used(self.hint_sources()) & typeddicts.EXTENSION_NAMES)

    def hint_sources(self) -> list[str]:
        tools = self.all_tools()
        return [c for t in tools for c in t.classes] + [p.hint for t in tools for p in t.params if p.hint]

    def aliased(self) -> list[Param]:
        return [p for t in self.all_tools() for p in t.params if p.alias]

    def warnings(self) -> list[str]:
        found = [f"tool {t.wire_name!r}: {w}" for t in self.all_tools() for w in dict.fromkeys(t.warnings)]
        return found + [f"tool {name!r} skipped: {why}" for name, why in self.skipped] + self.notes


UNREADABLE = "schema cannot be read"  # a tool skipped for this could not be generated: the CLI exits 2


def build(
    tools: list[dict[str, Any]], class_name: str, env: str | None, task_tools: Any = None, terminal_tool: Any = None,
    group_scoring: list[str] | None = None,
) -> Adapter:
    """The adapter for `tools`; `task_tools` (the snapshot's, if any) adds one subclass per task-specific tool set."""
    taken: set[str] = set()  # attribute names, shared by the base class and its variants
    prefixes: set[str] = {class_name, *naming.MODULE_NAMES}  # TypedDict class names and their tools' prefixes
    skipped: list[tuple[str, str]] = []
    seen: set[str] = set()
    adapter = Adapter(class_name, env, _tools(tools, taken, prefixes, skipped, seen), skipped,
                      terminal=Terminal.of(terminal_tool), group_scoring=group_scoring)
    if isinstance(task_tools, dict) and task_tools.get("tools"):
        extra = {t.wire_name: t for t in _tools(task_tools["tools"], taken, prefixes, skipped, seen)}
        adapter.notes = [f"task tools: {c}" for c in task_tools.get("conflicts") or []]
        if task_tools.get("all_tasks") is True:  # one tool set for every task: TRL's task_tools_discovery_index
            adapter.tools += extra.values()
            adapter.to_all = list(extra)
            return adapter
        adapter.variants = _variants(class_name, extra, task_tools.get("tasks") or {})
        adapter.task_tools_split = task_tools.get("split")
        read, count = task_tools.get("read"), task_tools.get("num_tasks")
        if isinstance(read, list) and isinstance(count, int):
            adapter.unread = sorted(set(range(count)) - {i for i in read if isinstance(i, int)})
    return adapter


def _tools(specs: list[dict[str, Any]], taken: set[str], prefixes: set[str], skipped: list[tuple[str, str]],
           seen: set[str]) -> list[Tool]:
    built = []
    for spec in specs:
        name = spec["name"]
        if name in seen:
            skipped.append((name, "listed twice; the first definition is used"))
            continue
        seen.add(name)
        try:
            built.append(_tool(spec, taken, prefixes))
        except (TypeError, ValueError, KeyError, AttributeError, RecursionError) as exc:
            skipped.append((name, f"{UNREADABLE} ({type(exc).__name__}: {str(exc)[:200]})"))
    return built


def _variants(base: str, extra: dict[str, Tool], tasks: dict[str, list[int]]) -> list[Variant]:
    """Tasks grouped by the task-specific tools they advertise; one class per distinct set."""
    by_task: dict[int, set[str]] = {}
    for name, indices in sorted(tasks.items()):
        if name in extra:
            for index in indices:
                by_task.setdefault(int(index), set()).add(name)
    groups: dict[tuple[str, ...], list[int]] = {}
    for index, advertised in sorted(by_task.items()):
        groups.setdefault(tuple(sorted(advertised)), []).append(index)
    variants, taken = [], {base}
    for names, indices in sorted(groups.items()):
        words = "".join(naming.class_name(extra[n].py_name) for n in names) if len(names) <= 3 else f"{len(names)}Tools"
        variants.append(Variant(naming.unique(f"{base}With{words}", taken), [extra[n] for n in names], indices))
    return variants


def _tool(spec: dict[str, Any], taken: set[str], prefixes: set[str]) -> Tool:
    wire = spec["name"]
    schema = normalize.schema(spec.get("input_schema"))
    if schema is None:
        schema = {}
    if not isinstance(schema, dict):
        raise TypeError(f"input_schema is a {type(schema).__name__}, not an object")
    description, arg_docs, returns = docs.split(spec.get("description") or "")
    if isinstance(schema.get("description"), str) and schema["description"].strip():
        model_doc = schema["description"].strip()  # the parameter model's docstring: not shown anywhere else
        description = f"{description}\n\n{model_doc}" if description else model_doc
    converter = Converter(root=schema)
    props = schema.get("properties") or {}
    if not isinstance(props, dict):
        raise TypeError("properties is not an object")
    required: list[Any] = schema["required"] if isinstance(schema.get("required"), list) else []
    params: list[Param] = []
    py_taken: set[str] = set()
    described: dict[str, str] = {}  # an object's fields, as described in the text -> the argument that has them
    cut_types: list[str] = []  # arguments whose types nest past MAX_TYPE_DEPTH
    for wire_param, prop in props.items():
        cuts = converter.cuts
        node = converter.convert(prop)
        notes = node.text()
        if converter.cuts > cuts:
            cut_types.append(wire_param)
        resolved, _ = converter.resolve(prop, ())
        resolved = resolved if isinstance(resolved, dict) else {}
        text = _first_text(prop, resolved, arg_docs.get(wire_param))
        if isinstance(prop, dict) and "default" in prop:
            notes.insert(0, f"default: {as_json(prop['default'])}")
        elif "default" in resolved:
            notes.insert(0, f"default: {as_json(resolved['default'])}")
        for key in ("examples", "example"):
            if key in resolved:
                notes.append(f"{key}: {as_json(resolved[key])}")
        if resolved.get("deprecated") is True:
            notes.append("deprecated")
        py = naming.unique(naming.parameter(wire_param), py_taken, naming.PARAM_RESERVED)
        notes = [_once(note, py, described) for note in notes]
        doc = docs.one_line(" ".join(x for x in (text, f"({'; '.join(notes)})" if notes else "") if x))
        params.append(Param(wire_param, py, node, wire_param in required, doc or py, tuple(notes)))
    attr = naming.unique(naming.identifier(wire, fallback="tool"), taken, naming.TOOL_RESERVED)
    body = docs.neutralise(description) or f"Call the {wire!r} tool."
    tool = Tool(wire, attr, body, docs.one_line(returns), params, converter.warnings)
    tool.lost = lost.keys(schema, [p.wire_name for p in params])
    _bounded(tool, spec, props, cut_types)
    if any(p.type.structured() for p in params):
        _add_typeddicts(tool, prefixes)
    return tool


def _bounded(tool: Tool, spec: dict[str, Any], props: dict[str, Any], cut_types: list[str]) -> None:
    """What `runtime.bounds` cut from the spec, or the converter from the types: a warning and, per argument, a lost
    item (the report counts them)."""
    description = spec.get("description") or ""
    if isinstance(description, str) and description.endswith("characters in all]") and bounds.TEXT_CUT[:20] in description:
        tool.warnings.append(f"description cut to {bounds.MAX_DESCRIPTION} characters "
                             f"({description.rsplit(': ', 1)[-1].split()[0]} in all)")
    for wire, prop in props.items():
        text = as_json(prop)
        if bounds.DEPTH_CUT in text:
            tool.lost.append(lost.cut(wire, f"the structure below {bounds.MAX_DEPTH} levels of its schema"))
        if bounds.TEXT_CUT[:20] in text:
            tool.warnings.append(f"argument {wire!r}: texts in its schema cut to {bounds.MAX_TEXT} characters")
    if bounds.DEPTH_CUT in as_json(spec.get("input_schema")):
        tool.warnings.append(f"the schema nests deeper than {bounds.MAX_DEPTH} levels: below that, any value "
                             "(its structure is lost, see --report)")
    tool.lost += [lost.cut(wire, f"its types nested deeper than {typemap.MAX_TYPE_DEPTH} levels") for wire in cut_types]


def _add_typeddicts(tool: Tool, prefixes: set[str]) -> None:
    classes = typeddicts.Classes(naming.unique(naming.class_name(tool.py_name), prefixes), prefixes)
    try:
        hints = {p.wire_name: classes.annotation(p.type, p.wire_name) for p in tool.params if p.type.structured()}
    except RecursionError:
        tool.warnings.append("no TypedDicts for type checkers (the schema nests too deeply)")
        return
    tool.classes = classes.sources
    tool.params = [replace(p, alias=f"_{tool.py_name}__{p.py_name}", hint=hints[p.wire_name])
                   if p.wire_name in hints else p for p in tool.params]


def _first_text(prop: Any, resolved: dict[str, Any], fallback: str | None) -> str:
    for source in (prop if isinstance(prop, dict) else {}, resolved):
        text = source.get("description")
        if isinstance(text, str) and text.strip():
            return text
    if fallback:
        return fallback
    title = resolved.get("title") or (prop.get("title") if isinstance(prop, dict) else None)
    return title if isinstance(title, str) else ""


def _once(note: str, param: str, described: dict[str, str]) -> str:
    """An object's fields are spelled out once per tool: a later argument of the same shape points to the first."""
    if not note.startswith("object: ") or len(note) < 80:
        return note
    first = described.setdefault(note, param)
    return note if first == param else f"object: the same fields as {first}"
