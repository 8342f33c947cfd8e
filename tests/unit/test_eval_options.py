"""`orsgen eval`'s command line (issue 41): `--tasks` kept as ranges, checked before a single index is built (O(1)
memory: a tracemalloc peak, not a time); the bar recorded in `Run`; what of a `--base-url` may be saved or shown."""

import json
import tracemalloc

import pytest
from orsgen.errors import OrsgenError
from orsgen.evaluate import options
from orsgen.evaluate.options import MAX_TASKS, PASS_THRESHOLD, Run, Tasks

SMALL = 1 << 20  # bytes: what parsing a command line may take at its peak, whatever its ranges name


def peak(call):
    """What `call()` returned, and the most memory it held at once (tracemalloc)."""
    tracemalloc.start()
    try:
        result = call()
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def run_of(*args):
    return options.invocation(["graded.py", "--model", "m", *args]).run


def test_a_range_at_the_limit_is_two_numbers_in_run_and_in_run_json(tmp_path):
    run, used = peak(lambda: run_of("--tasks", f"0-{MAX_TASKS - 1}"))
    assert used < SMALL, used  # before: a tuple of a million ints (~36 MB)
    assert run.tasks == Tasks(((0, MAX_TASKS - 1),)) and len(run.tasks) == MAX_TASKS
    saved, used = peak(run.saved)
    assert used < SMALL and saved["tasks"] == f"0-{MAX_TASKS - 1}"
    (tmp_path / "run.json").write_text(json.dumps({"run": saved}))
    loaded, used = peak(lambda: Run.load(tmp_path))
    assert used < SMALL and loaded == run


def test_more_tasks_than_a_run_takes_are_refused_in_one_line_before_any_is_built(capsys):
    def parse():
        with pytest.raises(SystemExit) as exited:
            run_of("--tasks", "0-99999999")
        return exited.value.code

    code, used = peak(parse)
    assert code == 2 and used < SMALL, used  # before: 10^8 ints, ~9 GB
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("orsgen: error: argument --tasks: 0-99999999 names 100000000 tasks, more than one run "
                           f"takes ({MAX_TASKS})"), line


@pytest.mark.parametrize("spec", ["3-1", "a", "1-", "-3", "", "3,,5", "²", "1-²", "1" * 19])
def test_a_spec_that_is_no_list_of_indices_is_one_line(spec, capsys):
    with pytest.raises(SystemExit) as exited:
        run_of("--tasks", spec)
    assert exited.value.code == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert f"argument --tasks: task indices as 0-99 or 3,5,10-19, not {spec!r}" in line, line


def test_tasks_keep_the_order_given_and_each_index_once():
    tasks = Tasks.parse("5,0-3,2-7,3")
    assert list(tasks) == [5, 0, 1, 2, 3, 4, 6, 7] and len(tasks) == 8
    assert str(tasks) == "5,0-4,6-7" and Tasks.parse(str(tasks)) == tasks
    assert list(Tasks.parse("10-19, 3 ,5")) == [*range(10, 20), 3, 5]


def test_a_run_json_from_before_keeps_loading(tmp_path):
    """Older run.json files hold the indices as a list, and `pass_threshold: null` (the bar that moved)."""
    old = {"target": "graded.py", "model": "m", "tasks": [4, 0, 1, 2, 9], "pass_threshold": None, "rollouts": 2}
    (tmp_path / "run.json").write_text(json.dumps({"run": old, "endpoint": None}))
    run = Run.load(tmp_path)
    assert list(run.tasks) == [4, 0, 1, 2, 9] and str(run.tasks) == "4,0-2,9"
    assert run.pass_threshold == PASS_THRESHOLD == 1.0 and run.rollouts == 2


def test_the_bar_is_recorded_in_the_run_default_or_given():
    assert run_of().pass_threshold == 1.0 and run_of().saved()["pass_threshold"] == 1.0
    assert run_of("--pass-threshold", "0.5").saved()["pass_threshold"] == 0.5


@pytest.mark.parametrize("value", ["nan", "inf", "x"])
def test_a_bar_that_is_no_number_is_one_line(value, capsys):
    with pytest.raises(SystemExit):
        run_of("--pass-threshold", value)
    assert f"argument --pass-threshold: a number, not {value!r}" in capsys.readouterr().err


def test_resume_and_compare_take_no_bar():
    with pytest.raises(OrsgenError, match="drop --pass-threshold"):
        options.invocation(["--resume", "run", "--pass-threshold", "0.5"])


@pytest.mark.parametrize(("url", "shown", "dropped"), [
    ("http://user:KEY@host:8000/v1", "http://host:8000/v1", ["userinfo"]),
    ("https://host/v1?api-key=KEY", "https://host/v1", ["query"]),
    ("https://u:KEY@host/v1?api-version=1&key=KEY#x", "https://host/v1", ["userinfo", "query"]),
    ("u:KEY@host/v1", "host/v1", ["userinfo"]),  # no scheme: still no password shown
    ("http://127.0.0.1:8000/v1", "http://127.0.0.1:8000/v1", []),
    ("http://host/v1/at@path", "http://host/v1/at@path", []),  # an @ in the path is no userinfo
    (None, None, []),
])
def test_what_of_an_endpoint_url_may_be_saved_or_shown(url, shown, dropped):
    assert options.public(url) == (shown, dropped)


def test_resume_takes_the_runs_own_arguments_typed_again_and_refuses_others(tmp_path):
    """Issue 44: `orsgen eval gen/x.py --model m -n 2 --resume DIR`, as a user retypes the run, was refused."""
    run = run_of("-k", "3", "--tasks", "0-1", "--reward", "total_reward", "--temperature", "0.5")
    (tmp_path / "run.json").write_text(json.dumps({"run": run.saved()}))
    same = options.invocation(["./graded.py", "--model", "m", "-k", "3", "--tasks", "0,1", "--reward", "total_reward",
                               "--temperature", "0.5", "--resume", str(tmp_path)])
    assert same.run is None and same.resume == tmp_path  # the run's own: run.json is what is repeated
    with pytest.raises(OrsgenError) as refused:
        options.invocation(["graded.py", "--model", "other", "-k", "3", "--resume", str(tmp_path)])
    assert str(refused.value) == (f"--resume {tmp_path} repeats the run recorded in its run.json: drop --model (the run "
                                  "has --model m) (or start a new run with --out)")
