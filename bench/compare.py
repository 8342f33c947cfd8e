"""Side-by-side cost of orsgen's generated adapter and TRL's `OpenRewardSpec` against one local ORS server.

    python bench/compare.py [--reps N] [--latency-ms 20] [--png bench/compare.png]

Serves `bench/env.py` on 127.0.0.1 behind a request-counting middleware, generates orsgen's adapter with the real
CLI, builds TRL's spec on the same server, and measures, for both, the median wall time and the HTTP requests the
server saw per operation: startup, first prompt from cold, reset, tool call, close and a 64-task dataset, on loopback
and again with injected per-request latency; then generation vs. binding for a 100-tool environment.
Prints a table and writes the same figures to bench/results.json (and a bar chart, if matplotlib is available).
"""

import argparse
import contextlib
import importlib.util
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

from examples.serve import HOST, free_port

HERE = Path(__file__).resolve().parent
NUM_TASKS = 64
# Loopback only: the SDK would otherwise ask pypi.org for updates; TRL's experimental warning is noise here.
os.environ["OPENREWARD_DISABLE_UPDATE_CHECK"] = "1"
os.environ["TRL_EXPERIMENTAL_SILENCE"] = "1"
NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class BenchServer:
    """One `bench/env.py` process on 127.0.0.1 and its request counters."""

    def __init__(self, env: str, port: int, latency_ms: float, timeout: float = 60.0) -> None:
        self.url = f"http://{HOST}:{port}"
        cmd = [sys.executable, str(HERE / "env.py"), env, "--port", str(port)]
        child_env = {**os.environ, "BENCH_LATENCY_MS": str(latency_ms)}
        self.process = subprocess.Popen(cmd, env=child_env, stdout=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"bench server exited with code {self.process.returncode}")
            with contextlib.suppress(OSError):
                if self._request("GET", "/health").get("status") == "ok":
                    return
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"bench server did not become healthy at {self.url} in {timeout}s")

    def _request(self, method: str, path: str) -> Any:
        request = urllib.request.Request(self.url + path, method=method, data=b"" if method == "POST" else None)
        with NO_PROXY.open(request, timeout=5) as response:
            return json.loads(response.read())

    def counts(self) -> dict[str, int]:
        return self._request("GET", "/_bench/counts")

    def reset_counts(self) -> None:
        self._request("POST", "/_bench/reset")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


@contextlib.contextmanager
def serving(env: str, port: int, latency_ms: float = 0) -> Iterator[BenchServer]:
    server = BenchServer(env, port, latency_ms)
    try:
        yield server
    finally:
        server.stop()


class Recorder:
    """Times operations and counts the requests the server saw during each, per (row, side)."""

    def __init__(self) -> None:
        self.samples: dict[tuple[str, str], list[tuple[float, dict[str, int]]]] = {}
        self.server: BenchServer | None = None
        self.settle_s = 0.05

    def use(self, server: BenchServer, latency_ms: float) -> None:
        self.server = server
        self.settle_s = 0.05 + 3 * latency_ms / 1000  # long enough for the SDK's background ping to land

    @contextlib.contextmanager
    def measure(self, row: str, side: str) -> Iterator[None]:
        assert self.server is not None
        self.server.reset_counts()
        start = time.perf_counter()
        yield
        ms = (time.perf_counter() - start) * 1000
        time.sleep(self.settle_s)  # a new session pings once in the background: count it with its operation
        self.add(row, side, ms, self.server.counts())

    def add(self, row: str, side: str, ms: float, counts: dict[str, int] | None = None) -> None:
        self.samples.setdefault((row, side), []).append((ms, counts or {}))


# ---- the two adapters, behind the same four calls -----------------------------------------------------------------


