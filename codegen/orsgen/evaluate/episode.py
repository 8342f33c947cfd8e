"""One evaluation episode, as GRPOTrainer runs a rollout (the runtime's `trl.rollout`, read under training's version
check), with the model behind an endpoint: `reset(**row)` appended to the row's prompt, the model's tool calls made on
the adapter's own methods in order with TRL's result and error texts, at most `max_turns` rounds of them, then the
reward functions named and `get_reward()` summed as TRL sums them. The runtime's recorder keeps what its hooks saw of
the episode (its trace), from which its trajectory record is built (`trajectories.build`) and written.

A reply the endpoint failed is the episode's `error` (unscored, `endpoint_error`). A conversation the endpoint refused
because it holds the model's own tool call that is not JSON ends the episode as TRL ends a rollout whose call it
cannot parse: no more turns, scored as it stands, its reason in the record's `model_error`."""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from orsgen.evaluate.endpoint import Endpoint, EndpointError, ModelError
from orsgen.evaluate.target import Member, tool_methods
from orsgen.runtime import hooks, trajectories
from orsgen.runtime.adapter import close_episode, episode_of, secrets_of, task_spec
from orsgen.runtime.errors import DriftError, StartError, WrongServer
from orsgen.runtime.recorder import Recorder
from orsgen.runtime.trl import rollout


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


class Refusals:
    """The starts the environment refused for capacity (429), by adapter: the limiter hears each as it happens, and an
    episode whose start failed after one is run again later (`Busy`); and the seconds its starts waited for a place in
    the sessions budget (--max-sessions), when `waits`: a budget below --concurrency (at it, a start waits only for
    the close an episode before it did not wait for: no wait of the user's)."""

    def __init__(self, busy: Callable[[float | None], None] = lambda seconds: None, waits: bool = True) -> None:
        self._busy, self._waits = busy, waits
        self._refused: set[int] = set()
        self._waited: dict[int, float] = {}
        self._lock = threading.Lock()
        hooks.add("session_open", self._heard)

    def refused(self, env: Any) -> bool:
        return id(env) in self._refused

    def waited(self, env: Any) -> float:
        with self._lock:
            return self._waited.get(id(env), 0.0)

    def forget(self, env: Any) -> None:
        with self._lock:
            self._refused.discard(id(env))
            self._waited.pop(id(env), None)

    def close(self) -> None:
        hooks.remove("session_open", self._heard)

    def _heard(self, record: hooks.SessionOpen[Any]) -> None:
        with self._lock:
            if self._waits:
                self._waited[id(record.adapter)] = self._waited.get(id(record.adapter), 0.0) + record.waited
            if record.status == 429:
                self._refused.add(id(record.adapter))
        if record.status == 429:
            self._busy(None)


@dataclass(frozen=True)
class Records:
    """Where the run's records go (the runtime's recorder: it keeps each episode's trace, and writes each record),
    the starts refused for capacity, and each task's spec, read once per run."""

    recorder: Recorder
    refusals: Refusals
    specs: dict[tuple[str, str, int], Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Scoring:
    """How an episode is scored and bounded: the run's, the same for every episode."""

    rewards: tuple[Callable[..., Any], ...]  # the module's reward functions, then get_reward() (TRL's order)
    max_turns: int
    seed: int | None
    unscored_reward: float | None
    run: str
    max_sessions: int | None = None  # the sessions budget per environment (pool.sessions_budget)


def run(work: Work, endpoint: Endpoint, records: Records, scoring: Scoring, stop: threading.Event
        ) -> dict[str, Any] | None:
    """The episode's trajectory record; None when it was stopped (Ctrl-C) before its end. Busy and Fatal as above."""
    rollout.rollout_release()  # training's version check (once per process)
    cls = work.member.adapter_class(work.row)
    given = {name: value for name, value in (("unscored_reward", scoring.unscored_reward),
                                              ("max_sessions", scoring.max_sessions)) if value is not None}
    env = cls(settings=given)
    try:
        return _episode(work, env, endpoint, scoring, stop, records)
    finally:
        close_episode(env)  # ends it (unread if nothing read it) and closes its session, waiting for the server
        records.recorder.take(episode_of(env))  # (a trace the record did not take: an episode stopped early)
        records.refusals.forget(env)


def _episode(work: Work, env: Any, endpoint: Endpoint, scoring: Scoring, stop: threading.Event,
             records: Records) -> dict[str, Any] | None:
    try:
        observation = env.reset(**work.row)
    except StartError as exc:
        if records.refusals.refused(env):
            raise Busy(str(exc)) from None
        raise Fatal(str(exc)) from None
    except (DriftError, WrongServer) as exc:
        raise Fatal(str(exc)) from None
    episode = episode_of(env)
    not_started = episode is not None and episode.why is not None  # its start failed: the episode is unscored
    prompt = rollout.prompt(work.row["prompt"], observation)
    tools = work.member.schemas(type(env))
    methods = {method.__name__: method for method in tool_methods(env)}
    completion: list[dict[str, Any]] = []
    wire = copy.deepcopy(prompt)
    seed = None if scoring.seed is None else scoring.seed + work.number
    usage: dict[str, int] | None = None
    model_seconds, error, model_error, rounds = 0.0, None, None, 0
    while not stop.is_set() and not not_started:
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
        if not reply.calls or rollout.last_round(rounds, scoring.max_turns):  # its calls are left unmade
            break
        for (call_id, name, _), call in zip(reply.calls, reply.turn["tool_calls"], strict=True):
            result = rollout.call(methods, name, call["function"]["arguments"])
            completion.append({"role": "tool", "name": name, "content": result})
            wire.append({"role": "tool", "tool_call_id": call_id, "content": _text(result)})
        rounds += 1
    if stop.is_set() and error is None:
        return None
    reward = None if error is not None else rollout.reward(work.row, env, prompt, completion, scoring.rewards)
    close_episode(env, wait=False)  # its end hook has run: the record can be built (the close's place is waited for
    # by the next start, on the runtime's loop: pool.sessions_budget)
    trace = records.recorder.take(episode)
    if trace is None:
        raise AssertionError("the runtime reported no end of the episode")
    record = trace.record(run=scoring.run, environment=work.member.name, prompt=prompt, completion=completion,
                          secrets=[*secrets_of(env), *endpoint.secrets()], model=endpoint.model, rollout=work.rollout,
                          usage=usage, model_seconds=model_seconds, error=error,
                          task_spec=_spec(env, work, records.specs))
    record["stream"] = "eval"
    record["seconds"]["waited"] = round(records.refusals.waited(env), 6)
    record["model_error"] = _redacted(model_error, [*secrets_of(env), *endpoint.secrets()])
    if error is None:
        record["reward"] = reward
    return record


def _redacted(text: str | None, secrets: list[str]) -> str | None:
    """`text` with each secret replaced, as `trajectories.build` replaces them in what it records."""
    for secret in sorted({s for s in secrets if len(s) >= 4}, key=len, reverse=True):
        text = None if text is None else text.replace(secret, trajectories.SECRET)
    return text


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


def _spec(env: Any, work: Work, specs: dict[tuple[str, str, int], Any]) -> Any:
    """The task's spec, read once per task and run (pinned, or one request)."""
    key = (work.member.name, str(work.row["split"]), int(work.row["task_index"]))
    if key not in specs:
        try:
            specs[key] = task_spec(env, key[1], key[2])
        except Exception:  # noqa: BLE001 - the spec is not essential to the record
            specs[key] = None
    return specs[key]
