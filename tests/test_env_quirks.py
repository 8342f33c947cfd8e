"""Environments as others write them (issue 19), served by the SDK's Server: what the model sees of a failed call,
secrets at generation, short splits in bundles, task tools read from some tasks, wrong servers, api_key secrets."""

import base64
import json
import logging
import sys

import pytest

from tests.harness import servers
from tests.harness.generation import in_process, load
from tests.harness.servers import settle

COUNTING = {"ORSGEN_COUNT_REQUESTS": "1"}
ENVS = ("tests.envs.quirks:Picky", "tests.envs.quirks:Hollow", "tests.envs.quirks:Guarded")
CANARY = "canary-7f3e-not-for-files"


@pytest.fixture(scope="module")
def quirks():
    with servers.running(*ENVS, env=COUNTING) as server:
        yield server


@pytest.fixture(scope="module")
def picky(quirks, tmp_path_factory):
    out = tmp_path_factory.mktemp("picky") / "picky.py"
    assert in_process(quirks.url, "--env", "picky", "-o", str(out)).returncode == 0
    return load(out)


# 1: validation errors -----------------------------------------------------------------------------------------------


def test_validator_errors_reach_the_model_as_one_sentence_per_field(picky):
    env = picky.Picky()
    env.reset(task_index=0)
    with pytest.raises(picky.ToolError) as odd:
        env.pick(count=3)  # the field_validator's ValueError sits in the error list as a repr literal_eval cannot read
    assert str(odd.value) == "pick: invalid arguments: count: Value error, count must be even, see (3)"
    with pytest.raises(picky.ToolError) as both:
        env.pick(count="x", label=5)
    assert str(both.value) == ("pick: invalid arguments: count: Input should be a valid integer, unable to parse "
                               "string as an integer; label: Input should be a valid string")
    assert env.pick(count=2) == "picked 2"
    picky.close_all()
    settle()


@pytest.mark.parametrize("detail", [
    ("Tool input validation error: [{'type': 'value_error', 'loc': ('items', 0, 'name'), 'msg': 'Value error, bad', "
    "'input': <object at 0x7f>, 'ctx': {'error': ValueError('bad')}, 'url': 'https://errors.pydantic.dev/2/v/x'}]"),
    ("1 validation error for Params\nitems.0.name\n  Value error, bad [type=value_error, input_value=1, "
    "input_type=int]\n    For further information visit https://errors.pydantic.dev/2.14/v/value_error"),
])
def test_any_validation_text_gives_one_sentence_per_field(detail):
    from openreward.api.errors import ToolCallError
    from orsgen.runtime.toolerrors import tool_error as _tool_error

    assert str(_tool_error("t", ToolCallError("input_validation", detail))) == \
        "t: invalid arguments: items.0.name: Value error, bad"


def test_unreadable_error_text_is_short_without_urls_or_reprs():
    from openreward.api.errors import ToolCallError, ToolFailed
    from orsgen.runtime.toolerrors import tool_error as _tool_error

    garbage = "Tool input validation error: [{'loc': <weird>, " + "'x': 1, " * 5000 + "'url': 'https://e.dev/x'}]"
    many = "Tool input validation error: " + repr([{"type": "missing", "loc": (f"f{i}",), "msg": "Field required"}
                                                   for i in range(40)])
    failed = ToolFailed("kaboom, see https://example.com/help and " + "z" * 5000)
    blank = ToolCallError("input_validation", " \n" * 500_000 + "x")  # megabytes of spaces: read in linear time
    texts = [str(_tool_error("t", e)) for e in (ToolCallError("input_validation", garbage),
                                               ToolCallError("input_validation", many), failed, blank)]
    assert texts[3] == "t: invalid arguments: the server rejected them"
    assert texts[0] == "t: invalid arguments: Tool input validation error"
    assert texts[1].startswith("t: invalid arguments: f0: Field required; f1: Field required") and \
        texts[1].endswith("f5: Field required; and 34 more")
    assert texts[2].startswith("t failed: ToolFailed: kaboom, see and zzz")
    for text in texts:
        assert len(text) <= 400 and "\n" not in text and "http" not in text and "{'" not in text, text


# 2 and 6: secrets at generation ------------------------------------------------------------------------------------


