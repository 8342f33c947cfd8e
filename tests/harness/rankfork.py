"""A torchrun rank whose process is forked by the tests' zygote (tests/harness/zygote.py, started with `--ranks`),
which imported TRL, torch and the SDK once: `torchrun ... -m tests.harness.rankfork MODULE ARGS` instead of `-m MODULE
ARGS` (`command` builds it). This process hands its environment (torchrun's RANK, LOCAL_RANK, MASTER_PORT...), folder,
argv and standard streams to the zygote, passes on the signals torchrun sends, and exits as the forked
`python -m MODULE ARGS` exited. It imports nothing heavy itself: a rank costs a fork, not 12 s of imports. A test's
own script that imports the SDK or TRL runs the same way, without torchrun (`python`)."""

import json
import os
import signal
import socket
import sys
from typing import Any

SOCKET = "ORSGEN_TEST_RANKS"  # the environment variable naming the zygote's socket


def command(module: str, *args: str, nproc: int = 2, port: int | None = None, node: tuple[int, int] | None = None,
            env: dict[str, str] | None = None) -> tuple[list[str], dict[str, str]]:
    """`python -m torch.distributed.run --nproc_per_node NPROC ... -m MODULE ARGS` on 127.0.0.1 (`node`: this
    launch's node rank and the number of nodes, which share `port`), each rank forked by the zygote: (argv, its
    environment: this process's, `env`, and the zygote's socket)."""
    from tests.harness import servers

    nodes = ["--nnodes", str(node[1]), "--node_rank", str(node[0])] if node else []
    argv = [sys.executable, "-m", "torch.distributed.run", *nodes, "--nproc_per_node", str(nproc), "--master_addr",
            "127.0.0.1", "--master_port", str(port or servers.free_port()), "-m", "tests.harness.rankfork", module, *args]
    return argv, {**os.environ, **(env or {}), SOCKET: servers.ranks_socket()}


def python(*args: str, env: dict[str, str] | None = None) -> tuple[list[str], dict[str, str]]:
    """`python -c CODE ARGS` or `python -m MODULE ARGS` (`args` as python takes them) as a process of its own, forked
    by the same zygote: for a test's script that imports the SDK or TRL (4.5 to 12 s of CPU in a fresh interpreter).
    Not for a script about what is imported or when (the zygote's modules stay loaded, and their exit hooks
    registered; orsgen's and the tests' are imported anew). (argv, its environment: `env` or this process's, and the
    zygote's socket)."""
    assert args[0] in ("-c", "-m"), args
    from tests.harness import servers

    argv = [sys.executable, "-m", "tests.harness.rankfork", *(args[1:] if args[0] == "-m" else args)]
    return argv, {**(os.environ if env is None else env), SOCKET: servers.ranks_socket()}


def main() -> None:
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.connect(os.environ[SOCKET])
    request = {"argv": sys.argv[1:], "cwd": os.getcwd(), "env": dict(os.environ)}
    socket.send_fds(conn, [(json.dumps(request) + "\n").encode()], [0, 1, 2])
    stream = conn.makefile("r")
    pid = json.loads(stream.readline())["pid"]

    def forward(sig: int, _frame: Any) -> None:
        os.kill(pid, sig)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, forward)
    line = stream.readline()
    code = json.loads(line)["returncode"] if line else 1  # no status: the zygote is gone
    if code < 0:  # killed by a signal: so is this process, as torchrun expects of its worker
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    sys.exit(code)


if __name__ == "__main__":
    main()
