"""One preloaded process that starts the tests' servers: it imports the SDK's `Server` and uvicorn once, then forks
a server per start. A start then costs a fork instead of the SDK's import (about 4.5 s of CPU each, some 30 starts
in the fast tier); the server is the same `Server` under uvicorn, with the environment (`env`) the start gave.

It also runs commands that import the SDK (`orsgen eval`: some 40 runs in the fast tier, each paying the same import,
and transformers' `get_json_schema`, datasets and matplotlib, also preloaded): `{"run": [argv], "cwd": ...,
"env": {...}, "out": path, "err": path}` forks a child that becomes the command as a fresh interpreter would run it: a
session of its own, the run's folder, environment and SIGINT, stdin from /dev/null, stdout and stderr into the files,
every orsgen module imported anew (none is preloaded but the server's), `python -m orsgen ARGV`, and a normal
interpreter exit (its atexit handlers run).

`python -m tests.harness.zygote`, driven by `tests/harness/servers.py` with one JSON line per request on stdin:
`{"start": [specs], "port": N, "env": {...}}` or `{"run": ...}` -> `{"pid": P}`; `{"poll": P}` -> `{"returncode":
null or N}` (a child is reaped only when polled, so its pid is never reused while the tests may still signal it).
When stdin closes (the test session ended), the children still running are stopped.

Started with `--ranks SOCKET` it also preloads TRL's trainer and torch.distributed (about 12 s of CPU a rank, with
the SDK's) and forks torchrun's ranks: `torchrun ... -m tests.harness.rankfork MODULE ARGS` (tests/harness/rankfork.py)
connects to SOCKET and hands over its environment, folder, argv and standard streams; the child is `python -m MODULE
ARGS` as that rank's fresh interpreter would run it (orsgen and the tests imported anew), and its exit status goes back
to the rank, which exits with it. A rank that dies takes its child with it. A test's own script that imports the
SDK or TRL is forked the same way, without torchrun (`rankfork.python`: `python -c CODE` or `-m MODULE`).
"""

import contextlib
import gc
import json
import os
import runpy
import select
import signal
import socket
import sys
import threading
import traceback
import types
from typing import Any


def _serve(specs: list[str], port: int, env: dict[str, str]) -> None:
    """In the forked child: the environment of the start, no pipes to the tests, then serve until stopped."""
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)  # as the subprocess start does: the server's stdout goes nowhere, its stderr to the tests'
    os.environ.clear()
    os.environ.update(env)
    sys.argv = ["tests.harness.servers", *specs, "--port", str(port)]
    from tests.harness import servers

    servers.main()


def _child(specs: list[str], port: int, env: dict[str, str]) -> None:
    code = 0
    try:
        _serve(specs, port, env)
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else 1
    except BaseException:  # noqa: BLE001 - what a server subprocess would die of
        traceback.print_exc()
        code = 1
    finally:
        sys.stderr.flush()
        os._exit(code)


def _command(argv: list[str], cwd: str, env: dict[str, str], out: str, err: str) -> None:
    """In the forked child: `python -m ARGV[0] ARGV[1:]` as a subprocess of the test would run it. Returns only by
    raising SystemExit, which ends this interpreter as the command's own exit would (never back in main's loop)."""
    os.setsid()
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    os.dup2(os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), 1)
    os.dup2(os.open(err, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), 2)
    _become(argv, cwd, env)


def _become(argv: list[str], cwd: str, env: dict[str, str]) -> None:
    """`python -m ARGV[0] ARGV[1:]` (or `python -c CODE ARGS` when ARGV[0] is "-c") in `cwd` with `env` alone, its
    SIGINT a KeyboardInterrupt, orsgen and the tests imported anew; raises SystemExit when it ends."""
    os.chdir(cwd)
    anew = {"orsgen", "tests"} | _path(env.get("PYTHONPATH", ""))
    os.environ.clear()
    os.environ.update(env)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # as processes.run starts its children
    for name in [m for m in sys.modules if m.split(".")[0] in anew]:
        del sys.modules[name]  # imported anew, reading the command's environment (and its PYTHONPATH)
    if argv[0] == "-c":  # a fresh __main__, as `python -c` runs its code
        sys.argv = ["-c", *argv[2:]]
        main = sys.modules["__main__"] = types.ModuleType("__main__")
        exec(compile(argv[1], "<string>", "exec"), main.__dict__)  # noqa: S102 - the test's own script
    else:
        sys.argv = ["-m", *argv[1:]]
        runpy.run_module(argv[0], run_name="__main__", alter_sys=True)
    raise SystemExit(0)


