"""The `orsgen` command as users with odd set-ups run it (issue 26's last review): a pasted API key, a password in
the URL, a server that echoes its secrets, pyproject values of the wrong type, two targets for one output, an output
that is not an orsgen module or not UTF-8, a symlinked module, templates that raise or drop the snapshot, a module's
SNAPSHOT edited by hand, a task list that cannot be fetched. Each ends in one line and exit 2 (or 1 for a module
that is stale), writes nothing wrong, and shows no secret. Where the command itself is under test (tracebacks,
exit codes, what reaches stderr) it runs as a subprocess; otherwise in this process."""

import json
import os
import textwrap

import pytest

from tests.harness.generation import in_process, orsgen
from tests.harness.stub_ors import Reply, stub

KEY = "sk-orsgen-test-0123456789abcdef"
MINE = 'print("my own code")\n'


def one_error_line(result, *words):
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2, result.stdout + result.stderr
    assert len(lines) == 1 and lines[0].startswith("orsgen: error: "), result.stderr
    assert all(w in lines[0] for w in words), lines[0]
    return lines[0]


def project(tmp_path, body):
    (tmp_path / "pyproject.toml").write_text(textwrap.dedent(body))
    return tmp_path


# A key or a password where it should not be ---------------------------------------------------------------------


@pytest.mark.parametrize("key", [KEY + "\n", " " + KEY, KEY + "\u2603"], ids=["newline", "space", "non-ascii"])
def test_an_api_key_no_header_can_carry_is_refused_without_showing_it(tmp_path, key):
    # Was: http.client's ValueError "Invalid header value b'sk-...\n'": the key in a traceback, and exit 1.
    with stub(None) as server:
        result = orsgen(server.url, "-o", str(tmp_path / "echo.py"), env={"OPENREWARD_API_KEY": key})
    one_error_line(result, "OPENREWARD_API_KEY")
    assert "0123456789abcdef" not in result.stdout + result.stderr
    assert server.seen == []  # refused before any request
    assert not (tmp_path / "echo.py").exists()


def test_a_url_with_a_password_is_refused_without_echoing_it(tmp_path):
    with stub(None) as server:
        url = server.url.replace("http://", "http://bob:hunter2-secret@")
        result = orsgen(url, "-o", str(tmp_path / "echo.py"))
    line = one_error_line(result, server.url)
    assert "hunter2" not in line and "bob" not in line
    assert server.seen == []


def test_a_secret_the_server_echoes_in_base64_is_masked(echo_server, tmp_path):
    # The X-Secrets header is base64 of the values: a server putting it in its error detail (shortened to 200
    # characters) showed them to anyone who decodes it.
    def echo_secrets(seen):
        if seen.path != "/create_session":
            return None
        detail = {"detail": f"refused secrets {seen.headers.get('x-secrets', '')}"}
        return Reply(500, {"Content-Type": "application/json"}, json.dumps(detail).encode())

    with stub(echo_server.url, echo_secrets) as server:
        result = orsgen(server.url, "--secret", "GRADER_KEY", "--task-tools-from", "0", "-o",
                        str(tmp_path / "echo.py"),
                        env={"GRADER_KEY": "grader-value-0123456789", "ORSGEN_WIRE_BACKOFF_SCALE": "0.01"})
        sent = next(s.headers["x-secrets"] for s in server.seen if s.path == "/create_session")
    one_error_line(result, "HTTP 500")
    for start in range(0, len(sent) - 12, 4):  # no run of the header's base64 survives
        assert sent[start:start + 12] not in result.stderr
    assert "grader-value" not in result.stderr


# pyproject.toml values of the wrong type, two targets for one output ----------------------------------------------


