"""A real GRPOTrainer run, offline on CPU, whose tools are a generated adapter's methods."""

import re

import pytest
from orsgen.demo import recording, tool_methods
from orsgen.testing import tiny


@pytest.mark.parametrize("steps", [2])
def test_grpo_trains_against_generated_adapter(echo_server, generate, tmp_path, steps):
    import torch
    from trl import GRPOTrainer

    torch.set_num_threads(2)
    mod = generate(echo_server.url)
    train = mod.dataset(num_tasks=4)
    probe = mod.Echo()
    conversations = [
        tiny.conversation(probe.reset(**row), "echo", {"text": row["target"]}, row["target"]) for row in train
    ]
    probe._close()
    tok = tiny.tokenizer(conversations, tool_methods(probe))
    words = list(train["target"])

    def first_turn(i: int, prompt: str) -> str:
        word = re.search(r"Echo the word (\w+)", prompt).group(1)
        return tiny.call_text("echo", {"text": word if i % 2 == 0 else word + "x"})  # half right, half wrong

    env_class = recording(mod.Echo)
    trainer = GRPOTrainer(
        model=tiny.model(tok),
        processing_class=tok,
        args=tiny.grpo_config(str(tmp_path / "out"), steps, max_tool_calling_iterations=1),
        train_dataset=train,
        environment_factory=env_class,
        rollout_func=tiny.scripted_rollouts(first_turn),
    )
    assert [t.__name__ for t in trainer.tools] == ["echo", "hint"]
    trainer.train()
    mod.close_all()

    assert trainer.state.global_step == steps
    echo_calls = [(args["text"], result) for name, args, result in env_class.calls if name == "echo"]
    assert len(echo_calls) >= 8 * steps  # every rollout's scripted call went through the adapter to the server
    assert {text for text, _ in echo_calls} >= {words[0], words[0] + "x"}
    logs = [entry for entry in trainer.state.log_history if "rewards/Echo/mean" in entry]
    assert len(logs) == steps
    for entry in logs:
        # the rewards TRL used are the ones get_reward() returned: 1.0 for the right word, 0.0 otherwise
        assert entry["rewards/Echo/mean"] == pytest.approx(0.5)
        assert entry["tools/call_frequency"] >= 1.0
        assert entry["tools/failure_frequency"] == 0.0
    assert sorted(env.get_reward() for env in trainer.environments) == [0.0] * 4 + [1.0] * 4
