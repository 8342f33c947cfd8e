"""The stages, each a function from values to values; `run` joins them for one job, `cli` only parses arguments.

    job -> snapshot(job): (Source, snapshot)  a server, the catalog, a /tools file, or a module's own snapshot
        -> model.build -> Adapter              every naming and typing decision, one node per schema construct
        -> render.module -> text               Jinja templates, then black in a fixed mode
        -> write.emit, or check.module         atomic; --check compares and writes nothing

The job (`config.Job`, frozen) carries every option from the command line or pyproject.toml through all of them.
"""

import ast
import contextlib
import json
import keyword
import os
import sys
import traceback
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import black
import jinja2

from orsgen import check, config, model, normalize, pin, render, report, spelling, write
from orsgen.builtin import templates
from orsgen.config import Job, project_root
from orsgen.errors import OrsgenError
from orsgen.model import naming
from orsgen.source import Probe, Source, _snap, fetch, scoring
from orsgen.source import tasks as fetch_tasks
from orsgen.stdout import say

BUNDLE_NAMES = frozenset({"bundle"})


@dataclass(frozen=True)
class Mode:
    """What a run does with the text: write it, or check it (--check, --diff), and whether it reports first."""

    check: bool = False
    diff: bool = False
    report: str | None = None  # "text" or "markdown": print the --report first
    report_only: bool = False  # no -o: the report is all


def run(job: Job, mode: Mode) -> tuple[int, model.Adapter | None]:
    """Generate, check or report one job: (exit status, its adapter if it belongs in a bundle)."""
    validate(job)
    job = replace(job, output=write.followed(job.output))  # a symlinked module: its file, under its own name
    source, snap, job = snapshot(job)
    text, adapter = _built(source, snap, job)
    for warning in adapter.warnings():
        print(f"orsgen: warning: {warning}", file=sys.stderr)
    if mode.report:
        say(report.render(text, adapter, fmt=mode.report, budgets=job.budgets())[0], end="")
        if mode.report_only:
            return 0, None
    if mode.check:
        status = check.module(job.output, text, mode.diff, root=job.root, own=lambda: regenerated(job.output))
        if job.pin_tasks and not job.offline:  # offline: the tasks are the server's, not this orsgen's
            status = max(status, check.tasks(tasks_path(job.output), pinned_tasks(job, source, snap)))
        return status, adapter
    # The tasks first: a server that fails (or a Ctrl-C) then leaves the module and its task list as they were.
    tasks = pinned_tasks(job, source, snap) if job.pin_tasks and not job.offline else None
    if write.emit(job.output, text, summary(adapter), generated=True) and job.fetched is None:
        not_a_package(job)
    if tasks is not None:
        write.emit(tasks_path(job.output), tasks,
                   ", ".join(f"{len(v)} {k} tasks" for k, v in json.loads(tasks)["splits"].items()))
    unread = [name for name, why in adapter.skipped if why.startswith(model.UNREADABLE)]
    if unread:  # the rest is written: one broken tool does not cost the others
        print(f"orsgen: error: {job.output}: {len(unread)} tool(s) could not be generated ({', '.join(map(repr, unread))}: "
              "see the warnings); the others were written", file=sys.stderr)
        return 2, adapter
    return 0, adapter


def regenerated(output: Path) -> str | None:
    """What `orsgen OUTPUT` writes: this orsgen, the module's own snapshot and options, no request (None: it
    cannot, e.g. its templates are gone)."""
    job = Job(output.as_posix(), output, root=project_root(output), found_root=True)
    try:
        source, snap, job = snapshot(job)
        return _built(source, snap, job)[0]
    except OrsgenError:
        return None


def not_a_package(job: Job) -> None:
    """A module written into a folder of the project that is not a package: one line on how to type-check it."""
    folder = job.output.parent.resolve()
    root = Path(job.root or project_root(job.output)).resolve()
    if (folder / "__init__.py").exists() or folder in (root, Path.cwd().resolve()) or root not in folder.parents:
        return
    shown = job.output.parent.as_posix()
    print(f"orsgen: note: {shown}/ has no __init__.py, so mypy on it beside the code importing it says \"Source "
          f"file found twice\": add an empty {shown}/__init__.py", file=sys.stderr)


