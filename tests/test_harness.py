"""The harness's own promises: generation in this process gives what the command gives (exit code, stdout, stderr and
the bytes written), and the fast tier builds no trainer."""

import pytest

from tests.harness import ROOT, trainers
from tests.harness.generation import in_process, orsgen

ECHO_TOOLS = ROOT / "tests" / "golden" / "echo" / "tools.json"


@pytest.mark.parametrize("argv", [
    [str(ECHO_TOOLS), "--env", "echo", "-o", "{out}"],  # written, with its summary line
    ["--check", str(ECHO_TOOLS), "--env", "echo", "-o", "{out}"],  # missing: exit 2, one line
    ["not a target", "-o", "{out}"],  # bad input
    ["--pin-task", str(ECHO_TOOLS), "-o", "{out}"],  # argparse's own usage error
    ["--version"],  # argparse exits
], ids=["generate", "check-missing", "bad-target", "usage-error", "version"])
def test_in_process_generation_is_the_command(tmp_path, argv):
    results, written = [], []
    for run, folder in ((orsgen, tmp_path / "process"), (in_process, tmp_path / "here")):
        folder.mkdir()
        result = run(*[a.format(out="adapter.py") for a in argv], cwd=folder)
        results.append((result.returncode, result.stdout, result.stderr))
        written.append({p.name: p.read_bytes() for p in folder.iterdir()})
    assert results[0] == results[1]
    assert written[0] == written[1]


def test_the_fast_tier_builds_no_trainer(tmp_path):
    with pytest.raises(RuntimeError, match="without @pytest.mark.trainer"):
        trainers.trainer(object, str(tmp_path), 1, tools=[])
