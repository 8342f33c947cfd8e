"""Bad input: one clear line on stderr, exit code 2, and an existing output file left untouched. The command runs as
a user runs it (a subprocess): what else reaches its stderr (a warning, a traceback) is part of what is checked."""

import pytest

from tests.harness.generation import orsgen
from tests.harness.servers import free_port

OLD = "# the previous adapter\n"


@pytest.fixture
def existing(tmp_path):
    out = tmp_path / "adapter.py"
    out.write_text(OLD)
    return out


def assert_failed(result, existing, message):
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("orsgen: error: ") and message in lines[0], lines[0]
    assert existing.read_text() == OLD
    assert [p.name for p in existing.parent.iterdir()] == [existing.name]  # no temp file left behind


def test_unreachable_server(existing):
    result = orsgen(f"http://127.0.0.1:{free_port()}", "-o", str(existing))
    assert_failed(result, existing, "cannot reach ORS server")


def test_unknown_env_name(echo_server, existing):
    result = orsgen(echo_server.url, "--env", "nosuchenv", "-o", str(existing))
    assert_failed(result, existing, "unknown environment 'nosuchenv'")


def test_malformed_json_file(tmp_path, existing):
    bad = tmp_path / "tools.json"
    bad.write_text('{"tools": [')
    result = orsgen(str(bad), "-o", str(existing))
    bad.unlink()
    assert_failed(result, existing, "not valid JSON")


def test_json_without_tools(tmp_path, existing):
    bad = tmp_path / "tools.json"
    bad.write_text('{"tool": []}')
    result = orsgen(str(bad), "-o", str(existing))
    bad.unlink()
    assert_failed(result, existing, "expected a JSON object with a 'tools' list")


def test_missing_file(existing):
    result = orsgen("no/such/tools.json", "-o", str(existing))
    assert_failed(result, existing, "no such file")


def test_bad_target(existing):
    result = orsgen("not a target", "-o", str(existing))
    assert_failed(result, existing, "is not a URL")


def test_catalog_without_api_key(existing):
    result = orsgen("owner/env", "-o", str(existing), env={"OPENREWARD_API_KEY": ""})
    assert_failed(result, existing, "set OPENREWARD_API_KEY")


def test_unwritable_output(echo_server, tmp_path, existing):
    blocker = tmp_path / "file"
    blocker.write_text("")
    result = orsgen(echo_server.url, "-o", str(blocker / "adapter.py"))
    assert result.returncode == 2 and "cannot write" in result.stderr and len(result.stderr.splitlines()) == 1
    result = orsgen(echo_server.url, "-o", str(tmp_path))
    assert result.returncode == 2 and "is a directory" in result.stderr
    blocker.unlink()
    assert existing.read_text() == OLD


def test_bad_class_name(echo_server, existing):
    result = orsgen(echo_server.url, "--class-name", "not-valid", "-o", str(existing))
    assert_failed(result, existing, "not a public Python identifier")



@pytest.mark.parametrize(("stem", "fix"), [("bad-name", "bad_name"), ("class", "class_")])  # `import class` fails too
def test_output_that_cannot_be_imported(tmp_path, stem, fix):
    out = tmp_path / f"{stem}.py"
    result = orsgen(f"http://127.0.0.1:{free_port()}", "-o", str(out))  # refused before any request
    assert result.returncode == 2 and not out.exists()
    assert result.stderr.strip().splitlines() == [
        f"orsgen: error: {out}: {stem!r} is not an importable module name (use {fix}.py)"]
