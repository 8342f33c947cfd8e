"""`orsgen serve MODULE:CLASS [MODULE:CLASS ...] [--port N] [--host HOST]`: serve the user's ORS environments with
the openreward SDK's own `Server` under uvicorn (both come with openreward: a training install can serve too).

The current folder goes first on sys.path, as `python -m` does, so `orsgen serve myenv:MyEnv` run beside myenv.py
finds it. One line on stdout once the server listens; a bad input is one line on stderr and exit 2; Ctrl-C or
SIGTERM stop it (exit 0).
"""

from __future__ import annotations

import argparse
import errno
import importlib
import importlib.util
import inspect
import os
import signal
import socket
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

if TYPE_CHECKING:
    from openreward.environments import Environment

HOST = "127.0.0.1"
PORT = 8031


class ServeError(Exception):
    """A bad input, said in one line (without the `orsgen: error: ` prefix)."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(2, f"orsgen: error: {message} (orsgen serve --help lists the options)\n")


def parser() -> argparse.ArgumentParser:
    p = _Parser(prog="orsgen serve", allow_abbrev=False,
                description="Serve ORS environments (openreward Environment subclasses) with the openreward SDK's "
                "Server under uvicorn, until Ctrl-C. The first is also served at /; the current folder is importable.",
                epilog="example: orsgen serve myenv:MyEnv --port 8010   (then: orsgen http://127.0.0.1:8010 -o "
                "generated/myenv.py)")
    p.add_argument("specs", nargs="+", metavar="MODULE:CLASS", help="an Environment subclass CLASS of module MODULE")
    p.add_argument("--port", type=_port, default=PORT, help=f"the port to listen on (default {PORT}; 0: a free one)")
    p.add_argument("--host", default=HOST, help=f"the address to listen on (default {HOST}: this machine only)")
    return p


def _port(text: str) -> int:
    if not text.isdigit() or int(text) > 65535:
        raise argparse.ArgumentTypeError(f"--port takes a number from 0 to 65535, not {text!r}")
    return int(text)


def importable_here() -> None:
    """The current folder first on sys.path, as `python -m` puts it."""
    here = os.getcwd()
    if not any(os.path.abspath(entry or ".") == here for entry in sys.path):
        sys.path.insert(0, here)


def load(spec: str) -> type[Environment]:
    """The Environment subclass `spec` ("module:Class") names, or a ServeError saying what to do."""
    module_name, colon, name = spec.partition(":")
    if module_name.endswith(".py") or "/" in module_name or os.sep in module_name:
        dotted = module_name.removesuffix(".py").strip("./").replace("/", ".").replace(os.sep, ".")
        raise ServeError(f"{module_name!r} is a file name: give the module's import name, {dotted}:{name or 'CLASS'}, "
                         "run from the folder that holds it")
    if not colon and "." in module_name.strip("."):  # `shopenv.Shop`: the class after the last dot
        module_part, _, class_part = module_name.strip(".").rpartition(".")
        raise ServeError(f"{spec!r} is not MODULE:CLASS: a colon goes before the class, {module_part}:{class_part} "
                         f"for class {class_part} in {_file_of(module_part)}")
    if not colon or not module_name or not name:
        raise ServeError(f"{spec!r} is not MODULE:CLASS: give the module and its Environment class, e.g. "
                         f"{module_name or 'myenv'}:{name or 'MyEnv'} for class {name or 'MyEnv'} in "
                         f"{_file_of(module_name or 'myenv')}")
    module = _import(module_name)
    from openreward.environments import Environment  # at run time: the SDK takes seconds to import

    found = getattr(module, name, None)
    candidates = _environments(module, Environment)
    offer = (f"{module_name} has these Environment subclasses: {', '.join(candidates)}" if candidates else
             f"{module_name} has no Environment subclass (from openreward.environments import Environment)")
    if found is None:
        raise ServeError(f"{module_name} has no {name}; {offer}")
    if found is Environment:
        raise ServeError(f"{spec} is openreward's Environment base class itself; serve a subclass: {offer}")
    if not _subclass(found, Environment):
        kind = "a class" if inspect.isclass(found) else f"a {type(found).__name__}"
        raise ServeError(f"{spec} is {kind}, not an openreward Environment subclass; {offer}")
    return found


def _file_of(module_name: str) -> str:
    return module_name.replace(".", "/") + ".py"


def _import(module_name: str) -> Any:
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if e.name is not None and (module_name == e.name or module_name.startswith(e.name + ".")):
            raise ServeError(f"no module named {module_name} in {os.getcwd()} or on PYTHONPATH: run orsgen serve from "
                             f"the folder that holds {_file_of(module_name)}, or add that folder to PYTHONPATH") from None
        raise ServeError(_raised(module_name, e)) from None
    except (Exception, SystemExit) as e:  # noqa: BLE001 - whatever the user's module raises is reported, not shown
        raise ServeError(_raised(module_name, e)) from None


def _raised(module_name: str, e: BaseException) -> str:
    """`importing M raised TYPE: MESSAGE (at FILE:LINE)`: the line is the module's own, when it is on the way."""
    if isinstance(e, SyntaxError) and e.filename:
        where, message = f"{_shown(e.filename)}:{e.lineno}", e.msg
    else:
        frames = [f for f in traceback.extract_tb(e.__traceback__) if not f.filename.startswith("<frozen")]
        origin = _origin(module_name)
        own = [f for f in frames if origin is not None and _same(f.filename, origin)]
        frame = (own or frames)[-1] if frames else None
        where, message = (f"{_shown(frame.filename)}:{frame.lineno}" if frame else "?"), str(e)
    message = " ".join(message.split())
    if len(message) > 300:
        message = message[:297] + "..."
    said = f"{type(e).__name__}: {message}" if message else type(e).__name__
    return f"importing {module_name} raised {said} (at {where}): fix that, then serve it again"


