"""Generate adapters from live servers, import them, and run rollouts through them."""

import inspect
import json
import socket
import sys

import pytest
from orsgen.runtime import episode_of
from transformers.utils import get_json_schema

from tests.harness import processes, rankfork
from tests.harness.generation import in_process, load
from tests.harness.trainers import tools_by_name


def test_echo_rollout(echo_server, generate):
    mod = generate(echo_server.url)
    adapter = mod.Echo()
    tools = tools_by_name(adapter)
    assert sorted(tools) == ["echo", "hint"]
    for fn in tools.values():
        get_json_schema(fn)
    assert str(inspect.signature(adapter.echo)) == "(*, text: str) -> str"
    assert adapter.reset(task_index=2) == "Echo the word lemon"
    assert adapter.get_reward() is None
    assert adapter.hint() == "l"  # level left unset: the server default (1) applies
    assert adapter.hint(level=3) == "lem"
    assert adapter.rewards == [None, None] and adapter.reward is None
    assert adapter.echo(text="lemons") == "lemons"
    assert adapter.get_reward() == 0.0 and not adapter.finished
    assert adapter.echo(text="lemon") == "lemon"
    assert adapter.get_reward() == 1.0 and adapter.finished
    assert adapter.metadata == {"target": "lemon"}
    assert adapter.last_output.reward == 1.0
    with pytest.raises(mod.ToolError, match="episode_finished"):
        adapter.echo(text="again")
    assert adapter.get_reward() == 1.0  # a failed call does not erase the score
    assert adapter.reset(task_index=0, split="test") == "Echo the word lime"
    assert adapter.reward is None and adapter.rewards == [] and not adapter.finished
    mod.close_all()


def test_second_env_on_multi_env_server(multi_server, generate):
    default = generate(multi_server.url, name="default")
    assert default.ENV == "echo" and hasattr(default, "Echo")
    quiz = generate(multi_server.url, "--env", "Quiz", name="quiz")
    assert quiz.ENV == "quiz" and quiz.URL == multi_server.url
    adapter = quiz.Quiz()
    tools = tools_by_name(adapter)
    assert sorted(tools) == ["answer", "lookup", "reset"]
    for fn in tools.values():
        get_json_schema(fn)
    # `reset` is the env's tool, kept under another attribute; the adapter's own reset still opens sessions.
    assert adapter.reset_.__name__ == "reset"
    assert adapter.reset(task_index=1) == "Capital of France?"
    assert adapter.reset_() == "reset tool ran"
    # `from` is a Python keyword: the model sees `from_`, the server gets `from`; unset `tags` is not sent as None.
    sig = inspect.signature(adapter.lookup)
    assert list(sig.parameters) == ["topic", "limit", "from_", "tags"]
    assert adapter.lookup(topic="geo", from_="atlas") == "geo notes from atlas, tags=[]"
    assert adapter.lookup(topic="math", limit=4) == "math"
    schema = get_json_schema(adapter.lookup)["function"]["parameters"]
    assert schema["properties"]["topic"]["enum"] == ["math", "geo"]
    assert schema["properties"]["limit"]["nullable"] is True
    assert schema["required"] == ["topic"]
    assert adapter.answer(answer="Rome") == "wrong"
    assert adapter.get_reward() == -0.5
    with pytest.raises(quiz.ToolError, match="invalid arguments"):
        adapter.answer(answer=5)
    assert adapter.get_reward() == -0.5
    assert adapter.answer(answer="Paris") == "correct" and adapter.get_reward() == 1.0
    quiz.close_all()


def test_dataset(echo_server, generate):
    mod = generate(echo_server.url)
    full = mod.dataset()
    assert full.num_rows == 8
    assert full.column_names == ["prompt", "task_index", "split", "difficulty", "id", "target"]
    assert full[0]["prompt"] == [{"role": "user", "content": ""}]
    assert full["task_index"] == list(range(8))
    first = mod.dataset(num_tasks=3, include_metadata=False)
    assert first.column_names == ["prompt", "task_index", "split"] and first["task_index"] == [0, 1, 2]
    picked = mod.dataset(split="test", indices=[5, 1])
    assert picked["task_index"] == [5, 1] and picked["id"] == ["test-5", "test-1"]
    with pytest.raises(ValueError, match="not both"):
        mod.dataset(num_tasks=2, indices=[1])
    with pytest.raises(ValueError, match="out of range"):
        mod.dataset(indices=[8])
    with pytest.raises(ValueError, match="8 tasks, 9 were asked"):
        mod.dataset(num_tasks=9)
    # a row from dataset() drives reset() on the right split and task
    adapter = mod.Echo()
    assert adapter.reset(**picked[0]) == "Echo the word lemon"
    mod.close_all()


