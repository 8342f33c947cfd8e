"""Stage 5 under --check: compare what would be written with what is there, write nothing. 0 up to date, 1 stale."""

import difflib
import json
import sys
from pathlib import Path
from typing import Any

from orsgen import pin
from orsgen.errors import OrsgenError
from orsgen.render import formatter_note


def module(output: Path, text: str, show_diff: bool, pinned: bool = True, root: Path | None = None) -> int:
    if not output.is_file():
        raise OrsgenError(f"cannot check {output}: no such file")
    try:
        old = output.read_bytes().decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:  # not stale: it cannot be checked (exit 2)
        why = "not UTF-8 text, so not an orsgen module" if isinstance(exc, UnicodeDecodeError) else exc.strerror
        raise OrsgenError(f"cannot check {output}: {why}") from None
    if old == text:
        print(f"{output}: up to date")
        return 0
    builds = [_build_line(old), _build_line(text)]
    if builds[0] != builds[1] and old == text.replace(builds[1], builds[0], 1):
        print(f"{output}: up to date, but the server's build changed ({builds[0]} -> {builds[1]}): the tools are the "
              "same, tasks, prompts or rewards may not be; regenerate to pin the new build")
        return 0
    changes = _changes(pin.read(output).snapshot, pin.read_text(text).snapshot) if pinned else []
    print(f"{output}: stale")  # (pin.read above: not an orsgen module means it cannot be checked, exit 2)
    for line in changes or ["the generated code differs (a new orsgen, templates or options)"]:
        print(f"  {line}")
    fix = text.splitlines()[1].removeprefix("#").strip() if pinned else "the command that wrote this directory"
    if pinned and root is not None and Path(root).resolve() != Path.cwd().resolve():
        fix += f"   (in {Path(root).resolve().as_posix()})"  # the header's paths are relative to the project
    print(f"  fix: {fix}" + ("" if show_diff else "   (--diff shows the whole difference)"))
    note = formatter_note()
    if note:
        print(f"  {note}")
    if show_diff:
        path = output.as_posix()
        sys.stdout.writelines(difflib.unified_diff(old.splitlines(True), text.splitlines(True), path, f"{path} (new)"))
    return 1


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
        print(f"{path}: up to date")
        return 0
    print(f"{path}: stale")
    before, after = (old.get("splits", {}) if isinstance(old, dict) else {}), new.get("splits", {})
    for split in sorted(set(before) | set(after)):
        a, b = before.get(split, []), after.get(split, [])
        if a != b:
            first = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
            print(f"  split {split!r}: task {first} differs ({len(a)} tasks pinned, {len(b)} on the server)")
    return 1
