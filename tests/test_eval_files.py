"""`orsgen eval`'s files and what they say (issue 41): a pass is a fixed bar recorded when the run starts, and
`--compare` refuses runs measured at different bars and labels each run's k; `--out` never replaces a file of the
user's; no credential of `--base-url` reaches a file or a line it prints, and `--resume` asks for it again; a run
that counted nothing says so, with the same counts everywhere.

The studio environment (tests/envs/studio.py) scores what its `score` tool is asked for, so a scripted model
(tests/harness/chat_standin.py) chooses each task's reward exactly; the graded one (tests/envs/graded.py) is the
one `tests/test_eval.py` measures.
"""

import base64
import json

import pytest

from tests.harness import evaluation, servers
from tests.harness.chat_standin import Error, Reply, first_user_text, serving, tool_results
from tests.harness.generation import in_process

pytestmark = pytest.mark.slow  # `orsgen eval` run as a user runs it, several runs a test: make test-slow

BONUS = 1.05  # a reward above 1.0: a style bonus some environments pay


@pytest.fixture(scope="module")
def studio(tmp_path_factory):
    folder = tmp_path_factory.mktemp("studio")
    with servers.running("tests.envs.studio:Studio", env={"ORSGEN_COUNT_REQUESTS": "1"}) as server:
        out = folder / "studio.py"
        made = in_process(server.url, "-o", str(out))
        assert made.returncode == 0, made.stderr
        yield server, out


def paying(rewards):
    """A scripted model that asks the studio's `score` for `rewards[task]` and finishes; "OK" to the probe."""

    def script(payload):
        text = first_user_text(payload)
        if not text.startswith("studio task"):
            return Reply(content="OK")
        if tool_results(payload):
            return Reply(content="done")
        return Reply(tool_calls=[("score", {"value": rewards[int(text.split()[-1])], "finish": True})])

    return script


def one_line(result):
    lines = result.stderr.strip().splitlines()
    assert "Traceback" not in result.stderr, result.stderr
    assert result.returncode == 2 and len(lines) == 1 and lines[0].startswith("orsgen: error: "), result.stderr
    return lines[0]


def measure(module, folder, cwd, rewards, *options, env=None):
    with serving(paying(rewards)) as endpoint:
        run = evaluation.orsgen_eval(str(module), "--base-url", endpoint.url, "--model", "scripted", "--tasks", "0-3",
                                     "--out", folder, *options, cwd=cwd, env=env)
    assert run.returncode == 0, run.stderr
    return run


# -- item 2: a pass is a fixed, recorded bar ---------------------------------------------------------------------------

RIGHT = {0: 1.0, 1: 1.0, 2: 1.0, 3: 0.0}
WITH_A_BONUS = {**RIGHT, 3: BONUS}  # the same answers on 0-2, and one episode above 1.0