def load_module(path: Path) -> ModuleType:
    """A fresh copy of a generated module, as a new training process would import it."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)
    return module


class Orsgen:
    """The generated module: import it, construct its adapter class."""

    name = "orsgen"

    def __init__(self, path: Path, class_name: str) -> None:
        self.path, self.class_name = path, class_name

    def start(self) -> tuple[ModuleType, Any]:
        module = load_module(self.path)
        return module, getattr(module, self.class_name)()

    def prepare_dataset(self) -> tuple[ModuleType, Callable[[], Any]]:
        module = load_module(self.path)
        return module, lambda: module.dataset(num_tasks=NUM_TASKS)

    def stop(self, module: ModuleType, adapter: Any = None) -> None:
        """Close the copy's sessions (the SDK client and its loop thread belong to the process's runtime)."""
        module.close_all()


class Trl:
    """TRL's documented path: OpenRewardSpec(URL), its environment_factory, one instance from it."""

    name = "TRL"

    def __init__(self, url: str) -> None:
        self.url = url

    def start(self) -> tuple[Any, Any]:
        from trl.experimental.openreward import OpenRewardSpec

        spec = OpenRewardSpec(self.url)
        return spec, spec.environment_factory()

    def prepare_dataset(self) -> tuple[Any, Callable[[], Any]]:
        from trl.experimental.openreward import OpenRewardSpec

        spec = OpenRewardSpec(self.url, num_tasks=NUM_TASKS)
        return spec, lambda: spec.train_dataset

    def stop(self, spec: Any, adapter: Any = None) -> None:
        if adapter is not None:
            adapter._close()
        if "_sdk_client" in vars(spec):  # a cached_property: only there once it was used
            spec._sdk_client.close()


Side = Orsgen | Trl


# ---- the measurements ---------------------------------------------------------------------------------------------


def alternate(sides: tuple[Side, ...], rep: int) -> tuple[Side, ...]:
    """Both sides each rep, who goes first alternating: the machine's load drifts, and this keeps it off one side."""
    return sides if rep % 2 == 0 else sides[::-1]


def bench_pass(rec: Recorder, sides: tuple[Side, ...], reps: int, dataset_reps: int, tag: str) -> None:
    """The same steps for both adapters: startup, first prompt from cold, reset / tool call / close, dataset."""
    for rep in range(reps):
        for side in alternate(sides, rep):
            with rec.measure(f"startup{tag}", side.name):
                owner, adapter = side.start()
            side.stop(owner, adapter)
    for rep in range(reps):
        for side in alternate(sides, rep):
            # orsgen defers work to the first reset (SDK client, drift check of the pinned tools): it counts here.
            with rec.measure(f"first prompt, cold{tag}", side.name):
                owner, adapter = side.start()
                prompt = adapter.reset(task_index=rep)
            side.stop(owner, adapter)
            assert prompt.startswith(f"Task {rep}:"), prompt
    warm = {side.name: side.start() for side in sides}
    try:
        for _owner, adapter in warm.values():
            adapter.reset(task_index=0)  # warm-up: connection pool, orsgen's once-per-process drift check
            adapter._close()
        for rep in range(reps):
            for side in alternate(sides, rep):
                adapter = warm[side.name][1]
                with rec.measure(f"reset{tag}", side.name):
                    prompt = adapter.reset(task_index=rep % NUM_TASKS)
                with rec.measure(f"tool call echo{tag}", side.name):
                    echoed = adapter.echo(text="hello")
                with rec.measure(f"close{tag}", side.name):
                    adapter._close()
                assert prompt.startswith(f"Task {rep % NUM_TASKS}:") and echoed == "hello", (prompt, echoed)
    finally:
        for side in sides:
            side.stop(*warm[side.name])
    for rep in range(dataset_reps):
        for side in alternate(sides, rep):
            owner, build = side.prepare_dataset()
            try:
                with rec.measure(f"dataset({NUM_TASKS}){tag}", side.name):
                    rows = build()
            finally:
                side.stop(owner)
            assert len(rows) == NUM_TASKS, len(rows)


