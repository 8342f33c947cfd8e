"""AsyncGRPOTrainer's worker: a group is counted (`orsgen/groups_zero_spread`) once every one of its rollouts
emitted `episode_end` (issue 41, read-only note c: "a group one of whose rollouts never emits it is never counted").
Shown impossible for a group TRL trains on: TRL's worker calls each rollout's `get_reward()` before it counts the
rollout into its group, and `get_reward()` ends the episode whatever happened in it (a start that failed, a session
the environment ended, a scored one). So every group TRL scores was counted, whole; what is held back is only the
groups TRL had not completed when the worker stopped, which TRL never scores either. TRL's own worker code in a
thread (tests/harness/async_worker.py), the mixed environment served live."""

import threading
from collections import Counter
from typing import Any

import pytest
from orsgen.runtime import hooks, worker_metrics

from examples import tiny
from tests.harness import servers
from tests.harness.async_worker import run_worker
from tests.harness.completions import serving
from tests.harness.generation import in_process, load
from tests.harness.trainers import tool_methods

pytestmark = pytest.mark.trainer  # runs TRL's worker code: also under the oldest TRL (.ci/trl-oldest)
SIZE = 4


def by_group(samples: list[Any]) -> Counter[int]:
    return Counter(sample.group_id for sample in samples)


def test_every_group_trl_scores_was_counted_whole_whatever_its_rollouts_met(tmp_path):
    with servers.running("tests.envs.mixed:Mixed", env={"ORSGEN_COUNT_REQUESTS": "1"}) as server:
        out = tmp_path / "mixed_adapter.py"
        made = in_process(server.url, "-o", str(out))
        assert made.returncode == 0, made.stderr
        mod = load(out)

        class Mixed(mod.Mixed):
            start_retries = 0  # task 1 fails at once

        Mixed.__name__ = "Mixed"
        conversations = [tiny.conversation("brittle task 0", name, {}, "scored") for name in ("score", "crash")]
        tok = tiny.tokenizer(conversations, tool_methods(mod.Mixed()))
        turns = iter(range(10_000))
        lock = threading.Lock()

        def script(prompt_text: str) -> str:
            if "<|tool|>" in prompt_text:
                return "done<|eot|>"
            with lock:
                n = next(turns)
            return tiny.call_text("crash" if n % 3 == 2 else "score", {})  # some sessions the environment ends

        ended: Counter[int] = Counter()
        met: dict[int, set[str]] = {}  # per group, how its rollouts ended

        def end(record: Any) -> None:
            ended[record.episode.group] += 1
            how = "session ended" if record.episode.gone else str(record.reason or "scored")
            met.setdefault(record.episode.group, set()).add(how)

        hooks.add("episode_end", end)
        pusher = worker_metrics.Pusher()  # what ORSGEN_EPISODE_METRICS makes in the worker's process
        try:
            with serving(tok, script) as completions:
                run = run_worker(
                    lambda samples: sum(n == SIZE for n in by_group(samples).values()) >= 6, timeout=120,
                    model_name="tiny", dataset=mod.dataset(), reward_funcs=[], processing_class=tok,
                    eos_token_ids=[tok.eos_token_id], environment_factory=Mixed, num_generations=SIZE,
                    max_inflight_tasks=8, vllm_server_url=completions.url, max_tokens=64,
                    max_tool_calling_iterations=2,
                )
        finally:
            pusher.close()
            hooks.remove("episode_end", end)
        assert run.error is None and not run.failed, run.exception_info
        mod.close_all()

    counted: Counter[int] = Counter()
    for payload in run.metrics:
        if worker_metrics.KEY in payload:
            for group, rewards in payload[worker_metrics.KEY].group_rewards.items():
                counted[group] += len(rewards)
    scored = by_group(run.samples)
    assert set(scored) <= set(counted)  # every group TRL scored was counted ...
    assert set(counted.values()) == {SIZE}  # ... whole, once: each of its rollouts had ended
    assert {g for g, n in ended.items() if n == SIZE} == set(counted)  # counted exactly when all its rollouts ended
    assert not set(scored) - {g for g, n in ended.items() if n == SIZE}  # TRL never scored a group before that
    # among them, groups that never started and groups with sessions the environment ended
    assert any(met[g] == {"not_started"} for g in scored), met
    assert any("session ended" in met[g] for g in scored), met
