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
