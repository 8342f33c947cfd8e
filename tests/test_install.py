"""The README's install lines, each run as written in a fresh venv under tmp, then what that install is for: the
generator's runs `orsgen --version`, generates a module against a served environment and imports it there; the
report's runs `--report` without torch. Slow (pip installs): marker `install`,
`make test-install`, after the fast tier in CI. The report's venv also runs `orsgen eval` (the same extra).

`/path/to/orsgen` is a copy of this checkout's files (tracked and new, as git lists them: a clone with the working
changes); the git URL form installs this clone's HEAD commit. Dependencies are downloaded once per run into a
wheelhouse (pip's own resolution against the configured index); each venv's pip then installs from it
(`PIP_NO_INDEX`, `PIP_FIND_LINKS`, no bytecode), so what a line installs is still resolved from the package's own
metadata. The training line (torch first, then `[train]`) is run by .ci/trl-oldest, which builds that venv anyway.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.harness import ROOT, processes
from tests.harness.chat_standin import Reply, first_user_text, serving, tool_results

pytestmark = pytest.mark.install

VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
WHEEL = f"orsgen-{VERSION}-py3-none-any.whl"
IMPORT = "import orsgen.runtime, echo; print(orsgen.runtime.__file__)"
# the runtime's own dependencies at work too (openreward, datasets): about 9 s, so in one venv only
DATASET = "import echo; rows = echo.dataset(num_tasks=2); print(len(rows), sorted(rows.column_names))"


def git(*args: str) -> str:
    return processes.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=True).stdout


@pytest.fixture(scope="session")
def place(tmp_path_factory):
    """(checkout, wheelhouse): the copy that stands for /path/to/orsgen, and the dependencies of every extra the
    lines below name, with setuptools for the builds (from a wheel of the checkout, built the README's way)."""
    base = tmp_path_factory.mktemp("install")
    checkout = base / "orsgen"
    for name in git("ls-files", "-co", "--exclude-standard", "-z").split("\0"):
        if name and (ROOT / name).is_file():
            (checkout / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, checkout / name)
    pip = [sys.executable, "-m", "pip", "-q"]
    processes.run([*pip, "wheel", "--no-deps", str(checkout), "-w", str(base / "dist")], check=True, cwd=base)
    processes.run([*pip, "download", "-d", str(base / "house"), "setuptools>=68",
                    f"{base / 'dist' / WHEEL}[generator,report,plot]"], check=True, cwd=base)
    (base / "house" / WHEEL).unlink()  # each line installs orsgen its own way, never from here
    shutil.rmtree(checkout / "build", ignore_errors=True)
    for info in checkout.glob("codegen/*.egg-info"):
        shutil.rmtree(info)
    return checkout, base / "house"


class Venv:
    """A fresh venv and a shell of its own: its bin first on PATH, no PYTHONPATH, pip reading the wheelhouse."""

    def __init__(self, folder: Path, house: Path) -> None:
        processes.run([_base_python(), "-m", "venv", str(folder / "venv")], check=True)
        self.bin = folder / "venv" / "bin"
        self.folder = folder
        keep = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
        path = [p for p in keep.get("PATH", "").split(os.pathsep) if Path(p) != Path(sys.executable).parent]
        # no bytecode: PIP_COMPILE=0 (PIP_NO_COMPILE=1 compiles: pip reads an off-switch's variable inverted)
        self.env = {**keep, "PATH": os.pathsep.join([str(self.bin), *path]), "PIP_NO_INDEX": "1",
                    "PIP_FIND_LINKS": str(house), "PIP_COMPILE": "0", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}

    def run(self, line: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
        """One line as a user types it, in this venv's shell."""
        return processes.run(line, shell=True, cwd=cwd or self.folder, env=self.env, capture_output=True, text=True)

    def install(self, line: str, cwd: Path | None = None) -> None:
        done = self.run(line, cwd)
        assert done.returncode == 0, f"{line}\n{done.stdout}\n{done.stderr}"
        assert "does not provide the extra" not in done.stderr, done.stderr

    def has(self, name: str) -> bool:
        found = self.run(f"python -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec(\"{name}\") is None)'")
        return found.returncode == 0


def _base_python() -> str:
    """The interpreter this venv was made from: a fresh venv must not start from this one's packages."""
    return str(Path(sys.base_prefix) / "bin" / "python3")


def generates(venv: Venv, url: str) -> str:
    """The generator install at work: its version, a module written against `url` and imported in that venv with the
    runtime installed there. Returns where orsgen.runtime was imported from."""
    version = venv.run("orsgen --version")
    assert version.returncode == 0 and version.stdout.strip() == f"orsgen {VERSION}", version
    out = venv.folder / "gen" / "echo.py"
    wrote = venv.run(f"orsgen {url} -o {out}")
    assert wrote.returncode == 0 and out.exists(), wrote.stderr
    imported = venv.run(f"python -c '{IMPORT}'", cwd=out.parent)
    assert imported.returncode == 0, imported.stderr
    return imported.stdout.strip()


def printed_install(stderr: str) -> str:
    """The `pip install "..." "..."` line a message of orsgen's names."""
    found = re.search(r'pip install(?: "[^"]+")+', stderr)
    assert found is not None, stderr
    return found.group()


def test_from_a_clone_then_report(tmp_path, place, echo_server):
    """`pip install "/path/to/orsgen[generator]"`: a copy of the clone. There --report says in one line what it
    needs, in a line that works as printed (issue 44: `pip install "orsgen[report]"` found nothing); `pip install
    "/path/to/orsgen[generator,report]"` adds transformers only (no torch, no TRL), and --report works, with nothing
    of transformers' on stderr. The picture's line (the plot extra) works as printed too."""
    checkout, house = place
    venv = Venv(tmp_path, house)
    venv.install(f'pip install "{checkout}[generator]"')
    runtime = generates(venv, echo_server.url)
    assert runtime.startswith(str(venv.bin.parent)), runtime
    assert not venv.has("transformers") and not venv.has("torch")
    report = venv.run(f"orsgen {echo_server.url} --report")
    assert report.returncode == 2 and report.stdout == "", report
    assert report.stderr.count("\n") == 1 and "orsgen[" not in report.stderr, report.stderr
    needed = printed_install(report.stderr)

    measure = "orsgen eval gen/echo.py --base-url {url} --model scripted --tasks 0-1 --out {out}"
    refused = venv.run(measure.format(url="http://127.0.0.1:9/v1", out="run"))
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused
    assert printed_install(refused.stderr) == needed  # the eval extra is the report's

    venv.install(needed)  # as printed
    assert venv.has("transformers") and not venv.has("torch") and not venv.has("trl")
    report = venv.run(f"orsgen {echo_server.url} --report")
    assert report.returncode == 0 and report.stderr == "", report.stderr  # no "PyTorch was not found"
    assert 'text: required, model sees {"type":"string"}' in report.stdout, report.stdout  # get_json_schema's view
    venv.install(f'pip install "{checkout}[generator,report]"')  # the README's line
    assert not venv.has("torch") and not venv.has("trl")

    # orsgen eval there, without torch or TRL: a model behind an endpoint, the tools get_json_schema makes
    def echoing(payload):
        text = first_user_text(payload)
        if tool_results(payload) or text.startswith("orsgen eval"):  # answered, or the probe
            return Reply(content="done")
        return Reply(tool_calls=[("echo", {"text": text.split()[-1]})])

    with serving(echoing) as endpoint:
        measured = venv.run(measure.format(url=endpoint.url, out="run"))
        assert measured.returncode == 0, measured.stderr
        assert "pass@1  100.0%" in measured.stdout, measured.stdout
        assert "PyTorch" not in measured.stderr and not (venv.folder / "run" / "pass_rates.png").exists()
        venv.install(printed_install(measured.stderr))  # the picture's extra, as printed
        pictured = venv.run(measure.format(url=endpoint.url, out="pictured"))
    assert pictured.returncode == 0 and (venv.folder / "pictured" / "pass_rates.png").is_file(), pictured.stderr
    assert not venv.has("torch") and not venv.has("trl")


def test_editable_from_a_clone(tmp_path, place, echo_server):
    """`pip install -e "/path/to/orsgen[generator]"`: the clone's own files, templates/ read where they are."""
    checkout, house = place
    venv = Venv(tmp_path, house)
    venv.install(f'pip install -e "{checkout}[generator]"')
    runtime = generates(venv, echo_server.url)
    assert runtime == str(checkout / "codegen" / "orsgen" / "runtime" / "__init__.py"), runtime


def test_wheel_built_from_a_clone(tmp_path, place, echo_server):
    """`pip wheel --no-deps /path/to/orsgen -w dist`, then the wheel with the extra; `--check` (the CI job's line) on
    what it wrote, and the module's dataset read from the server."""
    checkout, house = place
    venv = Venv(tmp_path, house)
    venv.install(f"pip wheel --no-deps {checkout} -w dist")
    assert (tmp_path / "dist" / WHEEL).exists(), sorted(p.name for p in (tmp_path / "dist").iterdir())
    venv.install(f'pip install "dist/{WHEEL}[generator]"')
    runtime = generates(venv, echo_server.url)
    assert runtime.startswith(str(venv.bin.parent)), runtime
    check = venv.run(f"orsgen --check {tmp_path / 'gen' / 'echo.py'}")
    assert check.returncode == 0, check
    rows = venv.run(f"python -c '{DATASET}'", cwd=tmp_path / "gen")
    assert rows.returncode == 0 and rows.stdout.startswith("2 ") and "'task_index'" in rows.stdout, rows


def test_git_url(tmp_path, place, echo_server):
    """`pip install "orsgen[generator] @ git+<URL>@<commit>"`, the URL this clone's, the commit its HEAD. A clone on
    disk is `git+file://localhost/path`: pip 23 (a fresh venv's here) refuses `git+file:///path`, a URL with no host."""
    _, house = place
    sha = git("rev-parse", "HEAD").strip()
    venv = Venv(tmp_path, house)
    venv.install(f'pip install "orsgen[generator] @ git+file://localhost{ROOT}@{sha}"')
    runtime = generates(venv, echo_server.url)
    assert runtime.startswith(str(venv.bin.parent)), runtime
    assert f'"commit_id": "{sha}"' in venv.run("cat venv/lib/python3*/site-packages/orsgen-*.dist-info/direct_url.json").stdout
