"""One evaluation episode, as GRPOTrainer runs a rollout (trl-contract §2.3-2.5), with the model behind an endpoint:
`reset(**row)` appended to the row's prompt, the model's tool calls made on the adapter's own methods in order with
TRL's result and error texts, at most `max_turns` rounds of them, then the reward functions named and `get_reward()`
summed as TRL sums them. What the runtime's hooks saw makes the episode's trajectory record (`trajectories.build`).

A reply the endpoint failed is the episode's `error` (unscored, `endpoint_error`). A conversation the endpoint refused
because it holds the model's own tool call that is not JSON ends the episode as TRL ends a rollout whose call it
cannot parse: no more turns, scored as it stands, its reason in the record's `model_error`."""

from __future__ import annotations

import asyncio
import copy
import inspect
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from orsgen.evaluate.endpoint import Endpoint, EndpointError, ModelError
from orsgen.evaluate.target import Member, tool_methods
from orsgen.runtime import hooks, trajectories
from orsgen.runtime.adapter import close_episode, secrets_of, task_spec
from orsgen.runtime.errors import DriftError, StartError, WrongServer


@dataclass(frozen=True)
class Work:
    """An episode to run: `number` is its place in the run (its seed offset), `rollout` its place among its task's."""

    member: Member
    row: dict[str, Any]
    rollout: int
    number: int

    @property
    def key(self) -> tuple[str, str, int, int]:
        return (self.member.name, self.row["split"], int(self.row["task_index"]), self.rollout)


class Busy(Exception):
    """The environment refused the episode's start for capacity (429): run it again later, with fewer at once."""


class Fatal(Exception):
    """What ends the run (the environment is down, its tools drifted): one line."""


@dataclass
class Seen:
    """The hook records of one adapter's episode."""

    start: Any = None
    calls: list[Any] = field(default_factory=list)
    end: Any = None
    session: str | None = None  # the ORS session id, read at the end (its session is still open then)
    refused: bool = False  # a start attempt got 429
    waited: float = 0.0  # seconds its starts waited for a place in the sessions budget (--max-sessions)


class Watcher:
    """The runtime's hooks, sorted by adapter: each evaluation episode has an adapter of its own."""

    def __init__(self, busy: Callable[[float | None], None] = lambda seconds: None) -> None:
        self._busy = busy  # told of each start the environment refused for capacity, as it happens
        self._seen: dict[int, Seen] = {}
        self.specs: dict[tuple[str, str, int], Any] = {}  # each task's spec, read once per run
        self._lock = threading.Lock()
        for event in hooks.EVENTS:
            hooks.add(event, self._heard)

    def watch(self, env: Any) -> Seen:
        with self._lock:
            seen = self._seen[id(env)] = Seen()
        return seen

    def forget(self, env: Any) -> None:
        with self._lock:
            self._seen.pop(id(env), None)

    def close(self) -> None:
        for event in hooks.EVENTS:
            hooks.remove(event, self._heard)

    def _heard(self, record: Any) -> None:
        with self._lock:
            seen = self._seen.get(id(record.adapter))
        if seen is None:
            return
        if isinstance(record, hooks.EpisodeStart):
            seen.start = record
        elif isinstance(record, hooks.ToolCall):
            seen.calls.append(record)
        elif isinstance(record, hooks.EpisodeEnd):
            seen.end = record
            seen.session = getattr(getattr(record.episode, "session", None), "sid", None)
        elif isinstance(record, hooks.SessionOpen):
            seen.waited += record.waited
            if record.status == 429:
                seen.refused = True
                self._busy(None)


@dataclass(frozen=True)
class Scoring:
    """How an episode is scored and bounded: the run's, the same for every episode."""

    rewards: tuple[Callable[..., Any], ...]  # the module's reward functions, then get_reward() (TRL's order)
    max_turns: int
    seed: int | None
    unscored_reward: float | None
    run: str
    max_sessions: int | None = None  # --max-sessions: the sessions budget per environment


def run(work: Work, endpoint: Endpoint, watcher: Watcher, scoring: Scoring, stop: threading.Event
        ) -> dict[str, Any] | None:
    """The episode's trajectory record; None when it was stopped (Ctrl-C) before its end. Busy and Fatal as above."""
    cls = work.member.adapter_class(work.row)
    given = {name: value for name, value in (("unscored_reward", scoring.unscored_reward),
                                              ("max_sessions", scoring.max_sessions)) if value is not None}
    env = cls(settings=given)
    seen = watcher.watch(env)
    try:
        return _episode(work, env, seen, endpoint, scoring, stop, watcher.specs)
    finally:
        close_episode(env)  # ends it (unread if nothing read it) and closes its session, waiting for the server
        watcher.forget(env)


