"""`orsgen eval` at C episodes at once beside a plain asyncio client, against the same two loopback servers, in one run.

    python bench/eval_scale.py [--levels 16,128,512] [--waves 8] [--runs 3] [--reply-ms 1000] [--tool-ms 1000]

The two servers, each a process of its own on 127.0.0.1: `bench/env.py` (the Bench environment, 80 tasks; its `echo`
tool awaits `--tool-ms`, 1 s) and a scripted OpenAI-compatible endpoint written here on aiohttp (`--reply-ms`, 1 s per
reply; `echo` the task's word, then answer it: two replies). One episode is then a session's start and prompt, a reply,
the tool call, a reply and the close: about 3 s, all of it waiting. At each C, `waves` x C episodes (at most 4 waves
at C = 512, to bound the run), 64 tasks x k rollouts:

- **orsgen eval**: `orsgen eval MODULE -n 64 -k K --concurrency C` as a user runs it (a subprocess; its module
  generated with the real CLI);
- **plain asyncio**: this script's `--plain` mode, a subprocess too: the openreward SDK's `AsyncOpenReward` (a
  session per episode, `async with`) and `openai.AsyncOpenAI`, `asyncio.gather` under a semaphore of C; nothing else.

Each level runs `--runs` times (3), the sides' order alternating from run to run and level to level (orsgen first, then
plain first, ...). The table gives each side's median, and the goal lines the median of the runs' pairs too (a pair's
two sides run within the same few minutes): the rest of the machine's work moves one side's phase as much as the client
does (at C = 128, the same plain client 1.50x to 2.61x of the ideal in runs minutes apart, as the load average went from
4 to 10), so one pair, side after side, is no measurement. Each run's pair is printed and kept, with the cores the rest
of the machine used in each side's phase (its busy CPU, /proc/stat, less the client's and the two servers'). Per side:
the episode phase on the endpoint's clock (its first episode request's arrival to its last answer; the ideal is waves x
3 s, episodes / C x one episode's designed time), its ratio to the ideal, the client's CPU seconds in that phase per
episode (its /proc/PID/stat sampled every 0.1 s, so imports and start-up are left out; the whole process's CPU is kept
too) and the two servers' in the same phase (what the side cost them: on 2 cores they compete with it), its peak RSS,
open file descriptors and threads, what it raised (orsgen: records with an error, and its exit code; plain: exceptions)
and the sessions the environment opened and closed. The goals (issue 47): orsgen's ratio within 1.1x the plain client's
at every C, its CPU per episode within 2x. A miss is reported, never an error. Writes bench/eval_scale.json. The
machine's load average is printed before and after: the servers and the client share its cores.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))

TASKS = 64
RATIO_GOAL, CPU_GOAL = 1.1, 2.0
NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


# -- the scripted endpoint (a process of its own: `--endpoint PORT`) ---------------------------------------------------


def endpoint_main(port: int, reply_ms: float) -> None:
    import itertools

    from aiohttp import web
    from eval_speed import script

    from tests.harness.chat_standin import completion, first_user_text

    log: list[tuple[float, float, bool]] = []  # (arrived, answered, an episode's: not the probe)
    numbers, call_numbers = itertools.count(), itertools.count()

    async def chat(request: web.Request) -> web.Response:
        arrived = time.monotonic()
        payload = await request.json()
        await asyncio.sleep(reply_ms / 1000)
        reply = script(payload)
        body = completion(reply, payload.get("model"), next(numbers), call_numbers)
        log.append((arrived, time.monotonic(), "Task " in first_user_text(payload)))
        return web.json_response(body)

    async def models(request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "scripted", "object": "model", "created": 0,
                                                               "owned_by": "bench"}]})

    async def taken(request: web.Request) -> web.Response:
        found = list(log)
        log.clear()
        return web.json_response(found)

    app = web.Application()
    app.add_routes([web.post("/v1/chat/completions", chat), web.get("/v1/models", models),
                    web.get("/_bench/log", taken)])
    web.run_app(app, host="127.0.0.1", port=port, access_log=None, print=None, backlog=4096)


# -- the plain client (a process of its own: `--plain`) ----------------------------------------------------------------


async def plain(url: str, endpoint: str, deployment: str, rollouts: int, concurrency: int) -> dict[str, Any]:
    import openai
    from openreward import AsyncOpenReward

    api = AsyncOpenReward(api_key="").environments
    env = api.get(deployment, variant=deployment, base_url=url)  # its path named: no redirect per request
    client = openai.AsyncOpenAI(base_url=endpoint, api_key="EMPTY", max_retries=0, timeout=300)
    tools = [{"type": "function", "function": {"name": "echo", "description": "Echo text back.", "parameters": {
        "type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}}}]
    gate = asyncio.Semaphore(concurrency)

    async def episode(index: int) -> float | None:
        async with gate, env.session(split="train", index=index) as session:
            prompt = await session.get_prompt()
            messages: list[dict[str, Any]] = [{"role": "user", "content": "".join(b.text for b in prompt)}]
            reward = None
            for _ in range(10):
                reply = await client.chat.completions.create(model="scripted", messages=messages,  # type: ignore[arg-type]
                                                             tools=tools)  # type: ignore[arg-type]
                message = reply.choices[0].message
                messages.append(message.model_dump(exclude_none=True))
                if not message.tool_calls:
                    break
                for call in message.tool_calls:
                    output = await session.call_tool(call.function.name, json.loads(call.function.arguments))
                    reward = output.reward if output.reward is not None else reward
                    messages.append({"role": "tool", "tool_call_id": call.id,
                                     "content": "".join(getattr(b, "text", "") for b in output.blocks)})
            return reward

    found = await asyncio.gather(*(episode(i) for _ in range(rollouts) for i in range(TASKS)), return_exceptions=True)
    await client.close()
    await api.aclose() if hasattr(api, "aclose") else None
    raised = [f"{type(e).__name__}: {e}" for e in found if isinstance(e, BaseException)]
    rewards = [r for r in found if not isinstance(r, BaseException)]
    return {"episodes": len(found), "raised": len(raised), "first_raised": raised[:3],
            "mean_reward": sum(r or 0.0 for r in rewards) / max(len(rewards), 1)}


# -- the driver --------------------------------------------------------------------------------------------------------


class Sampler:
    """A child's CPU seconds, RSS, open file descriptors and threads, sampled from /proc every 0.1 s; pid None: the
    whole machine's busy CPU seconds (every core's, /proc/stat), from which the others' share of a phase follows."""

    def __init__(self, pid: int | None) -> None:
        self.pid, self.samples = pid, []  # (monotonic, cpu_s, rss_mb, fds, threads)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        tick = os.sysconf("SC_CLK_TCK")
        while not self._stop.is_set():
            if self.pid is None:
                busy = [int(n) for n in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
                busy_s = (sum(busy[:8]) - busy[3] - busy[4]) / tick  # all but idle and iowait (guests are in user)
                self.samples.append((time.monotonic(), busy_s, 0.0, 0, 0))
                self._stop.wait(0.1)
                continue
            try:
                stat = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
                status = dict(line.split(":", 1) for line in Path(f"/proc/{self.pid}/status").read_text().splitlines()
                              if ":" in line)
                fds = len(os.listdir(f"/proc/{self.pid}/fd"))
                sample = (time.monotonic(), (int(stat[11]) + int(stat[12])) / tick,
                          int(status["VmRSS"].split()[0]) / 1024, fds, int(status["Threads"]))
            except (OSError, ValueError, KeyError):  # it exited (a zombie has no VmRSS)
                break
            self.samples.append(sample)
            self._stop.wait(0.1)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def cpu_at(self, when: float) -> float:
        """CPU seconds used by `when` (linear between the samples around it)."""
        before = [s for s in self.samples if s[0] <= when]
        after = [s for s in self.samples if s[0] >= when]
        if not before:
            return after[0][1] if after else 0.0
        if not after:
            return before[-1][1]
        a, b = before[-1], after[0]
        return a[1] if b[0] == a[0] else a[1] + (b[1] - a[1]) * (when - a[0]) / (b[0] - a[0])

    def peak(self, column: int) -> float:
        return max((s[column] for s in self.samples), default=0.0)


def get(url: str) -> Any:
    with NO_PROXY.open(url, timeout=30) as response:
        return json.loads(response.read())


def side_run(side: str, argv: list[str], env: dict[str, str], endpoint_url: str, env_url: str, episodes: int,
             concurrency: int, cwd: Path, servers: dict[str, int]) -> dict[str, Any]:
    get(f"{env_url}/_bench/reset")
    get(f"{endpoint_url}/_bench/log")
    began = time.monotonic()
    process = subprocess.Popen(argv, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    sampler = Sampler(process.pid)
    serving = {name: Sampler(pid) for name, pid in servers.items()}  # what each side costs the servers, too
    machine = Sampler(None)  # and what the rest of the machine used meanwhile: the load the side ran under
    out, err = process.communicate(timeout=3600)
    wall = time.monotonic() - began
    for each in [sampler, machine, *serving.values()]:
        each.stop()
    time.sleep(1.0)  # the last closes may land just after the exit
    log = [entry for entry in get(f"{endpoint_url}/_bench/log") if entry[2]]
    counts = get(f"{env_url}/_bench/counts")
    start, end = min(e[0] for e in log), max(e[1] for e in log)
    phase_cpu = sampler.cpu_at(end) - sampler.cpu_at(start)
    ours = phase_cpu + sum(each.cpu_at(end) - each.cpu_at(start) for each in serving.values())
    others = (machine.cpu_at(end) - machine.cpu_at(start) - ours) / (end - start)  # cores busy with other work
    found: dict[str, Any] = {"side": side, "concurrency": concurrency, "episodes": episodes, "exit": process.returncode,
                             "wall_s": wall, "phase_s": end - start, "chat_requests": len(log),
                             "cpu_phase_s": phase_cpu, "others_cores": max(others, 0.0), "cpu_total_s": sampler.peak(1),
                             "cpu_ms_per_episode": 1000 * phase_cpu / episodes, "peak_rss_mb": sampler.peak(2),
                             "peak_fds": sampler.peak(3), "peak_threads": sampler.peak(4),
                             "sessions_created": counts.get("POST /create", 0),
                             "sessions_deleted": counts.get("POST /delete", 0), "env_requests": counts,
                             **{f"{name}_cpu_ms_per_episode": 1000 * (each.cpu_at(end) - each.cpu_at(start)) / episodes
                                for name, each in serving.items()}}
    if side == "plain":
        # its last JSON line (a profiler put before it, --profile, may print after it)
        found.update(json.loads(next(line for line in reversed(out.splitlines()) if line.startswith("{"))))
    else:
        records = [json.loads(line) for line in (cwd / "out" / "trajectories.jsonl").read_text().splitlines()]
        found["raised"] = sum(1 for r in records if r.get("error") or r.get("start_error"))
        found["records"] = len(records)
        found["mean_reward"] = sum(r.get("reward") or 0.0 for r in records) / max(len(records), 1)
        found["stderr_tail"] = err.strip().splitlines()[-3:]
    if process.returncode != 0:
        found["stderr_tail"] = err.strip().splitlines()[-10:]
    return found


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--levels", default="16,128,512", help="the concurrencies C")
    p.add_argument("--waves", type=int, default=8, help="episodes per level: waves x C (at most 4 waves at C >= 512)")
    p.add_argument("--runs", type=int, default=3, help="times each level runs, the sides' order alternating: the "
                   "table gives each side's median")
    p.add_argument("--reply-ms", type=float, default=1000)
    p.add_argument("--tool-ms", type=float, default=1000)
    p.add_argument("--sides", default="orsgen,plain")
    p.add_argument("--json", type=Path, default=HERE / "eval_scale.json")
    p.add_argument("--profile", help="a command line put before each side's (py-spy record --gil -f raw -o FILE --, "
                   "py-spy by its path, one side per run: both write FILE): their figures are then the profiler's")
    p.add_argument("--endpoint", type=int, help=argparse.SUPPRESS)
    p.add_argument("--plain", nargs=5, metavar=("URL", "ENDPOINT", "DEPLOYMENT", "K", "C"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.endpoint:
        return endpoint_main(args.endpoint, args.reply_ms)
    if args.plain:
        url, endpoint, deployment, k, c = args.plain
        print(json.dumps(asyncio.run(plain(url, endpoint, deployment, int(k), int(c)))))
        return None

    from compare import BenchServer, free_port, generate

    levels = [int(c) for c in args.levels.split(",")]
    sides = args.sides.split(",")
    load_before = os.getloadavg()
    env_port, chat_port = free_port(), free_port()
    env_url, chat_url = f"http://127.0.0.1:{env_port}", f"http://127.0.0.1:{chat_port}"
    os.environ["BENCH_TOOL_MS"] = str(args.tool_ms)
    server = BenchServer("bench", env_port, 0)
    chat = subprocess.Popen([sys.executable, __file__, "--endpoint", str(chat_port), "--reply-ms", str(args.reply_ms)],
                            stdout=subprocess.DEVNULL)
    rows: list[dict[str, Any]] = []
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                get(f"{chat_url}/v1/models")
                break
            except OSError:
                if time.monotonic() > deadline or chat.poll() is not None:
                    raise
                time.sleep(0.2)
        with tempfile.TemporaryDirectory(prefix="orsgen-eval-scale-") as tmp:
            module = Path(tmp) / "bench_adapter.py"
            generate(env_url, module)
            child = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "codegen"), str(ROOT)]),
                     "OPENREWARD_API_URL": env_url, "OPENREWARD_SESSION_URL": env_url,
                     "OPENREWARD_DISABLE_UPDATE_CHECK": "1", "NO_PROXY": "127.0.0.1", "no_proxy": "127.0.0.1"}
            deployment = "bench"
            episode_s = (2 * args.reply_ms + args.tool_ms) / 1000
            print(f"load average {load_before}; {os.cpu_count()} CPUs; one episode = 2 replies of {args.reply_ms:g} ms "
                  f"+ a tool call of {args.tool_ms:g} ms = {episode_s:g} s", flush=True)
            for run in range(args.runs):
                for c in levels:
                    waves = min(args.waves, 4) if c >= 512 else args.waves
                    episodes = waves * c
                    k = max(1, episodes // TASKS)
                    episodes = k * TASKS
                    order = sides if (run + levels.index(c)) % 2 == 0 else sides[::-1]
                    for side in order:
                        cwd = Path(tmp) / f"r{run}-c{c}-{side}"
                        cwd.mkdir()
                        if side == "orsgen":
                            argv = [sys.executable, "-m", "orsgen", "eval", str(module), "--base-url", f"{chat_url}/v1",
                                    "--model", "scripted", "-n", str(TASKS), "-k", str(k), "--concurrency", str(c),
                                    "--out", "out", "--timeout", "600"]
                        else:
                            argv = [sys.executable, __file__, "--plain", env_url, f"{chat_url}/v1", deployment, str(k),
                                    str(c)]
                        argv = [*(args.profile or "").split(), *argv]
                        found = side_run(side, argv, child, chat_url, env_url, episodes, c, cwd,
                                         {"env_server": server.process.pid, "endpoint": chat.pid})
                        found["ideal_s"] = episodes / c * episode_s
                        found["ratio"] = found["phase_s"] / found["ideal_s"]
                        found["run"] = run + 1
                        found["load_after"] = os.getloadavg()
                        rows.append(found)
                        print(f"  C={c} {side}: {episodes} episodes, phase {found['phase_s']:.1f} s (ideal "
                              f"{found['ideal_s']:.1f}: {found['ratio']:.2f}x), CPU {found['cpu_ms_per_episode']:.1f} "
                              f"ms/episode in the phase ({found['cpu_total_s']:.1f} s in all; the servers' "
                              f"{found['env_server_cpu_ms_per_episode']:.1f} + {found['endpoint_cpu_ms_per_episode']:.1f}"
                              "), wall "
                              f"{found['wall_s']:.1f} s, RSS {found['peak_rss_mb']:.0f} MB, fds {found['peak_fds']:.0f},"
                              f" threads {found['peak_threads']:.0f}, raised {found['raised']}, exit {found['exit']}, "
                              f"sessions {found['sessions_created']} opened / {found['sessions_deleted']} closed, "
                              f"load {found['load_after'][0]:.2f}, other work {found['others_cores']:.2f} cores "
                              "in the phase", flush=True)
    finally:
        chat.terminate()
        server.stop()
    report(rows, levels, sides, args, load_before)


def report(rows: list[dict[str, Any]], levels: list[int], sides: list[str], args: Any, load_before: Any) -> None:
    import statistics

    def med(c: int, side: str, key: str) -> float:
        return statistics.median(r[key] for r in rows if r["concurrency"] == c and r["side"] == side)

    print("\n| C | episodes | orsgen eval: phase / ideal | plain asyncio: phase / ideal | orsgen / plain | orsgen CPU "
          "ms/episode | plain CPU ms/episode | orsgen / plain | orsgen peak RSS MB, fds, threads | plain peak RSS MB, "
          "fds, threads |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---|---|")
    goals = {}
    for c in levels:
        if not {"orsgen", "plain"} <= set(sides):
            break
        ratio = (med(c, "orsgen", "ratio"), med(c, "plain", "ratio"))
        cpu = (med(c, "orsgen", "cpu_ms_per_episode"), med(c, "plain", "cpu_ms_per_episode"))
        goals[c] = {"ratio": ratio[0] / ratio[1], "cpu": cpu[0] / cpu[1]}
        print(f"| {c} | {int(med(c, 'orsgen', 'episodes'))} | {ratio[0]:.2f}x | {ratio[1]:.2f}x | "
              f"**{goals[c]['ratio']:.2f}** | {cpu[0]:.1f} | {cpu[1]:.1f} | **{goals[c]['cpu']:.2f}** | "
              f"{med(c, 'orsgen', 'peak_rss_mb'):.0f}, {med(c, 'orsgen', 'peak_fds'):.0f}, "
              f"{med(c, 'orsgen', 'peak_threads'):.0f} | {med(c, 'plain', 'peak_rss_mb'):.0f}, "
              f"{med(c, 'plain', 'peak_fds'):.0f}, {med(c, 'plain', 'peak_threads'):.0f} |")
    for c, goal in goals.items():
        pairs = [next(r["ratio"] for r in rows if r["run"] == run and r["side"] == "orsgen" and r["concurrency"] == c)
                 / next(r["ratio"] for r in rows if r["run"] == run and r["side"] == "plain" and r["concurrency"] == c)
                 for run in range(1, args.runs + 1)]
        goal["runs"], goal["paired"] = pairs, statistics.median(pairs)  # each run's pair: the same minute's load
        goal["others_cores"] = (med(c, "orsgen", "others_cores"), med(c, "plain", "others_cores"))
        print(f"C={c}: each run's orsgen / plain {', '.join(f'{x:.2f}' for x in pairs)}; other work on the machine "
              f"{goal['others_cores'][0]:.2f} and {goal['others_cores'][1]:.2f} cores (medians) in the two sides' "
              "phases")
        print(f"C={c}: wall-time ratio {goal['ratio']:.2f} of the plain client's, the sides' medians (goal <= "
              f"{RATIO_GOAL}): {'met' if goal['ratio'] <= RATIO_GOAL else 'NOT met'}; the median of the runs' pairs "
              f"{goal['paired']:.2f}: {'met' if goal['paired'] <= RATIO_GOAL else 'NOT met'}; CPU per episode {goal['cpu']:.2f}x (goal <= "
              f"{CPU_GOAL}): {'met' if goal['cpu'] <= CPU_GOAL else 'NOT met'}")
    print(f"load average before {load_before}, after {os.getloadavg()}")
    from eval_speed import versions
    from slow_tools import runtime_commit

    meta = {"levels": levels, "waves": args.waves, "runs": args.runs, "reply_ms": args.reply_ms,
            "tool_ms": args.tool_ms, "cpus": os.cpu_count(), "python": platform.python_version(),
            "platform": platform.platform(), "versions": versions(), "runtime_commit": runtime_commit(),
            "load_average_before": load_before, "load_average_after": os.getloadavg(),
            "when": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")}
    args.json.write_text(json.dumps({"meta": meta, "goals": {str(c): g for c, g in goals.items()}, "runs": rows},
                                    indent=1) + "\n")
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
