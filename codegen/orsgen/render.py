"""Stage 4: lay the model out with the Jinja templates, then format with black in a fixed mode."""

from pathlib import Path
from typing import Any

import black
import jinja2

from orsgen import __version__, extras
from orsgen.blackfast import MODE, format_module
from orsgen.builtin import templates
from orsgen.config import Job
from orsgen.model import Adapter, docs
from orsgen.runtime import API
from orsgen.snapshot import sha256
from orsgen.source import Source


def formatter_note() -> str | None:
    """When the installed black is not the one orsgen pins (its release shapes the output bytes), a line saying so:
    a stale result may then be the formatter's doing."""
    from importlib.metadata import PackageNotFoundError, requires

    try:
        pins = [r for r in requires("orsgen") or [] if r.replace(" ", "").startswith("black==")]
    except PackageNotFoundError:
        return None
    pinned = pins[0].split("==", 1)[1].split(";")[0].strip() if pins else None
    if pinned is None or pinned == black.__version__:
        return None
    return (f"note: black {black.__version__} is installed, orsgen {__version__} formats with black {pinned}: "
            f"the difference may be the formatter's ({extras.pip('generator')})")


def comment(text: str) -> str:
    """One line, safe inside a `#` comment."""
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in str(text))


def environment(template_dir: Path | None = None) -> jinja2.Environment:
    builtin = jinja2.FileSystemLoader(str(templates()))
    loaders = [jinja2.FileSystemLoader(str(template_dir)), builtin] if template_dir else [builtin]
    env = jinja2.Environment(
        loader=jinja2.ChoiceLoader(loaders),
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        undefined=jinja2.StrictUndefined,
        autoescape=False,
    )
    env.filters.update(py=repr, doc=docs.literal, comment=comment)
    return env


def module(adapter: Adapter, source: Source, snap: dict[str, Any], job: Job) -> str:
    text = (
        environment(job.templates)
        .get_template("module.py.jinja")
        .render(
            adapter=adapter,
            source=source,
            snapshot=snap,
            sha256=sha256(snap),
            command=job.command(),
            options=job.options(),
            budgets=job.budgets(),
            module_name=job.module_name(),
            tasks_file=job.output.stem + ".tasks.json",
            async_tools=job.async_tools,
            version=__version__,
            api=API,
        )
    )
    formatted = format_module(text, snap)
    compile(formatted, job.module_name(), "exec")  # a template bug must fail here, not in the user's training run
    return formatted


def bundle(members: list[tuple[str, str]], template_dir: Path | None = None) -> str:
    """The module that trains on several environments: members are (module name, adapter class) pairs."""
    template = environment(template_dir).get_template("bundle.py.jinja")
    text = template.render(members=members, version=__version__, api=API)
    formatted = black.format_str(text, mode=MODE)
    compile(formatted, "bundle", "exec")
    return formatted
