"""The process holder (issue 43): every part of the runtime's process-wide state made once and kept by name, and the
exit's steps run in one explicit order, registered with atexit only when needed, and again after the SDK's own hook."""

import atexit

from orsgen.runtime.process import EXIT, Process


def test_a_part_is_made_once_at_its_first_use_and_kept_by_name():
    holder = Process()
    assert holder.parts() == {}
    first = holder.part("sessions", dict)
    first["x"] = 1
    assert holder.part("sessions", lambda: {"made": "again"}) is first
    assert holder.parts() == {"sessions": {"x": 1}}


def test_the_exit_steps_run_in_their_order_each_once(monkeypatch):
    registered = []
    monkeypatch.setattr(atexit, "register", lambda f, *a: registered.append(f))
    monkeypatch.setattr(atexit, "unregister", lambda f: registered.remove(f) if f in registered else None)
    holder, ran = Process(), []
    for step in reversed(EXIT):  # added in the opposite order: run in EXIT's
        holder.at_exit(step, lambda step=step: ran.append(step))
    holder.at_exit("close sessions", lambda: ran.append("close sessions, the second"))
    holder.at_exit("flush records", lambda: 1 / 0)  # a step that fails: the others still run
    assert registered == [holder.exit]  # registered once, at the first step
    holder.exit()
    holder.exit()
    assert ran == [*EXIT[:3], "close sessions, the second", *EXIT[3:]]


def test_the_exit_is_registered_again_after_the_sdk_so_it_runs_first(monkeypatch):
    registered = ["the SDK's hook, registered at its import"]
    monkeypatch.setattr(atexit, "register", lambda f, *a: registered.append(f))
    monkeypatch.setattr(atexit, "unregister", lambda f: registered.remove(f) if f in registered else None)
    holder = Process()
    holder.at_exit("close uploads", lambda: None)
    registered.append("another SDK hook")
    holder.after_sdk()
    assert registered == ["the SDK's hook, registered at its import", "another SDK hook", holder.exit]  # last: first
