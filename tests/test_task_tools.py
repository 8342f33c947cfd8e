"""Task-specific tools (one adapter class per distinct set, routed by the `environment` column) and terminal tools."""

import re

import pytest

from examples import tiny
from tests.harness import servers
from tests.harness.generation import in_process, load
from tests.harness.trainers import recording, tool_methods, trainer


@pytest.fixture(scope="module")
def quest(tmp_path_factory):
    with servers.running("tests.envs.quest:Quest") as server:
        out = tmp_path_factory.mktemp("quest") / "quest.py"
        result = in_process(server.url, "--task-tools-from", "all", "-o", str(out))
        assert result.returncode == 0, result.stderr
        yield server, load(out), result


def test_task_tools_become_subclasses(quest):
    _, mod, result = quest
    assert "'hint' differs on task 5 from its first listing" in result.stderr  # reported, not silently overwritten
    assert set(mod.ENVIRONMENTS) == {"Quest", "QuestWithHint", "QuestWithPeek"}
    assert mod.TASK_ENVIRONMENTS == {1: "QuestWithHint", 3: "QuestWithHint", 5: "QuestWithHint", 4: "QuestWithPeek"}
    assert sorted(t.__name__ for t in tool_methods(mod.Quest())) == ["guess"]
    assert sorted(t.__name__ for t in tool_methods(mod.QuestWithHint())) == ["guess", "hint"]
    assert sorted(t.__name__ for t in tool_methods(mod.QuestWithPeek())) == ["guess", "peek"]
    assert [t["name"] for t in mod.SNAPSHOT["task_tools"]["tools"]] == ["hint", "peek"]
    env = mod.QuestWithHint()
    assert env.reset(task_index=3) == "Guess the word (5 letters)"
    assert env.hint(level=2) == "co"
    ds = mod.dataset()
    assert ds["environment"] == ["Quest", "QuestWithHint", "Quest", "QuestWithHint", "QuestWithPeek", "QuestWithHint"]
    mod.close_all()


def test_task_tools_from_some_tasks_and_bad_specs(quest, tmp_path):
    server, _, _ = quest
    out = tmp_path / "even.py"
    odd = in_process(server.url, "--task-tools-from", "1,3", "-o", str(out))
    assert odd.returncode == 0 and load(out).ENVIRONMENTS.keys() == {"Quest", "QuestWithHint"}
    assert "class QuestWithHint adds hint for tasks 1, 3" in odd.stdout  # the summary names the variant classes
    for spec, message in (("x", "use indices"), ("0-9", "task 6 does not exist"),
                          ("0,2", "no task of quest advertises tools beyond the shared ones")):  # an option that does nothing
        result = in_process(server.url, "--task-tools-from", spec, "-o", str(out))
        assert result.returncode == 2 and message in result.stderr


def test_terminal_reward_submits_the_final_message(quest):
    _, mod, _ = quest
    assert mod.TERMINAL_TOOL["name"] == "final" and "final" not in {t.__name__ for t in tool_methods(mod.Quest())}
    right, wrong = mod.Quest(), mod.Quest()
    right.reset(task_index=0)
    wrong.reset(task_index=0)
    completions = [[{"role": "assistant", "content": "Sun"}], [{"role": "assistant", "content": "moon"}]]
    assert mod.terminal_reward(completions, [right, wrong]) == [1.0, -1.0]
    assert right.finished and right.get_reward() is None  # counted once, by the reward function
    mod.close_all()


@pytest.mark.trainer
def test_grpo_offers_task_tools_only_to_their_tasks(quest, tmp_path):
    _, mod, _ = quest
    factories = {name: recording(cls) for name, cls in mod.ENVIRONMENTS.items()}
    run = trainer(factories, str(tmp_path / "out"), 1, threads=2,
                  tools=tool_methods(mod.QuestWithHint()) + tool_methods(mod.QuestWithPeek()),
                  conversations=[tiny.conversation("Guess the word (3 letters)", "hint", {"level": 1}, "s")],
                  train_dataset=mod.dataset(), first_turn=lambda i, prompt: tiny.call_text("hint", {"level": 1}),
                  num_generations=2, per_device_train_batch_size=12)
    run.train()
    mod.close_all()
    hinted = {name: [c for c in cls.calls if c[0] == "hint"] for name, cls in factories.items()}
    assert len(hinted["QuestWithHint"]) == 6  # tasks 1, 3, 5 x 2 generations: the tool was theirs
    assert hinted["Quest"] == [] and hinted["QuestWithPeek"] == []  # elsewhere TRL refused: not their tool
    failures = [e["tools/failure_frequency"] for e in run.state.log_history if "tools/failure_frequency" in e]
    assert failures and failures[0] == pytest.approx(0.5)
    assert all(re.fullmatch(r"[a-z]+", r) for _, _, r in hinted["QuestWithHint"])
