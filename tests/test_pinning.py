"""Pinning and drift: byte-identical output, --check exit codes, offline regeneration, pyproject targets,
run-time drift detection and template overrides. Generation runs in this process, but for the hash seeds (a
subprocess each: the seed is read when an interpreter starts)."""

import ast
import json
import shutil

import pytest

from tests.harness import ROOT, servers
from tests.harness.generation import in_process, load, orsgen

CORPUS = ROOT / "tests" / "corpora" / "openreward-toolsets" / "claude_code.json"


def test_output_is_identical_across_hash_seeds(tmp_path):
    outputs = []
    for seed in ("0", "1", "12345"):
        out = tmp_path / f"seed{seed}" / "adapter.py"
        out.parent.mkdir()
        # the same command in another directory: the header records the command, so it must match too
        result = orsgen(str(CORPUS), "--env", "claude", "-o", "adapter.py", cwd=out.parent, env={"PYTHONHASHSEED": seed})
        assert result.returncode == 0, result.stderr
        outputs.append(out.read_bytes())
    assert outputs[0] == outputs[1] == outputs[2]
    assert b"timestamp" not in outputs[0].lower()


def drift_server(variant, port=None):
    return servers.start("tests.envs.drift:Drift", port=port, env={"DRIFT_VARIANT": variant})


def test_check_exit_codes_follow_the_live_server(tmp_path):
    out = tmp_path / "drift.py"
    server = drift_server("a")
    port = server.url.rsplit(":", 1)[1]
    try:
        assert in_process(server.url, "-o", str(out)).returncode == 0
        fresh = in_process("--check", server.url, "-o", str(out))
        assert fresh.returncode == 0 and "up to date" in fresh.stdout
    finally:
        server.stop()
    original = out.read_text()
    server = drift_server("b", port=int(port))
    try:
        stale = in_process("--check", server.url, "-o", str(out))
        assert stale.returncode == 1, stale.stderr
        assert "+ shout: added" in stale.stdout and "~ say: argument text: description changed" in stale.stdout
        assert f"  fix: orsgen {server.url} -o {out.as_posix()}" in stale.stdout  # the command that mends it
        assert "-            text: What to say\n" not in stale.stdout  # the whole diff only with --diff
        diff = in_process("--check", "--diff", server.url, "-o", str(out))
        assert diff.returncode == 1 and "-            text: What to say\n" in diff.stdout
        assert out.read_text() == original  # --check writes nothing
    finally:
        server.stop()
    down = in_process("--check", server.url, "-o", str(out))
    assert down.returncode == 2 and "cannot reach" in down.stderr
    missing = in_process("--check", server.url, "-o", str(tmp_path / "missing.py"))
    assert missing.returncode == 2


def test_check_offline_against_a_snapshot_file(tmp_path):
    out = tmp_path / "claude.py"
    assert in_process(str(CORPUS), "--env", "claude", "-o", str(out)).returncode == 0
    assert in_process("--check", str(CORPUS), "--env", "claude", "-o", str(out)).returncode == 0
    changed = json.loads(CORPUS.read_text())
    changed["tools"] = changed["tools"][1:]
    edited = tmp_path / "claude_edited.json"
    edited.write_text(json.dumps(changed))
    result = in_process("--check", str(edited), "--env", "claude", "-o", str(out))
    assert result.returncode == 1 and f"- {json.loads(CORPUS.read_text())['tools'][0]['name']}: removed" in result.stdout
    not_ours = tmp_path / "plain.py"
    not_ours.write_text("x = 1\n")
    result = in_process("--check", str(CORPUS), "--env", "claude", "-o", str(not_ours))
    assert result.returncode == 2 and "not an orsgen module" in result.stderr


def test_regenerate_offline_from_the_embedded_snapshot(echo_server, tmp_path):
    out = tmp_path / "generated" / "echo.py"
    assert in_process(echo_server.url, "-o", "generated/echo.py", cwd=tmp_path).returncode == 0
    before = out.read_text()
    out.write_text(before.replace('"""Echo text back.', '"""Edited by hand.'))
    # No server is named: the module's own snapshot is the input.
    result = in_process("generated/echo.py", "-o", "generated/echo.py", cwd=tmp_path,
                        env={"OPENREWARD_SESSION_URL": "http://127.0.0.1:9"})
    assert result.returncode == 0, result.stderr
    assert out.read_text() == before
    assert in_process("--check", "generated/echo.py", "-o", "generated/echo.py", cwd=tmp_path).returncode == 0


