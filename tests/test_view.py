"""`orsgen view` (issue 45): one self-contained HTML page of an `orsgen eval` run, of a training run's trajectory
records, or of two eval runs side by side, opened in headless Chromium (tests/harness/browser.py) and read from the
DOM its script drew: the figures equal summary.json and the records (recomputed here), a task's episodes after a
click and after a URL fragment, the comparison's deltas; hostile strings shown as text; no secret in the page; no
request, no console error. Each page kind leaves a screenshot in the folder printed at the end."""

import json
import math
import re
import statistics
import time
from html.parser import HTMLParser
from pathlib import Path

import pytest

from tests.harness import evaluation, pages
from tests.harness.browser import chromium, open_page
from tests.harness.chat_standin import Reply, first_user_text, serving, tool_results

SEED, K = 3, 4
HOSTILE = ("</script><script>window.__pwned = 1; alert(1)</script> <img src=x onerror=\"window.__pwned = 2; "
           "alert(2)\"> <a href=\"javascript:window.__pwned = 3\">click</a> javascript:alert(3) <!-- @DATA@ @TITLE@ "
           "]]> \u2028\u2029 &amp; \"quoted\"")


@pytest.fixture(scope="module")
def browser():
    with chromium() as found:
        yield found


@pytest.fixture(scope="module")
def shots(tmp_path_factory, request):
    """Where each page kind's screenshot goes, for a person to look at (the path is printed at the end)."""
    folder = tmp_path_factory.getbasetemp() / "view-screenshots"
    folder.mkdir(exist_ok=True)
    yield folder
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None and any(folder.iterdir()):
        reporter.write_line(f"orsgen view screenshots: {folder}")


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    with evaluation.graded(tmp_path_factory.mktemp("graded")) as found:
        yield found


def quiet(opened, page_path: Path) -> None:
    """No console error, no dialog, and no request but the page itself."""
    assert opened.errors == [] and opened.dialogs == []
    assert {url.split("#")[0] for url in opened.requests} <= {page_path.resolve().as_uri()}, opened.requests