def test_secrets_reach_the_server_only_in_their_header(quirks, tmp_path, monkeypatch):
    out = tmp_path / "guarded.py"
    argv = [quirks.url, "--env", "guarded", "--task-tools-from", "0", "--task-tools-for-all", "-o", str(out)]
    code, _, err = in_process(*argv)
    assert code == 2 and err.count("\n") == 1 and "GRADER_KEY must be provided via secrets" in err, err
    code, _, err = in_process(*argv, "--secret", "GRADER_KEY")
    assert code == 2 and err.strip() == ("orsgen: error: --secret GRADER_KEY: set the environment variable GRADER_KEY "
                                         "(its value is sent as the secret of that name when a session opens, and "
                                         "never written)")
    monkeypatch.setenv("GRADER_KEY", "wrong")  # the server's error holds the value: not shown
    code, _, err = in_process(*argv, "--secret", "GRADER_KEY")
    assert code == 2 and "the grader refused the key ***" in err and err.count("\n") == 1, err

    before = len(quirks.headers())
    monkeypatch.setenv("GRADER_KEY", CANARY)
    code, stdout, stderr = in_process(*argv, "--secret", "GRADER_KEY")
    assert code == 0, stderr
    text = out.read_text()
    assert f"orsgen {quirks.url} --env guarded --task-tools-from 0 --task-tools-for-all --secret GRADER_KEY -o" in text
    seen = quirks.headers()[before:]
    secrets = {r["request"]: json.loads(base64.b64decode(r["headers"]["x-secrets"])) for r in seen
               if "x-secrets" in r["headers"]}
    assert sorted(secrets) == ["POST /create", "POST /create_session"]  # the two requests that open a session
    assert all(sent["GRADER_KEY"] == {"value": CANARY, "allowed_domains": []} for sent in secrets.values())
    assert not [r["request"] for r in seen if CANARY in json.dumps(r)]  # in no other header, in no clear text
    assert all(CANARY not in json.dumps(c["body"]) for c in quirks.creates())
    code, report, _ = in_process(*argv, "--secret", "GRADER_KEY", "--report")
    assert code == 0
    for shown in (text, stdout, stderr, report, out.with_name("guarded.tasks.json").read_text()
                  if out.with_name("guarded.tasks.json").exists() else ""):
        assert CANARY not in shown