def validate(job: Job) -> None:
    """Input that cannot be right, refused before any request."""
    if not job.offline:  # offline, the module's own snapshot is the input
        exists(job.target)
    stem = job.output.stem
    if job.output.suffix == ".py" and (not stem.isidentifier() or keyword.iskeyword(stem)):  # `import class` fails
        fix = naming.identifier(stem, fallback="adapter")
        raise OrsgenError(f"{job.output}: {stem!r} is not an importable module name (use {fix}.py)")
    if job.templates is not None:
        check_templates(job.templates)
    url = urllib.parse.urlsplit(job.target) if job.target.startswith(("http://", "https://")) else None
    if url is not None and (url.username or url.password):  # said without them: the password is not echoed
        shown = url._replace(netloc=url.netloc.rpartition("@")[2]).geturl()
        raise OrsgenError(f"TARGET {shown} has a user name or password in it, which the module would pin: give the "
                          "URL without it (an API key goes in OPENREWARD_API_KEY, secrets in --secret NAME)")


def exists(target: str) -> None:
    """A file TARGET (a module or a /tools JSON file) that is not there, said as such: not asked for -o or fetched."""
    path = Path(target)
    if target.startswith(("http://", "https://")) or path.suffix not in (".py", ".json") or path.exists():
        return
    raise OrsgenError(f"{target}: no such file ({spelling.did_you_mean(path)}a TARGET is a server URL, a catalog owner/name, a /tools JSON "
                      "file or an orsgen module to regenerate)")


def is_module(target: str) -> bool:
    return target.endswith(".py") and Path(target).is_file()


def snapshot(job: Job) -> tuple[Source, dict[str, Any], Job]:
    """Stages 1-2: (source, snapshot) of a job, and the job as it renders; a `.py` target is regenerated from its
    embedded snapshot, offline, with the options it was made with."""
    if job.fetched is not None:
        source, snap = job.fetched
        return (source if is_module(job.target) else _as_named(job, source)), snap, job
    if job.target.endswith(".py"):
        pinned = pin.read(Path(job.target))
        options = {k: v for k, v in pinned.options.items() if k != "templates"}
        templates, recorded = job.templates, pinned.options.get("templates")
        if templates is None and isinstance(recorded, str):
            templates = Path(recorded)
            if not templates.is_dir():
                raise OrsgenError(f"{job.target} was made with --templates {recorded}, not found here: pass --templates DIR")
        if templates is not None:
            options["templates"] = job._shown(templates)
        if job.class_name:
            options["class-name"] = job.class_name
        async_tools = job.async_tools or pinned.async_tools
        if async_tools:
            options["async-tools"] = True
        budgets = _budgets(config.budgets(options, f"{job.target} ORSGEN_OPTIONS"), job.budgets())
        options = {**{k: v for k, v in options.items() if k not in budgets}, **budgets}
        return pinned.source, pinned.snapshot, replace(job, class_name=job.class_name or pinned.class_name,
                                                       templates=templates, async_tools=async_tools,
                                                       recorded=config.in_order(options),
                                                       **config.budget_fields(budgets))
    if job.offline:  # what this orsgen makes of the module's own snapshot: catches hand edits and generator drift
        pinned = pin.read(job.output)
        return _as_named(job, pinned.source), pinned.snapshot, replace(job, class_name=job.class_name
                                                                      or pinned.class_name, recorded=job.options())
    source, snap = fetch(job.target, job.env, probe(job))
    return _as_named(job, source), snap, job


def _budgets(recorded: dict[str, Any], given: dict[str, Any]) -> dict[str, Any]:
    """A module's recorded budgets with the ones given beside it on the command line (`orsgen gen/x.py
    --max-output-chars 8000`) in their place, key by key and per tool."""
    tools = {tool: dict(budget) for tool, budget in recorded.get("tools", {}).items()}
    for tool, budget in given.get("tools", {}).items():
        tools[tool] = {**tools.get(tool, {}), **budget}
    return config.budgets({**recorded, **given, "tools": tools}, "")


