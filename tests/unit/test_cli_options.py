"""The generator's option parsing alone: argv to jobs (`cli.parser`, `cli.jobs`), tool budgets from flags and from
pyproject (`config.budgets`), and the header's regenerate command both ways (`config.command`, `from_command`). No
server, no generation: the command as a user runs it is tests/test_cli_errors.py's and test_budget_options.py's."""

from pathlib import Path

import pytest
from orsgen import cli, config
from orsgen.errors import OrsgenError


def jobs(*argv: str) -> list[config.Job]:
    return cli.jobs(cli.parser().parse_args(list(argv)))


def test_one_target_one_output_is_one_job_with_its_options(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    [job] = jobs("http://127.0.0.1:8000", "-o", "gen/./echo.py", "--env", "echo", "--class-name", "Echo",
                 "--pin-tasks", "--secret", "KEY", "--secret", "OTHER", "--max-output-chars", "4000")
    assert (job.target, job.output, job.env, job.class_name) == ("http://127.0.0.1:8000", Path("gen/echo.py"),
                                                                 "echo", "Echo")
    assert (job.pin_tasks, job.async_tools, job.secret, job.max_output_chars) == (True, False, ("KEY", "OTHER"), 4000)


@pytest.mark.parametrize(("argv", "says"), [
    (["http://127.0.0.1:8000"], "give the output module with -o FILE"),
    (["-o", "x.py"], "-o, --env and --class-name go with a TARGET"),
    (["--secret", "KEY"], "--task-tools-from, --task-tools-for-all and --secret go with a TARGET"),
    (["--max-images", "2"], "--max-images goes with a TARGET; for pyproject targets set max-images in their table"),
    (["--tool-budget", "a:timeout=1"], "--tool-budget goes with a TARGET; for pyproject targets set tools.TOOL.KEY"),
    (["a/b", "--offline", "-o", "x.py"], "--offline goes without TARGET"),
    (["a/b", "c/d", "-o", "out.py"], "with several environments, -o is a directory"),
    (["a/b", "c/d", "--env", "x", "-o", "out"], "--env picks environments of one TARGET"),
    (["a/b", "a/b", "-o", "out"], "environment a/b is given twice"),
])
def test_arguments_that_make_no_job_are_one_line(tmp_path, monkeypatch, argv, says):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(OrsgenError) as refused:
        jobs(*argv)
    assert str(refused.value).startswith(says)


def test_a_usage_error_is_one_line_and_exit_2(capsys):
    with pytest.raises(SystemExit) as exited:
        cli.parser().parse_args(["--no-such-flag"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err == "orsgen: error: unrecognized arguments: --no-such-flag (orsgen --help lists the options)\n"


def test_options_are_not_abbreviated():
    with pytest.raises(SystemExit):
        cli.parser().parse_args(["a/b", "--out", "x.py"])


@pytest.mark.parametrize(("flag", "value", "says"), [
    ("--max-output-chars", "99", "--max-output-chars must be a whole number of at least 100, not 99"),
    ("--max-output-chars", "lots", "--max-output-chars must be a whole number of at least 100, not 'lots'"),
    ("--episode-timeout", "0", "--episode-timeout must be a number of seconds above 0, not 0"),
    ("--episode-timeout", "nan", "--episode-timeout must be a number of seconds above 0, not nan"),
    ("--truncate", "left", "--truncate must be one of head, tail, middle, not 'left'"),
    ("--max-output-tokens", "100", "max-output-tokens needs --tokenizer NAME"),
    ("--tool-budget", "bash=30", "--tool-budget bash=30: give TOOL:KEY=VALUE"),
    ("--tool-budget", "bash:retries=3", "--tool-budget bash:retries: unknown key 'retries'"),
])
def test_a_bad_budget_flag_is_refused_naming_the_flag(flag, value, says):
    with pytest.raises(OrsgenError) as refused:
        jobs("a/b", "-o", "x.py", flag, value)
    assert str(refused.value).startswith(says)


def test_budgets_from_flags_and_from_pyproject_are_the_same_values_in_one_order():
    flags = config.budgets({"max-images": "2", "episode-timeout": "30", "tools": ["sh:x=y:timeout=5",
                                                                                  "a:truncate=head"]}, "", flags=True)
    table = config.budgets({"tools": {"sh:x=y": {"timeout": 5}, "a": {"truncate": "head"}}, "episode-timeout": 30,
                            "max-images": 2}, "[tool.orsgen.targets.t]")
    assert flags == table == {"max-images": 2, "episode-timeout": 30.0,
                              "tools": {"a": {"truncate": "head"}, "sh:x=y": {"timeout": 5.0}}}
    assert list(flags) == ["max-images", "episode-timeout", "tools"]


def test_a_bad_pyproject_budget_names_its_table_and_key():
    with pytest.raises(OrsgenError, match=r"^\[t\]: tools\.bash\.timeout must be a number of seconds above 0, not "
                                          r"'30s'$"):
        config.budgets({"tools": {"bash": {"timeout": "30s"}}}, "[t]")
    with pytest.raises(OrsgenError, match=r"^\[t\]: max-images must be a whole number of at least 0, not True$"):
        config.budgets({"max-images": True}, "[t]")


def test_the_regenerate_command_reads_back_as_the_options_that_wrote_it():
    options = {"target": "http://127.0.0.1:8000", "env": "echo", "secret": ["A", "B"], "pin-tasks": True,
               "max-output-chars": 4000, "tools": {"my tool": {"timeout": 2.5}}}
    line = config.command(options, "gen dir/echo.py")
    assert line == ("orsgen http://127.0.0.1:8000 --env echo --secret A --secret B --pin-tasks --max-output-chars "
                    "4000 --tool-budget 'my tool:timeout=2.5' -o 'gen dir/echo.py'")
    assert config.from_command(line) == options


def test_recorded_options_are_put_in_the_order_the_module_writes_them():
    assert list(config.in_order({"max-images": 1, "secret": ["A"], "target": "t", "env": "e"})) == [
        "target", "env", "secret", "max-images"]
