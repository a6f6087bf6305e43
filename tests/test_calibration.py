"""`ftsolve calibrate` and plans that use calibrations (issue 21): each log format is read, each
record is fitted so that its own configuration is predicted at what it measured, corrections are
stored dated with their records, and plans use them on the measured GPU type, carry them to
other types through the model, and say so."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import ftsolve
from ftsolve import CatalogError, JobSpec, MemoryOptions
from ftsolve._calibration import (
    MEASURED_BAND,
    TRANSFER_BAND,
    Given,
    RunConfig,
    calibration_path,
    correct_time_estimate,
    fit_measurement,
    load_calibration,
    read_measurements,
)
from ftsolve._calibration._fit import record_id
from ftsolve.cli import cli
from ftsolve.solver import _coefficients as k

FIXTURES = Path(__file__).parent / "fixtures" / "calibration"
PROBE = FIXTURES / "probe-h100-lora.json"
CATALOG = ftsolve.load_catalog(user=False)
DYNAMIC = ("activations", "recompute", "logits", "fragmentation")


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test calibrates into its own FTSOLVE_HOME (plans elsewhere must not see it)."""
    folder = tmp_path / "home"
    monkeypatch.setenv("FTSOLVE_HOME", str(folder))
    return folder


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.output


# --- reading -------------------------------------------------------------------------------------

TORCHTUNE = Given(
    gpu="h100-sxm",
    config={"model": "qwen2.5-7b", "method": "qlora", "seq_len": 4096, "micro_batch": 2, "grad_accum": 8}
    | {"stack": "torchtune"},
)
AXOLOTL = Given(
    gpu="a100-sxm-80gb",
    config={
        "model": "llama-3.1-8b",
        "method": "lora",
        "seq_len": 2048,
        "micro_batch": 2,
        "grad_accum": 8,
        "n_gpus": 2,
        "sharding": "ddp",
        "stack": "axolotl",
    },
)
TRAINER = Given(gpu="l40s", config={"model": "qwen2.5-1.5b", "seq_len": 1024, "grad_accum": 2})


@pytest.mark.parametrize(
    ("name", "given", "expected"),
    [
        ("probe-h100-lora.json", Given(), ("probe", "h100-sxm", "hf", "lora", 8240.5, 33.87, 36.12)),
        # The first logged step (warm-up) is dropped; a value printed as a tensor is read.
        ("torchtune-qlora.log", TORCHTUNE, ("torchtune", "h100-sxm", "torchtune", "qlora", 7105.725, 18.10, 19.42)),
        # Per-GPU tokens/s times the run's two GPUs; axolotl logs its numbers as strings.
        ("axolotl-ddp.log", AXOLOTL, ("axolotl", "a100-sxm-80gb", "axolotl", "lora", 2 * 3302.7, 24.12, 27.91)),
        # train_samples_per_second x seq_len; micro-batch from train_batch_size, rank from adapter_config.json.
        ("hf-run/trainer_state.json", TRAINER, ("trainer-state", "l40s", "hf", "lora", 16.2 * 1024, None, None)),
        ("runs.json", Given(), ("table", "l40s", "axolotl", "qlora", 2150.0, 14.8, None)),
    ],
)
def test_each_format_is_read(name: str, given: Given, expected: tuple[Any, ...]) -> None:
    (m,) = read_measurements(FIXTURES / name, given)
    kind, gpu, stack, method, tokens, allocated, reserved = expected
    assert (m.kind, m.gpu, m.stack, m.config.method) == (kind, gpu, stack, method)
    assert m.tokens_per_s == pytest.approx(tokens, rel=1e-4)
    assert m.peak_allocated_gib == allocated and m.peak_reserved_gib == reserved
    if name.startswith("hf-run"):
        assert m.config.micro_batch == 8 and m.config.lora_rank == 32


def test_a_csv_table_with_device_names_and_empty_cells() -> None:
    first, second = read_measurements(FIXTURES / "runs.csv")
    assert first.gpu == second.gpu == "a100-sxm-80gb"  # 'NVIDIA A100-SXM4-80GB' resolved
    assert first.source == "own run 17 (wandb)" and str(first.date) == "2026-10-02"
    assert first.config.gradient_checkpointing is True and first.config.recipe == {"optimizer": "adamw"}
    assert second.peak_reserved_gib is None and second.tokens_per_s == 3302.5


