"""`orsgen eval`: measure a model behind an OpenAI-compatible endpoint on the environments of a generated module,
with what training uses (the runtime's sessions, the tools TRL offers, its turn limit, the module's rewards).

`measure` is the whole run on one screen: what to measure (a new run, or one resumed from its folder), the
environment's tasks, the endpoint checked before any episode, the episodes at once with each record appended as it
ends, then the figures (summary.json, the report on stdout, a picture, the passing episodes for SFT). Needs no TRL
and no GPU: the runtime, `openai` (from the openreward SDK) and transformers' `get_json_schema`.
"""

from __future__ import annotations

import datetime
import json
import logging
import os
import re
import sys
import threading
from collections import Counter
from pathlib import Path
from typing import Any

from orsgen.errors import OrsgenError
from orsgen.evaluate import options
from orsgen.evaluate.options import Invocation, Run

RECORDS, SUMMARY, RUN, REPORT, PICTURE = "trajectories.jsonl", "summary.json", "run.json", "report.md", "pass_rates.png"
ENDPOINT_ERRORS_IN_A_ROW = 8  # episodes the endpoint failed in a row before the run stops


def main(argv: list[str]) -> int:
    try:
        invocation = options.invocation(argv)
        if invocation.compare is not None:
            return compare(invocation)
        if invocation.merge is not None:
            from orsgen.evaluate import merge

            return merge.merge(invocation)
        return measure(invocation)
    except OrsgenError as exc:
        print(f"orsgen: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # before any episode ran: nothing to save
        print("orsgen eval: interrupted", file=sys.stderr)
        return 130


def measure(invocation: Invocation) -> int:
    from orsgen.evaluate import endpoint, episode, figures, pool, progress, target

    os.environ.pop("ORSGEN_TRAJECTORIES", None)  # a training's recorder: this run writes its own records
    folder, run, url = _what(invocation)
    concurrency = _concurrency(folder, invocation.concurrency)
    pool.open_files(concurrency)  # the limit on open files raised for it, or the run refused: before anything starts

    members = target.members(run.target)
    _same_module(folder, members, invocation)
    _need_transformers()
    from orsgen import runtime
    from orsgen.runtime.recorder import Recorder

    budget = pool.sessions_budget(invocation.max_sessions, concurrency)
    scoring = {m: episode.Scoring(_rewards(m, run.rewards), run.max_turns, run.seed, run.unscored_reward, folder.name,
                                  budget) for m in members}
    whole = _plan(members, run)
    plan = whole if run.shard is None else [w for w in whole if run.shard.holds(w.number)]
    records = records_of(folder)
    again = {_key(r): why for r in figures.latest(records) if (why := figures.again(r)) is not None}
    done = {_key(r) for r in figures.latest(records)} - set(again)
    todo = [work for work in plan if work.key not in done]
    limiter = pool.Limiter(min(concurrency, max(len(todo), 1)))
    model = endpoint.Endpoint(url, run.model, _sampling(run), invocation.timeout, busy=limiter.busy)
    try:
        if todo:
            first = todo[0].member
            model.check_served()  # before the tools' schemas are made: a mistyped model is its first error
            model.check_tools(first.schemas(first.adapter_class(todo[0].row)))
            for member in members:
                member.check()
                for cls in set(member.module.ENVIRONMENTS.values()):  # once, not by the first C episodes at once
                    member.schemas(cls)
    except BaseException:
        model.close()
        raise
    _save_run(folder, run, url, members, concurrency, invocation.resume is None, whole)
    recorder = Recorder(folder, path=folder / RECORDS, build=False, quiet=True)
    refusals = episode.Refusals(busy=limiter.busy, waits=budget < concurrency)
    kept, stop = episode.Records(recorder, refusals, _specs(todo)), threading.Event()
    shown = progress.Progress(len(todo))
    log = logging.getLogger("orsgen")
    above = progress.Above(shown)
    log.addHandler(above)
    log.propagate = False
    rerun = Counter(again[w.key] for w in todo if w.key in again)
    part = (f"{len(plan)} episodes ({len(plan) // run.rollouts} tasks x {run.rollouts})" if run.shard is None else
            f"shard {run.shard}: {len(plan)} of the run's {len(whole)} episodes ({len(whole) // run.rollouts} tasks x "
            f"{run.rollouts})")
    print(f"orsgen eval: {part}, {len(todo)} to run{_again_said(rerun, ' ({n} of them again: {said})')}, at most "
          f"{limiter.cap} at once; writing to {folder} (orsgen eval --resume {folder} if stopped)", file=sys.stderr)
    status, failed_in_a_row, why = 0, 0, None
    with pool.frozen_heap():  # the process as it is now: out of the garbage collector's way
        work_pool = pool.Pool(todo, lambda w: episode.run(w, model, kept, scoring[w.member], stop), limiter, stop)
        requeued: dict[Any, int] = {}
        rerun_done: Counter[str] = Counter()
        try:
            while work_pool.pending and not stop.is_set():
                shown.running = limiter.running
                shown.show()
                ended = work_pool.next(timeout=0.25)
                if ended is None:
                    continue
                if isinstance(ended.error, episode.Busy) and requeued.get(ended.work.key, 0) < pool.BUSY_REQUEUES:
                    requeued[ended.work.key] = requeued.get(ended.work.key, 0) + 1  # the limiter heard its 429s
                    work_pool.again(ended.work)
                    continue
                if ended.error is not None:
                    why = str(ended.error) if isinstance(ended.error, episode.Fatal | episode.Busy) else _bug(ended.error)
                    status = 2
                    break
                if ended.result is None:
                    continue
                unsaved = _save(recorder, ended.result)
                if unsaved is not None:  # a full disk: stop, with what is saved and the resume line
                    why, status = f"cannot write {folder / RECORDS}: {unsaved}", 2
                    break
                if ended.work.key in again:
                    rerun_done[again[ended.work.key]] += 1
                shown.done += 1
                if figures.counts(ended.result):
                    reward = ended.result["reward"]
                    shown.counted += 1
                    shown.passed += reward is not None and reward >= (1.0 if run.pass_threshold is None else
                                                                      run.pass_threshold)
                if ended.result.get("error"):
                    failed_in_a_row += 1
                elif ended.result.get("unscored_reason") != "not_started":  # the model was asked, and answered
                    failed_in_a_row = 0
                if failed_in_a_row >= ENDPOINT_ERRORS_IN_A_ROW:
                    why, status = (f"the endpoint failed {failed_in_a_row} episodes in a row; the last: "
                                   f"{ended.result['error']}"), 2
                    break
        except KeyboardInterrupt:
            status = 130
        finally:
            work_pool.finish(timeout=10.0 if status != 130 else 5.0)
            model.close()
            runtime.close_all()
            kept.refusals.close()
            recorder.close()
            shown.end()
            log.removeHandler(above)
            log.propagate = True
    records = records_of(folder)  # what was saved: never held in memory while the run goes (C records at most)
    try:
        finish(folder, run, url, [m.name for m in members], _tasks(plan), len(plan), records, invocation, members)
    except OSError as exc:  # a full disk again: the records are what counts, and they are saved
        unwritten = f"cannot write the figures in {folder}: {exc.strerror or exc}"
        why, status = (unwritten if why is None else f"{why}; {unwritten}"), status or 2
    finished = sum(1 for r in figures.latest(records) if figures.settled(r))  # what --resume will not run again
    unparsed = sum(1 for r in figures.latest(records) if r.get("model_error"))
    if rerun_done:
        print(f"orsgen eval: {_again_said(rerun_done, 'ran {n} episode{s} again ({said})')}", file=sys.stderr)
    if unparsed:
        print(f"orsgen eval: {unparsed} episode{'s' * (unparsed != 1)} ended on a conversation the endpoint refused "
              "for the model's own tool call (not JSON): counted as the model's, each record's model_error says why",
              file=sys.stderr)
    if status == 130:
        print(f"orsgen eval: interrupted: {finished} of {len(plan)} episodes saved in {folder}; "
              f"orsgen eval --resume {folder} runs the rest", file=sys.stderr)
    elif why is not None:
        print(f"orsgen: error: {why} ({finished} of {len(plan)} episodes saved in {folder}: "
              f"orsgen eval --resume {folder} runs the rest)", file=sys.stderr)
    return status


def _again_said(counts: Counter[str], text: str) -> str:
    """`text` with {n}, the episodes run again ({s}: its plural's s), and {said}, how many for each reason; "" when
    none."""
    from orsgen.evaluate import figures

    said = [f"{counts[reason]} {words}" for reason, words in figures.AGAIN.items() if counts[reason]]
    n = sum(counts.values())
    return text.format(n=n, s="s" * (n != 1), said=", ".join(said)) if said else ""


def _key(record: dict[str, Any]) -> tuple[Any, ...]:
    return record["environment"], record["split"], record["task_index"], record.get("rollout")


def _save(recorder: Any, record: dict[str, Any]) -> str | None:
    """Append the record through the recorder and wait until it is written (lone surrogates a model wrote escaped);
    why it could not be written, or None."""
    before = recorder.written
    recorder.put(record)
    recorder.flush(timeout=60.0)
    if recorder.written > before:
        return None
    return recorder.file.failure or recorder.stopped or "the record writer did not take it"


def _what(invocation: Invocation) -> tuple[Path, Run, str | None]:
    """The run's folder, what it measures and the endpoint: a new run's, or those its folder recorded. Nothing of the
    user's is replaced: a new run's folder is new or empty, --keep-passing's set is eval's own."""
    from orsgen.evaluate import sft

    keep = invocation.keep_passing
    if keep is not None and (keep.exists() and not keep.is_dir() or not sft.ours(keep)):
        raise OrsgenError(f"--keep-passing {keep}: {keep / sft.NAME if keep.is_dir() else keep} was not written by "
                          "orsgen eval: not replaced; give another folder")
    if invocation.resume is not None:
        folder = invocation.resume
        run = Run.load(folder)
        return folder, run, _endpoint(folder, invocation.base_url)
    if invocation.run is None:
        raise AssertionError("a new run is given")
    run = invocation.run
    folder = invocation.out or Path("evals") / _slug(
        f"{Path(run.target).stem}-{run.model}-{datetime.datetime.now():%Y%m%d-%H%M%S}")
    if (folder / RUN).exists():
        raise OrsgenError(f"{folder} holds a run already: orsgen eval --resume {folder} runs what it is missing, or "
                          "give another --out")
    fresh(folder, f"--out {folder}" if invocation.out else str(folder))
    return folder, run, invocation.base_url or os.environ.get("OPENAI_BASE_URL") or None


def fresh(folder: Path, where: str) -> None:
    """OrsgenError unless `folder` is new or empty: nothing of the user's is replaced."""
    if folder.exists() and not folder.is_dir():
        raise OrsgenError(f"{where}: a file, not a folder: give a new or empty folder")
    theirs = sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []
    if theirs:
        raise OrsgenError(f"{where} holds files orsgen eval did not write ({', '.join(theirs[:5])}"
                          f"{', ...' if len(theirs) > 5 else ''}): nothing there is replaced; give a new or empty "
                          "folder")


def _endpoint(folder: Path, given: str | None) -> str | None:
    """A resumed run's endpoint: --base-url, else the one run.json saved (OPENAI_BASE_URL when it is that one). A URL
    whose credentials were not saved must be given again; another OPENAI_BASE_URL is refused, never used silently."""
    saved = json.loads((folder / RUN).read_text(encoding="utf-8"))
    url, withheld = saved.get("endpoint"), saved.get("endpoint_withheld") or []
    if given is not None:
        if options.public(given)[0] != url:
            print(f"orsgen eval: --resume {folder}: asking the endpoint at {options.public(given)[0]} (the run began "
                  f"at {url or 'the openai default'})", file=sys.stderr)
        return given
    environ = os.environ.get("OPENAI_BASE_URL") or None
    if environ is not None:
        if options.public(environ)[0] == url:
            return environ
        raise OrsgenError(f"--resume {folder}: OPENAI_BASE_URL is {options.public(environ)[0]}, and the run measured "
                          f"the endpoint at {url or 'the openai default'}: give --base-url (its URL, or where it "
                          "moved)")
    if withheld:
        raise OrsgenError(f"--resume {folder}: its endpoint {url} had credentials in its URL ({' and '.join(withheld)}),"
                          " which are never saved: give --base-url again, with them")
    return url


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-")


def _same_module(folder: Path, members: list[Any], invocation: Invocation) -> None:
    if invocation.resume is None:
        return
    saved = json.loads((folder / RUN).read_text(encoding="utf-8")).get("environments", [])
    now = {m.name: m.snapshot for m in members}
    for env in saved:
        if now.get(env["name"]) != env["snapshot"]:
            raise OrsgenError(f"--resume {folder}: it measured {env['name']} at snapshot {env['snapshot'][:12]}, the "
                              f"module now pins {str(now.get(env['name']))[:12]}: a new run measures the new module")


def _need_transformers() -> None:
    try:
        import transformers.utils  # noqa: F401
    except ImportError:
        from orsgen import extras

        raise OrsgenError("orsgen eval needs transformers (its get_json_schema makes the tools TRL offers the model): "
                          f"{extras.pip('eval')} (the eval extra)") from None


def _plan(members: list[Any], run: Run) -> list[Any]:
    """Every episode of the run, rollout by rollout (an early stop has measured every task about equally); each
    numbered by its place, which seeds its requests."""
    from orsgen.evaluate.episode import Work

    rows: list[tuple[Any, dict[str, Any]]] = []
    for member in members:
        split = run.split or member.module.PINNED.split
        try:
            found = member.module.dataset(split=run.split, num_tasks=run.num_tasks,
                                          indices=list(run.tasks) if run.tasks else None)
        except ValueError as exc:  # not the tasks asked for (fewer than -n, say): what the environment has
            raise OrsgenError(_fewer(member, run, split, exc)) from None
        except Exception as exc:  # noqa: BLE001 - an environment that cannot list its tasks: one line
            from orsgen.runtime import client

            where = member.module.PINNED.sessions.server(None) or member.module.PINNED.target
            raise OrsgenError(f"the environment {member.name} at {where} cannot list its tasks: "
                              f"{client.describe(exc)[:300]}: is it running (orsgen serve), or is "
                              "OPENREWARD_SESSION_URL its address?") from None
        if not len(found):
            raise OrsgenError(f"no tasks in split {split!r} of {member.name}")
        rows += [(member, row) for row in found.to_list()]
    return [Work(member, row, rollout, rollout * len(rows) + i)
            for rollout in range(run.rollouts) for i, (member, row) in enumerate(rows)]


def _fewer(member: Any, run: Run, split: str, exc: ValueError) -> str:
    """One line for a split without the tasks asked for: "no tasks in split X" when it has none, whatever -n asks
    (-n N asked for more than it has, so listing the whole split is at most N tasks)."""
    if run.num_tasks is not None:
        try:
            empty = not len(member.module.dataset(split=run.split))
        except Exception:  # noqa: BLE001 - then the first answer says it
            empty = False
        if empty:
            return f"no tasks in split {split!r} of {member.name}"
    return f"{member.name}: {str(exc).removeprefix('dataset(): ')}"


def _specs(todo: list[Any]) -> dict[tuple[str, str, int], Any]:
    """Each task's spec for its records, read as dataset() reads them (pinned, or one request per range): not one
    request per episode."""
    from orsgen.runtime import rows
    from orsgen.runtime.sessions import Connection

    wanted: dict[tuple[Any, str], set[int]] = {}
    for work in todo:
        wanted.setdefault((work.member, str(work.row["split"])), set()).add(int(work.row["task_index"]))
    found: dict[tuple[str, str, int], Any] = {}
    for (member, split), indices in wanted.items():
        low = min(indices)
        try:
            specs = rows.task_specs(member.module.PINNED, split, low, max(indices) + 1, Connection(None, None, None))
        except Exception:  # noqa: BLE001, S112 - then each record reads its own (episode._spec)
            continue
        found.update({(member.name, split, low + i): spec for i, spec in enumerate(specs) if low + i in indices})
    return found


def records_of(folder: Path) -> list[dict[str, Any]]:
    path = folder / RECORDS
    if not path.exists():
        return []
    found = []
    for line in path.read_text(encoding="utf-8").split("\n"):  # not splitlines(): a text may hold U+2028
        if not line:
            continue
        try:
            found.append(json.loads(line))
        except ValueError:
            continue  # a line a killed run left cut: its episode runs again
    return found


def _sampling(run: Run) -> dict[str, Any]:
    given = {"temperature": run.temperature, "top_p": run.top_p, "max_tokens": run.max_tokens}
    return {k: v for k, v in given.items() if v is not None}


def _rewards(member: Any, names: tuple[str, ...]) -> tuple[Any, ...]:
    """The module's reward functions by name (a terminal environment's `terminal_reward` by default), as TRL runs
    them before get_reward()."""
    module = member.module
    if not names and callable(getattr(module, "terminal_reward", None)):
        return (module.terminal_reward,)
    found = []
    for name in names:
        if name in ("group_reward", "shaped_reward"):
            raise OrsgenError(f"--reward {name}: it is not a reward function of episodes one by one "
                              f"({'it scores GRPO groups' if name == 'group_reward' else 'it makes one from your code'})")
        func = getattr(module, name, None)
        if not callable(func) or name.startswith("_"):
            offered = [n for n in ("outcome_reward", "total_reward", "finished_reward", "terminal_reward")
                       if callable(getattr(module, n, None))]
            raise OrsgenError(f"--reward {name}: {module.__name__} has no reward function {name!r} (it has "
                              f"{', '.join(offered)})")
        found.append(func)
    return tuple(found)


def _concurrency(folder: Path, given: int | None) -> int:
    """Episodes at once: --concurrency, else what the resumed run's run.json says it ran with, else CONCURRENCY."""
    if given is not None:
        return given
    try:
        saved = json.loads((folder / RUN).read_text(encoding="utf-8")).get("concurrency")
    except (OSError, ValueError, AttributeError):  # a new run
        saved = None
    return saved if isinstance(saved, int) and not isinstance(saved, bool) and saved >= 1 else options.CONCURRENCY


def _tasks(plan: list[Any]) -> list[tuple[str, str, int]]:
    """The tasks of a plan, each once, in its order: (environment, split, task index)."""
    return list(dict.fromkeys((w.member.name, str(w.row["split"]), int(w.row["task_index"])) for w in plan))


def _save_run(folder: Path, run: Run, url: str | None, members: list[Any], concurrency: int, new: bool,
              whole: list[Any]) -> None:
    """run.json: what was measured, where, on which module pins, how many ran at once; a shard's also holds its whole
    run's tasks (as ranges, in order) and episodes, which `--merge` checks and makes the merged figures of."""
    from orsgen.runtime import jsontext
    from orsgen.write import atomic

    if not new:
        return
    shown, withheld = options.public(url)  # a user:password@ or ?api-key= is used, never saved
    saved = {"run": run.saved(), "endpoint": shown, **({"endpoint_withheld": withheld} if withheld else {}),
             "concurrency": concurrency,  # how it ran, not what it measures: --resume runs as many at once
             "environments": [{"name": m.name, "module": m.module.__name__, "snapshot": m.snapshot} for m in members]}
    if run.shard is not None:
        saved["plan"] = {"episodes": len(whole), "tasks": options.ranges(_tasks(whole))}
    atomic(folder / RUN, jsontext.dumps(saved, indent=1) + "\n")


def _bug(exc: BaseException) -> str:
    import traceback

    print("".join(traceback.format_exception(exc)), end="", file=sys.stderr)
    return f"internal error (the traceback above): {type(exc).__name__}: {exc}: please report it"


def finish(folder: Path, run: Run, url: str | None, names: list[str], tasks: list[tuple[str, str, int]],
            planned: int, records: list[dict[str, Any]], invocation: Invocation,
            members: list[Any] | None = None) -> dict[str, Any]:
    """The figures of every episode the folder holds (`planned` of them on `tasks`, in order): summary.json,
    report.md, the picture; the report on stdout; the passing episodes as an SFT set when asked (`members`)."""
    from orsgen.evaluate import figures, plot, report, sft
    from orsgen.runtime import jsontext
    from orsgen.write import atomic

    summary = figures.summary(records, k=run.rollouts, planned=planned, threshold=run.pass_threshold, tasks=tasks)
    splits = ", ".join(sorted({split for _, split, _ in tasks}))
    about: dict[str, Any] = {"model": run.model, "endpoint": options.public(url)[0], "target": run.target,
                             "split": splits, "environments": names, "folder": str(folder)}
    summary["run"] = about
    atomic(folder / SUMMARY, jsontext.dumps(summary, indent=1) + "\n")
    atomic(folder / REPORT, report.render(summary, about, markdown=True))
    if plot.available():
        rewards = [r["reward"] for r in figures.latest(records) if figures.counts(r) and r.get("reward") is not None]
        plot.draw(summary, rewards, f"{run.model} on {', '.join(names)}", folder / PICTURE)
        picture = f", {folder / PICTURE}"
    else:
        from orsgen import extras

        picture = f" (a picture too with matplotlib: {extras.pip('plot')}, the plot extra)"
    print(report.render(summary, about, markdown=invocation.format == "markdown"), end="")
    print(f"orsgen eval: {folder / SUMMARY}, {folder / RECORDS}{picture}", file=sys.stderr)
    if invocation.keep_passing is not None and members is not None:
        tools = {cls.__name__: m.schemas(cls) for m in members for cls in set(m.module.ENVIRONMENTS.values())}
        kept = sft.rows(records, summary["pass"]["threshold"], tools)
        path = sft.write(invocation.keep_passing, kept)
        print(f"orsgen eval: {len(kept)} passing episodes in {path} (messages, tools: SFTTrainer's format)",
              file=sys.stderr)
    from orsgen import view  # the run's page, beside report.md

    view.beside(folder)
    return summary


def compare(invocation: Invocation) -> int:
    from orsgen.evaluate import figures, report

    assert invocation.compare is not None
    found = []
    for given in invocation.compare:
        path = given / SUMMARY if given.is_dir() else given
        try:
            found.append(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError) as exc:
            raise OrsgenError(f"--compare: cannot read {path}: {exc}") from None
        if found[-1].get("schema") != figures.SCHEMA:
            raise OrsgenError(f"--compare: {path} is not an orsgen eval summary")
    names = (invocation.compare[0], invocation.compare[1])
    named = tuple(p.name if p.is_dir() else p.parent.name for p in names)
    pair = (named[0], named[1]) if named[0] != named[1] else (str(names[0]), str(names[1]))
    refused = figures.refusal(found[0], found[1], pair)
    if refused is not None:
        raise OrsgenError(f"--compare: {refused}")
    print(report.render_comparison(figures.compare(found[0], found[1]), pair,
                                   markdown=invocation.format == "markdown"), end="")
    return 0
