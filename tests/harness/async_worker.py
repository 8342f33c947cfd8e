"""TRL's AsyncGRPO rollout worker run in a thread of this process (`run_worker`): the body of AsyncRolloutWorker's
spawned child as is, so a test reads its rollout buffer, its loop and what it raised. And what the AsyncGRPO tests
share (tests/test_async_grpo.py, test_async_grpo_parity.py): the quiz's questions, `instrumented` adapters that log
every reset, tool call and reward, and the rollout buffer's samples by group."""

import asyncio
import contextlib
import inspect
import itertools
import math
import multiprocessing as mp
import os
import queue
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any, ClassVar

from orsgen.runtime import episode_of


class Run:
    """One run of TRL's `_child_main` (the body of AsyncRolloutWorker's child) in a thread of this process."""

    def __init__(self) -> None:
        self.loop: Any = None  # the `_AsyncRolloutLoop` instance
        self.samples: list[Any] = []
        self.error: BaseException | None = None
        self.started = 0.0
        self.stopped_in = 0.0
        self.finished = 0.0
        self.exception_info: tuple[str, str, str] | None = None
        self.failed = False
        self.metrics: list[dict[str, Any]] = []


def accepted(kwargs: dict[str, Any], *classes: type) -> dict[str, Any]:
    """The keyword arguments this TRL release's `classes` take (TRL 1.16 added `eos_token_ids`; 1.13 has none):
    AsyncRolloutWorker hands what it does not take itself to `_AsyncRolloutLoop`."""
    names = {name for cls in classes for name in inspect.signature(cls.__init__).parameters}
    return {k: v for k, v in kwargs.items() if k in names}