def test_one_bonus_episode_moves_no_bar_and_identical_answers_compare_unchanged(studio, tmp_path):
    _, module = studio
    measure(module, "before", tmp_path, RIGHT)
    after = measure(module, "after", tmp_path, WITH_A_BONUS)

    found = evaluation.summary(tmp_path / "after")
    assert found["pass"]["threshold"] == 1.0
    assert [t["pass_rate"] for t in found["tasks"]] == [1.0, 1.0, 1.0, 1.0]  # not [0, 0, 0, 1]: 1.05 is no bar
    assert found["pass"]["at_1"] == 1.0 and "reward >= 1;" in found["pass"]["rule"]
    assert json.loads((tmp_path / "after" / "run.json").read_text())["run"]["pass_threshold"] == 1.0
    assert "pass@1  100.0%" in after.stdout

    compared = evaluation.orsgen_eval("--compare", "before", "after", cwd=tmp_path)
    assert compared.returncode == 0, compared.stderr
    assert "tasks: 1 improved, 0 regressed, 3 unchanged" in compared.stdout, compared.stdout
    assert "-100.0" not in compared.stdout, compared.stdout  # identical answers never "regressed 100% -> 0%"

    # a run.json from before the bar was fixed (pass_threshold null): --resume recomputes its figures at 1.0
    saved = json.loads((tmp_path / "after" / "run.json").read_text())
    saved["run"]["pass_threshold"] = None
    (tmp_path / "after" / "run.json").write_text(json.dumps(saved))
    (tmp_path / "after" / "summary.json").unlink()
    resumed = evaluation.orsgen_eval("--resume", "after", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    again = evaluation.summary(tmp_path / "after")
    assert again["pass"]["threshold"] == 1.0 and [t["pass_rate"] for t in again["tasks"]] == [1.0] * 4


def test_compare_refuses_runs_at_different_bars_and_labels_each_runs_k(studio, tmp_path):
    _, module = studio
    measure(module, "one", tmp_path, RIGHT)
    measure(module, "half", tmp_path, RIGHT, "--pass-threshold", "0.5")
    measure(module, "two", tmp_path, {**RIGHT, 3: 0.5}, "-k", "2")

    refused = evaluation.orsgen_eval("--compare", "one", "half", cwd=tmp_path)
    line = one_line(refused)
    assert "one passes at reward >= 1 and half at reward >= 0.5" in line, line
    assert refused.stdout == ""

    compared = evaluation.orsgen_eval("--compare", "one", "two", "--format", "markdown", cwd=tmp_path)
    assert compared.returncode == 0, compared.stderr
    out = compared.stdout
    assert "| figure | one (k=1) | two (k=2) |" in out, out
    assert "| pass@k | 0.750 | 0.750 |" in out, out  # tasks 0-2 pass both times, 3 neither
    assert "k differs" in out and out.count("k differs") == 1, out
    assert "tasks: 0 improved, 0 regressed, 4 unchanged" in out, out


# -- item 7: no file of the user's is replaced ---------------------------------------------------------------------


def test_out_refuses_a_folder_holding_the_users_files_before_any_request(studio, tmp_path):
    server, module = studio
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "report.md").write_text("my own notes\n")
    (mine / "summary.json").write_text('{"mine": true}\n')
    sft = tmp_path / "sft"
    sft.mkdir()
    (sft / "passing.jsonl").write_text('{"text": "my own training set"}\n')
    before = len(server.creates())
    with serving(paying(RIGHT)) as endpoint:
        into_mine = evaluation.orsgen_eval(str(module), "--base-url", endpoint.url, "--model", "scripted", "--tasks",
                                           "0", "--out", "mine", cwd=tmp_path)
        into_sft = evaluation.orsgen_eval(str(module), "--base-url", endpoint.url, "--model", "scripted", "--tasks",
                                          "0", "--out", "run", "--keep-passing", "sft", cwd=tmp_path)
        asked = list(endpoint.requests)
    line = one_line(into_mine)
    assert "--out mine holds files orsgen eval did not write (report.md, summary.json)" in line, line
    line = one_line(into_sft)
    assert "--keep-passing sft" in line and "passing.jsonl" in line and "not written by orsgen eval" in line, line
    assert (mine / "report.md").read_text() == "my own notes\n"
    assert (mine / "summary.json").read_text() == '{"mine": true}\n'
    assert sorted(p.name for p in mine.iterdir()) == ["report.md", "summary.json"]
    assert (sft / "passing.jsonl").read_text() == '{"text": "my own training set"}\n'
    assert not (tmp_path / "run").exists()
    assert asked == [] and len(server.creates()) == before  # refused before the endpoint or a session

    # eval's own files are eval's: an empty folder, and --keep-passing into the folder of an earlier run's set
    (tmp_path / "empty").mkdir()
    measure(module, "empty", tmp_path, RIGHT, "--keep-passing", "kept")
    measure(module, "again", tmp_path, RIGHT, "--keep-passing", "kept")
    assert len((tmp_path / "kept" / "passing.jsonl").read_text().splitlines()) == 3


# -- item 8: no credential in any file --------------------------------------------------------------------------------

SECRET, QUERY_SECRET = "canary-url-password-7c1d", "canary-url-query-key-90fe"