@pytest.mark.parametrize(
    ("name", "given", "needle"),
    [
        ("torchtune-qlora.log", Given(config=TORCHTUNE.config), "pass --gpu"),
        ("torchtune-qlora.log", Given(gpu="h100-sxm", config={"method": "qlora", "seq_len": 4096}), "--model"),
        ("axolotl-ddp.log", Given(gpu="not-a-card", config=AXOLOTL.config), "cannot tell which GPU"),
        ("README.md", Given(gpu="h100-sxm"), "not a measurement this reads"),
    ],
)
def test_what_a_log_lacks_is_asked_for_in_one_line(name: str, given: Given, needle: str) -> None:
    with pytest.raises(CatalogError, match=needle) as info:
        read_measurements(FIXTURES / name, given)
    assert "\n" not in str(info.value)


# --- fitting -------------------------------------------------------------------------------------


def test_a_record_is_fitted_so_that_its_configuration_is_predicted_at_what_it_measured() -> None:
    (m,) = read_measurements(PROBE)
    fitted = fit_measurement(m, CATALOG)
    c = m.config
    common: dict[str, Any] = {
        "method": c.method,
        "seq_len": c.seq_len,
        "micro_batch": c.micro_batch,
        "grad_accum": c.grad_accum,
        "gradient_checkpointing": c.gradient_checkpointing,
        "options": c.options(),
        "catalog": CATALOG,
    }
    est = ftsolve.estimate_time(c.model, m.gpu, **common)
    assert fitted.throughput_factor == pytest.approx(8240.5 / est.tokens_per_s)
    # Throughput: the model's tokens/s times the factor.
    from ftsolve._calibration import Calibration, correction_of

    cal = Calibration(corrections=(correction_of([fitted]),))
    corrected = correct_time_estimate(est, "hf", cal)
    assert corrected.tokens_per_s == pytest.approx(8240.5)
    # Its band is the measurement's, not the model's.
    assert est.error_band == pytest.approx(k.time_band("lora", m.gpu), abs=1e-3)
    assert corrected.error_band == MEASURED_BAND.value
    # Memory: the reserved peak with the dynamic part scaled meets the measured 36.12 GiB.
    mem = ftsolve.estimate_memory(c.model, **common)
    dynamic = sum(mem.components_gib.get(n, 0.0) for n in DYNAMIC) / (1.0 + k.DYNAMIC_MARGIN.value)
    assert fitted.memory_scale is not None and fitted.memory_scale > 1
    assert mem.reserved_gib + (fitted.memory_scale - 1.0) * dynamic == pytest.approx(36.12, abs=0.01)


def test_a_static_part_above_the_measurement_holds_the_scale_and_says_so(tmp_path: Path) -> None:
    record = json.loads(PROBE.read_text())
    record["measured"] |= {"peak_reserved_gib": 12.0, "peak_allocated_gib": 11.0}
    path = tmp_path / "low.json"
    path.write_text(json.dumps(record))
    fitted = fit_measurement(read_measurements(path)[0], CATALOG)
    assert fitted.memory_scale == 0.25 and "static memory" in fitted.notes[0]


def test_a_peak_the_optimizer_step_makes_leaves_the_activation_scale_alone(tmp_path: Path) -> None:
    # A full fine-tune whose foreach AdamW step needs more than its activations: the measured peak
    # says nothing about the activations, so no correction is read from it.
    record = json.loads(PROBE.read_text())
    record["config"] |= {"model": "llama-3.2-1b", "method": "full", "seq_len": 512, "micro_batch": 1, "grad_accum": 1}
    record["config"]["recipe"] |= {"optimizer": "adamw-bf16", "optimizer_step": "foreach"}
    m = read_measurements(_write(tmp_path / "step.json", record))[0]
    opts = m.config.options()
    est = ftsolve.estimate_memory("llama-3.2-1b", method="full", seq_len=512, options=opts)
    assert est.optimizer_step_gib > 0
    record["measured"] |= {"peak_reserved_gib": None, "peak_allocated_gib": est.allocated_gib}
    fitted = fit_measurement(read_measurements(_write(tmp_path / "step.json", record))[0], CATALOG)
    assert fitted.memory_scale == 1.0 and "optimizer step" in fitted.notes[0]
    # The same run with a fused step is read as activations, and the scale meets the measurement.
    record["config"]["recipe"]["optimizer_step"] = "fused"
    fitted = fit_measurement(read_measurements(_write(tmp_path / "fused.json", record))[0], CATALOG)
    assert fitted.memory_scale is not None and fitted.memory_scale > 1.0 and not fitted.notes