def _episode(work: Work, env: Any, seen: Seen, endpoint: Endpoint, scoring: Scoring, stop: threading.Event,
             specs: dict[tuple[str, str, int], Any]) -> dict[str, Any] | None:
    try:
        observation = env.reset(**work.row)
    except StartError as exc:
        if seen.refused:
            raise Busy(str(exc)) from None
        raise Fatal(str(exc)) from None
    except (DriftError, WrongServer) as exc:
        raise Fatal(str(exc)) from None
    prompt = _prompt(work.row["prompt"], observation)
    tools = work.member.schemas(type(env))
    methods = {method.__name__: method for method in tool_methods(env)}
    completion: list[dict[str, Any]] = []
    wire = copy.deepcopy(prompt)
    seed = None if scoring.seed is None else scoring.seed + work.number
    usage: dict[str, int] | None = None
    model_seconds, error, model_error, rounds = 0.0, None, None, 0
    while not stop.is_set() and not (seen.start is not None and seen.start.error):  # a task that never started
        try:
            reply = endpoint.reply(wire, tools, seed)
        except EndpointError as exc:
            error = str(exc)
            break
        except ModelError as exc:
            model_error = str(exc)
            break
        model_seconds += reply.seconds
        if reply.usage is not None:
            usage = {k: (usage or {}).get(k, 0) + v for k, v in reply.usage.items()}
        completion.append(reply.turn)
        wire.append({"role": "assistant", "content": reply.turn["content"] or None,
                     **({"tool_calls": [{"id": i, "type": "function", "function": {"name": n, "arguments": a}}
                                        for i, n, a in reply.calls]} if reply.calls else {})})
        if not reply.calls or rounds >= scoring.max_turns:  # TRL leaves the last round's calls unmade
            break
        for (call_id, name, _), call in zip(reply.calls, reply.turn["tool_calls"], strict=True):
            result = _call(methods, name, call["function"]["arguments"])
            completion.append({"role": "tool", "name": name, "content": result})
            wire.append({"role": "tool", "tool_call_id": call_id, "content": _text(result)})
        rounds += 1
    if stop.is_set() and error is None:
        return None
    reward = None if error is not None else _reward(work, env, prompt, completion, scoring.rewards)
    close_episode(env)  # its end hook has run: the record can be built
    if seen.end is None:
        raise AssertionError("the runtime reported no end of the episode")
    record = trajectories.build(seen.start, seen.calls, seen.end, run=scoring.run, environment=work.member.name,
                                session=seen.session,
                                prompt=prompt, completion=completion, secrets=[*secrets_of(env), *endpoint.secrets()],
                                model=endpoint.model,
                                rollout=work.rollout, usage=usage, model_seconds=model_seconds, error=error,
                                task_spec=_spec(env, work, specs))
    record["stream"] = "eval"
    record["seconds"]["waited"] = round(seen.waited, 6)
    record["model_error"] = _redacted(model_error, [*secrets_of(env), *endpoint.secrets()])
    if error is None:
        record["reward"] = reward
    return record


def _redacted(text: str | None, secrets: list[str]) -> str | None:
    """`text` with each secret replaced, as `trajectories.build` replaces them in what it records."""
    for secret in sorted({s for s in secrets if len(s) >= 4}, key=len, reverse=True):
        text = None if text is None else text.replace(secret, trajectories.SECRET)
    return text


def _prompt(turns: list[dict[str, Any]], observation: Any) -> list[dict[str, Any]]:
    """The row's prompt with what reset() returned appended to its last turn, as GRPOTrainer does."""
    prompt = copy.deepcopy(turns)
    if observation is None:
        return prompt
    last = prompt[-1]
    if isinstance(observation, str) and isinstance(last.get("content"), str):
        last["content"] += observation
    else:
        parts = last.get("content")
        parts = [{"type": "text", "text": parts}] if isinstance(parts, str) else list(parts or [])
        last["content"] = parts + (observation if isinstance(observation, list) else [{"type": "text",
                                                                                        "text": str(observation)}])
    return prompt


def _call(methods: dict[str, Any], name: str, arguments: Any) -> Any:
    """A tool call as GRPOTrainer makes it: its result as the tool message's content, an exception as
    `{'error': ...}` (counted a failure)."""
    try:
        if name not in methods:
            raise ValueError(f"Tool {name} not found.")
        if not isinstance(arguments, dict):
            raise TypeError(f"the arguments of {name} are not a JSON object: {str(arguments)[:200]}")
        result = methods[name](**arguments)
        if inspect.isawaitable(result):
            result = asyncio.run(_awaited(result))
    except Exception as exc:  # noqa: BLE001 - what TRL's loop catches, the model sees
        result = {"error": str(exc)}
    return result if isinstance(result, list) else str(result)


async def _awaited(result: Any) -> Any:
    return await result


def _text(content: Any) -> Any:
    """A tool message's content for the endpoint: text, or text and image parts as the OpenAI API takes them."""
    if not isinstance(content, list):
        return content
    parts: list[dict[str, Any]] = []
    for part in content:
        if part.get("type") == "text":
            parts.append({"type": "text", "text": part["text"]})
        elif part.get("type") == "image":
            parts.append({"type": "image_url", "image_url": {"url": _data_uri(part.get("image"))}})
    return parts


def _data_uri(image: Any) -> str:
    if isinstance(image, str):
        return image
    import base64
    import io

    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def _reward(work: Work, env: Any, prompt: Any, completion: Any, rewards: tuple[Callable[..., Any], ...]
            ) -> float | None:
    """TRL's reward of one rollout: each reward function's value (None: no value), then get_reward()'s, summed with
    weight 1; None when none gave one."""
    columns = {k: [v] for k, v in work.row.items() if k not in ("prompt", "completion", "completion_ids")}
    values: list[float | None] = []
    for func in rewards:
        found = func(prompts=[prompt], completions=[completion], completion_ids=[[]], trainer_state=None,
                     log_extra=lambda *a, **k: None, log_metric=lambda *a, **k: None, environments=[env], **columns)
        if inspect.isawaitable(found):
            found = asyncio.run(_awaited(found))
        values.append(found[0])
    values.append(env.get_reward())
    scored = [float(v) for v in values if v is not None]
    return sum(scored) if scored else None


def _spec(env: Any, work: Work, specs: dict[tuple[str, str, int], Any]) -> Any:
    """The task's spec, read once per task and run (pinned, or one request)."""
    key = (work.member.name, str(work.row["split"]), int(work.row["task_index"]))
    if key not in specs:
        try:
            specs[key] = task_spec(env, key[1], key[2])
        except Exception:  # noqa: BLE001 - the spec is not essential to the record
            specs[key] = None
    return specs[key]
