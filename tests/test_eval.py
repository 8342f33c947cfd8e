"""`orsgen eval` (issue 31) against the scripted endpoint (tests/harness/chat_standin.py) on the graded environment
(tests/envs/graded.py): the model is right on tasks 0 and 1 (on 1 after a call its method refuses), wrong on 2 and
3, right on 4 by a coin flipped with each episode's seed; task 5 never starts. So every figure is known exactly."""

import json
import math

import pytest
from orsgen.evaluate.target import tool_methods
from transformers.utils import get_json_schema

from tests.harness import evaluation
from tests.harness.chat_standin import Error, Reply, first_user_text, serving, tool_results
from tests.harness.generation import in_process, load

pytestmark = pytest.mark.slow  # `orsgen eval` run as a user runs it, a fresh interpreter a run: make test-slow

SEED, K = 3, 4
COIN, coin, task_of, script = evaluation.COIN, evaluation.coin, evaluation.task_of, evaluation.script


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    with evaluation.graded(tmp_path_factory.mktemp("graded")) as found:
        yield found


def test_the_figures_records_and_tools_are_exact(graded, tmp_path):
    server, module = graded
    before = {e["session"] for e in server.log()}
    with serving(script, delay=0.02) as endpoint:
        run = evaluation.orsgen_eval(str(module), "--base-url", endpoint.url, "--model", "scripted", "-k", str(K),
                                     "--seed", str(SEED), "--concurrency", "8", "--out", "run", cwd=tmp_path,
                                     env={"OPENAI_API_KEY": "canary-openai-key-1a2b"})
        payloads = endpoint.payloads()
    assert run.returncode == 0, run.stderr
    folder = tmp_path / "run"

    # the figures, from what the script does
    coins = sum(coin(SEED + rollout * 6 + COIN) for rollout in range(K))
    assert 0 < coins < K
    found = evaluation.summary(folder)
    # done: what --resume keeps; the 4 episodes of task 5, which could not start, it runs again (issue 41, item 6)
    assert found["episodes"] == {"planned": 24, "done": 20, "counted": 20}
    assert found["unscored"] == {"not_started": 4}
    assert found["reward"]["mean"] == pytest.approx((8 + coins) / 20)
    assert found["pass"]["threshold"] == 1.0
    assert found["pass"]["at_1"] == pytest.approx((1 + 1 + 0 + 0 + coins / K) / 5)
    assert found["pass"]["at_k"] == pytest.approx(3 / 5)
    unbiased_at_2 = 1 - math.comb(K - coins, 2) / math.comb(K, 2)
    from orsgen.evaluate.figures import pass_at

    assert pass_at(K, coins, 2) == pytest.approx(unbiased_at_2)
    assert found["tools"]["calls_per_episode"] == pytest.approx(24 / 20)  # task 1: the refused call and the answer
    assert found["tools"]["failures_per_episode"] == pytest.approx(4 / 20)
    assert found["tokens"]["completion"] == 16 * (5 + 2) + 4 * (5 + 5 + 2)
    tasks = {t["task_index"]: t for t in found["tasks"]}
    assert [tasks[i]["pass_rate"] for i in range(5)] == [1.0, 1.0, 0.0, 0.0, coins / K]
    assert tasks[5]["counted"] == 0 and tasks[5]["pass_rate"] is None and tasks[5]["episodes"] == K
    assert f"pass@1  {100 * found['pass']['at_1']:.1f}%" in run.stdout

    # one record per episode, each with the seed its requests carried and the reward of its answer
    records = evaluation.records(folder)
    assert sorted((r["task_index"], r["rollout"]) for r in records) == [(t, k) for t in range(6) for k in range(K)]
    for r in records:
        assert r["schema"] == "orsgen.trajectory/1" and r["stream"] == "eval" and r["model"] == "scripted"
        if r["task_index"] == 5:
            assert r["unscored_reason"] == "not_started" and r["completion"] == [] and r["session"] is None
            continue
        expected = 1.0 if r["task_index"] in (0, 1) or (r["task_index"] == COIN and coin(SEED + r["rollout"] * 6 + COIN)) else 0.0
        assert r["reward"] == expected, r
        assert r["tool_calls"][-1]["name"] == "answer" and r["tool_calls"][-1]["reward"] == expected
    seeds = {(task_of(p), p["seed"]) for p in payloads if task_of(p) >= 0}
    assert seeds == {(t, SEED + k * 6 + t) for t in range(5) for k in range(K)}
    refused = next(r for r in records if r["task_index"] == 1)
    assert refused["completion"][1]["content"].startswith("{'error': ") and "txt" in refused["completion"][1]["content"]

    # what the server saw: each record's calls on its session, every session closed
    calls: dict[str, int] = {}
    for entry in server.log():
        if entry["request"].endswith("/call") and entry["session"] not in before:
            calls[entry["session"]] = calls.get(entry["session"], 0) + 1
    assert {r["session"]: len(r["tool_calls"]) for r in records if r["session"]} == calls
    assert server.open_sessions() == []

    # the tools offered: what get_json_schema makes of the module's methods, in TRL's order, in every request
    tools = [get_json_schema(method) for method in tool_methods(load(module).Graded())]
    assert all(p["tools"] == tools for p in payloads)
    assert len(payloads) == 1 + 16 * 2 + 4 * 3  # the probe; two replies per episode, three on task 1

    # the endpoint's key is in no file the run wrote
    for path in folder.iterdir():
        assert b"canary-openai-key-1a2b" not in path.read_bytes(), path


