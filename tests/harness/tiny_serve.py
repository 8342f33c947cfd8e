"""A tiny chat model behind `transformers serve`: a real OpenAI-compatible endpoint on 127.0.0.1, offline, on CPU,
that parses tool calls, for tests of what talks to such an endpoint.

    path = tiny_model_dir(tmp_path / "tiny")  # tokenizer + ~100k-parameter Qwen3, warmed up on the echo env
    with serving(path) as served:  # `transformers serve PATH --host 127.0.0.1 --port N --device cpu`
        OpenAI(base_url=served.url, api_key="EMPTY").chat.completions.create(model=served.model, ...)

The model is orsgen.tiny's (python -m orsgen.tiny), taught on the echo environment's eight tasks ("Echo the word apple" -> the
assistant calls echo(text="apple") -> the tool answers "apple" -> the assistant says "apple") until it gets every
assistant token of them right. `save_pretrained` writes the chat template (chat_template.jinja) and the response
template (the "response_template" key of tokenizer_config.json); the server reads the latter back as
`tokenizer.response_template` and parses each reply with `tokenizer.parse_response`, so a call comes back as an
OpenAI `tool_calls` entry (id, type "function", function.name, function.arguments as a JSON string).

What the server (transformers 5.24) does, measured on this model:
- it pins the model (`force_model`): a request naming another model gets a 400 ("Server is pinned to ..."), one
  naming none gets the pinned model; `/v1/models` lists `served.model` alone;
- it runs one generation at a time on one thread: concurrent requests queue, all answered;
- `max_tokens` and `max_completion_tokens` cap the reply (finish_reason "length"); `max_completion_length` and
  any other unknown field are refused with a 422; `tool_choice`, `n`, `logprobs`, `parallel_tool_calls`... are
  ignored with one logged warning; `stop` is honoured; `usage` is always there (prompt, completion, total tokens);
- a reply whose tool call is not valid JSON (cut by `max_tokens`, or a model writing garbage, e.g. after a system
  message or without tools, which it never saw) is a 500 "Internal Server Error", not the raw text (a stream
  drops the call instead and finishes with "length"/"stop").

Nothing here imports pytest.
"""

import contextlib
import fcntl
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orsgen import tiny

from examples.echo import WORDS
from examples.serve import HOST, free_port
from tests.harness import processes

__all__ = ["HOST", "MARKER", "Served", "build_info", "command", "echo_conversations", "echo_tools", "serving",
           "shared_model_dir", "start", "tiny_model_dir"]

MARKER = tiny.MARKER  # written last into a built directory: its settings and how the warm-up went

# What the server's process gets on top of os.environ: nothing from a hub, no telemetry, no update check, CPU only,
# one thread (the model is tiny; the machine is shared).
SERVER_ENV = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "HF_HUB_DISABLE_UPDATE_CHECK": "1",
    "DO_NOT_TRACK": "1",
    "CUDA_VISIBLE_DEVICES": "",
    "TOKENIZERS_PARALLELISM": "false",
    "OMP_NUM_THREADS": "1",
    "PYTHONUNBUFFERED": "1",
    "NO_PROXY": f"{HOST},localhost",
    "no_proxy": f"{HOST},localhost",
}


def echo_tools() -> list[dict[str, Any]]:
    """The tool list a client of the echo env sends: transformers' `get_json_schema` of generated/echo.py's
    `Echo().echo` (with its "return" key: the chat template shows the model name, description and parameters)."""
    from transformers.utils import get_json_schema

    from generated.echo import Echo

    return [get_json_schema(Echo().echo)]


def echo_conversations(words: Sequence[str] = WORDS) -> list[list[dict[str, Any]]]:
    """One finished echo episode per word: the prompt, the call, the tool's answer, the word said back."""
    return [tiny.conversation(f"Echo the word {word}", "echo", {"text": word}, word) for word in words]


def build_info(path: Path) -> dict[str, Any] | None:
    """What `tiny_model_dir` wrote about the model in `path` (settings, warm-up steps, loss, how many words a greedy
    first turn echoes exactly), or None if no build finished there."""
    try:
        return json.loads((Path(path) / MARKER).read_text())
    except (OSError, ValueError):
        return None