def several(jobs: list[Job], directory: Path) -> list[Job]:
    """Several environments into one folder: each fetched now (its module is named for its environment), one
    module each plus bundle.py."""
    found: list[Job] = []
    names: set[str] = set()
    root = project_root(directory / "bundle.py")
    for job in jobs:
        if is_module(job.target):  # an orsgen module: its embedded snapshot, offline
            embedded = pin.read(Path(job.target))
            source, snap = embedded.source, embedded.snapshot
        else:
            source, snap = fetch(job.target, job.env, probe(job, require_task_tools=False))
        name = naming.unique(naming.module_name(source.env or source.name), names, BUNDLE_NAMES)
        if any(done.fetched[0] == source for done in found):
            raise OrsgenError(f"environment {source.env or source.deployment} of {job.target} is given twice")
        found.append(replace(job, output=directory / f"{name}.py", fetched=(source, snap), root=root, found_root=True))
    return found


def probe(job: Job, require_task_tools: bool = True) -> Probe:
    """What a job's generation reads beyond /tools; --secret values come from the environment, never a file."""
    if job.task_tools_for_all and not job.task_tools_from:
        raise OrsgenError("--task-tools-for-all goes with --task-tools-from TASKS (the tasks whose tools every task gets)")
    missing = [name for name in job.secret if name not in os.environ]
    if missing:
        raise OrsgenError(f"--secret {missing[0]}: set the environment variable {missing[0]} (its value is sent as "
                          "the secret of that name when a session opens, and never written)")
    for name in ("api_key", "OPENREWARD_API_KEY"):
        if name in job.secret:
            print(f"orsgen: warning: --secret {name}: the openreward SDK sends the API key as the secret {name}, "
                  "replacing yours, at generation and at run time; pass the value as OPENREWARD_API_KEY (or the "
                  "adapter's api_key=) instead", file=sys.stderr)
    api_key_usable()
    secrets = {name: os.environ[name] for name in job.secret}
    return Probe(job.task_tools_from, job.task_tools_for_all, secrets, require_task_tools)


def api_key_usable() -> None:
    """An OPENREWARD_API_KEY no header can carry (a pasted newline, a space, a non-ASCII character) is refused
    before a request: sent, it raises with the key in the message, and no server would accept it anyway."""
    key = os.environ.get("OPENREWARD_API_KEY", "")
    if key and not all("!" <= c <= "~" for c in key):
        raise OrsgenError("OPENREWARD_API_KEY holds a space, a line break or a non-ASCII character (pasted with "
                          "its newline?): set it to the key alone")


def _as_named(job: Job, source: Source) -> Source:
    """A file TARGET as the project names it (relative to its root), however it was spelled, from any folder."""
    if job.root is None or not Path(job.target).exists():
        return source
    return replace(source, target=job._shown(job.target))


def tasks_path(output: Path) -> Path:
    return output.with_name(output.stem + ".tasks.json")


def pinned_tasks(job: Job, source: Source, snap: dict[str, Any]) -> str:
    """The task list --pin-tasks writes beside the module, as text."""
    if source.url is None and "/" not in source.deployment:
        raise OrsgenError(f"--pin-tasks needs a server or catalog TARGET, not {job.target}")
    api_key_usable()
    splits = [s if isinstance(s, str) else s.get("name") for s in snap.get("splits") or [source.split]]
    pinned = fetch_tasks(source, [s for s in splits if isinstance(s, str)])
    return json.dumps(pinned, ensure_ascii=False, indent=1, sort_keys=True) + "\n"


