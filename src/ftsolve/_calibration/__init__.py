"""Measure, then plan: corrections fitted from the user's own runs (`ftsolve calibrate`).

Inputs (`read_measurements`, the format told from the content):
- a probe record written by `ftsolve probe`'s script (JSON, "format": "ftsolve-probe");
- a Hugging Face Trainer `trainer_state.json` (its log_history's train_samples_per_second and,
  from axolotl, memory and tokens/s entries), with the run's configuration from the flags and
  the config.json / adapter_config.json beside it;
- a torchtune metric log ("Step 12 | loss:... tokens_per_second_per_gpu:... peak_memory_reserved:...")
  or an axolotl log ("{'loss': ..., 'memory/max_allocated (GiB)': ..., ...}");
- a JSON list (or {"runs": [...]}) or CSV of rows: RunConfig's fields (model, method, seq_len,
  micro_batch, grad_accum, n_gpus, sharding, gradient_checkpointing, lora_rank, stack, ...) and
  JobSpec's recipe fields, `gpu`, `tokens_per_s` (all GPUs), `peak_reserved_gib` and/or
  `peak_allocated_gib` (per GPU), optionally `date` and `source`.

Each measurement is fitted against the model's prediction for its configuration (`_fit`), and one
correction per (GPU type, stack, method) is stored with its records in
`$FTSOLVE_HOME/calibration.json` (`_store`). Plans read it unless the job says
`calibration: false` (`--no-calibration`); `_apply` says how a correction carries to other GPU
types and what a plan says when it used one.
"""

from ftsolve._calibration._apply import (
    Applied,
    PairCorrections,
    applied,
    calibration_assumptions,
    correct_time_estimate,
    pair_corrections,
    tokens_per_s_band,
)
from ftsolve._calibration._fit import MEASURED_BAND, TRANSFER_BAND, correction_of, fit_measurement, forget, merge
from ftsolve._calibration._records import Given, Measurement, RunConfig, read_measurements
from ftsolve._calibration._store import (
    Calibration,
    Correction,
    StoredRecord,
    calibration_path,
    load_calibration,
    update_calibration,
)

__all__ = [
    "MEASURED_BAND",
    "TRANSFER_BAND",
    "Applied",
    "Calibration",
    "Correction",
    "Given",
    "Measurement",
    "PairCorrections",
    "RunConfig",
    "StoredRecord",
    "applied",
    "calibration_assumptions",
    "calibration_path",
    "correct_time_estimate",
    "correction_of",
    "fit_measurement",
    "forget",
    "load_calibration",
    "merge",
    "pair_corrections",
    "read_measurements",
    "tokens_per_s_band",
    "update_calibration",
]
