"""`orsgen eval` one episode at a time and `--concurrency 16` at once, against a slow model and a slow environment.

    python bench/eval_speed.py [--runs 1] [--episodes 64] [--concurrency 16] [--reply-ms 200] [--latency-ms 20]

Serves `bench/env.py` on 127.0.0.1 with `--latency-ms` (20 ms) added to every request (as compare.py does), generates
its adapter module with the real CLI, and starts the scripted chat endpoint of tests/harness/chat_standin.py taking
`--reply-ms` (200 ms) per reply: each episode is one `echo` call with the task's word (reward 1.0), then a plain
answer, so two replies per episode. Then runs `orsgen eval MODULE -n EPISODES` (the bench environment has 80 tasks;
more episodes than that take `-k` rollouts per task) as a user does, a subprocess with a fresh `--out` folder, at
`--concurrency 1` and at `--concurrency N`, `--runs` times, the two orders alternating.

Per run: the wall time around the subprocess (interpreter, imports, the endpoint check and the report included: a
constant of several seconds that is not episode time) and the episode phase, from the first episode's start (its
record's `ended_at` less `seconds.episode`) to the last record's `ended_at`; also the span from the first to the last
`ended_at` (the issue's wording: it leaves the first episode out), the requests the environment and the endpoint saw,
the most chat requests in flight at once, and the CPU seconds of the `orsgen eval` process and of the environment
server. The goal (issue 31): the episode phase at least 10x faster at concurrency 16 than one at a time. A miss is
reported, never an error: this is a benchmark, not a test. Prints a table and writes the raw figures and the
machine's facts to `bench/eval_speed.json`.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))  # tests.harness (the chat stand-in) and examples

from compare import HOST, BenchServer, free_port, generate, serving
from slow_tools import TASK, runtime_commit

from tests.harness.chat_standin import Reply, Request, first_user_text, tool_results
from tests.harness.chat_standin import serving as chat_serving

GOAL = 10.0  # the speed-up of the episode phase
BENCH_TASKS = 80  # bench/env.py's NUM_TASKS


def script(payload: dict[str, Any]) -> Reply:
    """One `echo` call with the task's word, then a plain answer; "OK" to the endpoint check's probe."""
    found = TASK.search(first_user_text(payload))
    if found is None:
        return Reply(content="OK")  # the probe: no task prompt
    if tool_results(payload):
        return Reply(content=found.group(1), prompt_tokens=30, completion_tokens=2)
    return Reply(tool_calls=[("echo", {"text": found.group(1)})], prompt_tokens=20, completion_tokens=5)


def stamp(text: str) -> float:
    """A record's `ended_at` (ISO 8601, UTC, "Z") as a POSIX time."""
    return datetime.datetime.fromisoformat(text).timestamp()


def peak(chats: list[Request]) -> int:
    """The most chat requests in flight at once (as Standin.peak_concurrency, over these requests only)."""
    edges = sorted(e for r in chats for e in ((r.received, 1), (r.answered if r.answered is not None else 1e18, -1)))
    most = now = 0
    for _, step in edges:
        now += step
        most = max(most, now)
    return most