def summary(adapter: model.Adapter) -> str:
    names = ", ".join(t.wire_name for t in adapter.tools)
    count = len(adapter.tools)
    text = f"class {adapter.class_name}, {count} tool{'s' * (count != 1)} ({names})"
    for variant in adapter.variants:
        extra = ", ".join(t.wire_name for t in variant.tools)
        text += f"; class {variant.class_name} adds {extra} for tasks {_ranges(variant.tasks)}"
    if adapter.unread:
        text += (f"; tasks {adapter.unread_spans()} were not read (--task-tools-from): they get class "
                 f"{adapter.class_name}, the shared tools only")
    if adapter.to_all:
        text += f"; every task gets {', '.join(adapter.to_all)} (--task-tools-for-all)"
    if adapter.terminal:
        text += f"; terminal tool {adapter.terminal.name} (terminal_reward)"
    return text


def _ranges(indices: list[int]) -> str:
    shown = ", ".join(str(i) for i in indices[:8])
    return shown + (f", ... ({len(indices)} tasks)" if len(indices) > 8 else "")


def _built(source: Source, snap: dict[str, Any], job: Job) -> tuple[str, model.Adapter]:
    """`build`, where a snapshot read back from a module (hand-edited into a shape no server answers) is one line."""
    try:
        return build(source, snap, job)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        if not (is_module(job.target) or job.offline):
            raise
        module = job.target if is_module(job.target) else job.output
        raise OrsgenError(f"{module}: its SNAPSHOT cannot be read ({type(exc).__name__}: {exc}; edited by hand?): "
                          "regenerate it from its server with the command in its header") from None


def build(source: Source, snap: dict[str, Any], job: Job | None = None) -> tuple[str, model.Adapter]:
    """Stages 3-4: the model of a snapshot, and the module text it renders to."""
    job = job or Job("<tools>", Path("adapter.py"))
    name = job.class_name or naming.class_name(source.name)
    if not name.isidentifier() or name.startswith("_") or keyword.iskeyword(name) or name in naming.MODULE_NAMES:
        raise OrsgenError(f"class name {name!r} is not a public Python identifier the module can use")
    scoring = snap.get("message_block_types") if snap.get("supports_score_group") else None
    adapter = model.build(snap["tools"], name, source.env, snap.get("task_tools"), snap.get("terminal_tool"), scoring)
    budgeted(job, adapter, source)
    with template_errors(job.templates):
        text = render.module(adapter, source, snap, job)
    if job.templates is not None:
        pinned_by(text, snap, job.templates, job.budgets())
    twice = _bound_twice(text)
    if twice:
        raise OrsgenError(f"the module would bind {', '.join(twice)} twice (a class or tool name takes a name the "
                          "module uses): choose another --class-name")
    return text, adapter


def budgeted(job: Job, adapter: model.Adapter, source: Source) -> None:
    """Per tool budgets name tools of the environment (a tool it lacks would be capped nowhere, silently): the ones
    the model calls, or its terminal tool (as the runtime reads them)."""
    tools = list(dict.fromkeys([t.wire_name for t in adapter.all_tools()]
                               + ([str(adapter.terminal.name)] if adapter.terminal else [])))
    unknown = sorted(set(job.tools) - set(tools))
    if unknown:
        raise OrsgenError(f"a tool budget names {unknown[0]!r}, a tool {source.env or source.deployment} does not "
                          f"have (its tools: {', '.join(tools) or 'none'})")


def write_bundle(directory: Path, members: list[tuple[str, str]], mode: Mode, templates: Path | None) -> int:
    """bundle.py: every environment's adapter as TRL's dict environment_factory, and one mixed dataset."""
    path = directory / "bundle.py"
    text = bundle(members, templates)
    if mode.check:
        return check.module(path, text, mode.diff, pinned=False)
    write.emit(path, text, f"environments {', '.join(name for name, _ in members)}", generated=True)
    package = directory / "__init__.py"
    if not package.exists():  # a package, so that bundle.py's relative imports resolve (and type checkers follow)
        write.atomic(package, "")
    return 0


def bundle(members: list[tuple[str, str]], template_dir: Path | None = None) -> str:
    with template_errors(template_dir):
        return render.bundle(members, template_dir)