def generate(target: str, output: Path) -> float:
    """Run the real orsgen CLI; its wall time in ms."""
    start = time.perf_counter()
    cmd = [sys.executable, "-m", "orsgen", target, "-o", str(output)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    ms = (time.perf_counter() - start) * 1000
    if done.returncode != 0:
        raise RuntimeError(f"orsgen {target} failed: {done.stderr.strip()}")
    return ms


def bench_wide(rec: Recorder, server: BenchServer, workdir: Path, reps: int, gen_reps: int) -> list[float]:
    """100 tools: orsgen generates once from the saved /tools JSON (returned: the generation times, an orsgen-only
    figure: TRL has no such step); then both start up, TRL binding the tools every time."""
    tools_json = workdir / "wide.json"
    tools_json.write_text(json.dumps(server._request("GET", "/wide/tools"), indent=1))
    module_path = workdir / "wide_adapter.py"
    generation_ms = [generate(str(tools_json), module_path) for _ in range(gen_reps)]
    sides = (Orsgen(module_path, "Wide"), Trl(server.url))
    for rep in range(reps):
        for side in alternate(sides, rep):
            with rec.measure("100 tools: startup", side.name):
                owner, adapter = side.start()
            side.stop(owner, adapter)
            assert sum(callable(getattr(adapter, n)) for n in dir(adapter) if not n.startswith("_")) >= 100
    return generation_ms


# ---- the report ---------------------------------------------------------------------------------------------------


def summarize(rec: Recorder) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for row in dict.fromkeys(r for r, _ in rec.samples):
        entry: dict[str, Any] = {"operation": row}
        for side in ("orsgen", "TRL"):
            samples = rec.samples.get((row, side), [])
            entry[side] = {
                "n": len(samples),
                "median_ms": statistics.median(ms for ms, _ in samples),
                "min_ms": min(ms for ms, _ in samples),
                "requests": statistics.median(sum(c.values()) for _, c in samples),
                "requests_by_path": samples[-1][1],  # one sample's breakdown, to show what the requests are
            }
        entry["ratio"] = entry["TRL"]["median_ms"] / entry["orsgen"]["median_ms"]
        rows.append(entry)
    return rows


def print_table(rows: list[dict[str, Any]]) -> None:
    head = ["operation", "orsgen requests", "orsgen median ms", "TRL requests", "TRL median ms", "ratio (TRL/orsgen)",
            "n"]
    lines = [
        [r["operation"], f"{r['orsgen']['requests']:g}", f"{r['orsgen']['median_ms']:.2f}", f"{r['TRL']['requests']:g}",
         f"{r['TRL']['median_ms']:.2f}", f"{r['ratio']:.2f}", f"{r['orsgen']['n']}/{r['TRL']['n']}"]
        for r in rows
    ]
    widths = [max(len(x) for x in col) for col in zip(head, *lines)]
    for i, line in enumerate([head, *lines]):
        print(" | ".join(x.ljust(w) if j == 0 else x.rjust(w) for j, (x, w) in enumerate(zip(line, widths))))
        if i == 0:
            print("-+-".join("-" * w for w in widths))


def section(operation: str) -> str:
    return "100 tools" if operation.startswith("100 tools") else "latency" if ", +" in operation else "loopback"


def draw(rows: list[dict[str, Any]], png: Path) -> None:
    try:
        import matplotlib
    except ImportError:
        print(f"matplotlib is not installed (pip install matplotlib): {png} not drawn")
        return
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [r["operation"] for r in rows]
    x = range(len(rows))
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(15, 10), sharex=True)
    for ax, key, title in ((top, "median_ms", "median wall time, ms (log scale)"),
                           (bottom, "requests", "HTTP requests seen by the server (symlog scale)")):
        for offset, side, color in ((-0.2, "orsgen", "tab:blue"), (0.2, "TRL", "tab:orange")):
            values = [r[side][key] for r in rows]
            bars = ax.bar([i + offset for i in x], values, width=0.4, label=side, color=color)
            ax.bar_label(bars, labels=[f"{v:.0f}" if v >= 100 else f"{v:.3g}" for v in values], fontsize=7, padding=1)
        for i in range(1, len(rows)):  # dashed lines between the loopback, latency and 100-tool sections
            if section(labels[i]) != section(labels[i - 1]):
                ax.axvline(i - 0.5, color="grey", linestyle="--", linewidth=0.8)
        ax.set_title(title)
        ax.grid(axis="y", alpha=0.3)
        ax.legend(loc="upper left")
    top.set_yscale("log")
    top.set_ylim(top=max(r[s]["median_ms"] for r in rows for s in ("orsgen", "TRL")) * 4)  # room for the labels
    bottom.set_yscale("symlog", linthresh=1)
    bottom.set_ylim(0, max(r[s]["requests"] for r in rows for s in ("orsgen", "TRL")) * 4)
    bottom.set_xticks(list(x), labels, rotation=35, ha="right", fontsize=8)
    fig.suptitle("orsgen generated adapter vs TRL OpenRewardSpec, same ORS server on 127.0.0.1")
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    plt.close(fig)
    print(f"wrote {png}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--reps", type=int, default=20, help="repetitions per operation (medians are reported)")
    p.add_argument("--latency-ms", type=float, default=20, help="injected per-request latency of the second pass "
                   "(0: skip it)")
    p.add_argument("--dataset-reps", type=int, default=5, help="repetitions of dataset() under latency, and of the "
                   "100-tool generation (each takes seconds)")
    p.add_argument("--png", type=Path, default=HERE / "compare.png")
    p.add_argument("--json", type=Path, default=HERE / "results.json")
    args = p.parse_args()
    reps, slow_reps = max(1, args.reps), max(1, min(args.reps, args.dataset_reps))

    # One-time library imports are paid by any training process anyway: keep them out of both sides' timings.
    import datasets  # noqa: F401
    import openreward  # noqa: F401
    import trl.experimental.openreward  # noqa: F401

    port = free_port()
    url = f"http://{HOST}:{port}"
    # TRL's documented self-hosted setup; the orsgen adapter pins the same URL (and honours the same variable).
    os.environ["OPENREWARD_API_URL"] = os.environ["OPENREWARD_SESSION_URL"] = url
    rec = Recorder()
    with tempfile.TemporaryDirectory(prefix="orsgen-bench-") as tmp:
        workdir = Path(tmp)
        adapter_path = workdir / "bench_adapter.py"
        passes = [(0.0, "", reps)] + ([(args.latency_ms, f", +{args.latency_ms:g} ms", slow_reps)]
                                      if args.latency_ms > 0 else [])
        for latency_ms, tag, dataset_reps in passes:
            print(f"pass: injected latency {latency_ms:g} ms per request, {url}", flush=True)
            with serving("bench", port, latency_ms) as server:
                if not adapter_path.exists():
                    generate(url, adapter_path)
                rec.use(server, latency_ms)
                bench_pass(rec, (Orsgen(adapter_path, "Bench"), Trl(url)), reps, dataset_reps, tag)
        print("pass: 100-tool environment", flush=True)
        with serving("wide", port) as server:
            rec.use(server, 0)
            generation_ms = bench_wide(rec, server, workdir, reps, slow_reps)

    rows = summarize(rec)
    print()
    print_table(rows)
    print(f"\norsgen generation of the 100-tool adapter (the CLI's wall time; once per schema change, offline, so not a "
          f"row: TRL has no such step and binds at every start instead): median {statistics.median(generation_ms):.0f} "
          f"ms over {len(generation_ms)} runs.")
    print("n = repetitions orsgen/TRL.\nRequests are counted until the server is "
          f"quiet (a settle of 50 ms after the call, {50 + 3 * args.latency_ms:g} ms with latency): work the SDK or adapter "
          "does in the background (the first ping of a session, a background close) counts with its operation.")
    if sys.dont_write_bytecode:
        print("PYTHONDONTWRITEBYTECODE is set: orsgen's startup rows include compiling the generated module.")
    meta = {"reps": reps, "latency_ms": args.latency_ms, "python": platform.python_version(), "cpus": os.cpu_count(),
            "num_tasks": NUM_TASKS, "generation_100_tools_ms": generation_ms}
    args.json.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    print(f"wrote {args.json}")
    draw(rows, args.png)


if __name__ == "__main__":
    main()
