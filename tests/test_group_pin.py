"""The generator pins group scoring: the snapshot records it (and the candidates' block types) only for an
environment that scores groups, so other modules are byte for byte what they were; --check and --report say it."""

import json
import shutil

import pytest

from tests.harness import servers
from tests.harness.generation import load, orsgen

GOLDEN = "tests/golden/judged/tools.json"


def test_the_snapshot_records_group_scoring_and_check_reports_a_change(tmp_path):
    tools = tmp_path / "tools.json"
    shutil.copy(GOLDEN, tools)
    out = tmp_path / "judged.py"
    assert orsgen(str(tools), "--env", "judged", "-o", str(out)).returncode == 0
    mod = load(out)
    assert mod.SNAPSHOT["supports_score_group"] is True and callable(mod.group_reward)
    assert mod.MESSAGE_BLOCK_TYPES == ["image", "reasoning", "text", "tool_call", "tool_result"]
    assert orsgen("--check", str(tools), "--env", "judged", "-o", str(out)).returncode == 0

    reply = json.loads(tools.read_text())
    reply["supports_score_group"] = False  # the environment stopped scoring groups
    tools.write_text(json.dumps(reply))
    stale = orsgen("--check", str(tools), "--env", "judged", "-o", str(out))
    assert stale.returncode == 1 and "~ supports_score_group: true -> null" in stale.stdout, stale.stdout
    plain = tmp_path / "plain.py"
    assert orsgen(str(tools), "--env", "judged", "-o", str(plain)).returncode == 0
    text = plain.read_text()
    assert "group_reward" not in text and "supports_score_group" not in text and "MESSAGE_BLOCK_TYPES" not in text


def test_report_says_the_environment_scores_groups():
    report = orsgen("--report", GOLDEN, "--env", "judged")
    assert report.returncode == 0, report.stderr
    assert "group scoring: group_reward posts each GRPO group to score_group" in report.stdout


@pytest.mark.slow
def test_a_live_server_without_group_scoring_pins_nothing_of_it(tmp_path):
    with servers.running("tests.envs.judged:Unjudged") as server:
        out = tmp_path / "unjudged.py"
        assert orsgen(server.url, "-o", str(out)).returncode == 0
    assert "supports_score_group" not in out.read_text() and "group_reward" not in out.read_text()