@pytest.mark.slow
def test_catalog_target_uses_session_url_and_never_stores_the_key(echo_server, tmp_path):
    out = tmp_path / "catalog.py"
    env = {"OPENREWARD_SESSION_URL": echo_server.url, "OPENREWARD_API_KEY": "sk-secret-test-key-123"}
    result = in_process("someone/echo", "-o", str(out), env=env)
    assert result.returncode == 0, result.stderr
    text = out.read_text()
    assert "sk-secret-test-key-123" not in text
    assert 'DEPLOYMENT = "someone/echo"' in text and "URL: str | None = None" in text
    assert "class Echo(runtime.Adapter)" in text
    # at training time the same variables reach the server
    code = (
        f"import sys; sys.path.insert(0, {str(tmp_path)!r}); import catalog; a = catalog.Echo(); "
        "print(a.reset(task_index=1)); print(a.echo(text='grape'), a.get_reward()); catalog.close_all()"
    )
    argv, environ = rankfork.python("-c", code, env={**__import__("os").environ, **env})
    run = processes.run(argv, env=environ, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split("\n")[:2] == ["Echo the word grape", "grape 1.0"]


def test_offline_json_file_target(echo_server, generate, tmp_path):
    import urllib.request

    with urllib.request.urlopen(f"{echo_server.url}/echo/tools") as r:
        (tmp_path / "tools.json").write_bytes(r.read())
    mod = generate(str(tmp_path / "tools.json"), "--env", "echo", "--class-name", "OfflineEcho")
    assert mod.URL is None and mod.ENV == "echo"
    assert sorted(tools_by_name(mod.OfflineEcho())) == ["echo", "hint"]
    # pinned URL missing: the adapter takes it from the constructor
    adapter = mod.OfflineEcho(url=echo_server.url)
    assert adapter.reset(task_index=0) == "Echo the word apple"
    mod.close_all()


def test_import_and_construction_send_no_request(echo_server, generate, monkeypatch):
    path_module = generate(echo_server.url)
    attempts = []
    real_connect = socket.socket.connect

    def spy(self, address):
        attempts.append(address)
        return real_connect(self, address)

    monkeypatch.setattr(socket.socket, "connect", spy)
    mod = load(__import__("pathlib").Path(path_module.__file__))
    adapters = [mod.Echo() for _ in range(64)]
    assert attempts == []
    assert all(a._env is None and episode_of(a).session is None for a in adapters)  # nothing was opened, nothing is pending


@pytest.mark.slow
def test_training_imports_the_runtime_and_never_the_generator(echo_server, generate):
    mod = generate(echo_server.url)
    generator = ["jinja2", "black", "datamodel_code_generator", "orsgen.cli", "orsgen.model", "orsgen.render",
                 "orsgen.source", "orsgen.pipeline"]
    code = (
        f"import sys; sys.modules.update(dict.fromkeys({generator!r}))\n"  # any import of these now fails
        f"sys.path.insert(0, {str(__import__('pathlib').Path(mod.__file__).parent)!r})\n"
        "import adapter\n"
        "assert 'datasets' not in sys.modules and 'trl' not in sys.modules\n"
        "a = adapter.Echo(); print(a.reset(task_index=3)); adapter.close_all()\n"
    )
    run = processes.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "Echo the word mango"


def test_a_module_for_another_runtime_api_refuses_to_load_in_one_line(echo_server, generate, tmp_path):
    mod = generate(echo_server.url)
    path = __import__("pathlib").Path(mod.__file__)
    text = path.read_text()
    assert "runtime.require(1, __name__)" in text
    path.write_text(text.replace("runtime.require(1, __name__)", "runtime.require(99, __name__)"))
    code = f"import sys; sys.path.insert(0, {str(path.parent)!r})\nimport adapter\n"
    run = processes.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert run.returncode == 1
    last = run.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: adapter was generated for orsgen runtime API 99, but the installed orsgen")
    assert "regenerate the module" in last


def test_generated_modules_pass_mypy_and_ruff(multi_server, tmp_path):
    paths = []
    for env in ("echo", "quiz"):
        out = tmp_path / f"{env}_adapter.py"
        assert in_process(multi_server.url, "--env", env, "-o", str(out)).returncode == 0
        paths.append(str(out))
    ruff = processes.run([sys.executable, "-m", "ruff", "check", "--no-cache", *paths], capture_output=True, text=True)
    assert ruff.returncode == 0, ruff.stdout + ruff.stderr
    mypy = processes.run([sys.executable, "-m", "mypy", "--no-incremental", "--ignore-missing-imports", *paths],
                         capture_output=True, text=True)
    assert mypy.returncode == 0, mypy.stdout + mypy.stderr


def test_snapshot_is_embedded_and_hashed(echo_server, generate):
    mod = generate(echo_server.url)
    import hashlib

    canonical = json.dumps(mod.SNAPSHOT, ensure_ascii=False, separators=(",", ":"))
    assert hashlib.sha256(canonical.encode()).hexdigest() == mod.SNAPSHOT_SHA256
    assert [t["name"] for t in mod.SNAPSHOT["tools"]] == ["echo", "hint"]
