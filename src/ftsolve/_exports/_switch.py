"""The switch to on-demand capacity of fallback and adaptive plans, carried by the SkyPilot export.

SkyPilot relaunches a preempted managed job on the same kind of capacity; it has no rule that
moves a job to on-demand capacity part-way. So the export carries the plan's rule in two small
files beside the task:

- `switch.py` wraps the training command. On interruptible capacity it stops the run with exit
  code 75 when the plan's rule fires: for an adaptive plan, at a (re)start after a preemption once
  more hours are lost to preemptions than the plan's threshold (wall hours since the first launch,
  less the start-up and the hours the checkpointed steps stand for); for a static fallback, once a
  checkpoint at or past the switch step exists. On on-demand capacity it runs the command as is.
- `launch.sh` launches the task as a managed job on interruptible capacity, waits for it, and
  when switch.py stopped it (its log says so) relaunches it on on-demand capacity
  (`--no-use-spot`), where it resumes from the last checkpoint on the bucket.
"""

from __future__ import annotations

import math
import shlex
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ftsolve._exports._recipe import Schedule, TrainingRecipe
    from ftsolve.solver._plans import Plan

SWITCH_FILE = "switch.py"
LAUNCH_FILE = "launch.sh"
SWITCH_EXIT = 75  # EX_TEMPFAIL: the run stopped on purpose and goes on elsewhere
# The task's environment variable that says where the run is: the on-demand relaunch sets it.
CAPACITY_ENV = "FTSOLVE_CAPACITY"


def carries_switch(p: Plan) -> bool:
    """Plans whose run may move to on-demand capacity part-way."""
    adaptive = p.market == "adaptive" and p.time.switch_after_lost_hours is not None
    return adaptive or (p.market == "fallback" and p.time.interruptible_fraction < 1.0)


def switch_step(p: Plan, s: Schedule) -> int:
    """The static fallback's last step on interruptible capacity (its share of the steps)."""
    return max(math.floor(p.time.interruptible_fraction * s.max_steps), 1)


def rule_words(p: Plan, s: Schedule) -> str:
    t = p.time
    if p.market == "adaptive":
        return (
            f"adaptive market: interruptible; at a restart after a preemption, once more than "
            f"{t.switch_after_lost_hours:.2f} h are lost to preemptions, resume on on-demand capacity "
            f"({t.switch_probability or 0:.0%} of runs do)"
        )
    return (
        f"fallback market: interruptible to step {switch_step(p, s)} of {s.max_steps} "
        f"(about {t.interruptible_fraction:.0%} of the steps), then resume on on-demand capacity "
        "from the latest checkpoint"
    )


def switch_script(r: TrainingRecipe) -> str:
    """`switch.py`: the rule as constants and a wrapper around the training command (stdlib only)."""
    t, s = r.plan.time, r.schedule
    work_h = t.training_hours + t.evaluation_hours + t.checkpoint_hours
    constants = {
        "RULE": repr(r.plan.market),
        "LOST_HOURS": repr(float(t.switch_after_lost_hours or 0.0)),
        "SWITCH_STEP": repr(switch_step(r.plan, s) if r.plan.market == "fallback" else 0),
        "HOURS_PER_STEP": repr(round(work_h / max(s.max_steps, 1), 8)),
        "STARTUP_HOURS": repr(round(t.startup_hours, 6)),
        "SWITCH_EXIT": repr(SWITCH_EXIT),
    }
    lines = [f"{name} = {value}" for name, value in constants.items()]
    return _SCRIPT.replace("__RULE_WORDS__", rule_words(r.plan, s)).replace("__CONSTANTS__", "\n".join(lines))


def launch_script(r: TrainingRecipe) -> str:
    """`launch.sh`: the managed job on interruptible capacity, then on on-demand if its rule stopped it."""
    name = shlex.quote(f"ftsolve-{r.plan.method}-{r.plan.gpu}")
    return (
        _LAUNCH.replace("__RULE_WORDS__", rule_words(r.plan, r.schedule))
        .replace("__NAME__", name)
        .replace("__CAPACITY__", CAPACITY_ENV)
        .replace("__EXIT__", str(SWITCH_EXIT))
    )