def children_cpu() -> float:
    """CPU seconds (user + system) of this process's ended children: the `orsgen eval` subprocesses."""
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def process_cpu(pid: int) -> float | None:
    """CPU seconds (user + system) a running process has used so far (Linux's /proc; None elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def eval_run(module: Path, endpoint: Any, server: BenchServer, url: str, episodes: int, concurrency: int,
             out: Path) -> dict[str, Any]:
    """One `orsgen eval` subprocess: its wall time, the episode phase and what the servers saw."""
    rollouts = next(k for k in range(1, episodes + 1) if episodes % k == 0 and episodes // k <= BENCH_TASKS)
    tasks = episodes // rollouts  # the fewest rollouts per task that the environment's tasks allow
    cmd = [sys.executable, "-m", "orsgen", "eval", str(module), "--base-url", endpoint.url, "--model", "scripted",
           "-n", str(tasks), "-k", str(rollouts), "--concurrency", str(concurrency), "--out", str(out)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "codegen"), str(ROOT)]),
           "OPENREWARD_API_URL": url, "OPENREWARD_SESSION_URL": url, "OPENREWARD_DISABLE_UPDATE_CHECK": "1",
           "NO_PROXY": HOST, "no_proxy": HOST}
    server.reset_counts()
    chats_before = len(endpoint.chats())
    cpu_before = children_cpu(), process_cpu(server.process.pid)
    launched, launched_mono = time.time(), time.monotonic()
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=out.parent, env=env, timeout=1800, check=False)
    wall = time.monotonic() - launched_mono
    exited = time.time()
    cpu = {"eval_process": children_cpu() - cpu_before[0]}
    if done.returncode != 0:
        raise RuntimeError(f"orsgen eval --concurrency {concurrency} exited {done.returncode}:\n{done.stderr}")
    time.sleep(0.2)  # the last session's close may land just after the exit
    counts = server.counts()
    server_cpu = process_cpu(server.process.pid)
    if server_cpu is not None and cpu_before[1] is not None:
        cpu["env_server"] = server_cpu - cpu_before[1]
    chats = endpoint.chats()[chats_before:]
    records = [json.loads(line) for line in (out / "trajectories.jsonl").read_text(encoding="utf-8").splitlines()]
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    if len(records) != episodes:
        raise RuntimeError(f"orsgen eval --concurrency {concurrency}: {len(records)} records, {episodes} planned")
    ends = sorted(stamp(r["ended_at"]) for r in records)
    starts = sorted(stamp(r["ended_at"]) - r["seconds"]["episode"] for r in records)
    phase = ends[-1] - starts[0]

    def median(key: str) -> float:
        return statistics.median(float(r["seconds"][key] or 0.0) for r in records)

    probe = [r for r in chats if TASK.search(first_user_text(r.payload)) is None]
    first_chat = min((r.received for r in chats), default=launched_mono) - launched_mono
    return {
        "concurrency": concurrency, "episodes": episodes, "tasks": tasks, "rollouts": rollouts,
        "wall_s": wall, "episode_phase_s": phase, "first_to_last_ended_s": ends[-1] - ends[0],
        "episodes_per_s": episodes / phase,
        # wall time outside the episode phase: before the first episode starts (interpreter, imports, the module,
        # the endpoint check, the task list) and after the last one ends (closing, the figures, the report)
        "before_first_episode_s": starts[0] - launched, "after_last_episode_s": exited - ends[-1],
        "first_chat_request_after_s": first_chat,
        "episode_s": {"median": median("episode"), "min": min(r["seconds"]["episode"] for r in records),
                      "max": max(r["seconds"]["episode"] for r in records)},
        "median_s": {"reset": median("reset"), "tools": median("tools"), "model": median("model")},
        "mean_reward": summary["reward"]["mean"], "pass_at_1": summary["pass"]["at_1"],
        "chat_requests": len(chats), "probe_requests": len(probe), "chat_peak_in_flight": peak(chats),
        "env_requests": counts, "env_requests_total": sum(counts.values()),
        "cpu_s": cpu, "load_average_after": os.getloadavg(),
    }


def versions() -> dict[str, str]:
    found = {}
    for name in ("orsgen", "openreward", "openai", "transformers", "aiohttp", "uvicorn", "starlette"):
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = "-"
    return found


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=1, help="runs at each concurrency (the two orders alternating)")
    p.add_argument("--episodes", type=int, default=64, help="episodes per run (-n, and -k beyond 80 tasks)")
    p.add_argument("--concurrency", type=int, default=16, help="the concurrency compared with 1")
    p.add_argument("--reply-ms", type=float, default=200, help="the stand-in endpoint's time per reply")
    p.add_argument("--latency-ms", type=float, default=20, help="added to every environment request")
    p.add_argument("--json", type=Path, default=HERE / "eval_speed.json")
    args = p.parse_args()
    levels = (1, args.concurrency)
    port = free_port()
    url = f"http://{HOST}:{port}"
    load_before = os.getloadavg()
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="orsgen-eval-speed-") as tmp, \
            serving("bench", port, args.latency_ms) as server, \
            chat_serving(script, delay=args.reply_ms / 1000) as endpoint:
        module = Path(tmp) / "bench_adapter.py"
        generate(url, module)
        print(f"bench environment at {url} (+{args.latency_ms:g} ms per request), chat stand-in at {endpoint.url} "
              f"({args.reply_ms:g} ms per reply); {args.episodes} episodes per run", flush=True)
        for r in range(args.runs):
            for concurrency in levels if r % 2 == 0 else levels[::-1]:
                found = eval_run(module, endpoint, server, url, args.episodes, concurrency,
                                 Path(tmp) / f"run{r}-c{concurrency}")
                found["run"] = r + 1
                runs.append(found)
                print(f"  run {r + 1}/{args.runs}, concurrency {concurrency}: wall {found['wall_s']:.2f} s, episode "
                      f"phase {found['episode_phase_s']:.2f} s ({found['before_first_episode_s']:.2f} s before it, "
                      f"{found['after_last_episode_s']:.2f} s after), median episode "
                      f"{found['episode_s']['median']:.3f} s, chat peak {found['chat_peak_in_flight']}, "
                      f"environment requests {found['env_requests_total']}, mean reward {found['mean_reward']}, CPU s "
                      f"{', '.join(f'{k} {v:.1f}' for k, v in found['cpu_s'].items())}",
                      flush=True)

    def med(concurrency: int, key: str) -> float:
        return statistics.median(x[key] for x in runs if x["concurrency"] == concurrency)

    rows = {c: {key: med(c, key) for key in ("wall_s", "episode_phase_s", "first_to_last_ended_s", "episodes_per_s",
                                             "before_first_episode_s", "after_last_episode_s")} for c in levels}
    high = args.concurrency
    speedup = {key: rows[1][key] / rows[high][key] for key in ("episode_phase_s", "wall_s", "first_to_last_ended_s")}
    ideal_1 = args.episodes * (2 * args.reply_ms / 1000)  # the model's replies alone, one episode at a time
    print(f"\n{args.episodes} episodes (one echo call, 2 replies of {args.reply_ms:g} ms each; +{args.latency_ms:g} ms "
          f"per environment request); medians of {args.runs} run(s); {os.cpu_count()} CPUs\n")
    print("| episodes | concurrency | wall s | episode phase s | first to last ended_at s | episodes/s "
          "| speed-up, episode phase | speed-up, wall | before first episode s | after last episode s |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for c, row in rows.items():
        print(f"| {args.episodes} | {c} | {row['wall_s']:.2f} | {row['episode_phase_s']:.2f} | "
              f"{row['first_to_last_ended_s']:.2f} | {row['episodes_per_s']:.2f} | "
              f"{rows[1]['episode_phase_s'] / row['episode_phase_s']:.2f}x | {rows[1]['wall_s'] / row['wall_s']:.2f}x | "
              f"{row['before_first_episode_s']:.2f} | {row['after_last_episode_s']:.2f} |")
    print(f"\nspeed-up of {high} over 1: episode phase {speedup['episode_phase_s']:.2f}x, wall time "
          f"{speedup['wall_s']:.2f}x (first to last ended_at: {speedup['first_to_last_ended_s']:.2f}x)")
    print(f"the model's replies alone take {ideal_1:.1f} s one at a time, {ideal_1 / high:.2f} s at {high} at once")
    met = speedup["episode_phase_s"] >= GOAL
    print(f"goal (>= {GOAL:g}x on the episode phase): {'met' if met else 'NOT met'}")
    meta = {"episodes": args.episodes, "concurrency": list(levels), "runs": args.runs, "reply_ms": args.reply_ms,
            "latency_ms": args.latency_ms, "goal": GOAL, "cpus": os.cpu_count(), "python": platform.python_version(),
            "platform": platform.platform(), "versions": versions(), "runtime_commit": runtime_commit(),
            "load_average_before": load_before, "load_average_after": os.getloadavg(),
            "when": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")}
    result = {"meta": meta, "rows": {str(c): row for c, row in rows.items()}, "speedup": speedup, "goal_met": met,
              "runs": runs}
    args.json.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
