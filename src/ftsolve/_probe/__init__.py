"""`ftsolve probe`: a short measured run of a plan's configuration, and the task that runs it.

`build_probe` writes the probe's script (probe_script.py, self-contained: torch, transformers,
peft and bitsandbytes as installed where it runs) with the planned configuration in it, and a
SkyPilot task for the plan's offer. The script's JSON record is what `ftsolve calibrate` reads.
"""

from ftsolve._probe._build import RECORD_NAME, SCRIPT_NAME, TASK_NAME, Probe, build_probe, hf_config

__all__ = ["RECORD_NAME", "SCRIPT_NAME", "TASK_NAME", "Probe", "build_probe", "hf_config"]
