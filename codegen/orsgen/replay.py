"""`orsgen replay RECORDS... --against TARGET`: re-drive recorded episodes against an environment, no model called.

RECORDS are trajectory records (schema "orsgen.trajectory/1": `orsgen eval`'s trajectories.jsonl, training's
trajectories-rank*.jsonl; a folder means the trajectories*.jsonl in it). Each episode that started is replayed on a
fresh session of its task, through the runtime as training ran it (the TARGET module's adapter class, its budgets
included; for a server, a plain adapter of it): the same tool calls with the same arguments, in order. Every call's
result or error, reward and finished flag is compared with the record, then the episode's reward, recomputed as the
record's was (the last reward a tool gave, `get_reward()`; or their sum, `total_reward`, when that is what the record
holds; a reward of the trainer's own functions is compared call by call only). A summary, the first difference of
each differing episode; the replayed records (the same schema, in the order read: what `orsgen view` shows beside
the old ones) go to --out. Exit 0: every replayed episode is equal; 1: one differs; 2: none could be replayed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from orsgen.errors import OrsgenError

SCHEMA = "orsgen.replay/1"
COMPARED = ("result", "error", "reward", "finished")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(2, f"orsgen: error: {message} (orsgen replay --help lists the options)\n")


def parser() -> argparse.ArgumentParser:
    p = _Parser(prog="orsgen replay", allow_abbrev=False, formatter_class=argparse.RawDescriptionHelpFormatter,
                description="Replay recorded episodes (trajectory records) against an environment: the same tool "
                "calls in order on a fresh session of each task, every result and reward compared with the record.",
                epilog="examples:\n  orsgen replay runs/base/trajectories.jsonl --against myenv:MyEnv\n  orsgen replay "
                "runs/seta/ --against generated/seta.py --out replayed.jsonl --json\nexit codes: 0 every episode "
                "equal, 1 an episode differs, 2 nothing could be replayed")
    p.add_argument("records", nargs="+", type=Path, metavar="RECORDS", help="trajectory records (.jsonl), or a "
                   "folder of them")
    p.add_argument("--against", required=True, metavar="TARGET", help="a URL, a catalog owner/name, a generated "
                   "module, or MODULE:CLASS (served on 127.0.0.1 for the replay)")
    p.add_argument("--env", metavar="NAME", help="one environment of a server (or bundle) that has several")
    p.add_argument("--out", type=Path, default=Path("replayed.jsonl"), metavar="FILE", help="where the replayed "
                   "records go (default replayed.jsonl)")
    p.add_argument("--json", action="store_true", help="print one JSON document (schema orsgen.replay/1)")
    return p


@dataclass
class Episode:
    """One record read, and what its replay found."""

    where: str  # FILE:LINE
    record: dict[str, Any]
    status: str = "equal"  # equal, differs, not replayable
    said: str | None = None  # the first difference, or why it could not be replayed
    replayed: dict[str, Any] | None = None

    def name(self) -> str:
        r = self.record
        rollout = f", rollout {r['rollout']}" if r.get("rollout") is not None else ""
        step = f", step {r['step']}" if r.get("step") is not None else ""
        return f"{r.get('split')} task {r.get('task_index')} ({self.where}{step}{rollout})"


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    os.environ.pop("ORSGEN_TRAJECTORIES", None)  # a training's recorder: the replayed records go to --out alone
    try:
        episodes = read(args.records)
    except OrsgenError as exc:
        print(f"orsgen: error: {exc}", file=sys.stderr)
        return 2
    from orsgen.doctor import target

    try:
        live = target.resolve(args.against, args.env)
    except OrsgenError as exc:
        print(f"orsgen: error: {exc}", file=sys.stderr)
        return 2
    try:
        replay(episodes, live)
    except KeyboardInterrupt:
        print("orsgen replay: interrupted", file=sys.stderr)
        return 130
    except OrsgenError as exc:
        print(f"orsgen: error: {exc}", file=sys.stderr)
        return 2
    finally:
        from orsgen.runtime import close_all

        close_all()
        live.close()
    return report(episodes, live, args)


def read(paths: list[Path]) -> list[Episode]:
    """Every record of the files (a folder: its trajectories*.jsonl), in order; OrsgenError when there is none."""
    from orsgen.runtime import trajectories

    files: list[Path] = []
    for path in paths:
        if path.is_dir():
            found = sorted(p for p in path.glob("trajectories*.jsonl"))
            if not found:
                raise OrsgenError(f"{path}: a folder without trajectories*.jsonl (the records orsgen eval and "
                                  "Trajectories(...) write)")
            files += found
        elif path.is_file():
            files.append(path)
        else:
            raise OrsgenError(f"{path}: no such file or folder")
    episodes = []
    for path in files:
        try:
            lines = path.read_text(encoding="utf-8").split("\n")  # not splitlines(): a text may hold U+2028
        except (OSError, UnicodeDecodeError) as exc:
            raise OrsgenError(f"{path}: cannot read: {exc}") from None
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError:
                record = None
            where = f"{path}:{number}"
            if not isinstance(record, dict) or record.get("schema") != trajectories.SCHEMA:
                episodes.append(Episode(where, {}, "not replayable", "not trajectory records"))
            else:
                episodes.append(Episode(where, record))
    if not episodes:
        raise OrsgenError(f"{', '.join(map(str, paths))}: no record to replay")
    return episodes


def replay(episodes: list[Episode], live: Any) -> None:
    """Each replayable episode re-driven, compared, its replayed record kept (one at a time, in order)."""
    from orsgen.runtime.errors import StartError, WrongServer
    from orsgen.runtime.trajectories import Traces

    classes = _classes(live)
    traces = Traces()  # each episode's hook records, kept once it ended
    try:
        for episode in episodes:
            if episode.status != "equal":
                continue
            why = _unreplayable(episode.record, live)
            if why is not None:
                episode.status, episode.said = "not replayable", why
                continue
            try:
                episode.replayed = _again(episode.record, classes(episode.record.get("adapter")), traces)
            except (StartError, WrongServer, ValueError) as exc:  # what stops every episode: one line, exit 2
                raise OrsgenError(f"replaying {episode.where}: {exc}") from None
            difference = compare(episode.record, episode.replayed)
            if difference is not None:
                episode.status, episode.said = "differs", difference
    finally:
        traces.close()


def _classes(live: Any) -> Any:
    """The adapter class of a recorded `adapter` name: the TARGET module's own (its default for a name it lacks),
    else a plain adapter of the live environment under that name."""
    from orsgen.runtime import Adapter, Pinned

    module = live.module
    if module is not None:
        classes = module.ENVIRONMENTS
        return lambda name: classes.get(name) or classes[module.PINNED.default_class]
    pinned = Pinned(module="orsgen replay", target=live.target, url=live.url, deployment=live.deployment,
                    env=live.env, split=(live.splits() or ["train"])[0], snapshot=live.snapshot)
    made: dict[str, type] = {}

    def plain(name: Any) -> type:
        name = name if isinstance(name, str) and name.isidentifier() else "Replayed"
        if name not in made:
            made[name] = type(name, (Adapter,), {"pinned": pinned, "__module__": __name__})
        return made[name]

    return plain


def _unreplayable(record: dict[str, Any], live: Any) -> str | None:
    if record.get("start_error") or not record.get("session"):
        return "never started"
    environment = record.get("environment")
    if isinstance(environment, str) and environment.lower() != live.name.lower():
        return f"of another environment ({environment})"
    if not isinstance(record.get("task_index"), int) or not isinstance(record.get("split"), str):
        return "name no task"
    calls = record.get("tool_calls")
    if not isinstance(calls, list) or not all(isinstance(c, dict) and isinstance(c.get("name"), str)
                                               and isinstance(c.get("arguments"), dict) for c in calls):
        return "hold unreadable tool calls"
    if "[secret]" in json.dumps([c["arguments"] for c in calls]):
        return "hold a secret the record replaced with [secret]"
    return None


def _again(record: dict[str, Any], cls: type, traces: Any) -> dict[str, Any]:
    """The episode re-driven on a fresh session: its new record, in the record's schema and identity."""
    from orsgen.runtime import ToolError
    from orsgen.runtime.adapter import call_tool, close_episode, episode_of, secrets_of

    env = cls(settings={"check_drift": False})
    try:
        env.reset(split=record["split"], task_index=record["task_index"])
        for call in record["tool_calls"]:
            try:
                call_tool(env, call["name"], call["arguments"])
            except ToolError:
                pass  # recorded in its hook record: the error the model was shown
        got = env.get_reward()  # the episode's end: its trace holds what the record is built from
        trace = traces.take(episode_of(env))
        if trace is None:
            raise AssertionError("the runtime reported no end of the episode")
        trace.policy_version = record.get("policy_version")
        trace.ended_at = None
        replayed = trace.record(
            run=record.get("run"), step=record.get("step"), rank=record.get("rank") or 0,
            environment=record.get("environment"), task_spec=record.get("task_spec"), prompt=record.get("prompt"),
            secrets=secrets_of(env), model=record.get("model"), rollout=record.get("rollout"), usage=record.get("usage"))
    finally:
        close_episode(env)
        traces.take(episode_of(env))  # (one an error cut short)
    replayed["stream"] = record.get("stream")
    replayed["completion"] = _completion(record, replayed)
    rule = reward_rule(record)
    if rule == "sum" and replayed["scored"]:
        replayed["reward"] = sum(c["reward"] for c in replayed["tool_calls"] if c["reward"] is not None)
    elif rule is not None:
        replayed["reward"] = got
    return replayed