@pytest.mark.parametrize("line, words", [
    ('pin-tasks = "false"', ["pin-tasks must be true or false"]),  # was: bool("false"), the tasks pinned
    ("templates = 1", ["templates must be a string"]),  # was: a TypeError traceback
    ('env = ["echo"]', ["env must be a string"]),  # was: asked the server for environment "['echo']"
])
def test_pyproject_values_of_the_wrong_type_are_refused(echo_server, tmp_path, line, words):
    project(tmp_path, f"""
        [tool.orsgen.targets.echo]
        target = "{echo_server.url}"
        output = "gen/echo.py"
        {line}
        """)
    one_error_line(in_process(cwd=tmp_path), "[tool.orsgen.targets.echo]", *words)
    assert not (tmp_path / "gen").exists()


def test_a_pyproject_tool_table_that_is_not_a_table_is_one_line(tmp_path):
    project(tmp_path, "tool = 3  # [tool.orsgen]\n")
    one_error_line(orsgen(cwd=tmp_path), "has no [tool.orsgen.targets.NAME] tables")


def test_two_targets_writing_one_output_are_refused(echo_server, tmp_path):
    # Was: the second replaced the first, and `--check` found one of them stale for ever.
    project(tmp_path, f"""
        [tool.orsgen.targets.first]
        target = "{echo_server.url}"
        output = "gen/echo.py"

        [tool.orsgen.targets.second]
        target = "{echo_server.url}"
        output = "gen/../gen/echo.py"
        class-name = "Other"
        """)
    one_error_line(in_process(cwd=tmp_path), "targets first and second both write")
    assert not (tmp_path / "gen").exists()


# Outputs that are not what orsgen wrote ----------------------------------------------------------------------------


def test_a_file_orsgen_did_not_write_is_not_replaced(echo_server, tmp_path):
    mine = tmp_path / "main.py"
    mine.write_text(MINE)
    one_error_line(in_process(echo_server.url, "-o", str(mine)), "was not written by orsgen", "not replaced")
    assert mine.read_text() == MINE
    empty = tmp_path / "empty.py"  # `touch` first: still written
    empty.write_text("")
    assert in_process(echo_server.url, "-o", str(empty)).returncode == 0
    assert empty.read_text().startswith("# Generated by orsgen")


def test_an_output_that_is_not_utf8_is_one_line_not_a_traceback(echo_server, tmp_path):
    # Was: UnicodeDecodeError, exit 1 (which --check documents as "stale").
    latin = tmp_path / "latin.py"
    latin.write_bytes(b'x = "\xff\xfe"\n')
    one_error_line(orsgen(echo_server.url, "-o", str(latin)), "was not written by orsgen")
    one_error_line(orsgen(echo_server.url, "-o", str(latin), "--check"), "cannot check", "not UTF-8")
    assert latin.read_bytes() == b'x = "\xff\xfe"\n'


def test_a_symlinked_module_is_written_through_its_link(echo_server, tmp_path):
    # Was: the link replaced by a file (its target left stale), and --check of the link stale for ever (its
    # tasks file named after the link, its header after the target).
    real = tmp_path / "real" / "echo.py"
    assert in_process(echo_server.url, "-o", str(real), "--pin-tasks").returncode == 0
    real.write_text(real.read_text() + "# edited\n")
    link = tmp_path / "link.py"
    link.symlink_to(real)
    assert in_process(echo_server.url, "-o", str(link), "--pin-tasks").returncode == 0
    assert link.is_symlink() and "# edited" not in real.read_text()
    assert sorted(p.name for p in real.parent.iterdir()) == ["__init__.py", "echo.py", "echo.tasks.json"]
    check = in_process(echo_server.url, "-o", str(link), "--pin-tasks", "--check")
    assert check.returncode == 0, check.stdout + check.stderr


# Templates ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("template, words", [
    (b'{{ "%s" % (1, 2) }}\n', ["module.py.jinja, line 1", "TypeError"]),
    (b"\xff\xfe{{ x }}\n", ["not UTF-8"]),
], ids=["raises", "not-utf8"])
def test_a_template_that_raises_or_is_not_utf8_is_one_line(echo_server, tmp_path, template, words):
    folder = tmp_path / "templates"
    folder.mkdir()
    (folder / "module.py.jinja").write_bytes(template)
    one_error_line(orsgen(echo_server.url, "--templates", str(folder), "-o", str(tmp_path / "echo.py")), *words)
    assert not (tmp_path / "echo.py").exists()


