"""The switch to on-demand capacity carried by the SkyPilot export (issue 20): switch.py stops the
run on interruptible capacity when the plan's rule fires, launch.sh relaunches it on on-demand."""

from __future__ import annotations

import functools
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

import ftsolve
from ftsolve import JobSpec
from ftsolve._exports import export_files
from ftsolve.solver._plans import Plan

CATALOG = ftsolve.load_catalog(user=False)
# A deadline that plain interruptible capacity is not allowed to meet alone: the adaptive market.
ADAPTIVE_JOB = JobSpec(
    model="llama-3.1-8b", train_tokens=300_000_000, seq_len=2048, deadline_hours=14, markets=("adaptive", "on-demand")
)


@functools.cache
def _adaptive() -> Plan:
    plan = ftsolve.plan(ADAPTIVE_JOB, CATALOG, top=1).plans[0]
    assert plan.market == "adaptive" and plan.time.switch_after_lost_hours is not None
    return plan


def _fallback(share: float) -> Plan:
    # The planner picks a static split only where preemptions are frequent; the export reads the
    # plan's market and share, so a copy with a split stands for one.
    p = _adaptive()
    time_ = p.time.model_copy(update={"interruptible_fraction": share, "switch_after_lost_hours": None})
    return p.model_copy(update={"market": "fallback", "time": time_})


def _folder(tmp_path: Path, plan: Plan) -> Path:
    files = export_files("skypilot", plan, ADAPTIVE_JOB, CATALOG)
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    return tmp_path


def _constant(script: str, name: str) -> float:
    m = re.search(rf"^{name} = (.+)$", script, re.M)
    assert m is not None, name
    return float(m.group(1))


