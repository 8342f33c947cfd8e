"""A `Trajectories` callback's recorder is the process's while it lives (issue 43, item 4), and no longer: once its
trainer is gone, ORSGEN_TRAJECTORIES is as it was, a later adapter records nothing, and the recorder's hooks no longer
hold that run's episodes (a trainer that raised kept its sessions open, held by a recorder kept for ever)."""

import gc
import json

from orsgen.runtime import recorder as recorders
from orsgen.runtime.recorder import VARIABLE, Recorder, adopt, from_environment


def test_an_adopted_recorder_is_the_processs_while_it_lives_and_then_nothing_is(tmp_path, monkeypatch):
    monkeypatch.delenv(VARIABLE, raising=False)
    made = Recorder(tmp_path / "run")
    adopt(made)
    assert json.loads(recorders.os.environ[VARIABLE])["dir"] == str(tmp_path / "run")  # for the worker it starts
    assert from_environment() is made
    made.close()
    del made
    gc.collect()
    assert VARIABLE not in recorders.os.environ
    assert from_environment() is None


def test_a_value_set_by_hand_is_given_back(tmp_path, monkeypatch):
    monkeypatch.setenv(VARIABLE, str(tmp_path / "by-hand"))
    made = Recorder(tmp_path / "run")
    adopt(made)
    made.close()
    del made
    gc.collect()
    assert recorders.os.environ[VARIABLE] == str(tmp_path / "by-hand")


def test_a_callback_gone_retires_its_recorder_whose_writer_would_keep_it_listening(tmp_path, monkeypatch):
    from orsgen.runtime.recording import Trajectories

    from tests.harness.processes import wait_until

    monkeypatch.delenv(VARIABLE, raising=False)
    callback = Trajectories(tmp_path / "run")
    made = callback.recorder
    made.put({"episode": 1})  # its writer's thread starts: alive, it holds the recorder
    assert made.flush() and from_environment() is made
    del callback
    gc.collect()
    assert made.closed  # stopped listening at once
    wait_until(lambda: not made._thread.is_alive(), timeout=10, waiting_for="the writer to end")
    assert (tmp_path / "run" / "trajectories-rank0.jsonl").read_text().count("\n") == 1  # what was queued, written
    assert from_environment() is None  # and no recorder made again from what the callback had set


def test_an_attached_recorder_writes_its_trainers_episodes_not_another_trainers(tmp_path, monkeypatch):
    """A trainer that raised keeps its episodes; a later trainer's `close_all()` ends them: they are not the later
    run's rollouts. Of the episodes placed in a trainer's batch, a recorder attached to a trainer takes only its own;
    an episode outside any trainer's batch (an adapter used by hand) it takes as before."""
    import types

    class Trainer:  # weakly referenced, as a GRPOTrainer
        pass

    mine, earlier = Trainer(), Trainer()

    def batch_of(trainer):
        return types.SimpleNamespace(trainer=trainer, placed_trainer=lambda: trainer)

    runners = {"mine": types.SimpleNamespace(batch=batch_of(mine), secrets=list),
               "earlier": types.SimpleNamespace(batch=batch_of(earlier), secrets=list),
               "by hand": types.SimpleNamespace(batch=None, secrets=list),
               "no trainer": types.SimpleNamespace(batch=batch_of(None), secrets=list)}
    monkeypatch.setattr(recorders, "runner_of", runners.get)
    made = Recorder(tmp_path / "run")
    taken = []
    monkeypatch.setattr(made, "_put", taken.append)
    made.attach(run="r", step=lambda: 3, rank=lambda: 0, run_info={}, trainer=mine)
    for adapter in runners:
        made._seen(types.SimpleNamespace(end=types.SimpleNamespace(adapter=adapter)))
    assert [item[0].end.adapter for item in taken] == ["mine", "by hand", "no trainer"]
    made.close()