def test_credentials_in_the_base_url_reach_no_file_and_resume_asks_for_them(studio, tmp_path):
    _, module = studio
    right = paying(RIGHT)

    def refusing_task_3(payload):  # an endpoint_error: its record's `error` names the endpoint
        return Error(400, "task 3 refused") if first_user_text(payload).endswith(" 3") else right(payload)

    with serving(refusing_task_3) as endpoint:
        given = endpoint.url.replace("http://", f"http://evaluator:{SECRET}@")
        run = evaluation.orsgen_eval(str(module), "--base-url", given, "--model", "scripted", "--tasks", "0-3",
                                     "--out", "run", "--keep-passing", "kept", cwd=tmp_path)
        sent = {r.headers.get("authorization") for r in endpoint.requests}
        # a query string (an API key some gateways take there) is dropped too: the endpoint refuses the request
        # here, and the line that says so names the endpoint without it
        queried = evaluation.orsgen_eval(str(module), "--base-url", f"{endpoint.url}?api-key={QUERY_SECRET}",
                                         "--model", "scripted", "--tasks", "0", "--out", "queried", cwd=tmp_path,
                                         env={"OPENAI_BASE_URL": ""})
    assert run.returncode == 0, run.stderr
    basic = "Basic " + base64.b64encode(f"evaluator:{SECRET}".encode()).decode()
    assert basic in sent  # the credentials were used: the client sent them
    (failed,) = [r for r in evaluation.records(tmp_path / "run") if r.get("error")]
    assert f"the endpoint at {endpoint.url} answered 400: task 3 refused" in failed["error"]
    saved = json.loads((tmp_path / "run" / "run.json").read_text())
    assert saved["endpoint"] == endpoint.url
    assert evaluation.summary(tmp_path / "run")["run"]["endpoint"] == endpoint.url
    written = [p for p in (*tmp_path.joinpath("run").iterdir(), *tmp_path.joinpath("kept").iterdir())]
    assert {p.name for p in written} >= {"run.json", "summary.json", "report.md", "trajectories.jsonl",
                                         "passing.jsonl"}
    for path in written:
        assert SECRET.encode() not in path.read_bytes(), path
    assert SECRET not in run.stdout + run.stderr
    assert QUERY_SECRET not in queried.stdout + queried.stderr, queried.stderr
    for path in (tmp_path / "queried").rglob("*") if (tmp_path / "queried").exists() else ():
        assert QUERY_SECRET.encode() not in path.read_bytes(), path

    # --resume gets them back from --base-url given again (the folder does not keep them), never by a silent guess
    with serving(paying(RIGHT)) as other:
        asked = evaluation.orsgen_eval("--resume", "run", cwd=tmp_path, env={"OPENAI_BASE_URL": ""})
        moved = evaluation.orsgen_eval("--resume", "run", cwd=tmp_path, env={"OPENAI_BASE_URL": other.url})
    line = one_line(asked)
    assert f"its endpoint {endpoint.url} had credentials in its URL" in line and "--base-url" in line, line
    assert SECRET not in line
    line = one_line(moved)
    assert f"OPENAI_BASE_URL is {other.url}" in line and endpoint.url in line, line
    (tmp_path / "run" / "summary.json").unlink()
    with serving(paying(RIGHT)) as again:
        given = again.url.replace("http://", f"http://evaluator:{SECRET}@")
        resumed = evaluation.orsgen_eval("--resume", "run", "--base-url", given, cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert SECRET not in resumed.stdout + resumed.stderr
    for path in (tmp_path / "run").iterdir():
        assert SECRET.encode() not in path.read_bytes(), path


# -- item 14: nothing counted --------------------------------------------------------------------------------------


def test_a_run_with_nothing_counted_says_so_with_one_set_of_counts(studio, tmp_path):
    """The endpoint fails every episode after its probe: the run stops after 8 in a row, nothing counted."""
    _, module = studio

    def dead(payload):
        if not first_user_text(payload).startswith("studio task"):
            return Reply(content="OK")
        return Error(400, "the model crashed: engine is dead")

    for name in ("a", "b"):
        with serving(dead) as endpoint:
            run = evaluation.orsgen_eval(str(module), "--base-url", endpoint.url, "--model", "scripted", "--tasks",
                                         "0-3", "-k", "4", "--concurrency", "1", "--out", name, cwd=tmp_path)
        assert run.returncode == 2, run.stderr
    records = evaluation.records(tmp_path / "a")
    assert len(records) == 8 and all(r["unscored_reason"] == "endpoint_error" for r in records)
    found = evaluation.summary(tmp_path / "a")
    # the line that stopped the run, the summary and the report say one thing: 0 of 16 done, 8 the endpoint failed
    assert run.stderr.strip().splitlines()[-1].endswith("(0 of 16 episodes saved in b: orsgen eval --resume b runs "
                                                       "the rest)"), run.stderr
    assert found["episodes"] == {"planned": 16, "done": 0, "counted": 0}
    assert found["unscored"] == {"endpoint_error": 8}
    (line,) = [x for x in run.stdout.splitlines() if x.strip().startswith("episodes")]
    assert line.split(None, 1)[1] == "0 of 16 done (0 counted; --resume runs 8 again: 8 the endpoint had failed)"

    compared = evaluation.orsgen_eval("--compare", "a", "b", cwd=tmp_path)
    assert compared.returncode == 0, compared.stderr
    assert "measured in one run only" not in compared.stdout, compared.stdout
    assert compared.stdout.count("counted an episode") == 1, compared.stdout
    assert "neither a nor b counted an episode (a: endpoint_error 8; b: endpoint_error 8)" in compared.stdout
