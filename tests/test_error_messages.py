"""Messages that say what happened and what to do (issue 29, parts 5 and 8), each as a user meets it: a typo'd
module TARGET, a module edited by hand (and the other reasons a module is stale), `--check --diff` into a closed
pipe, a catalog target with no network, a server that never answers, DriftError against `--check` for the same
change, and mypy on a generated folder beside the code that imports it."""

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from orsgen import __version__

from tests.harness import ROOT, processes, servers
from tests.harness.generation import in_process, load, orsgen
from tests.harness.servers import free_port
from tests.harness.stub_ors import Reply, Seen, stub

ECHO_TOOLS = ROOT / "tests" / "golden" / "echo" / "tools.json"
KEY = "or-test-key-5150"  # masked wherever it appears: a one-letter key would mask every such letter
TARGETS = "a TARGET is a server URL, a catalog owner/name, a /tools JSON file or an orsgen module to regenerate"


def one_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in stderr and "Errno" not in stderr, stderr
    return lines[0]


def project(folder: Path, table: str = "") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "pyproject.toml").write_text('[project]\nname = "mine"\n' + table)
    return folder


# a. A module TARGET that is not there --------------------------------------------------------------------------


def test_a_typo_in_a_module_target_says_no_such_file(tmp_path):
    """Was: `give the output module with -o FILE`, as if the file were there and -o missing."""
    (tmp_path / "generated").mkdir()
    shutil.copy(ECHO_TOOLS, tmp_path / "generated" / "shop.py")  # any file: only its name is compared
    typo = orsgen("generated/shpo.py", cwd=tmp_path)
    assert typo.returncode == 2
    assert one_line(typo.stderr) == (f"orsgen: error: generated/shpo.py: no such file (did you mean "
                                     f"generated/shop.py? {TARGETS})")
    far = in_process("generated/nothing_like_it.py", cwd=tmp_path)
    assert far.returncode == 2
    assert one_line(far.stderr) == f"orsgen: error: generated/nothing_like_it.py: no such file ({TARGETS})"
    assert sorted(p.name for p in (tmp_path / "generated").iterdir()) == ["shop.py"]  # nothing written


# b. Why a module is stale: edited by hand (its code or its SNAPSHOT), a new orsgen, other options ---------------


@pytest.fixture(scope="module")
def counted():
    with servers.running("examples.echo:Echo", env={"ORSGEN_COUNT_REQUESTS": "1"}) as server:
        yield server


def echo_project(folder: Path, server, options: str = "") -> Path:
    project(folder, f'[tool.orsgen.targets.echo]\ntarget = "{server.url}"\noutput = "gen/echo.py"\n{options}')
    assert in_process(cwd=folder).returncode == 0
    return folder / "gen" / "echo.py"


def stale_lines(result) -> list[str]:
    assert result.returncode == 1, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "gen/echo.py: stale" and result.stderr == "", result
    return lines[1:]


def test_a_module_edited_by_hand_is_named_so_and_its_fix_is_offline(counted, tmp_path):
    """Was: "the generated code differs (a new orsgen, templates or options)", fix: the command that asks the
    server. The fix given now sends no request and undoes just the edit."""
    module = echo_project(tmp_path, counted)
    generated = module.read_text()
    module.write_text(generated.replace('"""Reveal the first letters of the word.', '"""Reveal a letter or two.'))
    line = next(n for n, text in enumerate(generated.splitlines(), 1) if "Reveal the first letters" in text
                and text.lstrip().startswith('"""'))
    hand = (f"  edited by hand: orsgen {__version__}, which wrote it, writes line {line} otherwise from its own "
            "snapshot and options")
    for argv in (["--check", "--offline"], ["--check"]):
        assert stale_lines(in_process(*argv, cwd=tmp_path)) == [
            hand, "  fix: orsgen gen/echo.py   (from its own snapshot, no request; --diff shows the whole difference)"]
    counted.requests()  # from here on, count
    fixed = in_process("gen/echo.py", cwd=tmp_path)
    assert fixed.returncode == 0 and module.read_text() == generated
    assert counted.requests() == {}  # offline indeed