def _write(path: Path, record: dict[str, Any]) -> Path:
    path.write_text(json.dumps(record))
    return path


# --- the command, the store, and plans -----------------------------------------------------------

BASE = ["--model", "llama-3.1-8b", "--tokens", "50M", "--seq-len", "2048", "--methods", "lora", "--max-gpus", "1"]


def test_calibrate_shows_predicted_against_measured_and_stores_the_correction(home: Path) -> None:
    code, out = run("calibrate", str(PROBE))
    assert code == 0, out
    assert "measured        8,240" in out and "predicted" in out
    # The correction is what was measured over what the model predicts for that configuration.
    predicted = float(re.search(r"tokens/s .*predicted\s+([\d,]+)", out).group(1).replace(",", ""))  # type: ignore[union-attr]
    assert f"throughput x{8240 / predicted:.2f}" in out
    peak = re.search(r"peak GiB\s+measured\s+([\d.]+)\s+predicted\s+([\d.]+).*activation memory x([\d.]+)", out)
    assert peak, out
    measured_gib, predicted_gib, scale = map(float, peak.groups())
    assert measured_gib > predicted_gib and scale > 1.0  # more than the model: its activations scale up
    cal = load_calibration()
    (c,) = cal.corrections
    assert f"{c.records[0].memory_scale:.2f}" == f"{scale:.2f}"  # the correction stored is the one shown
    assert c.key == ("h100-sxm", "hf", "lora") and str(c.date) == "2026-12-01"
    assert c.throughput_band == MEASURED_BAND.value and c.records[0].measurement.source == str(PROBE)
    assert calibration_path() == home / "calibration.json"
    # The same record again counts once; --list shows it with its source.
    assert run("calibrate", str(PROBE))[0] == 0
    assert len(load_calibration().corrections[0].records) == 1
    code, listed = run("calibrate", "--list")
    assert code == 0 and "h100-sxm hf/lora" in listed and "probe-h100-lora.json" in listed


def _speed_record(folder: Path, gpu: str, plan: ftsolve.Plan, tokens_per_s: float) -> Path:
    """A measurements file of one run of `plan`'s configuration of Llama-3.1-8B LoRA at 2,048 tokens."""
    row = {
        "gpu": gpu,
        "date": "2026-12-01",
        "model": "llama-3.1-8b",
        "method": "lora",
        "seq_len": 2048,
        "micro_batch": plan.micro_batch,
        "grad_accum": plan.grad_accum,
        "gradient_checkpointing": plan.gradient_checkpointing,
        "tokens_per_s": tokens_per_s,
    }
    table = folder / "mine.json"
    table.write_text(json.dumps([row]))
    return table


def test_plans_use_the_measurement_on_its_gpu_and_carry_it_to_others(home: Path, tmp_path: Path) -> None:
    job = JobSpec(model="llama-3.1-8b", train_tokens=50_000_000, seq_len=2048, gpus=("h100-sxm",), methods=("lora",))
    job = job.model_copy(update={"max_gpus": 1})
    before = ftsolve.plan(job, CATALOG, top=1).plans[0]
    # A record of exactly the planned configuration, measured at 80% of the model's tokens/s.
    measured = round(0.8 * before.time.tokens_per_s, 1)
    code, out = run("calibrate", str(_speed_record(tmp_path, "h100-sxm", before, measured)))
    assert code == 0, out
    after = ftsolve.plan(job, CATALOG, top=1).plans[0]
    assert after.micro_batch == before.micro_batch and after.grad_accum == before.grad_accum
    assert after.time.tokens_per_s == pytest.approx(measured, abs=0.2)
    said = "tokens/s from your measurements of 2026-12-01 on h100-sxm"
    assert any(a.startswith(said) and "±5%" in a for a in after.assumptions)
    # The plan's tokens/s band is the measurement's, no longer the model's validated band.
    assert before.time.tokens_per_s_band == pytest.approx(k.time_band("lora", "h100-sxm"), abs=1e-3)
    assert after.time.tokens_per_s_band == MEASURED_BAND.value
    # Another GPU type moves by the same factor, through the model, with a wider band.
    other = job.model_copy(update={"gpus": ("a100-sxm-80gb",)})
    plain = ftsolve.plan(other.model_copy(update={"calibration": False}), CATALOG, top=1).plans[0]
    carried = ftsolve.plan(other, CATALOG, top=1).plans[0]
    factor = measured / before.time.tokens_per_s
    assert carried.time.tokens_per_s == pytest.approx(plain.time.tokens_per_s * factor, rel=1e-3)
    band = f"±{MEASURED_BAND.value + TRANSFER_BAND.value:.0%}"
    assert any("carried to a100-sxm-80gb through the model" in a and band in a for a in carried.assumptions)
    assert carried.time.tokens_per_s_band == pytest.approx(MEASURED_BAND.value + TRANSFER_BAND.value)
    assert plain.time.tokens_per_s_band == pytest.approx(k.time_band("lora", "a100-sxm-80gb"), abs=1e-3)
    assert not any("your" in a for a in plain.assumptions)
    # The command line: --no-calibration plans on the model alone.
    code, text = run("plan", *BASE, "--gpus", "h100-sxm", "--json", "--no-calibration")
    assert code == 0, text
    assert json.loads(text)["plans"][0]["time"]["tokens_per_s"] == pytest.approx(before.time.tokens_per_s, rel=1e-6)


