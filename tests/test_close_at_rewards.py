"""A batch's sessions close once GRPOTrainer has read its rewards (issue 28: the close is no longer paid by the next
batch's first reset): the server has them closed while the trainer is still in the step, a tool called after that
gets one line, and the reward functions that run before TRL's own `get_reward()` (sync ones) or after it (async
ones) still reach open sessions. A trainer that overrides TRL's reward computation keeps them until the next reset.
"""

import json
import time

import pytest
from orsgen.runtime import ToolError

from tests.harness import trainers
from tests.harness.generation import served
from tests.harness.trainers import tool_methods

CLOSED = "its session closed once the trainer had read the batch's rewards"


def add_one(i: int, prompt: str) -> str:
    return "<tool>" + json.dumps({"name": "add", "arguments": {"n": 1}}) + "</tool><|eot|>"


@pytest.fixture(scope="module")
def tally(tmp_path_factory):
    with served("tests.envs.tally:Tally", tmp_path_factory.mktemp("tally"), "tally") as found:
        yield found


def grpo(mod, out_dir, steps: int, **given):
    conversation = [{"role": "user", "content": "tally task 0"},
                    {"role": "assistant", "content": "", "tool_calls": [
                        {"type": "function", "function": {"name": "add", "arguments": {"n": 1}}}]},
                    {"role": "assistant", "content": "done"}]
    return trainers.trainer(mod.Tally, str(out_dir), steps, tools=tool_methods(mod.Tally()),
                            conversations=[conversation], train_dataset=mod.dataset(num_tasks=2), first_turn=add_one,
                            **given)


@pytest.mark.trainer
@pytest.mark.parametrize("own_rewards", [False, True], ids=["GRPOTrainer", "overridden"])
def test_a_batch_closes_once_trl_has_read_its_rewards(tally, tmp_path, own_rewards):
    """At the end of step 1 (after the backward pass, before step 2's resets): with GRPOTrainer the server has
    closed all 8 sessions, a tool call gets one line and the episode's reward is still there; with a subclass that
    overrides `_calculate_rewards` (it could use the environments after TRL's part), all 8 are still open and
    usable."""
    from transformers import TrainerCallback
    from trl import GRPOTrainer

    server, mod = tally
    mod.close_all()

    class OwnRewards(GRPOTrainer):  # type: ignore[misc]
        def _calculate_rewards(self, *args):
            return super()._calculate_rewards(*args)

    seen: dict = {}
    holder: list = []

    class AtStepEnd(TrainerCallback):  # type: ignore[misc]
        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step != 1:
                return
            deadline = time.monotonic() + 10
            while not own_rewards and server.open_sessions() and time.monotonic() < deadline:
                time.sleep(0.05)  # the closes were sent when TRL read the rewards; the server answers them
            seen["open"] = len(server.open_sessions())
            env = holder[0].environments[0]
            seen["reward"] = env.reward
            try:
                seen["call"] = env.add(n=1)
            except ToolError as exc:
                seen["call"] = str(exc)

    trainer = grpo(mod, tmp_path, 2, callbacks=[AtStepEnd()], trainer_class=OwnRewards if own_rewards else None)
    holder.append(trainer)
    trainer.train()
    mod.close_all()
    assert seen["reward"] == 1.0  # the episode's figures outlive its session
    if own_rewards:
        assert seen["open"] == 8 and seen["call"].startswith("total 2 after 2 calls"), seen
    else:
        assert seen["open"] == 0 and seen["call"] == f"add: this episode is over: {CLOSED}", seen
    rewards = [e["rewards/Tally/mean"] for e in trainer.state.log_history if "rewards/Tally/mean" in e]
    assert rewards == [1.0, 1.0]
    assert server.open_sessions() == []


@pytest.mark.trainer
def test_reward_functions_reach_open_sessions_before_and_after_trls_own(tally, tmp_path):
    """A sync reward function (TRL runs it before its own `get_reward()`) and an async one (after it) each call a
    tool on every rollout's session: every call reaches the server and answers; the batch closes after both."""
    server, mod = tally
    mod.close_all()
    results: dict[str, list] = {"sync": [], "async": []}

    def sync_calls(environments, **kwargs):
        results["sync"] += [env.add(n=10) for env in environments]
        return [0.0] * len(environments)

    async def async_calls(environments, **kwargs):
        for env in environments:
            try:
                results["async"].append(env.add(n=100))
            except ToolError as exc:
                results["async"].append(str(exc))
        return [0.0] * len(environments)

    before = sum(1 for e in server.log() if e["request"].endswith("/call"))
    trainer = grpo(mod, tmp_path, 1, reward_funcs=[sync_calls, async_calls])
    trainer.train()
    mod.close_all()
    calls = sum(1 for e in server.log() if e["request"].endswith("/call")) - before
    assert [r.split(" after")[0] for r in results["sync"]] == ["total 11"] * 8, results
    assert [r.split(" after")[0] for r in results["async"]] == ["total 111"] * 8, results
    assert calls == 8 * 3  # the model's, the sync function's and the async function's
    assert server.open_sessions() == []