def run_worker(until, *, timeout: float, **loop_kwargs: Any) -> Run:
    """Start the worker with the shared objects AsyncRolloutWorker makes, read its rollout buffer until
    `until(samples)`, then stop it the way the trainer does (the mp stop event) and wait for it to finish."""
    from trl.experimental.async_grpo import async_rollout_worker as arw

    run = Run()

    class Loop(arw._AsyncRolloutLoop):  # the worker's loop class as is; only keeps a handle on the instance
        def __init__(self, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            run.loop = self

    ctx = mp.get_context("spawn")
    rollout_buffer, version, stop = ctx.Queue(), ctx.Value("i", 0), ctx.Event()
    ready, heartbeat, failed = ctx.Event(), ctx.Value("d", time.time()), ctx.Event()
    exception_info, metrics = ctx.Queue(maxsize=1), ctx.Queue(maxsize=4096)
    loop_kwargs.setdefault("dataset_start_index", 0)
    loop_kwargs.setdefault("queue_maxsize", 0)
    loop_kwargs = accepted(loop_kwargs, arw._AsyncRolloutLoop)

    def child() -> None:
        try:
            arw._child_main(Loop, loop_kwargs, rollout_buffer, version, stop, ready, heartbeat, failed,
                            exception_info, metrics)
        except BaseException as exc:  # noqa: BLE001 - what the child process would die of
            run.error = exc

    saved_env = dict(os.environ)  # _child_main scrubs CUDA/torchrun variables: it believes it is a fresh process
    thread = threading.Thread(target=child, name="grpo-worker-under-test", daemon=True)
    run.started = time.monotonic()
    with contextlib.redirect_stderr(sys.stdout):  # _child_main prints the traceback of a failure
        thread.start()
        try:
            if not ready.wait(60):
                thread.join(5)
                info = None if exception_info.empty() else exception_info.get(timeout=1)
                raise AssertionError(f"the worker did not get ready: {run.error!r} {info}")
            deadline = time.monotonic() + timeout
            while not until(run.samples):
                if not thread.is_alive():
                    break
                assert time.monotonic() < deadline, f"only {len(run.samples)} samples after {timeout}s"
                with contextlib.suppress(queue.Empty):
                    run.samples.append(rollout_buffer.get(timeout=0.2))
        finally:
            run.finished = time.monotonic()
            stop.set()
            stopping = time.monotonic()
            thread.join(timeout=60)
            run.stopped_in = time.monotonic() - stopping
            os.environ.clear()
            os.environ.update(saved_env)
    assert not thread.is_alive(), "the worker did not stop"
    run.failed = failed.is_set()
    with contextlib.suppress(queue.Empty):
        run.exception_info = exception_info.get(timeout=1)
    while True:
        try:
            run.metrics.append(metrics.get(timeout=0.2))
        except queue.Empty:
            break
    for left in (rollout_buffer, exception_info, metrics):  # what the worker put after `until`: never read, and a
        left.cancel_join_thread()  # full pipe would hold this process's exit on the queue's feeder thread
    return run


def log_window(metrics_queue: Any) -> dict[str, float]:
    """One logging window of AsyncGRPOTrainer's `log()` (TRL 1.13 to 1.16): drain `metrics_queue` with `get_nowait()`
    until `queue.Empty`, a list of values per name, each reduced with TRL's own `_reduce_metric`. (The trainer itself
    cannot be built on a CPU: its constructor loads the model with FlashAttention, and 1.16's reads the GPU's peak
    FLOPs.)"""
    from trl.experimental.async_grpo.async_grpo_trainer import _reduce_metric

    values: dict[str, list[Any]] = {}
    while True:
        try:
            for key, value in metrics_queue.get_nowait().items():
                values.setdefault(key, []).append(value)
        except queue.Empty:
            break
    valid = {key: [v for v in found if isinstance(v, tuple) or not math.isnan(v)] for key, found in values.items()}
    return {key: _reduce_metric(key, found) for key, found in valid.items() if found}


def collect(worker: Any, until: Any, *, timeout: float = 120, each: Any = None) -> list[Any]:
    """Read a started AsyncRolloutWorker's samples (its spawned child's) until `until(samples)`, checking its health
    as the trainer does; `each(samples)` after each wait."""
    samples: list[Any] = []
    deadline = time.monotonic() + timeout
    while not until(samples):
        worker.check_health(stale_after_s=60)
        assert time.monotonic() < deadline, f"only {len(samples)} samples"
        with contextlib.suppress(queue.Empty):
            samples.append(worker.rollout_buffer.get(timeout=0.5))
        if each is not None:
            each(samples)
    worker.check_health(stale_after_s=60)
    return samples


@contextlib.contextmanager
def draining(worker: Any) -> Iterator[list[Any]]:
    """Read what a started AsyncRolloutWorker's child puts while the body runs (its samples let go, the metrics
    payloads kept: the queue's own, behind EpisodeMetrics' Drain if there is one): a child whose queue's pipe is full
    cannot exit (its feeder thread waits for a reader)."""
    metrics = getattr(worker.metrics_queue, "inner", worker.metrics_queue)
    payloads: list[Any] = []
    done = threading.Event()

    def drain() -> None:
        while not done.is_set():
            for source, kept in ((worker.rollout_buffer, None), (metrics, payloads)):
                with contextlib.suppress(queue.Empty, OSError, ValueError):
                    item = source.get(timeout=0.1)
                    if kept is not None:
                        kept.append(item)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        yield payloads
    finally:
        done.set()
        reader.join(5)


def stop(worker: Any) -> tuple[Any, list[Any]]:
    """Stop a started AsyncRolloutWorker as the trainer does, reading what its child still puts meanwhile (stop()
    terminates a child that did not exit within 15 s). (The child process, the metrics payloads read.)"""
    child = worker._process
    metrics = getattr(worker.metrics_queue, "inner", worker.metrics_queue)
    with draining(worker) as payloads:
        worker.stop()
    if child is not None and child.exitcode != 0:  # failed, or terminated mid-put: a cut message blocks a reader
        return child, payloads
    while True:
        try:
            payloads.append(metrics.get(timeout=0.2))
        except (queue.Empty, OSError, ValueError):
            return child, payloads


def cause_line(worker: Any, raised: BaseException) -> str:
    """The first line of what the child died of, behind check_health()'s "child has failed" error."""
    cause: Any = raised.__cause__
    if cause is None:  # TRL's race: the child sets the failed event before its queue's feeder thread has written
        type_name, message, _ = worker._exception_info_queue.get(timeout=10)  # flushed when the child exited
        cause = f"{type_name}: {message}"
    return str(cause).splitlines()[0]


def dies_with_its_stop_watcher_waiting(event: Any) -> None:
    """A spawned child as AsyncGRPOTrainer's worker is when it fails: TRL's own stop watcher waits on `event`, orsgen's
    exit hook for it is registered (what `trl.guard_stop` registers in the worker), and the child exits at once."""
    import asyncio
    import atexit
    from types import SimpleNamespace

    from orsgen.runtime import trl as boundary

    atexit.register(boundary._stop_watcher_released, event)  # first, so it runs last: the exit follows at once
    from trl.experimental.async_grpo.async_rollout_worker import _spawn_stop_watcher

    closed = asyncio.new_event_loop()
    closed.close()  # the loop has ended, as in a failed worker: the watcher's call on it is refused, and it returns
    _spawn_stop_watcher(SimpleNamespace(_loop=closed, _stop_event=None), event)
    time.sleep(0.5)  # the watcher is waiting
    raise SystemExit(1)


# -- what the AsyncGRPO tests share ---------------------------------------------------------------------------

QUESTIONS = {0: ("What is 2+2?", "4"), 1: ("Capital of France?", "Paris"), 2: ("3*3?", "9")}  # tests/envs/quiz.py

def instrumented(adapter_class: type, **class_attributes: Any) -> type:
    """A subclass that records, per episode, the reset (thread, row, task), every tool call (thread, event loop, start
    and end), and get_reward(). Only underscore members and the two TRL-reserved names are touched, so the tools TRL
    finds on it are exactly the generated ones."""

    class Instrumented(adapter_class):  # type: ignore[misc, valid-type]
        events: ClassVar[list[dict[str, Any]]] = []
        _lock: ClassVar[threading.Lock] = threading.Lock()
        _episodes: ClassVar[Any] = itertools.count()
        _episode: int = -1

        def _log(self, **event: Any) -> None:
            with self._lock:
                self.events.append({"adapter": id(self), "episode": self._episode,
                                    "thread": threading.current_thread().name, **event})

        def reset(self, **row: Any) -> Any:
            started = time.monotonic()
            self._episode = next(self._episodes)
            try:
                prompt = super().reset(**row)
            except BaseException as exc:
                self._log(kind="reset", row_task=row.get("task_index"), error=exc, start=started, end=time.monotonic())
                raise
            self._log(kind="reset", row_task=row.get("task_index"), task_index=self.task_index, prompt=prompt,
                      start=started, end=time.monotonic())
            return prompt

        async def _acall(self, name: str, arguments: dict[str, Any]) -> Any:
            started = time.monotonic()
            loop = asyncio.get_running_loop()
            try:
                result = await super()._acall(name, arguments)
            except Exception as exc:
                self._log(kind="tool", name=name, arguments=arguments, loop=loop, error=str(exc), start=started,
                          end=time.monotonic(), task_index=self.task_index)
                raise
            self._log(kind="tool", name=name, arguments=arguments, loop=loop, result=result, start=started,
                      end=time.monotonic(), task_index=self.task_index)
            return result

        def get_reward(self) -> float | None:
            value = super().get_reward()
            self._log(kind="reward", value=value, task_index=self.task_index, void=episode_of(self).why,
                      mismatch=self.prompt_mismatch, at=time.monotonic())
            return value

    for key, value in class_attributes.items():
        setattr(Instrumented, key, value)
    Instrumented.__name__ = Instrumented.__qualname__ = class_attributes.get("__name__", adapter_class.__name__)
    return Instrumented



def groups(samples: list[Any]) -> dict[int, list[Any]]:
    out: dict[int, list[Any]] = {}
    for sample in samples:
        out.setdefault(sample.group_id, []).append(sample)
    return out


def complete_groups(n_groups: int, per_group: int):
    return lambda samples: all(len(groups(samples).get(g, [])) >= per_group for g in range(n_groups))


def user_text(prompt_text: str) -> str:
    """The last user message of a rendered prompt (tiny's chat format)."""
    return prompt_text.rsplit("<|user|>", 1)[-1].split("<|eot|>", 1)[0]