def test_the_other_reasons_a_module_is_stale_are_named_with_their_fix(counted, tmp_path):
    module = echo_project(tmp_path, counted)
    generated = module.read_text()
    header = f"orsgen {counted.url} -o gen/echo.py"
    more = "   (--diff shows the whole difference)"

    # An older orsgen wrote it (its version line stands in for the code it wrote otherwise): offline too.
    module.write_text(generated.replace(f'ORSGEN_VERSION = "{__version__}"', 'ORSGEN_VERSION = "0.1.9"'))
    line = generated.splitlines().index(f'ORSGEN_VERSION = "{__version__}"') + 1
    assert stale_lines(in_process("--check", "--offline", cwd=tmp_path)) == [
        (f"  a new orsgen: {__version__} writes line {line} otherwise than 0.1.9, which wrote it, from the same "
        "snapshot and options"),
        "  fix: orsgen gen/echo.py   (from its own snapshot, no request; --diff shows the whole difference)"]

    # Its SNAPSHOT edited: regenerating from it would keep the edit, so the fix asks the server.
    module.write_text(generated.replace('"description": "How much to reveal"', '"description": "How much"'))
    assert stale_lines(in_process("--check", "--offline", cwd=tmp_path)) == [
        ("  its SNAPSHOT was edited by hand (its sha256 is not the one its header records): restore gen/echo.py "
        "from version control, or regenerate it from its server"), f"  fix: {header}{more}"]

    # The project asks for other options: named, and the fix is the command with them.
    module.write_text(generated)
    (tmp_path / "pyproject.toml").write_text((tmp_path / "pyproject.toml").read_text() + "async-tools = true\n")
    for argv in (["--check", "--offline"], ["--check"]):
        assert stale_lines(in_process(*argv, cwd=tmp_path)) == [
            "  ~ option async-tools: (not set) -> true",
            f"  fix: orsgen {counted.url} --async-tools -o gen/echo.py{more}"]
    # ... and edited by hand as well: both said, the fix replaces the edit too.
    module.write_text(generated.replace('"""Reveal the first letters of the word.', '"""Reveal a letter or two.'))
    lines = stale_lines(in_process("--check", "--offline", cwd=tmp_path))
    assert lines[0] == "  ~ option async-tools: (not set) -> true"
    assert lines[1].startswith("  edited by hand: ") and lines[1].endswith(" (the fix replaces the edit too)")
    assert lines[2] == f"  fix: orsgen {counted.url} --async-tools -o gen/echo.py{more}"


def test_a_module_checked_from_another_folder_than_it_was_written_from_is_not_called_edited(tmp_path):
    """No project: the header's paths are relative to the folder it was generated from."""
    (tmp_path / "a").mkdir()
    assert in_process(str(ECHO_TOOLS), "--env", "echo", "-o", "echo.py", cwd=tmp_path / "a").returncode == 0
    moved = in_process("--check", "a/echo.py", cwd=tmp_path)
    assert moved.returncode == 1
    assert moved.stdout.splitlines()[1:] == [
        (f"  only its paths differ (lines 2, 10): it was generated from another folder (its header: orsgen {ECHO_TOOLS} "
        "--env echo -o echo.py); check it from there, or rewrite it from here"),
        "  fix: orsgen a/echo.py   (from its own snapshot, no request; --diff shows the whole difference)"]


# c. --check --diff into a pipe its reader closed ------------------------------------------------------------------


@pytest.mark.slow
def test_check_diff_into_a_closed_pipe_exits_with_the_checks_code_quietly(tmp_path):
    """Was: a BrokenPipeError traceback (and exit 2, "could not") after `orsgen --check --diff | head`."""
    module, fresh = tmp_path / "echo.py", tmp_path / "fresh.py"
    for out in (module, fresh):
        assert in_process(str(ECHO_TOOLS), "--env", "echo", "-o", out.name, cwd=tmp_path).returncode == 0
    module.write_text(module.read_text().replace('"""Echo text back.', '"""Say it again.'))
    # Buffered (Python's default on a pipe), a short output meets the closed pipe at exit; unbuffered, at once.
    for unbuffered in ("", "1"):
        env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"} | (
            {"PYTHONUNBUFFERED": unbuffered} if unbuffered else {})
        for argv, code in ((["--check", "--diff", str(module)], 1), (["--report", str(module)], 0),
                           (["--check", str(fresh)], 0), (["--help"], 0)):
            with processes.started([sys.executable, "-m", "orsgen", *argv], stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, cwd=tmp_path, env=env) as run:
                run.stdout.close()  # `| head` gone before the first line: every write meets a closed pipe
                err = run.stderr.read().decode()
                assert run.wait() == code and err == "", (unbuffered, argv, err)