def test_compare_finds_the_changed_tasks_and_a_dataset_keeps_the_sometimes_solved(graded, tmp_path, caplog):
    _server, module = graded

    def better(payload):
        task = task_of(payload)
        if task == 2 and not tool_results(payload):
            return Reply(tool_calls=[("answer", {"text": "w2"})])
        return script(payload)

    seed = next(s for s in range(100) if coin(s + COIN) != coin(s + 5 + COIN))  # 5 tasks: one coin falls each way
    for name, answers in (("before", script), ("after", better)):
        with serving(answers) as endpoint:
            run = evaluation.orsgen_eval(str(module), "--base-url", endpoint.url, "--model", "scripted", "--tasks",
                                         "0-4", "-k", "2", "--seed", str(seed), "--out", name, cwd=tmp_path)
        assert run.returncode == 0, run.stderr
    compared = evaluation.orsgen_eval("--compare", "before", "after", "--format", "markdown", cwd=tmp_path)
    assert compared.returncode == 0, compared.stderr
    assert "1 improved, 0 regressed, 4 unchanged" in compared.stdout
    assert "| 2 | 0.0% | 100.0% | +100.0 |" in compared.stdout

    # the measured pass rates choose the training set: only the coin task is sometimes solved
    rates = {t["task_index"]: t["pass_rate"] for t in evaluation.summary(tmp_path / "before")["tasks"]}
    mod = load(module)
    with caplog.at_level("WARNING", logger="orsgen"):
        kept = mod.dataset(pass_rates=tmp_path / "before")
    sometimes = sorted(i for i, rate in rates.items() if rate is not None and 0 < rate < 1)
    assert kept["task_index"] == sometimes
    assert f"kept {len(sometimes)} of 6 tasks" in caplog.text and "1 not measured" in caplog.text
    every = mod.dataset(pass_rates={str(i): 0.5 for i in range(6)}, keep=(0.0, 0.6))
    assert every.num_rows == 6
    with pytest.raises(ValueError, match="a pass rate is between 0 and 1"):
        mod.dataset(pass_rates={"0": 2})