class Markup(HTMLParser):
    """A page's elements, attributes, and the text of its style and script elements."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.texts: dict[str, list[str]] = {"style": [], "script": []}
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        if tag in self.texts:
            self.texts[tag].append("")

    def handle_data(self, data):
        if self.tags and self.tags[-1][0] in self.texts:
            self.texts[self.tags[-1][0]][-1] += data


def self_contained(text: str) -> None:
    """Nothing in the page names a place elsewhere: every src and href is this page's fragment or a data: URI, every
    url() in its style a data: URI, no address in its script; its data block is JSON with every < and > escaped."""
    markup = Markup(text)
    assert [tag for tag, _ in markup.tags].count("script") == 2  # the data block and the page's script
    for _tag, attrs in markup.tags:
        for name in ("src", "href"):
            assert attrs.get(name) is None or attrs[name].startswith(("#", "data:")), attrs
    style, (data, script) = "".join(markup.texts["style"]), markup.texts["script"]
    assert all(u.startswith("data:") for u in re.findall(r"url\(\s*['\"]?([^)'\"]*)", style))
    assert set(re.findall(r"https?://[^\s\"'<>]+", script)) <= {"http://www.w3.org/2000/svg"}  # createElementNS's
    assert "<" not in data and ">" not in data
    policy = next(attrs["content"] for tag, attrs in markup.tags if attrs.get("http-equiv") == "Content-Security-Policy")
    assert policy.startswith("default-src 'none'; script-src 'sha256-") and "img-src data:;" in policy


# -- an eval run ---------------------------------------------------------------------------------------------------


@pytest.mark.slow  # runs `orsgen eval` first, as a user does
def test_an_eval_runs_page_shows_its_summary_its_tasks_and_their_episodes(graded, tmp_path, browser, shots):
    _server, module = graded
    with serving(evaluation.script) as endpoint:
        run = evaluation.orsgen_eval(str(module), "--base-url", endpoint.url, "--model", "scripted", "-k", str(K),
                                     "--seed", str(SEED), "--out", "run", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    folder = tmp_path / "run"
    page_path = folder / "report.html"
    assert "orsgen eval: run/report.html (" in run.stderr  # written beside report.md, and said
    self_contained(page_path.read_text(encoding="utf-8"))
    summary = evaluation.summary(folder)
    records = evaluation.records(folder)

    opened = open_page(browser, page_path)
    p = summary["pass"]
    assert opened.value("#fig-episodes") == summary["episodes"]["done"] == 20  # task 5's 4 never started
    assert opened.value("#fig-coverage") == summary["episodes"]["done"] / summary["episodes"]["planned"]
    assert opened.value("#fig-mean-reward") == summary["reward"]["mean"]
    assert opened.value("#fig-pass-at-1") == p["at_1"] and opened.value("#fig-pass-at-k") == p["at_k"]
    assert opened.value("#fig-threshold") == p["threshold"] == 1.0 and opened.value("#fig-k") == p["k"] == K
    assert opened.text("#fig-threshold .note") == "fixed when the run started"  # never "the highest reward seen"
    assert opened.value("#fig-unscored") == 4 and opened.text("#fig-unscored .note") == "not_started 4"
    assert opened.text("#fig-pass-at-1 .value") == f"{100 * p['at_1']:.1f}%"
    opened.page.screenshot(path=shots / "eval.png")

    opened.click("#tab-tasks")
    rows = opened.rows("#task-table tbody tr")
    assert [r["data"]["task"] for r in rows] == [f"graded/train/{t['task_index']}" for t in summary["tasks"]]
    for row, task in zip(rows, summary["tasks"], strict=True):
        assert row["values"][6:9] == [task["pass_rate"], task["mean_reward"], task[f"pass_at_{K}"]]
        assert row["cells"][3:6] == [str(task["episodes"]), str(task["counted"]), str(task["passes"])]
    assert rows[5]["cells"][9] == str(K)  # task 5 never starts: its episodes are unscored
    opened.click("#task-table th[data-key=pass_rate]")  # sorted by pass rate, highest first
    rates = [r["values"][6] for r in opened.rows("#task-table tbody tr")]
    assert rates == sorted([t["pass_rate"] for t in summary["tasks"] if t["pass_rate"] is not None],
                           reverse=True) + [None]

    opened.click("#tab-tools")
    (answer,) = opened.rows("#tool-table tbody tr")
    turns = [t for r in records if r["unscored_reason"] != "not_started" for t in r["completion"] if t["role"] == "tool"]
    failed = [t for t in turns if t["content"].startswith("{'error': ")]
    assert answer["data"]["tool"] == "answer" and answer["values"][1:4] == [len(turns), len(failed),
                                                                            len(failed) / len(turns)]
    assert len(turns) == summary["tools"]["calls_per_episode"] * summary["episodes"]["counted"]
    assert answer["values"][4] == sum(len(r["tool_calls"]) for r in records)  # those that reached the environment

    # a task's row leads to its episodes; one of them to its conversation
    opened.click("#tab-tasks")
    opened.click("#task-table tbody tr[data-task='graded/train/1']")
    opened.page.wait_for_selector("#episodes:not([hidden]) #episode-table")
    listed = opened.rows("#episode-table tbody tr")
    assert len(listed) == K and {r["data"]["task"] for r in listed} == {"graded/train/1"}
    opened.click(f"#episode-table tbody tr[data-episode='{listed[0]['data']['episode']}']")
    opened.page.wait_for_selector(f"#viewer[data-episode='{listed[0]['data']['episode']}']")
    conversation = opened.text("#conversation")
    assert "Task 1: answer with the word w1" in conversation  # the prompt with what reset() returned
    assert opened.page.locator("#conversation .turn.tool.failed").count() == 1  # the call its method refused
    assert "unexpected keyword argument 'txt'" in opened.text("#conversation .turn.tool.failed")
    assert '"text": "w1"' in conversation and "right" in opened.text("#environment-calls")
    quiet(opened, page_path)

    # an episode's link survives a reload, with the filters of its fragment
    opened.click("#only-failed")
    opened.select("#episode-task", "graded/train/4")
    unsolved = opened.rows("#episode-table tbody tr")
    coins = sum(evaluation.coin(SEED + rollout * 6 + evaluation.COIN) for rollout in range(K))
    assert len(unsolved) == K - coins and {r["data"]["task"] for r in unsolved} == {"graded/train/4"}
    chosen = unsolved[-1]["data"]["episode"]
    opened.click(f"#episode-table tbody tr[data-episode='{chosen}'] a.permalink")
    url = opened.page.url
    assert "task=graded%2Ftrain%2F4" in url and "failed=1" in url and f"ep={chosen}" in url
    again = open_page(browser, page_path, "#" + url.split("#", 1)[1])
    assert again.page.locator("#viewer").get_attribute("data-episode") == chosen
    assert again.page.locator("#only-failed").is_checked()
    session = again.text("#viewer dd[data-fact=session]")
    (record,) = [r for r in records if r["session"] == session]
    assert record["task_index"] == 4 and record["reward"] == 0.0
    quiet(again, page_path)

    # --resume writes the page again (its figures may have changed): it runs task 5's episodes, which never start,
    # again
    page_path.unlink()
    with serving(evaluation.script) as endpoint:
        resumed = evaluation.orsgen_eval("--resume", "run", "--base-url", endpoint.url, cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert page_path.exists() and "orsgen eval: run/report.html (" in resumed.stderr


@pytest.mark.slow  # runs `orsgen eval` first, as a user does
def test_hostile_strings_are_shown_as_text(echo_server, tmp_path, browser, shots):
    """Model output, tool arguments, tool results, the model's and the folder's names holding markup, a script end,
    `javascript:` links, the template's own markers and lone surrogates: all shown as text; nothing runs, no element
    is added."""
    module = tmp_path / "echo.py"
    from tests.harness.generation import in_process

    assert in_process(echo_server.url, "-o", str(module)).returncode == 0
    model = "<img src=x onerror=alert(4)>"

    def hostile(payload):
        if "probe" in first_user_text(payload) or not first_user_text(payload).startswith("Echo"):
            return Reply(content="OK")
        if tool_results(payload):
            return Reply(content=HOSTILE)
        return Reply(tool_calls=[("echo", {"text": HOSTILE})])

    out = "run <b>bold <img src=x onerror=alert(5)>"  # a folder's name: no slash
    with serving(hostile, models=(model,)) as endpoint:
        run = evaluation.orsgen_eval(str(module), "--base-url", endpoint.url, "--model", model, "--tasks", "0-1",
                                     "--out", out, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    folder = tmp_path / out
    # a model's lone surrogates (half a pair in its tool-call JSON), as orsgen writes them: their \\u escapes
    first, rest = (folder / "trajectories.jsonl").read_text(encoding="utf-8").split("\n", 1)
    first = first.replace("javascript:alert(3)", "javascript:alert(3) \\ud83d lone \\udc00")
    (folder / "trajectories.jsonl").write_text(first + "\n" + rest, encoding="utf-8")
    made = pages.orsgen_view(out, "-o", "page.html", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    page_path = tmp_path / "page.html"
    text = page_path.read_text(encoding="utf-8")
    self_contained(text)
    assert "\\ud83d lone \\udc00" in text  # escaped, as JSON reads them back

    opened = open_page(browser, page_path, "#tab=episodes&ep=1")
    assert opened.page.title() == f"orsgen eval: {out}" and opened.text("#title") == f"orsgen eval: {out}"
    assert model in opened.text("#subtitle")
    assert opened.text("#conversation").count(HOSTILE) == 2  # the echo and the reply (the arguments: JSON text)
    assert opened.text("#environment-calls pre:not(.arguments)") == HOSTILE
    opened.goto(page_path, "#tab=episodes&ep=0")
    opened.page.wait_for_selector("#viewer[data-episode='0']")
    conversation = opened.text("#conversation")
    assert "\ufffd lone \ufffd" in conversation or "\ud83d lone \udc00" in conversation
    opened.page.screenshot(path=shots / "hostile.png")
    dom = opened.page.evaluate("""() => ({pwned: window.__pwned === undefined ? null : window.__pwned,
        scripts: document.scripts.length, imgs: document.images.length, bold: document.querySelectorAll('b').length,
        links: Array.from(document.links).map(a => a.getAttribute('href'))})""")
    assert dom["pwned"] is None and dom["scripts"] == 2 and dom["imgs"] == 0 and dom["bold"] == 0
    assert all(href.startswith("#") for href in dom["links"]), dom["links"]
    opened.click("#tab-tasks")
    opened.click("#tab-overview")
    quiet(opened, page_path)


@pytest.mark.slow  # runs `orsgen eval` first, as a user does
def test_no_secret_reaches_the_page(graded, tmp_path, browser):
    """The endpoint's and OpenReward's keys set for the run, an endpoint that writes the key it was sent into its
    replies, and (another run) an endpoint URL with a password: none of it is in the page."""
    _server, module = graded
    keys = {"OPENAI_API_KEY": "canary-openai-7f3e9a", "OPENREWARD_API_KEY": "canary-openreward-5b21c4"}
    seen: list[str] = []

    def leaky(payload):
        if tool_results(payload):
            return Reply(content=f"my key is {seen[-1]}")
        return evaluation.script(payload)

    with serving(leaky) as endpoint:
        def remember(payload):
            seen.append(endpoint.chats()[-1].headers.get("authorization", ""))
            return leaky(payload)

        endpoint.script = remember
        run = evaluation.orsgen_eval(str(module), "--base-url", endpoint.url, "--model", "scripted", "--tasks", "0-2",
                                     "--concurrency", "1", "--out", "run", cwd=tmp_path, env=keys)
        assert run.returncode == 0, run.stderr
        with_password = endpoint.url.replace("http://", "http://user:canary-password-0c8d@")
        run = evaluation.orsgen_eval(str(module), "--base-url", with_password, "--model", "scripted", "--tasks", "0",
                                     "--out", "password", cwd=tmp_path)
        assert run.returncode == 0, run.stderr
    assert f"Bearer {keys['OPENAI_API_KEY']}" in seen  # the endpoint did get the key, and wrote it back
    made = pages.orsgen_view("run", "-o", "again.html", cwd=tmp_path, env=keys)
    assert made.returncode == 0, made.stderr
    for path in (tmp_path / "run" / "report.html", tmp_path / "again.html", tmp_path / "password" / "report.html"):
        text = path.read_text(encoding="utf-8")
        assert "canary" not in text, path
    assert "my key is" in (tmp_path / "run" / "report.html").read_text()  # the replies are there, the key replaced
    opened = open_page(browser, tmp_path / "password" / "report.html")
    assert opened.text("#overview dd[data-fact=endpoint]") == endpoint.url  # no user, no password
    assert "canary" not in opened.page.content()


# -- a training run ------------------------------------------------------------------------------------------------


def expected_steps(records):
    """Per step of the training stream, from the records, as the page should chart them: the scored rewards' mean
    and sample standard deviation, the share of groups (a step's episodes of one task) whose scored rewards have
    no spread, the share of unscored episodes."""
    found = {}
    for step in sorted({r["step"] for r in records if r["step"] is not None and r["stream"] != "eval"}):
        mine = [r for r in records if r["step"] == step and r["stream"] != "eval"]
        rewards = [r["reward"] for r in mine if r["reward"] is not None]
        groups: dict = {}
        for r in mine:
            groups.setdefault((r["environment"], r["split"], r["task_index"]), []).append(r["reward"])
        flat = [len(s := [x for x in g if x is not None]) < 2 or statistics.stdev(s) <= 1e-8 for g in groups.values()]
        found[step] = {"reward_mean": statistics.fmean(rewards) if rewards else None,
                       "reward_std": statistics.stdev(rewards) if len(rewards) > 1 else None,
                       "zero_spread": sum(flat) / len(flat),
                       "unscored": sum(r["unscored_reason"] is not None for r in mine) / len(mine)}
    return found


def charted(opened):
    """What the page's three charts show: step -> the values of their points."""
    points = {}
    for chart, key in (("#chart-reward", "reward_mean"), ("#chart-zero-spread", "zero_spread"),
                       ("#chart-unscored", "unscored")):
        for dot in opened.page.eval_on_selector_all(f"{chart} circle", "ds => ds.map(d => [d.dataset.step, "
                                                    "d.dataset.value, d.dataset.spread])"):
            step = int(dot[0])
            points.setdefault(step, {})[key] = json.loads(dot[1])
            if key == "reward_mean":
                points[step]["reward_std"] = json.loads(dot[2])
    return points


def assert_training_page(opened, records):
    expected = expected_steps(records)
    assert expected and charted(opened) == expected
    scored = [r["reward"] for r in records if r["reward"] is not None]
    assert opened.value("#fig-episodes") == len(records)
    assert opened.value("#fig-mean-reward") == statistics.fmean(scored)


def test_training_records_from_hooks_chart_each_steps_figures(echo_server, generate, tmp_path, browser, shots):
    """Episodes run by hand on the echo environment, recorded by `Recorder` at steps set as a trainer sets them: a
    step where every rollout fails alike, one with a spread, one with unscored episodes."""
    from orsgen.runtime import Recorder

    mod = generate(echo_server.url)
    recorder = Recorder(tmp_path / "traj")
    now = {"step": 0}
    recorder.attach(run="by-hand", step=lambda: now["step"], rank=lambda: 0, run_info={})
    targets = {row["task_index"]: row["target"] for row in mod.dataset()}
    plan = {0: lambda task, i: "nope", 1: lambda task, i: targets[task] if i % 2 else "nope",
            2: lambda task, i: None if i == 0 else targets[task]}
    for step, answer in plan.items():
        now["step"] = step
        for task in (0, 1):
            for i in range(4):
                env = mod.Echo()
                env.reset(task_index=task)
                if answer(task, i) is not None:
                    env.echo(text=answer(task, i))
                env.get_reward()
        mod.close_all()
        assert recorder.flush()
    recorder.close()
    records = [json.loads(line) for line in recorder.path.read_text().split("\n") if line]
    assert len(records) == 24 and {r["step"] for r in records} == {0, 1, 2}

    made = pages.orsgen_view(str(tmp_path / "traj"), "-o", "training.html", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    assert "orsgen view: training.html (24 episodes, " in made.stderr
    page_path = tmp_path / "training.html"
    self_contained(page_path.read_text(encoding="utf-8"))
    opened = open_page(browser, page_path)
    assert_training_page(opened, records)
    assert charted(opened)[0]["zero_spread"] == 1.0 and charted(opened)[1]["zero_spread"] == 0.0
    assert charted(opened)[2]["unscored"] == 2 / 8
    opened.goto(page_path, "#tab=episodes&ep=0")
    opened.page.wait_for_selector("#viewer[data-episode='0']")
    assert "TRL's turns were not recorded" in opened.text("#viewer")  # read outside TRL: the calls are shown
    assert opened.page.locator("#environment-calls .turn").count() == 1
    quiet(opened, page_path)


@pytest.mark.trainer
def test_a_grpo_runs_trajectories_page(echo_server, generate, tmp_path, browser, shots):
    """A real GRPOTrainer with `Trajectories`: the page of its records charts each step as the records say."""
    from examples import tiny
    from tests.harness import trainers

    def half_right(i, prompt):  # every other rollout echoes the word, the others "apple" (the tokenizer's word)
        return trainers.echo_the_word(i, prompt) if i % 2 else tiny.call_text("echo", {"text": "apple"})

    mod = generate(echo_server.url)
    trajectories = mod.Trajectories(tmp_path / "traj")
    trainer = trainers.trainer(mod.Echo, str(tmp_path / "out"), 3, tools=trainers.tool_methods(mod.Echo()),
                               threads=1, train_dataset=mod.dataset(), per_device_train_batch_size=4,
                               num_generations=4, callbacks=[trajectories], first_turn=half_right)
    trainer.train()
    mod.close_all()
    trajectories.close()
    records = [json.loads(line) for line in trajectories.path.read_text().split("\n") if line]
    assert len({r["step"] for r in records}) == 3 and {0.0, 1.0} <= {r["reward"] for r in records}

    made = pages.orsgen_view(str(tmp_path / "traj"), "-o", "training.html", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    opened = open_page(browser, tmp_path / "training.html")
    assert_training_page(opened, records)
    opened.page.screenshot(path=shots / "training.png", full_page=True)
    opened.click("#tab-episodes")
    opened.click("#episode-table tbody tr[data-episode='0']")
    opened.page.wait_for_selector("#viewer[data-episode='0']")
    assert opened.page.locator("#conversation .turn.assistant").count() >= 1  # TRL's turns, as the model saw them
    quiet(opened, tmp_path / "training.html")


# -- two eval runs -------------------------------------------------------------------------------------------------


@pytest.mark.slow  # runs `orsgen eval` first, as a user does
def test_two_runs_side_by_side(graded, tmp_path, browser, shots):
    _server, module = graded

    def better(payload):
        if evaluation.task_of(payload) == 2 and not tool_results(payload):
            return Reply(tool_calls=[("answer", {"text": "w2"})])
        return evaluation.script(payload)

    def worse(payload):
        if evaluation.task_of(payload) == 0 and not tool_results(payload):
            return Reply(tool_calls=[("answer", {"text": "no"})])
        return better(payload)

    for name, answers, more in (("before", evaluation.script, ()), ("after", worse, ()),
                                ("lenient", better, ("--pass-threshold", "0.5"))):
        with serving(answers) as endpoint:
            run = evaluation.orsgen_eval(str(module), "--base-url", endpoint.url, "--model", "scripted", "--tasks",
                                         "0-4", "-k", "2", "--seed", str(SEED), "--out", name, *more, cwd=tmp_path)
        assert run.returncode == 0, run.stderr
    made = pages.orsgen_view("before", "after", "-o", "compare.html", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    page_path = tmp_path / "compare.html"
    self_contained(page_path.read_text(encoding="utf-8"))

    a, b = evaluation.summary(tmp_path / "before"), evaluation.summary(tmp_path / "after")
    rates = [{t["task_index"]: t["pass_rate"] for t in s["tasks"]} for s in (a, b)]
    changes = {t: rates[1][t] - rates[0][t] for t in rates[0]}
    assert changes[2] == 1.0 and changes[0] == -1.0  # one task flipped each way
    opened = open_page(browser, page_path)
    rows = opened.rows("#compare-table tbody tr")
    shown = [(r["data"]["task"], json.loads(r["data"]["change"])) for r in rows]
    order = sorted(changes, key=lambda t: (changes[t] == 0, -abs(changes[t]), t))
    assert shown == [(f"graded/train/{t}", changes[t]) for t in order]
    assert rows[0]["cells"][3:6] == [f"{100 * rates[0][order[0]]:.1f}%", f"{100 * rates[1][order[0]]:.1f}%",
                                     f"{100 * changes[order[0]]:+.1f}"]
    improved, regressed = sum(c > 0 for c in changes.values()), sum(c < 0 for c in changes.values())
    assert opened.text("#compare-counts") == (f"tasks: {improved} improved, {regressed} regressed, "
                                              f"{len(changes) - improved - regressed} unchanged, 0 measured in one "
                                              "run only")
    figures = {r["data"]["figure"]: r["cells"][1:] for r in opened.rows("#compare-figures tbody tr")}
    assert figures["pass@1"][:2] == [f"{100 * a['pass']['at_1']:.1f}%", f"{100 * b['pass']['at_1']:.1f}%"]
    bars = opened.rows("#bars tbody tr")
    assert [r["values"][2:4] for r in bars] == [[1.0, 2], [1.0, 2]]
    assert opened.page.locator("#bars-differ").count() == 0
    opened.page.screenshot(path=shots / "comparison.png", full_page=True)

    # each side's episodes of a task
    opened.click("#compare-table tbody tr[data-task='graded/train/0'] a >> nth=1")
    opened.page.wait_for_selector("#episodes:not([hidden]) #episode-table")
    assert opened.page.locator("#run-1").get_attribute("class") == "on"
    assert {r["data"]["task"] for r in opened.rows("#episode-table tbody tr")} == {"graded/train/0"}
    quiet(opened, page_path)

    # a run with another pass bar: flagged
    made = pages.orsgen_view("before", "lenient", "-o", "differ.html", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    differ = open_page(browser, tmp_path / "differ.html")
    assert "pass bar" in differ.text("#bars-differ")
    assert [r["values"][2] for r in differ.rows("#bars tbody tr")] == [1.0, 0.5]


# -- a big run -----------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_ten_thousand_episodes_build_and_stay_usable(tmp_path, browser, shots, capsys):
    records = pages.eval_folder(tmp_path / "big", 10_000)
    started = time.perf_counter()
    made = pages.orsgen_view("big", cwd=tmp_path)
    took = time.perf_counter() - started
    assert made.returncode == 0, made.stderr
    page_path = tmp_path / "big" / "report.html"
    size = page_path.stat().st_size
    assert f"orsgen view: big/report.html (10000 episodes, {size / 1e6:.1f} MB)" in made.stderr
    with capsys.disabled():
        print(f"\norsgen view: 10,000 episodes built in {took:.1f} s (the command, start to end), {size / 1e6:.1f} MB")
    summary = evaluation.summary(tmp_path / "big")

    opened = open_page(browser, page_path)
    assert opened.value("#fig-episodes") == summary["episodes"]["done"]
    assert opened.value("#fig-mean-reward") == summary["reward"]["mean"]
    assert opened.value("#fig-pass-at-k") == summary["pass"]["at_k"]
    opened.click("#tab-tasks")
    assert opened.page.locator("#task-table tbody tr").count() == 100
    assert opened.text("#tasks-pager span") == f"page 1 of {math.ceil(len(summary['tasks']) / 100)}"
    opened.fill("#task-filter", "synthetic/train/123")
    assert [r["data"]["task"] for r in opened.rows("#task-table tbody tr")] == [
        f"synthetic/train/{t}" for t in range(2500) if str(t).startswith("123")]
    opened.click("#tab-episodes")
    assert opened.page.locator("#episode-table tbody tr").count() == 50
    assert opened.text("#episodes-pager span") == "page 1 of 200"
    opened.click("#episodes-pager button >> nth=1")
    assert opened.page.locator("#episode-table tbody tr").first.get_attribute("data-episode") == "50"
    long = next(i for i, r in enumerate(records) if len(r["tool_calls"]) == 1 and r["tool_calls"][0]["cut"])
    opened.goto(page_path, f"#tab=episodes&ep={long}")
    opened.page.wait_for_selector(f"#viewer[data-episode='{long}']")
    result = opened.text("#environment-calls pre:not(.arguments)")
    total = len(records[long]["tool_calls"][-1]["result"])
    assert "characters not shown here; the record keeps them]" in result
    assert f" of {total:,} characters" in result and len(result) < 1_200  # capped: 1,000 in a run this big
    opened.page.screenshot(path=shots / "big.png")
    quiet(opened, page_path)


# -- the command ---------------------------------------------------------------------------------------------------


def test_images_are_shown_as_the_record_holds_them(tmp_path, browser):
    """A tool result's image: a data: URI (Pillow absent when recorded) inline, Pillow's description as text, an SVG
    (which can hold script) as "[an image]", any other address as text, never fetched."""
    import base64
    import io
    import random

    from PIL import Image

    png = io.BytesIO()
    Image.new("RGB", (24, 16), (200, 40, 40)).save(png, format="PNG")
    uri = "data:image/png;base64," + base64.b64encode(png.getvalue()).decode()
    svg = "data:image/svg+xml;base64," + base64.b64encode(b"<svg onload='alert(1)'/>").decode()
    records = [pages.record(i, i, 0, random.Random(i)) for i in range(2)]
    records[0]["tool_calls"][-1]["result"] = [{"type": "text", "text": "a picture"}, {"type": "image", "image": uri},
                                              {"type": "image", "image": "[image 64x48]"},
                                              {"type": "image", "image": svg},
                                              {"type": "image", "image": "https://example.com/x.png"}]
    pages.write_folder(tmp_path / "pictures", records, k=1, tasks=[("synthetic", "train", t) for t in range(2)])
    made = pages.orsgen_view("pictures", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    page_path = tmp_path / "pictures" / "report.html"
    self_contained(page_path.read_text(encoding="utf-8"))
    opened = open_page(browser, page_path, "#tab=episodes&ep=0")
    images = opened.page.eval_on_selector_all("#environment-calls img", "is => is.map(i => [i.src, i.naturalWidth])")
    assert images == [[uri, 24]]  # drawn: the policy lets data: images in
    texts = opened.page.eval_on_selector_all("#environment-calls pre:not(.arguments)",
                                             "ps => ps.map(p => p.textContent)")
    assert texts == ["a picture", "[image 64x48]", "[an image]", "https://example.com/x.png"]  # text, never fetched
    quiet(opened, page_path)



@pytest.mark.slow
def test_a_reward_that_is_not_a_number_is_shown_as_such(tmp_path, browser):
    """A reward function's NaN (JSON has no such number: Python writes it, JSON.parse refuses it): the page still
    opens, the episode says NaN, and the step's mean leaves it out."""
    import random

    records = [pages.record(i, i % 4, i // 4, random.Random(i)) for i in range(8)]
    records[1]["reward"], records[1]["unscored_reason"], records[1]["scored"] = float("nan"), None, True
    pages.write_folder(tmp_path / "nan", records, k=2, tasks=[("synthetic", "train", t) for t in range(4)])
    training = [{**r, "stream": "train", "step": i // 4, "rollout": None} for i, r in enumerate(records)]
    (tmp_path / "traj").mkdir()
    (tmp_path / "traj" / "trajectories-rank0.jsonl").write_text("".join(json.dumps(r) + "\n" for r in training))
    for args, page_path in ((["nan"], tmp_path / "nan" / "report.html"),
                            (["traj", "-o", "traj.html"], tmp_path / "traj.html")):
        made = pages.orsgen_view(*args, cwd=tmp_path)
        assert made.returncode == 0, made.stderr
        opened = open_page(browser, page_path, "#tab=episodes&ep=1")
        assert opened.text("#viewer dd[data-fact=reward]") == "NaN"
        quiet(opened, page_path)
    opened.click("#tab-overview")
    finite = [r["reward"] for r in training[:4] if r["reward"] is not None and r["reward"] == r["reward"]]
    assert charted(opened)[0]["reward_mean"] == statistics.fmean(finite)
    quiet(opened, tmp_path / "traj.html")



def test_bad_input_is_one_line_and_exit_2(tmp_path):
    pages.eval_folder(tmp_path / "a", 8)
    (tmp_path / "empty").mkdir()
    (tmp_path / "other.jsonl").write_text('{"not": "a record"}\n')
    (tmp_path / "cut").mkdir()
    (tmp_path / "cut" / "trajectories.jsonl").write_text("")
    for args, says in ((["nowhere"], "nowhere: no such file or folder"),
                       (["empty"], "empty: neither an orsgen eval folder"),
                       (["other.jsonl"], "no orsgen trajectory record"),
                       (["cut"], "orsgen eval --resume cut finishes it"),
                       (["a", "a", "a"], "3 eval folders"),
                       (["a", "other.jsonl"], "give eval folders or training trajectories, not both"),
                       (["a", "-o", "a/trajectories.jsonl"], "that is one of the records it reads")):
        found = pages.orsgen_view(*args, cwd=tmp_path)
        assert found.returncode == 2 and found.stderr.count("\n") == 1, (args, found.stderr)
        assert found.stderr.startswith("orsgen: error: ") and says in found.stderr, (args, found.stderr)
    assert not (tmp_path / "a" / "report.html").exists()


def test_the_view_needs_no_sdk(tmp_path):
    """`orsgen view` reads files: it never imports openreward (a 4-5 s import), torch, nor the generator."""
    import random
    import subprocess
    import sys

    pages.eval_folder(tmp_path / "a", 8)
    (tmp_path / "traj").mkdir()
    (tmp_path / "traj" / "trajectories-rank0.jsonl").write_text("".join(
        json.dumps(pages.record(i, i % 2, 0, random.Random(i), step=i // 4, stream="train")) + "\n" for i in range(8)))
    for given in (["a"], ["traj", "-o", "t.html"]):
        code = (f"import sys; sys.argv = ['orsgen', 'view', *{given!r}]; from orsgen.command import main; "
                "code = main(); print(code, sorted(m for m in ('openreward', 'black', 'jinja2', 'torch', "
                "'transformers', 'datasets') if m in sys.modules))")
        found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path,
                               timeout=60, env=evaluation.environ(), check=False)
        assert found.stdout == "0 []\n", found.stderr
