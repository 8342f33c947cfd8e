"""Stage 5 under --check: compare what would be written with what is there, write nothing. 0 up to date, 1 stale."""

import difflib
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from orsgen import __version__, pin
from orsgen.errors import OrsgenError
from orsgen.render import formatter_note
from orsgen.snapshot import sha256
from orsgen.stdout import say


def module(output: Path, text: str, show_diff: bool, pinned: bool = True, root: Path | None = None,
           own: Callable[[], str | None] | None = None) -> int:
    """`own()`: what `orsgen OUTPUT` would write (its own snapshot and options, no request), to tell an edit by hand
    from a change of the server, the options or orsgen."""
    if not output.is_file():
        raise OrsgenError(f"cannot check {output}: no such file")
    try:
        old = output.read_bytes().decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:  # not stale: it cannot be checked (exit 2)
        why = "not UTF-8 text, so not an orsgen module" if isinstance(exc, UnicodeDecodeError) else exc.strerror
        raise OrsgenError(f"cannot check {output}: {why}") from None
    if old == text:
        say(f"{output}: up to date")
        return 0
    builds = [_build_line(old), _build_line(text)]
    if builds[0] != builds[1] and old == text.replace(builds[1], builds[0], 1):
        say(f"{output}: up to date, but the server's build changed ({builds[0]} -> {builds[1]}): the tools are the "
            "same, tasks, prompts or rewards may not be; regenerate to pin the new build")
        return 0
    fix = text.splitlines()[1].removeprefix("#").strip() if pinned else "the command that wrote this directory"
    notes = []
    if pinned:  # (pin.read: not an orsgen module means it cannot be checked, exit 2)
        changes, offline = _reasons(output, old, pin.read(output), pin.read_text(text), own)
        if offline:
            fix, notes = f"orsgen {output.as_posix()}", ["from its own snapshot, no request"]
        elif root is not None and Path(root).resolve() != Path.cwd().resolve():
            notes = [f"in {Path(root).resolve().as_posix()}"]  # the header's paths are relative to the project
    else:
        changes = ["the generated code differs (a new orsgen, templates or options)"]
    notes += [] if show_diff else ["--diff shows the whole difference"]
    say(f"{output}: stale")
    for line in changes:
        say(f"  {line}")
    say(f"  fix: {fix}   ({'; '.join(notes)})" if notes else f"  fix: {fix}")
    note = formatter_note()
    if note:
        say(f"  {note}")
    if show_diff:
        path = output.as_posix()
        say("".join(difflib.unified_diff(old.splitlines(True), text.splitlines(True), path, f"{path} (new)")), end="")
    return 1


def _reasons(output: Path, old: str, was: pin.Pinned, now: pin.Pinned,
             own: Callable[[], str | None] | None) -> tuple[list[str], bool]:
    """Why a module is stale, a line each: its SNAPSHOT or code edited by hand, the server's tools, the options,
    orsgen itself; and whether the fix is offline (`orsgen OUTPUT`, from its own snapshot)."""
    if was.sha256 is not None and _sha256(was.snapshot) != was.sha256:
        edited = (f"its SNAPSHOT was edited by hand (its sha256 is not the one its header records): restore "
                  f"{output.as_posix()} from version control, or regenerate it from its server")
        return [edited], False
    changes = _changes(was.snapshot, now.snapshot) + pin.option_changes(was.options, now.options)
    mine = own() if own is not None else None
    if mine is None or mine == old:  # it is what this orsgen writes of its own pin: the server or options changed
        return changes or ["the generated code differs (a new orsgen, templates or options)"], False
    where = _first_difference(mine, old)
    if _paths_only(mine, old):  # no project: the header's paths are relative to the folder it was generated from
        if changes:
            return changes, False
        edit = (f"only its paths differ ({where}): it was generated from another folder (its header: "
                f"{old.splitlines()[1].removeprefix('#').strip()}); check it from there, or rewrite it from here")
    elif was.version != __version__:
        edit = (f"a new orsgen: {__version__} writes {where} otherwise than {was.version}, which wrote it, from the "
                "same snapshot and options")
    elif "templates" in was.options:
        edit = (f"its templates ({was.options['templates']}) changed, or it was edited by hand: they write {where} "
                "otherwise from its own snapshot and options")
    else:
        edit = (f"edited by hand: orsgen {__version__}, which wrote it, writes {where} otherwise from its own "
                "snapshot and options")
    if changes:
        return [*changes, f"{edit} (the fix replaces the edit too)"], False
    return [edit], True


_PATHS = re.compile(r"(TARGET|ORSGEN_OPTIONS)\b|\s+from [\w.]+ import ")  # the lines besides the header's


def _paths_only(a: str, b: str) -> bool:
    """The two differ only in lines that hold the header's paths (its command, target, module name)."""
    x, y = a.splitlines(), b.splitlines()
    return len(x) == len(y) and all(i in (1, 2) or _PATHS.match(line)
                                    for i, (line, other) in enumerate(zip(y, x)) if line != other)


def _first_difference(a: str, b: str) -> str:
    """`line 140` (of b), or `lines 140, 152 and 3 more`: where b departs from a."""
    blocks = [j1 + 1 for tag, _, _, j1, _ in difflib.SequenceMatcher(None, a.splitlines(), b.splitlines(),
                                                                      autojunk=False).get_opcodes() if tag != "equal"]
    if len(blocks) == 1:
        return f"line {blocks[0]}"
    more = f" and {len(blocks) - 2} more" if len(blocks) > 2 else ""
    return f"lines {blocks[0]}, {blocks[1]}{more}"


def _sha256(snap: dict[str, Any]) -> str | None:
    try:
        return sha256(snap)
    except (TypeError, ValueError):  # edited into something JSON cannot carry
        return None


def _changes(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """How the tools changed; a SNAPSHOT edited into a shape no server answers is stale all the same (exit 1)."""
    try:
        return pin.tool_changes(old, new)
    except (KeyError, TypeError, AttributeError):
        return ["the module's SNAPSHOT was edited by hand (it has a shape no server answers)"]


def _build_line(text: str) -> str:
    return next((line for line in text.splitlines() if line.startswith("BUILD_SHA")), "")


def tasks(path: Path, text: str) -> int:
    """--check of a pinned task list: the first task that differs, per split."""
    if not path.is_file():
        raise OrsgenError(f"cannot check {path}: no such file (write it with --pin-tasks)")
    try:
        old, new = json.loads(path.read_bytes().decode("utf-8")), json.loads(text)
    except (OSError, ValueError) as exc:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise OrsgenError(f"cannot check {path}: not a task list orsgen wrote ({type(exc).__name__})") from None
    if old == new:
        say(f"{path}: up to date")
        return 0
    say(f"{path}: stale")
    before, after = (old.get("splits", {}) if isinstance(old, dict) else {}), new.get("splits", {})
    for split in sorted(set(before) | set(after)):
        a, b = before.get(split, []), after.get(split, [])
        if a != b:
            first = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
            say(f"  split {split!r}: task {first} differs ({len(a)} tasks pinned, {len(b)} on the server)")
    return 1
