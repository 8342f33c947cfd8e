"""The README's "Your own environment" path, run as a user runs it in a folder of their own outside the clone (issue
44): the environment the README shows (its block, written as shop.py, which is examples/shop.py), then each command
of its console block in order: `orsgen serve`, `orsgen URL -o`, `python -m orsgen.tiny`, the README's train.py (one
GRPO step), `transformers serve` and `orsgen eval` on the model before and after training, `orsgen eval --compare`.

The commands are the README's lines, their ports swapped for free ones; they run in a shell whose PATH starts with
this venv's bin (its installed orsgen, `python`, `transformers`) and no PYTHONPATH: nothing of the clone is
importable there but the installed package (no `examples`, no `tests`)."""

import json
import os
import shlex
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from tests.harness import ROOT, processes, readme, servers
from tests.harness.processes import wait_until
from tests.harness.tiny_serve import SERVER_ENV

PORTS = ("8010", "8020", "8021")  # the README's: the environment's server, the models' servers
SERVED = ("orsgen serve", "transformers serve")  # commands that keep running (a terminal of their own)


def shell(folder: Path) -> dict[str, str]:
    """A user's shell in `folder`: this venv's bin first on PATH, no PYTHONPATH, nothing downloaded."""
    keep = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return {**keep, **SERVER_ENV, "PATH": os.pathsep.join([str(Path(sys.executable).parent), keep.get("PATH", "")])}


def answers(url: str) -> bool:
    try:
        with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(url, timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


def test_the_environment_shown_is_examples_shop():
    assert readme.block("python", "class Shop(Environment)") == (ROOT / "examples" / "shop.py").read_text()


@pytest.mark.trainer
@pytest.mark.timeout(2400)  # a hang guard: the tiny model's warm-up and two model servers on 2 shared cores
def test_the_own_environment_path_runs_from_a_folder_outside_the_clone(tmp_path):
    folder = tmp_path / "myproject"
    folder.mkdir()
    assert not folder.resolve().is_relative_to(ROOT)
    (folder / "shop.py").write_text(readme.block("python", "class Shop(Environment)"))
    (folder / "train.py").write_text(readme.block("python", "save_model(\"tiny-trained\")"))
    env = shell(folder)
    for name in ("examples", "tests"):  # the clone's folders are not importable from here
        found = processes.run([sys.executable, "-c", f"import {name}"], cwd=folder, env=env, capture_output=True)
        assert found.returncode == 1, name
    ports = {port: str(servers.free_port()) for port in PORTS}
    commands = readme.commands("orsgen serve shop:Shop")
    assert [c.split()[:2] for c in commands] == [
        ["orsgen", "serve"], ["orsgen", "http://127.0.0.1:8010"], ["python", "-m"], ["python", "train.py"],
        ["transformers", "serve"], ["orsgen", "eval"], ["transformers", "serve"], ["orsgen", "eval"],
        ["orsgen", "eval"]]
    running: list[subprocess.Popen] = []
    results = []
    try:
        for command in commands:
            for port, free in ports.items():
                command = command.replace(port, free)
            if command.startswith(SERVED):
                log = folder / f"{len(running)}.log"
                with log.open("wb") as sink:
                    running.append(processes.popen(command, shell=True, cwd=folder, env=env, stdout=sink,
                                                   stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL))
                words = shlex.split(command)
                health = f"http://127.0.0.1:{words[words.index('--port') + 1]}/health"
                wait_until(lambda process=running[-1], url=health: process.poll() is not None or answers(url),
                           timeout=300, waiting_for=f"{command} to answer")
                assert running[-1].poll() is None, log.read_text()
                continue
            done = processes.run(command, shell=True, cwd=folder, env=env, capture_output=True, text=True)
            assert done.returncode == 0, f"$ {command}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
            results.append(done)
    finally:
        for process in running:
            processes.stop(process)
    generated, built, trained, base, after, compared = results
    assert generated.stdout.startswith("wrote generated/shop.py: class Shop, 2 tools (order, stock)\n")
    info = json.loads((folder / "tiny" / "orsgen-tiny.json").read_text())
    assert info["tasks"] == 8 and info["rewarded"] >= 1, info  # calls the environment rewarded, taught
    assert "orsgen tiny: saved tiny" in built.stdout
    # the GRPO step's episodes, as the runtime recorded them: sessions on the served environment, its tools called
    records = [json.loads(line) for line in (folder / "runs" / "grpo" / "trajectories-rank0.jsonl").open()]
    assert len(records) == 8 and all(r["session"] for r in records), records
    assert {c["name"] for r in records for c in r["tool_calls"]} <= {"order", "stock"}
    assert any(c["name"] == "order" for r in records for c in r["tool_calls"])
    assert (folder / "tiny-trained" / "model.safetensors").is_file(), trained.stdout[-2000:]
    for run in ("base", "trained"):
        summary = json.loads((folder / "runs" / run / "summary.json").read_text())
        assert summary["episodes"]["done"] == 8 and summary["episodes"]["counted"] == 8, summary
    assert "orsgen eval:" in base.stdout and "orsgen eval:" in after.stdout
    assert compared.stdout.startswith("orsgen eval: base -> trained"), compared.stdout