def tiny_model_dir(
    path: Path,
    steps: int = 600,
    *,
    tools: Sequence[dict[str, Any]] | None = None,
    words: Sequence[str] = WORDS,
    seed: int = 0,
    sample: bool = False,
) -> Path:
    """Build the tiny tokenizer and model, warm them up on the echo episodes of `words` with `tools` (default:
    `echo_tools()`) for at most `steps` full-batch steps on one thread (it stops once every assistant token has been
    right for a few steps in a row: 150 to 450 steps, 10 to 30 s in all on 2 busy cores), and save both into `path`
    for `transformers serve`. A directory already holding a finished build with the same settings is reused as it
    is: pass a cache directory to build once.

    The saved generation config is greedy: the server then ignores a request's `temperature` (it logs "generation
    flags are not valid and may be ignored") unless it is 0. `sample=True` saves `do_sample=True` instead, so
    `temperature` and `seed` apply (the server seeds torch once per request, before it queues the generation)."""
    path = Path(path)
    tools = list(tools) if tools is not None else echo_tools()
    settings = {"steps": steps, "tools": tools, "words": list(words), "seed": seed, "sample": sample,
                "lr": tiny.LEARNING_RATE}
    done = build_info(path)
    if done is not None and done.get("settings") == settings:
        return path
    (path / MARKER).unlink(missing_ok=True)

    import torch

    start = time.monotonic()
    conversations = echo_conversations(words)
    tok = tiny.tokenizer(conversations, tools)  # type: ignore[arg-type]  # JSON schemas render as callables do
    lm = tiny.model(tok, seed=seed)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # on 2 busy cores, 1 thread is 7 s where 2 take up to a minute (the same steps)
    try:
        warm = tiny.warm_up(lm, tok, [(c, tools) for c in conversations], steps)
        lm.generation_config.do_sample = sample
        calls = [tiny.first_turn(lm, tok, tools, f"Echo the word {word}") for word in words]
    finally:
        torch.set_num_threads(threads)
    warm["echoed"] = sum(call == tiny.call_text("echo", {"text": word}) for call, word in zip(calls, words))
    path.mkdir(parents=True, exist_ok=True)
    tok.save_pretrained(path)
    lm.save_pretrained(path)
    warm["seconds"] = round(time.monotonic() - start, 1)
    (path / MARKER).write_text(json.dumps({"settings": settings, **warm}, indent=1))
    return path


def shared_model_dir(root: Path, tools: Sequence[dict[str, Any]]) -> Path:
    """`tiny_model_dir` for `tools` in `root`, built once for every process sharing `root` (a test run's workers:
    tests/conftest.py's `run_tmp`): the first builds it under an exclusive lock, the others wait on the lock and reuse
    the build."""
    key = hashlib.sha256(json.dumps(list(tools), sort_keys=True).encode()).hexdigest()[:12]
    Path(root).mkdir(parents=True, exist_ok=True)
    with (Path(root) / f"tiny-{key}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return tiny_model_dir(Path(root) / f"tiny-{key}", tools=tools)


@dataclass
class Served:
    url: str  # the OpenAI base URL: http://127.0.0.1:PORT/v1
    model: str  # the name requests must give: the model directory, as the server was started with it
    log: Path  # the server's stdout and stderr (`output()`)
    process: subprocess.Popen[bytes]
    command: list[str]

    @property
    def root(self) -> str:
        """http://127.0.0.1:PORT, for /health."""
        return self.url.removesuffix("/v1")

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def stop(self) -> None:
        """SIGTERM (uvicorn shuts down), then SIGKILL after 10 s, to its whole process group."""
        processes.stop(self.process)


def command(model_dir: Path, port: int, *options: str) -> list[str]:
    """`transformers serve MODEL_DIR --host 127.0.0.1 --port PORT --device cpu --default-seed 0 [options]`, with this
    interpreter (the venv's `transformers` entry point runs the same `main`)."""
    return [sys.executable, "-m", "transformers.cli.transformers", "serve", str(model_dir),
            "--host", HOST, "--port", str(port), "--device", "cpu", "--default-seed", "0", *options]


def _get(url: str) -> tuple[int, str]:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: never through a proxy
    try:
        with opener.open(url, timeout=2) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")


def start(model_dir: Path, *options: str, port: int | None = None, timeout: float = 180.0,
          env: dict[str, str] | None = None, log: Path | None = None) -> Served:
    """Start `transformers serve` on `model_dir` and return once `/health` answers 200 (the server loads the model
    before it listens). Raises AssertionError with the server's output if it exits or is not up in `timeout` s."""
    model = str(Path(model_dir).resolve())
    port = port or free_port()
    if log is None:
        fd, name = tempfile.mkstemp(prefix="transformers-serve-", suffix=".log")
        os.close(fd)
        log = Path(name)
    cmd = command(Path(model), port, *options)
    with log.open("wb") as sink:
        process = processes.popen(cmd, stdin=subprocess.DEVNULL, stdout=sink, stderr=subprocess.STDOUT,
                                   env={**os.environ, **SERVER_ENV, **(env or {})})
    served = Served(f"http://{HOST}:{port}/v1", model, log, process, cmd)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"`transformers serve` exited with code {process.returncode} before answering "
                                 f"/health (log: {log})\n$ {' '.join(cmd)}\n{served.output()[-6000:]}")
        try:
            if _get(f"{served.root}/health")[0] == 200:
                return served
        except OSError:
            pass
        time.sleep(0.25)
    served.stop()
    raise AssertionError(f"`transformers serve` did not answer /health at {served.root} in {timeout:.0f}s "
                         f"(log: {log})\n$ {' '.join(cmd)}\n{served.output()[-6000:]}")


@contextlib.contextmanager
def serving(model_dir: Path, *options: str, port: int | None = None, timeout: float = 180.0,
            env: dict[str, str] | None = None, log: Path | None = None) -> Iterator[Served]:
    """`start(...)`, then stop the server (SIGTERM, then SIGKILL) on the way out; the log is removed then too unless
    it is `log`, a path of the caller's."""
    served = start(model_dir, *options, port=port, timeout=timeout, env=env, log=log)
    try:
        yield served
    finally:
        served.stop()
        if log is None:
            served.log.unlink(missing_ok=True)