def reward_rule(record: dict[str, Any]) -> str | None:
    """How the record's reward came from its calls: "last" (get_reward()), "sum" (total_reward), or None (the
    trainer's own reward function, or an unscored episode's unscored_reward: compared call by call only)."""
    rewards = [c.get("reward") for c in record.get("tool_calls") or [] if c.get("reward") is not None]
    if not record.get("scored") or not rewards:
        return "last" if record.get("reward") is None else None
    if record.get("reward") == rewards[-1]:
        return "last"
    if abs(float(record.get("reward") or 0.0) - sum(rewards)) < 1e-9:
        return "sum"
    return None


def compare(old: dict[str, Any], new: dict[str, Any]) -> str | None:
    """The first difference between a record and its replay, in words; None when they are equal."""
    if new.get("start_error"):
        return f"it did not start: {new['start_error']}"
    for i, (a, b) in enumerate(zip(old["tool_calls"], new["tool_calls"], strict=False)):
        for key in COMPARED:
            if a.get(key) != b.get(key):
                return f"call {i + 1}, {a['name']}: {key} {_shown(a.get(key))} -> {_shown(b.get(key))}"
    if len(old["tool_calls"]) != len(new["tool_calls"]):
        return f"{len(old['tool_calls'])} calls recorded, {len(new['tool_calls'])} replayed"
    if old.get("scored") != new.get("scored") or old.get("unscored_reason") != new.get("unscored_reason"):
        return f"unscored_reason {old.get('unscored_reason')} -> {new.get('unscored_reason')}"
    if reward_rule(old) is not None and old.get("reward") != new.get("reward"):
        return f"reward {_shown(old.get('reward'))} -> {_shown(new.get('reward'))}"
    return None


