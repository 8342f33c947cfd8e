"""learnable (with --endpoint URL --model M): `orsgen eval` itself runs the model on the first tasks of the probed
split, k episodes each, with what training uses (a generated module's adapter: the module given as TARGET, else one
rendered from the live tools into a temporary folder); a task the model always or never passes gives GRPO no
reward spread to learn from. Its episodes' rewards are what the reward probes hold trivial policies to."""

from __future__ import annotations

import contextlib
import json
import sys
import tempfile
from pathlib import Path

from orsgen.doctor.check import ERROR, FAILED, PASSED, WARNING, Check, Facts
from orsgen.errors import OrsgenError


def run(facts: Facts, endpoint: str, model: str, tasks: int, k: int) -> Check:
    from orsgen import evaluate
    from orsgen.evaluate import figures, options

    with tempfile.TemporaryDirectory(prefix="orsgen-doctor-") as folder:
        try:
            module = _module(facts, Path(folder))
            argv = [str(module), "--model", model, "--base-url", endpoint, "-n", str(tasks), "-k", str(k), "--seed",
                    "0", "--out", str(Path(folder) / "eval")]  # seeded: a rerun of the doctor asks the same
            if facts.split is not None:
                argv += ["--split", facts.split]
            with contextlib.redirect_stdout(sys.stderr):  # its report: --json keeps stdout for the doctor's
                status = evaluate.measure(options.invocation(argv))
        except OrsgenError as exc:
            return Check("learnable", ERROR, f"orsgen eval could not run: {exc}")
        if status != 0:
            return Check("learnable", ERROR, f"orsgen eval stopped (exit {status}): its line above says why")
        summary = json.loads((Path(folder) / "eval" / evaluate.SUMMARY).read_text(encoding="utf-8"))
        records = [json.loads(line) for line in (Path(folder) / "eval" / evaluate.RECORDS).read_text(
            encoding="utf-8").splitlines() if line.strip()]
    facts.model += [r["reward"] for r in figures.latest(records) if isinstance(r.get("reward"), int | float)]
    measured = [t for t in summary["tasks"] if t["counted"]]
    flat = [t for t in measured if t["pass_rate"] in (0.0, 1.0)]
    shown = {f"{t['split']}/{t['task_index']}": t["pass_rate"] for t in measured}
    found = {"pass_rates": shown, "threshold": summary["pass"]["threshold"], "k": k}
    if not measured:
        return Check("learnable", ERROR, "no episode of the model counted (none started, or the endpoint failed)",
                     figures=found)
    rates = ", ".join(f"task {t['task_index']} {t['pass_rate']:.2f}" for t in measured[:8])
    said = f"{model}, {k} episodes per task: {rates}"
    if len(flat) == len(measured):
        return Check("learnable", FAILED, f"{said}: every task is always or never passed, so no GRPO group has a "
                     "reward spread", fix="give tasks of graded difficulty (or partial credit), or train another "
                     "model", figures=found)
    if flat:
        return Check("learnable", WARNING, f"{said}: {len(flat)} of {len(measured)} tasks always or never passed "
                     "(no reward spread for GRPO)", fix='train on the others: dataset(pass_rates="EVAL_FOLDER") keeps '
                     "them (orsgen eval --out EVAL_FOLDER)", figures=found)
    return Check("learnable", PASSED, f"{said}: every task sometimes passed", figures=found)


def _module(facts: Facts, folder: Path) -> Path:
    """The generated module to measure: the TARGET's own, else one rendered from the live tools."""
    live = facts.live
    if live.module is not None:
        return Path(str(live.module.__file__))
    try:
        from orsgen import pipeline
        from orsgen.model import naming
    except ImportError:
        from orsgen import extras

        raise OrsgenError(f"--endpoint on a server needs the generator to render its module: "
                          f"{extras.pip('generator', 'eval')}, or give a generated module as TARGET") from None
    text, _ = pipeline.build(live.origin, live.snapshot)
    path = folder / f"orsgen_doctor_{naming.module_name(live.name)}.py"
    path.write_text(text, encoding="utf-8")
    return path