def _origin(module_name: str) -> str | None:
    """The file of the module that failed to import (its parents imported already)."""
    try:
        spec = importlib.util.find_spec(module_name)
    except (Exception, SystemExit):  # noqa: BLE001 - a parent that fails too: no own line to show
        return None
    return spec.origin if spec is not None else None


def _same(a: str, b: str) -> bool:
    try:
        return Path(a).resolve() == Path(b).resolve()
    except OSError:
        return False


def _shown(filename: str) -> str:
    path = Path(filename)
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except (ValueError, OSError):
        return filename


def _environments(module: Any, base: type) -> list[str]:
    return sorted(n for n, v in vars(module).items() if _subclass(v, base) and v is not base)


def _subclass(value: Any, base: type) -> bool:
    try:
        return inspect.isclass(value) and issubclass(value, base)
    except TypeError:  # a class-like object issubclass refuses
        return False


def _named(spec: str) -> str:
    """`spec` as the user knows it: `python -m examples.echo` serving its own class says examples.echo:Echo."""
    module_name, _, name = spec.partition(":")
    found = getattr(sys.modules.get("__main__"), "__spec__", None) if module_name == "__main__" else None
    return f"{found.name}:{name}" if found is not None else spec


def listen(host: str, port: int) -> socket.socket:
    """The listening socket, or a ServeError (port in use, no such address)."""
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0][0]
    except socket.gaierror:
        raise ServeError(f"cannot listen on {host!r}: no such address; --host takes an address of this machine, e.g. "
                         f"{HOST}") from None
    try:
        return socket.create_server((host, port), family=family, backlog=2048)
    except OSError as e:
        if e.errno == errno.EADDRINUSE:
            raise ServeError(f"port {port} on {host} is in use (another server?): stop that, or pick another port "
                             "with --port N") from None
        if e.errno == errno.EACCES:
            raise ServeError(f"port {port} needs root here: pick one above 1023 with --port N") from None
        if e.errno == errno.EADDRNOTAVAIL:
            raise ServeError(f"{host} is not an address of this machine: give one with --host, e.g. {HOST}") from None
        raise ServeError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None


def url(host: str, port: int) -> str:
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


class _Stopped(Exception):
    """SIGTERM, once uvicorn has shut down gracefully and handed the signal back."""


def _stop(signum: int, frame: Any) -> None:
    raise _Stopped


def main(argv: list[str] | None = None, wrap: Callable[[Any], Any] | None = None) -> int:
    """Serve until stopped: 0 when stopped, 2 on bad input (one line on stderr), 130 if interrupted while starting.
    `wrap(app)`, if given, is the ASGI app served instead of the SDK's (the tests' request log)."""
    args = parser().parse_args(argv)
    if not (os.environ.get("OPENREWARD_LOG_LEVEL") or os.environ.get("LOG_LEVEL")):
        # the SDK logs every request at INFO (its level is read when it is imported): warnings and errors only,
        # unless asked (OPENREWARD_LOG_LEVEL=INFO)
        os.environ["OPENREWARD_LOG_LEVEL"] = "WARNING"
    try:
        importable_here()
        classes = [load(spec) for spec in args.specs]
        named = [cls.name().lower() for cls in classes]  # what the SDK serves each under: URL/NAME/...
        if twice := sorted({name for name in named if named.count(name) > 1}):
            raise ServeError(f"two of them are named {twice[0]!r} (the SDK serves each under its name(), lowercased): "
                             "serve each class once, or give one a name() of its own")
        import uvicorn
        from openreward.environments import Server

        try:
            server = Server(classes)
        except Exception as e:  # noqa: BLE001 - no tools, no splits, no prompt; or list_splits() raised
            said = " ".join(str(e).split())
            said = said if isinstance(e, ValueError | TypeError) else f"{type(e).__name__}: {said}"
            raise ServeError(f"the openreward Server refuses {' '.join(args.specs)}: {said}") from None
        sock = listen(args.host, args.port)
    except ServeError as e:
        print(f"orsgen: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("orsgen: interrupted", file=sys.stderr)
        return 130
    served = ", ".join(f'{_named(spec)} as "{name}"' for spec, name in zip(args.specs, named, strict=True))
    line = f"orsgen: serving {served} at {url(args.host, sock.getsockname()[1])} (Ctrl-C stops)"

    class Announced(uvicorn.Server):
        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets=sockets)
            if self.started:  # listening and the app started: now a request is answered
                print(line, flush=True)

    app = wrap(server.app) if wrap else server.app
    previous = signal.signal(signal.SIGTERM, _stop)  # uvicorn hands SIGTERM back after shutting down: end quietly
    try:
        Announced(uvicorn.Config(app, log_level="warning", timeout_keep_alive=60)).run(sockets=[sock])
    except (KeyboardInterrupt, _Stopped):
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
        sock.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