# d. A catalog target with no network ------------------------------------------------------------------------------


def test_a_catalog_target_out_of_reach_names_the_url_the_reason_and_what_to_check(tmp_path, monkeypatch):
    """Was: "... Eigent/SETA from Eigent/SETA ... [Errno -2] Name or service not known" and no hint."""
    monkeypatch.delenv("OPENREWARD_SESSION_URL", raising=False)
    monkeypatch.delenv("OPENREWARD_URL", raising=False)
    closed = f"http://127.0.0.1:{free_port()}"
    refused = orsgen("Eigent/SETA", "-o", "seta.py", cwd=tmp_path,
                     env={"OPENREWARD_API_KEY": KEY, "OPENREWARD_SESSION_URL": closed})
    assert refused.returncode == 2
    assert one_line(refused.stderr) == (
        f"orsgen: error: cannot reach the session server of catalog environment Eigent/SETA, {closed} "
        "(OPENREWARD_SESSION_URL): connection refused: check the network or proxy (HTTPS_PROXY), and "
        "OPENREWARD_SESSION_URL (4 attempts)")
    # OPENREWARD_URL names the platform; its session server is sessions.<host>, which no DNS knows here.
    unknown = in_process("Eigent/SETA", "-o", "seta.py", cwd=tmp_path,
                         env={"OPENREWARD_API_KEY": KEY, "OPENREWARD_URL": closed})
    assert unknown.returncode == 2
    line = one_line(unknown.stderr)
    sessions = closed.replace("//", "//sessions.")
    assert line.startswith(f"orsgen: error: cannot reach the session server of catalog environment Eigent/SETA, "
                           f"{sessions} (from OPENREWARD_URL): the DNS lookup of sessions.127.0.0.1 failed (")
    assert line.endswith("): check the network or proxy (HTTPS_PROXY), and OPENREWARD_URL (4 attempts)")
    assert not (tmp_path / "seta.py").exists()


@pytest.mark.parametrize(("status", "path", "hint"), [
    (404, "/tools", "is someone/quset spelt as the catalog lists it (owner/name)?"),
    (401, "/create_session", "is OPENREWARD_API_KEY the key of an account that may use it?"),
], ids=["unknown-name", "refused-key"])
def test_a_catalog_answer_that_refuses_says_what_to_check(tmp_path, status, path, hint):
    """Was: "fetching tools of someone/quset from someone/quset failed: ... HTTP 404 ..."."""
    def refuse(seen: Seen) -> Reply | None:
        return Reply(status, {"Content-Type": "application/json"}, b'{"detail":"no"}') if seen.path == path else None

    with servers.running("tests.envs.quest:Quest") as upstream, stub(upstream.url, refuse) as platform:
        run = in_process("someone/quset", "-o", str(tmp_path / "quest.py"),
                         env={"OPENREWARD_API_KEY": KEY, "OPENREWARD_SESSION_URL": platform.url})
    assert run.returncode == 2
    assert one_line(run.stderr) == (f"orsgen: error: fetching the tools of catalog environment someone/quset failed: "
                                    f"{platform.url}{path} answered HTTP {status}: no: {hint}")


# e. A server that takes the connection and never answers ----------------------------------------------------------


@pytest.fixture
def silent() -> Iterator[str]:
    """A 127.0.0.1 socket that accepts every connection and never answers."""
    listener = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    done = threading.Event()

    def accept() -> None:
        while not done.is_set():
            try:
                held.append(listener.accept()[0])
            except OSError:
                return

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    done.set()
    listener.close()
    for conn in held:
        conn.close()


def test_a_server_that_never_answers_names_the_timeout_and_how_to_raise_it(silent, tmp_path):
    """Was: "cannot reach ORS server at URL: timed out (3 attempts)", after 30 s, naming neither."""
    hung = in_process(silent, "-o", str(tmp_path / "x.py"), env={"ORSGEN_WIRE_TIMEOUT": "0.3"})
    assert hung.returncode == 2
    assert one_line(hung.stderr) == (
        f"orsgen: error: {silent}/list_environments: no answer within 0.3 s (the server took the connection): "
        "stuck, or slow? ORSGEN_WIRE_TIMEOUT=SECONDS waits longer (3 attempts)")
    bad = in_process(silent, "-o", str(tmp_path / "x.py"), env={"ORSGEN_WIRE_TIMEOUT": "soon"})
    assert bad.returncode == 2
    assert one_line(bad.stderr) == ("orsgen: error: ORSGEN_WIRE_TIMEOUT='soon': give the seconds a request may "
                                    "wait, a number above 0 (default 10, 60 to open a session)")
    assert not (tmp_path / "x.py").exists()