def test_a_measured_peak_shrinks_the_headroom_on_its_gpu_only(home: Path) -> None:
    assert run("calibrate", str(PROBE))[0] == 0
    job = JobSpec(model="llama-3.1-8b", train_tokens=50_000_000, seq_len=2048, methods=("lora",), max_gpus=1)
    on_h100 = ftsolve.plan(job.model_copy(update={"gpus": ("h100-sxm",)}), CATALOG, top=1).plans[0]
    on_a100 = ftsolve.plan(job.model_copy(update={"gpus": ("a100-sxm-80gb",)}), CATALOG, top=1).plans[0]
    assert on_h100.memory.band == MEASURED_BAND.value
    assert on_a100.memory.band == pytest.approx(k.memory_band("lora", "hf"), abs=1e-3)
    assert any("headroom at most the measured ±5%" in a for a in on_h100.assumptions)
    scale = load_calibration().corrections[0].memory_scale
    carried = f"activation memory x{scale:.2f}"
    assert any(carried in a and "carried to a100-sxm-80gb" in a for a in on_a100.assumptions)
    # Every plan still passes the solver-independent check, which rebuilds the same physics.
    assert ftsolve.check_plan(job.model_copy(update={"gpus": ("h100-sxm",)}), CATALOG, on_h100) == []


def test_several_records_combine_and_forget_and_replace_work(home: Path) -> None:
    code, out = run("calibrate", str(FIXTURES / "runs.csv"))
    assert code == 0, out
    (c,) = load_calibration().corrections
    factors = [r.throughput_factor for r in c.records if r.throughput_factor is not None]
    assert len(factors) == 2
    assert c.throughput_factor == pytest.approx(math.sqrt(factors[0] * factors[1]), rel=1e-5)
    assert c.throughput_band is not None and c.throughput_band >= MEASURED_BAND.value
    assert c.memory_scale is not None and len(c.records) == 2  # one row measured memory
    assert run("calibrate", str(PROBE))[0] == 0
    assert len(load_calibration().corrections) == 2
    code, out = run("calibrate", "--forget", "a100-sxm-80gb")
    assert code == 0 and "removed 1" in out
    assert [x.gpu for x in load_calibration().corrections] == ["h100-sxm"]
    code, out = run("calibrate", "--forget", "b200/hf")
    assert code == 2 and out.startswith("Error: no calibration matches")
    # --replace drops the earlier records of the corrections it updates.
    row = json.loads((FIXTURES / "probe-h100-lora.json").read_text())
    row["measured"]["tokens_per_s"] = 9000.0
    newer = home.parent / "newer.json"
    newer.write_text(json.dumps(row))
    assert run("calibrate", str(newer), "--replace")[0] == 0
    (c,) = load_calibration().corrections
    assert len(c.records) == 1 and c.records[0].measurement.tokens_per_s == 9000.0
    assert run("calibrate", "--forget", "all")[0] == 0 and load_calibration().corrections == ()


def test_logs_take_their_configuration_from_flags(home: Path) -> None:
    args = ["--gpu", "h100-sxm", "--model", "qwen2.5-7b", "--method", "qlora", "--seq-len", "4096"]
    args += ["--micro-batch", "2", "--grad-accum", "8", "--stack", "torchtune", "--date", "2026-11-28"]
    code, out = run("calibrate", str(FIXTURES / "torchtune-qlora.log"), *args, "--json")
    assert code == 0, out
    data = json.loads(out)
    (record,) = data["records"]
    assert record["measurement"]["config"]["stack"] == "torchtune" and record["measurement"]["date"] == "2026-11-28"
    assert data["corrections"][0]["method"] == "qlora"
    code, out = run("calibrate", str(FIXTURES / "torchtune-qlora.log"), "--method", "qlora")
    assert code == 2 and out.count("\n") == 1 and "pass --model" in out


