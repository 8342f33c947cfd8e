"""CONTRIBUTING's worked examples, made on a copy of the package as a contributor would and run (issue 43): a new
per-episode limit a module pins touches three code files (the budget table and its setting, the generator's `Job`,
the episode), a new record sink is one new module and its registration; each works once made."""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
HEADER = re.compile(r"^# (?P<path>\S+), (?:(?P<how>before|replace): (?P<line>.+)|a new file)$")


def blocks(name: str) -> list[tuple[str, str | None, str | None, str]]:
    """The worked example `name` of CONTRIBUTING: (file, "before" or "replace" or None for a new file, the line
    it goes at, its code), in order."""
    text = (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")
    example = text.split(f"<!-- worked example: {name} -->")[1]
    found = []
    for code in re.findall(r"```python\n(.*?)```", example, re.DOTALL):
        header, _, body = code.partition("\n")
        match = HEADER.match(header)
        assert match, f"a block of the {name} example says where it goes: {header!r}"
        found.append((match["path"], match["how"], match["line"], body))
    return found


def made(name: str, tmp_path: Path) -> set[str]:
    """A copy of the package with the example made in it: the files it touched."""
    shutil.copytree(ROOT / "codegen", tmp_path / "codegen", ignore=shutil.ignore_patterns("__pycache__"))
    touched = set()
    for path, how, line, body in blocks(name):
        target = tmp_path / path
        if how is None:
            assert not target.exists(), f"{path} is a new file"
            target.write_text(body, encoding="utf-8")
        else:
            text = target.read_text(encoding="utf-8")
            lines = [i for i, old in enumerate(text.split("\n")) if old.startswith(line)]
            assert len(lines) == 1, f"{path}: the line {line!r} is where the block goes, once ({len(lines)} found)"
            rows = text.split("\n")
            at = lines[0]
            rows[at:at + (how == "replace")] = body.rstrip("\n").split("\n")
            target.write_text("\n".join(rows), encoding="utf-8")
        touched.add(path)
    return touched


def run(tmp_path: Path, script: str, **env: str) -> subprocess.CompletedProcess[str]:
    import os

    environ = {**os.environ, "PYTHONPATH": str(tmp_path / "codegen"), **env}
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=environ, timeout=120,
                          check=False, cwd=tmp_path)


LIMIT = """
from pathlib import Path
import orsgen
from orsgen import config
from orsgen.runtime.budgets import Budgets
from orsgen.runtime.episode import Episode
from orsgen.runtime.errors import ToolError
from orsgen.runtime.settings import resolve
assert Path(orsgen.__file__).is_relative_to(Path.cwd()), orsgen.__file__  # the copy, not the repository
print(config.budgets({"max-failed-calls": 2}, "t"), config.Job("t", Path("o.py"), max_failed_calls=2).budgets())
class Env: pass
env = Env()
for pinned, given in (({"max-failed-calls": 1}, {}), ({"max-failed-calls": 1}, {"max_failed_calls": 2})):
    config_ = resolve(None, given)
    episode = Episode(env, "train", 0, None, config_, budgets=Budgets(pinned, config_))
    episode.session, episode.failures = object(), 1
    try:
        episode.usable("echo")
        print("usable")
    except ToolError as exc:
        print(exc, episode.void)
"""


def test_a_new_per_episode_limit_is_three_code_files(tmp_path):
    touched = made("limit", tmp_path)
    assert touched == {"codegen/orsgen/runtime/settings.py", "codegen/orsgen/config.py",
                       "codegen/orsgen/runtime/episode.py"}
    ran = run(tmp_path, LIMIT)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.splitlines() == [
        "{'max-failed-calls': 2} {'max-failed-calls': 2}",  # the generator's option, and what a module pins
        ("echo: this episode is not scored: 1 of its tool calls failed (max-failed-calls, pinned in the module) "
         "too_many_failures"),
        "usable",  # the setting overrides the pin
    ]


SINK = """
import logging
from orsgen.runtime import Recorder, hooks
class Env: pass
recorder = Recorder("records")
ep, env = object(), Env()
hooks.emit("episode_start", hooks.EpisodeStart(env, "train", 0, None, "prompt", None, 0.1, ep))
hooks.emit("tool_call", hooks.ToolCall(env, "echo", {"text": "x"}, "ok", None, 0.1, 1.0, episode=ep))
hooks.emit("episode_end", hooks.EpisodeEnd(env, "train", None, None, True, 1.0, True, None, 1, 0, episode=ep))
assert recorder.flush() is True
recorder.close()
print([type(sink).__name__ for sink in recorder.sinks])
"""


@pytest.mark.parametrize("asked", [True, False])
def test_a_new_record_sink_is_one_new_module_and_its_registration(tmp_path, asked):
    touched = made("sink", tmp_path)
    assert touched == {"codegen/orsgen/runtime/printed.py", "codegen/orsgen/runtime/sinks.py"}
    ran = run(tmp_path, SINK, ORSGEN_RECORDS_PRINTED="1" if asked else "0")
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.split() == (["['JsonlSink',", "'PrintedSink']"] if asked else ["['JsonlSink']"])
    assert ("Env: reward 1.0, 1 calls" in ran.stderr.splitlines()) is asked
    assert len((tmp_path / "records" / "trajectories-rank0.jsonl").read_text().splitlines()) == 1