def _rank(conn: socket.socket, request: dict[str, Any], fds: list[int], others: list[socket.socket]) -> None:
    """In the forked child: a torchrun rank's process, on the rank's own standard streams; killed when the rank (the
    other end of `conn`) is gone. Returns only by raising SystemExit."""
    for other in others:
        other.close()
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)

    def watch() -> None:  # the rank's end closes when it exits or is killed: so does this process
        with contextlib.suppress(OSError):
            conn.recv(1)
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch, daemon=True).start()
    _become(request["argv"], request["cwd"], request["env"])


def _path(pythonpath: str) -> set[str]:
    """sys.path as `python -m` makes it with the command's PYTHONPATH: the current folder, those entries, then the
    interpreter's own (the zygote's PYTHONPATH left out). Returns the top-level names those entries hold: a preloaded
    one is to be imported anew, from the entry (a test shadowing matplotlib with a package that fails)."""
    own = [os.path.abspath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    given = [os.path.abspath(p) for p in pythonpath.split(os.pathsep) if p]
    rest = [p for p in sys.path[1:] if os.path.abspath(p or ".") not in own]
    sys.path[:] = [os.getcwd(), *given, *rest]
    held: set[str] = set()
    for entry in given:
        with contextlib.suppress(OSError):
            held |= {n.split(".")[0] for n in os.listdir(entry) if n.isidentifier() or n.endswith(".py")}
    return held


def main() -> None:
    # Preloaded, so that a forked child skips them: uvicorn and the SDK's Server, what every server imports; what each
    # `orsgen eval` run imports: transformers' get_json_schema, which reads its tools (1.4 s of CPU), datasets for the
    # task rows (1.5 s), matplotlib for the run's picture (1.6 s). Not torch, which `orsgen eval` does not import
    # (tests/unit/test_offered.py): its children run as a user's do. A command whose PYTHONPATH shadows one of them
    # imports its own (_path).
    import datasets  # noqa: F401
    import matplotlib
    import uvicorn  # noqa: F401
    from openreward.environments import Server  # noqa: F401
    from transformers.utils import get_json_schema  # noqa: F401

    matplotlib.use("Agg")  # as orsgen.evaluate.plot selects it
    import matplotlib.pyplot

    from tests.harness import servers  # noqa: F401 - and the request log

    listener = None
    if sys.argv[1:2] == ["--ranks"]:
        import torch.distributed  # noqa: F401 - what every rank imports
        from trl import GRPOTrainer  # noqa: F401

        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(sys.argv[2])
        listener.listen(64)
    gc.freeze()  # what is preloaded: a forked child's collections skip it (and copy none of its pages)
    running: set[int] = set()
    ranks: dict[int, socket.socket] = {}  # a rank's child -> the connection its status goes back on
    while True:
        ready = select.select([sys.stdin, *([listener] if listener else [])], [], [], 0.1 if ranks else None)[0]
        for pid, conn in list(ranks.items()):
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                with contextlib.suppress(OSError):
                    conn.sendall((json.dumps({"returncode": os.waitstatus_to_exitcode(status)}) + "\n").encode())
                conn.close()
                del ranks[pid]
        if listener in ready:
            assert listener is not None
            conn, _ = listener.accept()
            message, fds, _, _ = socket.recv_fds(conn, 1 << 16, 3)
            while not message.endswith(b"\n"):  # a stream: the request may come in parts
                message += conn.recv(1 << 16) or b"\n"
            request = json.loads(message)
            pid = os.fork()
            if pid == 0:
                listener.close()
                _rank(conn, request, fds, list(ranks.values()))
            for fd in fds:
                os.close(fd)
            conn.sendall((json.dumps({"pid": pid}) + "\n").encode())
            ranks[pid] = conn
        if sys.stdin not in ready:
            continue
        line = sys.stdin.readline()
        if not line:
            break
        request = json.loads(line)
        if "start" in request or "run" in request:
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:  # a server or a command holds no rank's connection (a rank's child is told of its end)
                for held in [*([listener] if listener else []), *ranks.values()]:
                    held.close()
            if pid == 0 and "run" in request:
                _command(request["run"], request["cwd"], request["env"], request["out"], request["err"])
            if pid == 0:
                _child(request["start"], request["port"], request["env"])
            running.add(pid)
            reply: dict[str, object] = {"pid": pid}
        else:
            pid = request["poll"]
            done, status = os.waitpid(pid, os.WNOHANG) if pid in running else (pid, 0)
            reply = {"returncode": None if done == 0 else os.waitstatus_to_exitcode(status)}
            if done:
                running.discard(pid)
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()
    for pid in [*running, *ranks]:  # the tests are gone: what they left running goes too (stopped ones included)
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)


if __name__ == "__main__":
    main()