def _switch(folder: Path, out: Path, command: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if k != "FTSOLVE_CAPACITY"} | {"OUTPUT_DIR": str(out)} | env
    return subprocess.run(
        [sys.executable, str(folder / "switch.py"), "--", *command],
        env=environ,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_adaptive_export_wraps_training_in_its_switch_rule(tmp_path: Path) -> None:
    plan = _adaptive()
    folder = _folder(tmp_path, plan)
    task = yaml.safe_load((folder / "task.yaml").read_text())
    assert task["run"].splitlines()[-1].startswith("python3 switch.py -- accelerate launch")
    assert task["envs"]["FTSOLVE_CAPACITY"] == "interruptible" and task["resources"]["use_spot"] is True
    script = (folder / "switch.py").read_text()
    assert _constant(script, "LOST_HOURS") == pytest.approx(plan.time.switch_after_lost_hours)
    assert "bash launch.sh <your-bucket>" in (folder / "task.yaml").read_text()
    # An on-demand plan carries no rule.
    od = ftsolve.plan(ADAPTIVE_JOB.model_copy(update={"markets": ("on-demand",)}), CATALOG, top=1).plans[0]
    files = export_files("skypilot", od, ADAPTIVE_JOB, CATALOG)
    assert "switch.py" not in files and "switch.py" not in files["task.yaml"]


def test_switch_py_fires_when_more_hours_are_lost_than_the_plan_allows(tmp_path: Path) -> None:
    (tmp_path / "export").mkdir()
    folder = _folder(tmp_path / "export", _adaptive())
    script = (folder / "switch.py").read_text()
    lost, startup = _constant(script, "LOST_HOURS"), _constant(script, "STARTUP_HOURS")
    per_step = _constant(script, "HOURS_PER_STEP")
    out = tmp_path / "ckpt" / "run"
    touch = tmp_path / "ran"
    command = [sys.executable, "-c", f"open({str(touch)!r}, 'w').close()"]
    # The first launch records its time and trains.
    first = _switch(folder, out, command)
    assert first.returncode == 0 and touch.exists()
    assert json.loads((out.parent / "ftsolve-switch.json").read_text())["launched_at"] > 0
    # A restart after more wall hours than start-up, progress and the threshold explain: switch.
    touch.unlink()
    elapsed_h = startup + lost + 0.5
    (out.parent / "ftsolve-switch.json").write_text(json.dumps({"launched_at": time.time() - elapsed_h * 3600}))
    late = _switch(folder, out, command)
    assert late.returncode == 75 and not touch.exists()
    assert "ftsolve switch rule fired" in late.stdout and "lost to preemptions" in late.stdout
    # The same wall time with the checkpointed progress that explains it: go on training.
    (out / f"checkpoint-{int(1.0 / per_step) + 1}").mkdir(parents=True)
    ok = _switch(folder, out, command)
    assert ok.returncode == 0 and touch.exists()
    # On on-demand capacity the command runs as is, whatever was lost, and keeps its exit code.
    (out / f"checkpoint-{int(1.0 / per_step) + 1}").rmdir()
    od = _switch(folder, out, [sys.executable, "-c", "import sys; sys.exit(3)"], FTSOLVE_CAPACITY="on-demand")
    assert od.returncode == 3


def test_switch_py_stops_a_static_split_at_its_step(tmp_path: Path) -> None:
    folder = _folder(tmp_path, _fallback(0.5))
    script = (folder / "switch.py").read_text()
    step = int(_constant(script, "SWITCH_STEP"))
    assert step > 1
    out = tmp_path / "ckpt" / "run"
    # The trainer writes the switch step's checkpoint and would go on: the wrapper stops it.
    trainer = f"import os, time; os.makedirs({str(out / f'checkpoint-{step}')!r}); time.sleep(60)"
    started = time.monotonic()
    run = _switch(folder, out, [sys.executable, "-c", trainer], FTSOLVE_POLL_S="0.1")
    assert run.returncode == 75 and time.monotonic() - started < 30
    assert f"checkpoint at step {step}" in run.stdout
    # Relaunched on interruptible capacity after that (a preemption), it stops before training.
    again = _switch(folder, out, [sys.executable, "-c", "raise SystemExit(9)"])
    assert again.returncode == 75


def _fake_sky(tmp_path: Path, status: str, job_log: str = "") -> tuple[dict[str, str], Path]:
    log = tmp_path / "sky.log"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    sky = bin_dir / "sky"
    sky.write_text(
        "#!/usr/bin/env bash\n"
        f'echo "$@" >> {log}\n'
        'if [ "$1 $2" = "jobs queue" ]; then\n'
        f"  name=$(grep -o -- '-n [^ ]*' {log} | head -n1 | cut -d' ' -f2)\n"
        f'  echo "[{{\\"job_name\\": \\"$name\\", \\"status\\": \\"{status}\\"}}]"\n'
        "fi\n"
        f'if [ "$1 $2" = "jobs logs" ]; then echo {job_log!r}; fi\n'
    )
    sky.chmod(0o755)
    env = os.environ | {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "FTSOLVE_POLL_S": "0"}
    return env, log


@pytest.mark.parametrize(
    ("status", "job_log", "relaunched"),
    [
        ("SUCCEEDED", "", False),
        ("FAILED", "ftsolve switch rule fired: 2.10 h lost to preemptions, more than 1.50 h", True),
        ("FAILED", "CUDA out of memory", False),  # another failure is not the rule's: no relaunch
    ],
)
def test_launch_sh_relaunches_on_on_demand_only_when_the_rule_stopped_the_run(
    tmp_path: Path, status: str, job_log: str, relaunched: bool
) -> None:
    folder = _folder(tmp_path, _adaptive())
    env, log = _fake_sky(tmp_path, status, job_log)
    run = subprocess.run(
        ["bash", "launch.sh", "my-bucket"], cwd=folder, env=env, capture_output=True, text=True, timeout=60
    )
    assert run.returncode == (0 if status == "SUCCEEDED" or relaunched else 1), run.stderr
    launches = [line for line in log.read_text().splitlines() if line.startswith("jobs launch")]
    assert "CHECKPOINT_BUCKET=my-bucket" in launches[0] and "--no-use-spot" not in launches[0]
    if not relaunched:
        assert len(launches) == 1
    else:
        assert len(launches) == 2 and "--no-use-spot" in launches[1]
        assert "FTSOLVE_CAPACITY=on-demand" in launches[1] and "CHECKPOINT_BUCKET=my-bucket" in launches[1]