def _shown(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 80 else text[:77] + "..."


def _completion(old: dict[str, Any], new: dict[str, Any]) -> Any:
    """The recorded turns with each tool turn of a replayed call showing its new result (the model's own turns are
    the record's: no model was asked)."""
    turns = old.get("completion")
    if not isinstance(turns, list):
        return turns
    pairs = list(zip(old["tool_calls"], new["tool_calls"], strict=False))
    out, at = [], 0
    for turn in turns:
        if isinstance(turn, dict) and turn.get("role") == "tool" and at < len(pairs):
            was, now = pairs[at]
            if turn.get("content") in (was.get("result"), str({"error": was.get("error")})):
                turn = {**turn, "content": now["result"] if now.get("error") is None else str({"error": now["error"]})}
                at += 1
        out.append(turn)
    return out


def report(episodes: list[Episode], live: Any, args: argparse.Namespace) -> int:
    from orsgen.write import atomic

    replayed = [e for e in episodes if e.replayed is not None]
    equal = [e for e in replayed if e.status == "equal"]
    differ = [e for e in replayed if e.status == "differs"]
    skipped = [e for e in episodes if e.status == "not replayable"]
    if replayed:
        try:
            atomic(args.out, "".join(json.dumps(e.replayed, ensure_ascii=False) + "\n" for e in replayed))
        except OrsgenError as exc:
            print(f"orsgen: error: {exc}", file=sys.stderr)
            return 2
    code = 1 if differ else 0 if replayed else 2
    reasons: dict[str, int] = {}
    for e in skipped:
        reasons[e.said or ""] = reasons.get(e.said or "", 0) + 1
    if args.json:
        print(json.dumps({"schema": SCHEMA, "against": live.target, "environment": live.name, "exit": code,
                          "episodes": len(episodes), "equal": len(equal), "differ": len(differ),
                          "not_replayable": reasons, "out": str(args.out) if replayed else None,
                          "differences": [{"where": e.where, "split": e.record.get("split"),
                                           "task_index": e.record.get("task_index"), "difference": e.said}
                                          for e in differ]}, indent=1))
        return code
    why = "; ".join(f"{n} {reason}" for reason, n in reasons.items())
    if not replayed:
        print(f"orsgen: error: none of the {len(episodes)} records could be replayed ({why})", file=sys.stderr)
        return code
    print(f"orsgen replay: {len(episodes)} episodes against {live.name} at {live.where}: {len(equal)} equal, "
          f"{len(differ)} differ, {len(skipped)} not replayable" + (f" ({why})" if why else ""))
    for e in differ:
        print(f"  differs: {e.name()}: {e.said}")
    print(f"orsgen replay: the replayed records are in {args.out}", file=sys.stderr)
    return code
