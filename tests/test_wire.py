"""Generation speaks the ORS endpoints itself (issue 17.4): what it reads equals what the pinned SDK reads from the
same Server, and generating from a live URL never imports the SDK (whose package init costs seconds)."""

import asyncio
import os
import sys

import pytest
from orsgen import normalize, wire

from tests.harness import ROOT, processes, servers
from tests.harness.generation import in_process


@pytest.fixture(scope="module")
def quest():
    with servers.running("tests.envs.quest:Quest", "tests.envs.quiz:Quiz") as server:
        yield server


def test_what_generation_reads_is_what_the_sdk_reads(quest):
    from openreward import AsyncOpenReward

    async def sdk() -> tuple:
        api = AsyncOpenReward(api_key="").environments
        env = api.get("quiz", variant="quiz", base_url=quest.url)
        quiz = (await env._tools_response(), await env.list_splits(), await env.num_tasks("train"),
                [t.task_spec for t in await env.get_task_range("train")])
        quest_env = api.get("quest", variant="quest", base_url=quest.url)
        async with quest_env.session(split="train", index=4) as session:
            listed = [vars(t) for t in await session.list_tools()]
        await api.aclose()
        return quiz, listed

    quiz, listed = asyncio.run(sdk())
    ours = wire.Server(quest.url, deployment="quiz", env="quiz")
    assert (ours.tools(), ours.splits(), ours.num_tasks("train"), ours.task_range("train")) == quiz
    task_tools = wire.Server(quest.url, deployment="quest", env="quest").task_tools("train", 4)
    assert normalize.tool_list(task_tools, "ours")[0] == normalize.tool_list({"tools": listed}, "sdk")[0]
    assert {t["name"] for t in task_tools["tools"]} == {"guess", "peek"}  # shared and its own
    default = wire.Server(quest.url, deployment="quest", env=None)  # bare paths: the server's redirect, POST too
    assert default.num_tasks("train") == 6


@pytest.mark.parametrize("settings", [{}, {"OPENREWARD_URL": "https://example.test:8443"},
                                      {"OPENREWARD_SESSION_URL": "http://127.0.0.1:9/"}], ids=["default", "url", "session"])
def test_the_platform_session_server_is_the_sdks(monkeypatch, settings):
    from openreward import OpenReward

    for name in ("OPENREWARD_URL", "OPENREWARD_SESSION_URL"):
        monkeypatch.delenv(name, raising=False)
    for name, value in settings.items():
        monkeypatch.setenv(name, value)
    assert wire.platform_sessions() == OpenReward(api_key="k").session_base_url.rstrip("/")


@pytest.mark.slow
def test_a_catalog_target_is_generated_without_the_sdk_and_runs(quest, tmp_path):
    """The platform stands in as the local server (OPENREWARD_SESSION_URL): env-level requests carry throwaway
    session ids, as the SDK sends them to the platform, and the module pins no URL and, without --env, no path
    segment: bare paths, the deployment's default environment, as the SDK's `environments.get(name)` sends them."""
    out = tmp_path / "catalog.py"
    env = {**os.environ, "OPENREWARD_API_KEY": "k", "OPENREWARD_SESSION_URL": quest.url}
    run = processes.run([sys.executable, "-X", "importtime", "-m", "orsgen", "someone/quest", "--task-tools-from",
                          "all", "--pin-tasks", "-o", str(out)], capture_output=True, text=True,
                        cwd=ROOT, env=env)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "import time:" in run.stderr and "openreward" not in run.stderr
    assert "class Quest, 1 tool (guess); class QuestWithHint adds hint" in run.stdout
    script = ("import sys; sys.path.insert(0, sys.argv[1]); import catalog; "
              "assert (catalog.URL, catalog.DEPLOYMENT, catalog.ENV) == (None, 'someone/quest', None); "
              "env = catalog.QuestWithHint(); print(env.reset(task_index=3)); print(env.hint(level=2)); "
              "print(len(catalog.dataset())); catalog.close_all()")
    used = processes.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True, text=True,
                         cwd=ROOT, env=env)
    assert used.stdout.splitlines() == ["Guess the word (5 letters)", "co", "6"], used.stderr[-2000:]


@pytest.mark.parametrize("options", [["-o", "{out}"], ["--task-tools-from", "all", "-o", "{out}"],
                                     ["--check", "-o", "{out}"]], ids=["generate", "task-tools", "check"])
def test_live_generation_does_not_import_the_sdk(quest, tmp_path, options):
    out = tmp_path / "quest.py"
    if "--check" in options:
        assert in_process(quest.url, "-o", str(out), cwd=ROOT).returncode == 0  # what is checked: the next run
    argv = [a.format(out=out) for a in options]
    run = processes.run([sys.executable, "-X", "importtime", "-m", "orsgen", quest.url, *argv],
                        capture_output=True, text=True, cwd=ROOT)
    assert run.returncode == 0, run.stderr[-2000:]
    imported = {line.rsplit("|", 1)[-1].strip().split(".")[0] for line in run.stderr.splitlines()
                if line.startswith("import time:")}
    assert "orsgen" in imported and "jinja2" in imported  # the import log is read right
    assert not imported & {"openreward", "aiohttp", "openai", "anthropic", "google"}, imported & {"openreward"}