def test_pyproject_targets(echo_server, tmp_path):
    shutil.copy(CORPUS, tmp_path / "claude.json")
    (tmp_path / "pyproject.toml").write_text(
        "[tool.orsgen.targets.echo]\n"
        f'target = "{echo_server.url}"\n'
        'output = "gen/echo.py"\n\n'
        "[tool.orsgen.targets.claude]\n"
        'target = "claude.json"\n'
        'output = "gen/claude.py"\n'
        'env = "claude"\n'
        'class-name = "Claude"\n'
    )
    result = in_process(cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "wrote gen/echo.py" in result.stdout and "wrote gen/claude.py" in result.stdout
    assert "class Claude(runtime.Adapter)" in (tmp_path / "gen" / "claude.py").read_text()
    assert in_process("--check", cwd=tmp_path).returncode == 0
    echo = tmp_path / "gen" / "echo.py"
    echo.write_text(echo.read_text() + "# local edit\n")
    stale = in_process("--check", cwd=tmp_path)
    assert stale.returncode == 1 and "gen/echo.py: stale" in stale.stdout and "gen/claude.py: up to date" in stale.stdout
    (tmp_path / "pyproject.toml").write_text("[tool.orsgen]\n")
    assert in_process(cwd=tmp_path).returncode == 2


def test_runtime_drift_fails_fast_with_a_readable_diff(tmp_path, monkeypatch):
    out = tmp_path / "drift_adapter.py"
    server = drift_server("a")
    try:
        assert in_process(server.url, "-o", str(out)).returncode == 0
        mod = load(out)
        assert mod.Drift().reset(task_index=1) == "task 1"
        mod.close_all()
    finally:
        server.stop()
    server = drift_server("b")
    try:
        mod = load(out)
        with pytest.raises(mod.DriftError, match=r"\+ shout: added; ~ say: argument text: description changed\. Regenerate"):
            mod.Drift(url=server.url).reset(task_index=0)
        assert mod.Drift(url=server.url, check_drift=False).reset(task_index=0) == "task 0"
        monkeypatch.setenv("ORSGEN_DRIFT_CHECK", "0")
        assert load(out).Drift(url=server.url).reset(task_index=1) == "task 1"
        mod.close_all()
    finally:
        server.stop()


def test_template_override_shadows_one_file(multi_server, tmp_path):
    templates = tmp_path / "templates"
    templates.mkdir()
    builtin = (ROOT / "templates" / "bundle.py.jinja").read_text()
    (templates / "bundle.py.jinja").write_text("# house rule: reviewed bundles only\n" + builtin)
    out = tmp_path / "gen"
    result = in_process(multi_server.url, "--env", "echo", "--env", "quiz", "-o", str(out),
                        "--templates", str(templates))
    assert result.returncode == 0, result.stderr
    assert (out / "bundle.py").read_text().startswith("# house rule: reviewed bundles only\n")
    echo = (out / "echo.py").read_text()
    assert "house rule" not in echo and "class Echo(runtime.Adapter)" in echo  # the module template is the built-in
    assert f"--templates {templates.as_posix()}" in echo.splitlines()[1]  # the header's command says how it was made


def test_a_module_regenerates_with_the_options_it_records(tmp_path):
    """`orsgen MODULE` reads ORSGEN_OPTIONS (data, not the header's comment); a module written before it existed
    (orsgen 0.2.0: the same module without those two lines) is read from its header's command."""
    templates = tmp_path / "tpl"
    templates.mkdir()
    (templates / "module.py.jinja").write_text((ROOT / "templates" / "module.py.jinja").read_text() + "\n# house template\n")
    made = orsgen(str(CORPUS), "--env", "claude", "--class-name", "Custom", "--async-tools", "--templates",
                  "tpl", "-o", "made.py", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    text = (tmp_path / "made.py").read_text()
    recorded = load(tmp_path / "made.py").ORSGEN_OPTIONS
    assert recorded == {"target": CORPUS.as_posix(), "env": "claude", "class-name": "Custom", "templates": "tpl",
                        "async-tools": True}
    lines = text.splitlines(keepends=True)
    assert lines[-1] == "# house template\n" and "--class-name Custom" in lines[1]
    # The header's command is a comment: garbled, it is rewritten from the recorded options.
    garbled = text.replace(lines[1], "#   orsgen something-else -o elsewhere.py\n", 1)
    (tmp_path / "garbled.py").write_text(garbled)
    again = orsgen("garbled.py", "-o", "made.py", cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert (tmp_path / "made.py").read_text() == text
    # A module of the previous version: no ORSGEN_OPTIONS, its header's command says the options.
    statement = next(n for n in ast.parse(text).body if isinstance(n, ast.AnnAssign)
                     and isinstance(n.target, ast.Name) and n.target.id == "ORSGEN_OPTIONS")
    assert lines[statement.lineno - 2].startswith("# The options it was generated with")  # its comment goes too
    old = "".join(lines[: statement.lineno - 2] + lines[statement.end_lineno:])
    (tmp_path / "old.py").write_text(old)
    check = orsgen("--check", "old.py", "-o", "made.py", cwd=tmp_path)
    assert check.returncode == 0 and "made.py: up to date" in check.stdout, check.stdout + check.stderr
    rewritten = orsgen("old.py", cwd=tmp_path)
    assert rewritten.returncode == 0, rewritten.stderr
    assert (tmp_path / "old.py").read_text() == text.replace("-o made.py", "-o old.py").replace(
        "from made import", "from old import").replace('"made.tasks.json"', '"old.tasks.json"')