def test_templates_that_drop_the_snapshot_are_refused(echo_server, tmp_path):
    # Was: written, exit 0; then `--check` and regeneration from the module could not read it.
    folder = tmp_path / "templates"
    folder.mkdir()
    (folder / "module.py.jinja").write_text("# Generated by orsgen {{ version }}\nx = 1\n")
    one_error_line(in_process(echo_server.url, "--templates", str(folder), "-o", str(tmp_path / "echo.py")),
                   "cannot read back")
    assert not (tmp_path / "echo.py").exists()


# A module's SNAPSHOT edited by hand -------------------------------------------------------------------------------


def edited(module, entry):
    text = module.read_text()
    start = text.index("SNAPSHOT: dict[str, Any] = {")
    end = text.index("\n}\n", start)
    module.write_text(text[:end] + f"\n    {entry}," + text[end:])


def test_a_snapshot_edited_by_hand_is_stale_or_unreadable_never_a_traceback(echo_server, tmp_path):
    module = tmp_path / "echo.py"
    assert in_process(echo_server.url, "-o", str(module)).returncode == 0
    edited(module, '"tools": 5')
    # Against the server: the module is stale (was: a TypeError traceback, exit 1 by accident).
    live = orsgen(echo_server.url, "-o", str(module), "--check")
    assert live.returncode == 1 and "Traceback" not in live.stderr, live.stdout + live.stderr
    assert "its SNAPSHOT was edited by hand" in live.stdout  # (was: "+ echo: added", as if the server had changed)
    # From its own snapshot: it cannot be checked (was: a traceback, exit 1, i.e. "stale").
    one_error_line(orsgen(str(module), "--check"), "its SNAPSHOT cannot be read", "edited by hand")


def test_an_internal_error_exits_2_with_secrets_masked(tmp_path, monkeypatch):
    # Whatever orsgen did not foresee: exit 2 ("could not"), never --check's 1, and no secret's value shown.
    from orsgen import pipeline

    def broken(*args, **kwargs):
        key, secret = os.environ["OPENREWARD_API_KEY"], os.environ["GRADER_KEY"]
        raise RuntimeError(f"a bug holding {key!r} and {secret.encode()!r}")

    monkeypatch.setattr(pipeline, "run", broken)
    result = in_process(str(tmp_path / "tools.json"), "--secret", "GRADER_KEY", "-o", str(tmp_path / "echo.py"),
                        env={"OPENREWARD_API_KEY": KEY, "GRADER_KEY": "grader-value\n"})
    assert result.returncode == 2
    assert "Traceback" in result.stderr and "RuntimeError" in result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith("orsgen: error: internal error")
    assert KEY not in result.stderr and "grader-value" not in result.stderr


# --pin-tasks: the module and its task list move together -----------------------------------------------------------


def test_a_task_list_that_cannot_be_fetched_leaves_the_module_as_it_was(echo_server, tmp_path):
    # Was: the new module written, then the task fetch failed (exit 2), leaving a module and a task list that
    # disagree; a Ctrl-C there did the same.
    module = tmp_path / "echo.py"
    assert in_process(echo_server.url, "-o", str(module), "--pin-tasks").returncode == 0
    before = module.read_text(), (tmp_path / "echo.tasks.json").read_text()

    def no_tasks(seen):
        return Reply(400, {"Content-Type": "application/json"}, b'{"detail":"no"}') if seen.path.endswith(
            "/task_range") else None

    with stub(echo_server.url, no_tasks) as server:
        result = in_process(server.url, "-o", str(module), "--pin-tasks")  # another URL: the module would change
    one_error_line(result, "fetching the tasks")
    assert (module.read_text(), (tmp_path / "echo.tasks.json").read_text()) == before