# f. DriftError says what `--check` says ---------------------------------------------------------------------------


def test_drift_error_names_the_change_as_check_does(echo_server, tmp_path):
    """A module pinned with an argument the server no longer has (`echo`'s `loud`) and one whose type changed
    (`hint`'s `level`, a string in the pin). Was: "~ echo (schema or description changed); ~ hint (...)"."""
    with urllib.request.urlopen(f"{echo_server.url}/echo/tools") as response:
        served = json.load(response)
    pinned = json.loads(json.dumps(served))
    pinned["tools"][1]["input_schema"]["properties"]["level"]["type"] = "string"
    pinned["tools"][0]["input_schema"]["properties"]["loud"] = {"type": "boolean"}
    tools = tmp_path / "tools.json"
    tools.write_text(json.dumps(pinned))
    module = tmp_path / "pinned.py"
    assert in_process(str(tools), "--env", "echo", "-o", str(module)).returncode == 0
    check = in_process("--check", echo_server.url, "-o", str(module))
    assert check.returncode == 1
    said = [line.strip() for line in check.stdout.splitlines() if line.startswith(("  ~ echo", "  ~ hint"))]
    assert said == ["~ echo: argument loud removed", "~ hint: argument level: type changed"], check.stdout
    mod = load(module)
    with pytest.raises(mod.DriftError) as raised:
        mod.Echo(url=echo_server.url).reset(task_index=0)
    mod.close_all()
    message = str(raised.value)
    assert "\n" not in message
    assert f": {'; '.join(said)}. Regenerate the module" in message
    assert message.endswith("or set ORSGEN_DRIFT_CHECK=0 to train anyway.")


# g. mypy on a generated folder beside the code that imports it ----------------------------------------------------


def mypy(folder: Path, *paths: str) -> subprocess.CompletedProcess:
    return processes.run([sys.executable, "-m", "mypy", "--no-incremental", *paths], cwd=folder,
                         capture_output=True, text=True)


@pytest.mark.slow
def test_a_folder_orsgen_creates_is_a_package_mypy_checks_beside_user_code(echo_server, tmp_path):
    root = project(tmp_path / "proj")
    (root / "train.py").write_text("from gen.echo import Echo\n\nprint(Echo().echo(text='apple'))\n")
    first = in_process(echo_server.url, "-o", "gen/echo.py", cwd=root)
    assert first.returncode == 0 and first.stderr == "", first
    assert first.stdout.splitlines()[1] == ("wrote gen/__init__.py: empty, so that gen/ is a package (imports and "
                                            "mypy name the module once)")
    assert (root / "gen" / "__init__.py").read_bytes() == b""
    before = {p.name: p.read_bytes() for p in (root / "gen").iterdir()}
    again = in_process(echo_server.url, "-o", "gen/echo.py", cwd=root)
    assert again.stdout == "gen/echo.py: unchanged\n" and again.stderr == ""
    assert {p.name: p.read_bytes() for p in (root / "gen").iterdir()} == before  # byte-identical rerun
    check = in_process("--check", echo_server.url, "-o", "gen/echo.py", cwd=root)
    assert check.returncode == 0 and check.stdout == "gen/echo.py: up to date\n"
    typed = mypy(root, "gen", "train.py")
    assert typed.returncode == 0, typed.stdout

    # A folder that was there already, not a package: one line saying how to type-check it; nothing created.
    (root / "other").mkdir()
    (root / "use.py").write_text("from other.echo import Echo\n\nprint(Echo().echo(text='apple'))\n")
    noted = in_process(echo_server.url, "-o", "other/echo.py", cwd=root)
    assert noted.returncode == 0
    assert noted.stderr == ('orsgen: note: other/ has no __init__.py, so mypy on it beside the code importing it '
                            'says "Source file found twice": add an empty other/__init__.py\n')
    assert sorted(p.name for p in (root / "other").iterdir()) == ["echo.py"]
    assert "Source file found twice" in mypy(root, "other", "use.py").stdout  # the note is right...
    (root / "other" / "__init__.py").write_text("")
    assert mypy(root, "other", "use.py").returncode == 0  # ... and so is its fix