_SCRIPT = '''#!/usr/bin/env python3
"""ftsolve switch rule: __RULE_WORDS__.

Usage (the task's run command): python3 switch.py -- <training command>. On interruptible capacity
it exits with SWITCH_EXIT when the rule fires, and launch.sh resumes the run on on-demand capacity;
with FTSOLVE_CAPACITY=on-demand it runs the command as is. The first launch's time is kept beside
the checkpoints (ftsolve-switch.json), so the hours lost count from there.
"""

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

__CONSTANTS__
POLL_S = float(os.environ.get("FTSOLVE_POLL_S", "30"))


def latest_step(output_dir: Path) -> int:
    """The newest checkpoint's step (checkpoint-N of transformers and axolotl, step_N of torchtune)."""
    steps = [0]
    if output_dir.is_dir():
        for entry in output_dir.iterdir():
            m = re.fullmatch(r"(?:checkpoint-|step_)([0-9]+)", entry.name)
            if m and entry.is_dir():
                steps.append(int(m.group(1)))
    return max(steps)


def launched_at(state: Path, now: float) -> float:
    """The first launch's time; the first node to start records it."""
    try:
        return float(json.loads(state.read_text())["launched_at"])
    except (OSError, ValueError, KeyError, TypeError):
        if os.environ.get("SKYPILOT_NODE_RANK", "0") == "0":
            state.parent.mkdir(parents=True, exist_ok=True)
            state.write_text(json.dumps({"launched_at": now}))
        return now


def lost_hours(start: float, now: float, step: int) -> float:
    """Wall hours since the first launch that the checkpointed progress and the start-up do not explain."""
    return (now - start) / 3600.0 - STARTUP_HOURS - step * HOURS_PER_STEP


def fired(output_dir: Path, start: float, now: float) -> str | None:
    step = latest_step(output_dir)
    if RULE == "adaptive":
        lost = lost_hours(start, now, step)
        if lost > LOST_HOURS:
            return f"{lost:.2f} h lost to preemptions, more than {LOST_HOURS:.2f} h"
    elif step >= SWITCH_STEP:
        return f"checkpoint at step {step}, the switch step is {SWITCH_STEP}"
    return None


def main(argv: list[str]) -> int:
    if "--" not in argv or argv.index("--") == len(argv) - 1:
        print("usage: python3 switch.py -- <training command>", file=sys.stderr)
        return 2
    command = argv[argv.index("--") + 1 :]
    if os.environ.get("FTSOLVE_CAPACITY") == "on-demand":
        os.execvp(command[0], command)
    output_dir = Path(os.environ["OUTPUT_DIR"])
    start = launched_at(output_dir.parent / "ftsolve-switch.json", time.time())
    why = fired(output_dir, start, time.time())
    if why is not None:
        print(f"ftsolve switch rule fired: {why}; resume on on-demand capacity (launch.sh does)")
        return SWITCH_EXIT
    proc = subprocess.Popen(command)
    while True:
        try:
            return proc.wait(timeout=POLL_S)
        except subprocess.TimeoutExpired:
            pass
        # The static split also stops a running job; the adaptive rule fires only at restarts.
        if RULE == "fallback" and (why := fired(output_dir, start, time.time())):
            proc.send_signal(signal.SIGTERM)
            proc.wait()
            print(f"ftsolve switch rule fired: {why}; resume on on-demand capacity (launch.sh does)")
            return SWITCH_EXIT


if __name__ == "__main__":
    sys.exit(main(sys.argv))
'''

_LAUNCH = """#!/usr/bin/env bash
# ftsolve switch rule: __RULE_WORDS__.
# Usage, from this folder: bash launch.sh <your-bucket> [more `sky jobs launch` options]
# Launches task.yaml as a managed job on interruptible capacity and waits for it. When switch.py
# stopped it (exit __EXIT__, the rule fired, as its log says), it relaunches the task on on-demand
# capacity, which resumes from the last checkpoint on the bucket; another failure stops here.
set -euo pipefail
BUCKET="${1:?usage: bash launch.sh <your-bucket> [more sky jobs launch options]}"
shift
NAME=__NAME__-$(date +%Y%m%d-%H%M%S)
sky jobs launch task.yaml -n "$NAME" -y -d --env CHECKPOINT_BUCKET="$BUCKET" "$@"
while true; do
  STATUS=$(sky jobs queue -o json | python3 -c '
import json, sys
jobs = [j for j in json.load(sys.stdin) if j.get("job_name") == sys.argv[1]]
print(jobs[0]["status"] if jobs else "PENDING")' "$NAME")
  case "$STATUS" in
    SUCCEEDED) echo "ftsolve: $NAME finished on interruptible capacity"; exit 0 ;;
    CANCELLED|CANCELLING) echo "ftsolve: $NAME was cancelled" >&2; exit 1 ;;
    FAILED*) break ;;
  esac
  sleep "${FTSOLVE_POLL_S:-60}"
done
# Only the rule's own stop moves the run; any other failure is the user's to look at.
if ! sky jobs logs -n "$NAME" --no-follow 2>/dev/null | grep -q "ftsolve switch rule fired"; then
  echo "ftsolve: $NAME failed ($STATUS) without the switch rule firing; see: sky jobs logs -n $NAME" >&2
  exit 1
fi
echo "ftsolve: $NAME stopped on interruptible capacity ($STATUS): resuming on on-demand capacity"
exec sky jobs launch task.yaml -n "$NAME-on-demand" -y --no-use-spot \\
  --env CHECKPOINT_BUCKET="$BUCKET" --env __CAPACITY__=on-demand "$@"
"""