def test_api_key_secret_is_warned_about_at_generation_and_at_run_time(quirks, tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("GRADER_KEY", CANARY)
    monkeypatch.setenv("api_key", "mine")
    out = tmp_path / "keyed.py"
    code, _, err = in_process(quirks.url, "--env", "guarded", "--task-tools-from", "0", "--task-tools-for-all",
                            "--secret", "GRADER_KEY", "--secret", "api_key", "-o", str(out))
    assert code == 0
    warning = [line for line in err.splitlines() if "api_key" in line]
    assert warning == [("orsgen: warning: --secret api_key: the openreward SDK sends the API key as the secret api_key, "
                       "replacing yours, at generation and at run time; pass the value as OPENREWARD_API_KEY (or the "
                       "adapter's api_key=) instead")]
    mod = load(out)
    with caplog.at_level(logging.WARNING, logger="orsgen"):
        env = mod.Guarded(secrets={"GRADER_KEY": (CANARY, []), "api_key": ("mine", [])})
        mod.Guarded(secrets={"api_key": ("mine", [])})  # once per process
    assert [r.getMessage() for r in caplog.records if "api_key" in r.getMessage()] == [
        ("orsgen: the secret 'api_key' is replaced by the openreward SDK with the API key (OPENREWARD_API_KEY or "
        "api_key=), so the environment never gets the value given: pass it as api_key= instead")]
    env.reset(task_index=1)
    assert env.secret_of(answer="api_key") != "mine"  # what the warning says: the SDK sent its API key instead
    assert env.secret_of(answer="GRADER_KEY") == CANARY
    mod.close_all()
    settle()


# 3: odd splits and counts ------------------------------------------------------------------------------------------


def test_dataset_refuses_a_split_the_module_did_not_pin(picky):
    with pytest.raises(ValueError) as refused:
        picky.dataset(split="nope")
    assert str(refused.value) == "dataset(): picky has no split 'nope': " + picky.__name__ + " pinned 'train', 'test'"
    assert picky.dataset(split="test")["task_index"] == [0]


def test_bundle_errors_name_their_environment(quirks, tmp_path, monkeypatch):
    folder = tmp_path / "mix"
    code, _, err = in_process(quirks.url, "--env", "picky", "--env", "hollow", "-o", str(folder))
    assert code == 0, err
    monkeypatch.syspath_prepend(str(tmp_path))
    from mix import bundle  # type: ignore[import-not-found]

    with pytest.raises(ValueError) as short:
        bundle.dataset(num_tasks=2)
    assert str(short.value) == "bundle.dataset(): environment 'hollow': dataset(): split 'train' has 0 tasks, 2 were " \
                               "asked for"
    with pytest.raises(ValueError) as split:
        bundle.dataset(split="test")
    assert str(split.value).startswith("bundle.dataset(): environment 'hollow': dataset(): hollow has no split 'test'")
    rows = bundle.dataset()  # every task of each: the empty environment adds none
    assert rows["environment"] == ["picky"] * 3
    for name in [m for m in sys.modules if m == "mix" or m.startswith("mix.")]:
        del sys.modules[name]


# 4: task tools from some tasks -------------------------------------------------------------------------------------


def test_partial_task_tools_say_what_the_unread_tasks_get(tmp_path):
    with servers.running("tests.envs.quest:Quest") as server:
        out = tmp_path / "quest.py"
        code, stdout, _ = in_process(server.url, "--task-tools-from", "1,3", "-o", str(out))
        assert code == 0
        assert "tasks 0, 2, 4-5 were not read (--task-tools-from): they get class Quest, the shared tools only" in stdout
        text = out.read_text()
        assert "# Tasks whose tools were not read (--task-tools-from): 0, 2, 4-5.\n# They get Quest, the shared " \
               "tools only, whatever they advertise." in text
        every = tmp_path / "every.py"
        code, stdout, _ = in_process(server.url, "--task-tools-from", "1", "--task-tools-for-all", "-o", str(every))
        assert code == 0 and "every task gets hint (--task-tools-for-all)" in stdout
        mod = load(every)
        assert set(mod.ENVIRONMENTS) == {"Quest"} and mod.TASK_ENVIRONMENTS == {}
        env = mod.Quest()
        assert env.reset(task_index=3) == "Guess the word (5 letters)"  # the drift check passed: hint is no shared tool
        assert env.hint(level=2) == "co"
        assert "environment" not in mod.dataset().column_names
        mod.close_all()
        settle()
        code, _, err = in_process(server.url, "--task-tools-for-all", "-o", str(every))
        assert code == 2 and "--task-tools-for-all goes with --task-tools-from" in err


# 8: project mode ---------------------------------------------------------------------------------------------------


def test_project_mode_refuses_per_target_options_and_reads_them_from_pyproject(quirks, tmp_path, monkeypatch):
    (tmp_path / "pyproject.toml").write_text(
        f'[tool.orsgen.targets.g]\ntarget = "{quirks.url}"\noutput = "g.py"\nenv = "guarded"\n'
        'task-tools-from = "0"\ntask-tools-for-all = true\nsecret = ["GRADER_KEY"]\n')
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GRADER_KEY", CANARY)
    for flag in (["--task-tools-from", "1"], ["--secret", "X"], ["--task-tools-for-all"]):
        code, _, err = in_process(*flag)
        assert code == 2 and err.count("\n") == 1 and "go with a TARGET" in err, err
    code, _, err = in_process()
    assert code == 0, err
    assert "--task-tools-from 0 --task-tools-for-all --secret GRADER_KEY -o g.py" in (tmp_path / "g.py").read_text()
    assert in_process("--check")[0] == 0


# 5: a wrong server -------------------------------------------------------------------------------------------------


def test_a_wrong_server_is_one_line_from_dataset_and_reset(picky, monkeypatch):
    with servers.running("tests.envs.quest:Quest") as other:
        expected = (f"{other.url} serves quest, not 'picky', which {picky.__name__} pins (target {picky.TARGET}): "
                    "point url= or OPENREWARD_SESSION_URL at the server of 'picky', or regenerate the module for this "
                    "server")
        with pytest.raises(picky.runtime.WrongServer) as from_dataset:
            picky.dataset(url=other.url)
        assert str(from_dataset.value) == expected
        with pytest.raises(picky.runtime.WrongServer) as from_reset:
            picky.Picky(url=other.url).reset(task_index=0)
        assert str(from_reset.value) == expected
        monkeypatch.setenv("OPENREWARD_SESSION_URL", other.url)
        with pytest.raises(picky.runtime.WrongServer):
            picky.Picky().reset(task_index=0)
        assert picky.PINNED.failures.count == 0  # not counted as episodes that could not start
    picky.close_all()