def test_a_dry_run_stores_nothing(home: Path) -> None:
    code, out = run("calibrate", str(PROBE), "--dry-run")
    assert code == 0 and "dry run" in out
    assert not (home / "calibration.json").exists()


def test_a_damaged_calibration_file_is_one_line_and_no_calibration_still_plans(home: Path) -> None:
    home.mkdir(parents=True)
    (home / "calibration.json").write_text('{"schema_version": 1, "corrections": [{"gpu": 3}]}')
    code, out = run("plan", *BASE, "--top", "1")
    assert code == 2 and out.count("\n") == 1 and "calibration.json" in out and "--forget all" in out
    code, out = run("plan", *BASE, "--top", "1", "--no-calibration")
    assert code == 0, out


def test_a_run_config_refuses_what_jobspec_refuses() -> None:
    config = RunConfig(model="llama-3.1-8b", method="lora", seq_len=2048, recipe={"optimizer": "adam-9bit"})
    with pytest.raises(ftsolve.InvalidJobSpec):
        config.options()
    assert RunConfig(model="llama-3.1-8b", method="lora", seq_len=2048, stack="torchtune").options() == (
        MemoryOptions.for_stack("torchtune")
    )


def test_estimate_time_returns_the_measured_tokens_per_second_after_calibrating(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from click.testing import CliRunner

    from ftsolve.cli import cli

    monkeypatch.setenv("FTSOLVE_HOME", str(tmp_path))
    args = [
        "estimate", "time", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--method", "lora", "--seq-len", "2048",
        "--micro-batch", "4", "--grad-accum", "4", "--json",
    ]  # fmt: skip
    before = json.loads(CliRunner().invoke(cli, args).output)["tokens_per_s"]
    assert CliRunner().invoke(cli, ["calibrate", str(PROBE)]).exit_code == 0
    after = json.loads(CliRunner().invoke(cli, args).output)["tokens_per_s"]
    assert after == pytest.approx(8240.5, rel=1e-3) and before != pytest.approx(after, rel=1e-3)
    other = [a if a != "h100-sxm" else "a100-sxm-80gb" for a in args]
    monkeypatch.setenv("FTSOLVE_HOME", str(tmp_path / "none"))
    a100_model = json.loads(CliRunner().invoke(cli, other).output)["tokens_per_s"]
    monkeypatch.setenv("FTSOLVE_HOME", str(tmp_path))
    a100_calibrated = json.loads(CliRunner().invoke(cli, other).output)["tokens_per_s"]
    assert a100_calibrated / a100_model == pytest.approx(after / before, rel=1e-3)  # the same factor


def test_a_gpu_with_the_calibrated_gpus_figures_states_the_measured_band(home: Path, tmp_path: Path) -> None:
    """The planner applies a calibration to every GPU type with the calibrated one's figures (peak,
    bandwidth, usable memory; gpus.csv lists the A100 40GB PCIe and SXM alike); the plan's stated
    band and assumption lines follow the same match, not the GPU's name."""
    job = JobSpec(
        model="llama-3.1-8b", train_tokens=50_000_000, seq_len=2048, gpus=("a100-sxm-40gb",), methods=("lora",)
    ).model_copy(update={"max_gpus": 1})
    before = ftsolve.plan(job, CATALOG, top=1).plans[0]
    record = _speed_record(tmp_path, "a100-sxm-40gb", before, round(0.8 * before.time.tokens_per_s, 1))
    assert run("calibrate", str(record))[0] == 0
    twin = ftsolve.plan(job.model_copy(update={"gpus": ("a100-pcie-40gb",)}), CATALOG, top=1).plans[0]
    plain = ftsolve.plan(
        job.model_copy(update={"gpus": ("a100-pcie-40gb",), "calibration": False}), CATALOG, top=1
    ).plans[0]
    assert twin.time.tokens_per_s == pytest.approx(plain.time.tokens_per_s * 0.8, rel=2e-3)
    assert twin.time.tokens_per_s_band == MEASURED_BAND.value
    assert any(a.startswith("tokens/s from your measurements of 2026-12-01 on a100-sxm-40gb") for a in twin.assumptions)
    # `estimate time` on the twin card applies the same correction and states the same band.
    code, text = run("estimate", "time", "--model", "llama-3.1-8b", "--gpu", "a100-pcie-40gb", "--json")
    assert code == 0, text
    assert json.loads(text)["error_band"] == MEASURED_BAND.value


def test_a_calibration_an_older_model_fitted_is_fitted_again_against_this_one(home: Path) -> None:
    # An older ftsolve predicted the probe's configuration 25% slower and 2 GiB lower, and stored the
    # factors that met the measurement then. Applied as stored, they would count the model's change twice.
    assert run("calibrate", str(PROBE))[0] == 0
    path = calibration_path()
    now = json.loads(path.read_text())
    record = now["corrections"][0]["records"][0]
    old = json.loads(path.read_text())
    aged = old["corrections"][0]["records"][0]
    aged["predicted_tokens_per_s"] = record["predicted_tokens_per_s"] * 0.75
    aged["throughput_factor"] = record["throughput_factor"] / 0.75
    aged["predicted_memory_gib"] = record["predicted_memory_gib"] - 2.0
    aged["memory_scale"] = record["memory_scale"] * 1.3
    old["corrections"][0] |= {"throughput_factor": aged["throughput_factor"], "memory_scale": aged["memory_scale"]}
    path.write_text(json.dumps(old))
    (c,) = load_calibration().corrections
    assert c.throughput_factor == pytest.approx(record["throughput_factor"], rel=1e-6)
    assert c.memory_scale == pytest.approx(record["memory_scale"], rel=1e-6)
    assert c.records[0].predicted_tokens_per_s == pytest.approx(record["predicted_tokens_per_s"], rel=1e-9)
    # Only a factor differs (where the optimizer step makes the peak, the predicted peak does not
    # move with the activation memory the scale multiplies): fitted again all the same.
    scaled = json.loads(json.dumps(now))
    scaled["corrections"][0]["records"][0]["memory_scale"] = record["memory_scale"] * 1.3
    scaled["corrections"][0]["memory_scale"] = record["memory_scale"] * 1.3
    path.write_text(json.dumps(scaled))
    assert load_calibration().corrections[0].memory_scale == pytest.approx(record["memory_scale"], rel=1e-6)
    # A file this model fitted reads back as stored, field for field.
    path.write_text(json.dumps(now))
    assert load_calibration().model_dump(mode="json") == now | {"schema_version": now.get("schema_version", 1)}
    # A record the model can no longer predict (a preset this ftsolve lacks) keeps its stored factors.
    gone = json.loads(json.dumps(old))
    gone["corrections"][0]["records"][0]["measurement"]["config"]["model"] = "no-such-model"
    path.write_text(json.dumps(gone))
    (kept,) = load_calibration().corrections
    assert kept.throughput_factor == pytest.approx(aged["throughput_factor"])


def test_a_run_on_a_faster_host_is_fitted_with_its_host_and_ids_of_older_records_hold() -> None:
    import hashlib

    (m,) = read_measurements(PROBE)
    fast = m.model_copy(update={"config": m.config.model_copy(update={"host_speed": 2.25})})
    plain, quick = fit_measurement(m, CATALOG), fit_measurement(fast, CATALOG)
    # The model already credits the host: a smaller share of the measurement is left to the factor.
    assert quick.predicted_tokens_per_s > plain.predicted_tokens_per_s  # type: ignore[operator]
    assert quick.throughput_factor == pytest.approx(8240.5 / quick.predicted_tokens_per_s)  # type: ignore[operator]
    # A run on the reference host keeps the id an ftsolve without RunConfig.host_speed gave it.
    older = json.loads(m.model_dump_json())
    del older["config"]["host_speed"]
    assert record_id(m) == hashlib.sha256(json.dumps(older, separators=(",", ":")).encode()).hexdigest()[:16]
    assert record_id(fast) != record_id(m)
    # An architecture given in full digests as before ModelArch had logit_softcap, unless it is set.
    arch = CATALOG.model("llama-3.1-8b")
    with_arch = m.model_copy(update={"config": m.config.model_copy(update={"model": arch})})
    older = json.loads(with_arch.model_dump_json())
    del older["config"]["host_speed"], older["config"]["model"]["logit_softcap"]
    assert record_id(with_arch) == hashlib.sha256(json.dumps(older, separators=(",", ":")).encode()).hexdigest()[:16]
    capped = arch.model_copy(update={"logit_softcap": True})
    assert record_id(with_arch.model_copy(update={"config": m.config.model_copy(update={"model": capped})})) != (
        record_id(with_arch)
    )