def test_an_endpoint_failing_mid_run_is_counted_per_episode(graded, tmp_path):
    server, module = graded

    def failing(payload):
        return Error(500, "the GPU fell over") if task_of(payload) == 2 else script(payload)

    with serving(failing) as endpoint:
        run = evaluation.orsgen_eval(str(module), "--base-url", endpoint.url, "--model", "scripted", "--tasks", "0-3",
                                     "--out", "run", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    found = evaluation.summary(tmp_path / "run")
    assert found["unscored"] == {"endpoint_error": 1} and found["episodes"]["counted"] == 3
    (failed,) = [r for r in evaluation.records(tmp_path / "run") if r["task_index"] == 2]
    assert failed["reward"] is None and "answered 500: the GPU fell over" in failed["error"]
    assert server.open_sessions() == []


def test_without_matplotlib_the_report_is_text_only(graded, tmp_path):
    _, module = graded
    blocked = tmp_path / "blocked" / "matplotlib"
    blocked.mkdir(parents=True)
    (blocked / "__init__.py").write_text("raise ImportError('not installed here')\n")
    with serving(script) as endpoint:
        run = evaluation.orsgen_eval(str(module), "--base-url", endpoint.url, "--model", "scripted", "--tasks", "0",
                                     "--out", "run", cwd=tmp_path,
                                     env={"PYTHONPATH": f"{blocked.parent}:{evaluation.environ()['PYTHONPATH']}"})
    assert run.returncode == 0, run.stderr
    assert not (tmp_path / "run" / "pass_rates.png").exists()
    assert 'a picture too with matplotlib: pip install "matplotlib>=3.7", the plot extra' in run.stderr
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["pass"]["at_1"] == 1.0


def test_a_bundle_and_a_pyproject_target(multi_server, tmp_path):
    """A bundle measures each of its environments (their own tools, a table by environment); a [tool.orsgen] target
    name finds its module."""
    made = in_process(multi_server.url, "--env", "echo", "--env", "quiz", "-o", str(tmp_path / "gen"))
    assert made.returncode == 0, made.stderr
    (tmp_path / "pyproject.toml").write_text('[tool.orsgen.targets.quiz]\ntarget = "x"\noutput = "gen/quiz.py"\n')

    def either(payload):
        text, names = first_user_text(payload), [t["function"]["name"] for t in payload.get("tools", [])]
        if tool_results(payload) or "probe" in text:
            return Reply(content="done")
        if "echo" in names:
            return Reply(tool_calls=[("echo", {"text": text.split()[-1]})])
        return Reply(tool_calls=[("answer", {"answer": "4"})])

    with serving(either) as endpoint:
        bundle = evaluation.orsgen_eval("gen/bundle.py", "--base-url", endpoint.url, "--model", "scripted", "--tasks",
                                        "0", "--out", "both", cwd=tmp_path)
        named = evaluation.orsgen_eval("quiz", "--base-url", endpoint.url, "--model", "scripted", "--tasks", "0-1",
                                       "--out", "quiz", cwd=tmp_path)
        offered = {tuple(t["function"]["name"] for t in p["tools"]) for p in endpoint.payloads()}
    assert bundle.returncode == 0, bundle.stderr
    assert named.returncode == 0, named.stderr
    assert offered == {("echo", "hint"), ("answer", "lookup", "reset")}  # each environment's own tools, TRL's order
    both = evaluation.summary(tmp_path / "both")
    assert [(t["environment"], t["task_index"], t["pass_rate"]) for t in both["tasks"]] == [("echo", 0, 1.0),
                                                                                             ("quiz", 0, 1.0)]
    assert any(line.split()[:2] == ["environment", "task"] for line in bundle.stdout.splitlines())  # by environment
    quiz = evaluation.summary(tmp_path / "quiz")
    assert [(t["environment"], t["task_index"], t["pass_rate"]) for t in quiz["tasks"]] == [("quiz", 0, 1.0),
                                                                                             ("quiz", 1, 0.0)]
    assert quiz["reward"]["mean"] == pytest.approx((1.0 - 0.5) / 2)  # quiz pays -0.5 for a wrong answer


def test_reward_functions_by_name_run_before_get_reward_as_trl_runs_them(graded, tmp_path):
    _, module = graded
    with serving(script) as endpoint:
        total = evaluation.orsgen_eval(str(module), "--base-url", endpoint.url, "--model", "scripted", "--tasks", "0-2",
                                       "--reward", "total_reward", "--out", "run", cwd=tmp_path)
        wrong = evaluation.orsgen_eval(str(module), "--base-url", endpoint.url, "--model", "scripted", "--reward",
                                       "nope", "--out", "nope", cwd=tmp_path)
    assert total.returncode == 0, total.stderr
    assert [r["reward"] for r in sorted(evaluation.records(tmp_path / "run"), key=lambda r: r["task_index"])] == [
        1.0, 1.0, 0.0]  # total_reward claimed each episode; get_reward() then gave None: counted once
    assert wrong.returncode == 2 and wrong.stderr.count("\n") == 1, wrong.stderr
    assert "--reward nope: " in wrong.stderr and "total_reward" in wrong.stderr
    assert not (tmp_path / "nope").exists()