def check_templates(folder: Path) -> None:
    """A --templates folder must exist and shadow built-in templates only (a typo would be silently ignored)."""
    if not folder.is_dir():
        raise OrsgenError(f"--templates {folder}: no such directory")
    builtin = {p.name for p in templates().iterdir() if p.name.endswith(".jinja")}
    unknown = sorted(p.name for p in folder.iterdir() if p.name.endswith(".jinja") and p.name not in builtin)
    if unknown:
        raise OrsgenError(f"--templates {folder}: {unknown[0]} shadows no built-in template "
                          f"(they are {', '.join(sorted(builtin))})")


@contextlib.contextmanager
def template_errors(template_dir: Path | None) -> Iterator[None]:
    """A template that does not render, or renders invalid Python, is one line naming the template and its line."""
    try:
        yield
    except jinja2.TemplateSyntaxError as exc:
        raise OrsgenError(f"template {exc.filename or exc.name}, line {exc.lineno}: {exc.message}") from None
    except jinja2.TemplateError as exc:
        where = next((f"template {f.filename}, line {f.lineno}" for f in reversed(traceback.extract_tb(exc.__traceback__))
                      if f.filename.endswith(".jinja")), "a template")
        raise OrsgenError(f"{where}: {type(exc).__name__}: {exc}") from None
    except (black.InvalidInput, SyntaxError) as exc:
        line = " ".join(str(exc).split())
        origin = f"the templates in {template_dir}" if template_dir else "the built-in templates"
        raise OrsgenError(f"{origin} render invalid Python: {line[:200]}") from None
    except OrsgenError:
        raise
    except UnicodeDecodeError as exc:  # a template file that is not UTF-8 text
        raise OrsgenError(f"a template in {template_dir or 'the built-in templates'} is not UTF-8 text: {exc}") from None
    except Exception as exc:  # an expression in a template that raised (`"%s" % (1, 2)`): named, not a traceback
        frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename.endswith(".jinja")]
        if not frames:
            raise
        raise OrsgenError(f"template {frames[-1].filename}, line {frames[-1].lineno}: {type(exc).__name__}: {exc}") from None


def pinned_by(text: str, snap: dict[str, Any], template_dir: Path, budgets: dict[str, Any] | None = None) -> None:
    """A module from --templates must still carry what orsgen reads back (its snapshot, target and class): else
    `--check` and regeneration from it could not read it."""
    try:
        found = pin.read_text(text, "the module")
    except OrsgenError as exc:
        raise OrsgenError(f"the templates in {template_dir} render a module orsgen cannot read back ({exc}): keep "
                          "the built-in template's header, constants and SNAPSHOT") from None
    if found.snapshot != snap:
        raise OrsgenError(f"the templates in {template_dir} render a SNAPSHOT other than the environment's: keep "
                          "the built-in template's SNAPSHOT")
    if budgets and found.budgets != budgets:  # a copy of an older module.py.jinja: the budgets would be lost
        raise OrsgenError(f"the templates in {template_dir} drop the tool budgets: keep the built-in template's "
                          "BUDGETS and its budgets=BUDGETS")


def _bound_twice(text: str) -> list[str]:
    """Top-level names the module binds more than once: one would replace the other."""
    seen: dict[str, int] = {}
    for node in ast.parse(text).body:
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AnnAssign):
            targets = [node.target]
        names = [t.id for t in targets if isinstance(t, ast.Name)]
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            names = [node.name]
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [(a.asname or a.name).split(".")[0] for a in node.names]
        for name in names:
            seen[name] = seen.get(name, 0) + 1
    return sorted(n for n, count in seen.items() if count > 1)


def from_tools(data: Any, *, env: str = "env", class_name: str | None = None) -> tuple[str, model.Adapter]:
    """Module text for a tool list held in memory (the /tools shape, an MCP list, or a bare list)."""
    tools, rest = normalize.tool_list(data, "<tools>")
    extra: dict[str, Any] = {k: rest[k] for k in ("terminal_tool", "splits") if k in rest}
    extra.update(scoring(rest))
    source = Source(target="<tools>", url=None, deployment=env, env=env, name=env, split="train")
    return build(source, _snap(env, tools, extra), Job("<tools>", Path("adapter.py"), class_name=class_name))
