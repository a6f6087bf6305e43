"""`ftsolve probe` (issue 21): the script carries the plan's configuration, runs on CPU with real
torch and a tiny randomly initialized model, and writes a record that `calibrate` reads; the
SkyPilot task passes SkyPilot's own schema."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

import ftsolve
from ftsolve import CatalogError, InvalidJobSpec, JobSpec, ModelArch
from ftsolve._calibration import Given, fit_measurement, read_measurements
from ftsolve._probe import SCRIPT_NAME, TASK_NAME, build_probe, hf_config
from ftsolve.cli import cli

CATALOG = ftsolve.load_catalog(user=False)
TINY = ModelArch(
    name="tiny-llama",
    family="llama",
    hidden_size=64,
    num_layers=2,
    num_heads=4,
    num_kv_heads=2,
    intermediate_size=128,
    vocab_size=256,
    source="test: a few layers, randomly initialized",
)


def planned(script: str) -> dict[str, Any]:
    """The PLAN dict the script carries, read as a literal (the script is not run)."""
    tree = ast.parse(script)
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "PLAN" for t in node.targets):
            value = ast.literal_eval(node.value)
            assert isinstance(value, dict)
            return value
    raise AssertionError("no PLAN in the script")


@pytest.mark.parametrize(
    "fields",
    [
        {"model": "llama-3.1-8b", "train_tokens": 50_000_000, "seq_len": 2048},
        {"model": "qwen2.5-7b", "train_tokens": 20_000_000, "seq_len": 4096, "methods": ("qlora",)}
        | {"stack": "torchtune"},
        {"model": "llama-3.1-70b", "train_tokens": 20_000_000, "seq_len": 2048, "methods": ("full",), "max_gpus": 16},
    ],
)
def test_the_script_is_python_and_carries_the_planned_configuration(fields: dict[str, Any]) -> None:
    job = JobSpec(**fields)
    p = ftsolve.plan(job, CATALOG, top=1).plans[0]
    probe = build_probe(p, job, CATALOG)
    script = probe.files[SCRIPT_NAME]
    compile(script, SCRIPT_NAME, "exec")
    plan = planned(script)
    config = plan["config"]
    assert config["method"] == p.method and config["seq_len"] == job.seq_len
    assert config["micro_batch"] <= p.micro_batch and config["gradient_checkpointing"] == p.gradient_checkpointing
    assert config["lora_rank"] == job.lora_rank and config["recipe"]["optimizer"] == job.memory_options().optimizer
    assert config["n_gpus"] == 1 and config["sharding"] == "none"
    assert plan["plan"]["stack"] == job.stack and plan["plan"]["gpu"] == p.gpu
    assert plan["hf_config"]["num_hidden_layers"] == probe.arch.num_layers == config["model"]["num_layers"]
    assert plan["predicted"]["tokens_per_s"] > 0 and plan["predicted"]["reserved_gib"] > 0
    # A model one GPU cannot hold whole is probed with fewer layers, and the script says so.
    if p.sharding == "zero3":
        assert probe.arch.num_layers < 80 and "decoder layers to fit one GPU" in script
    assert "# The probe runs transformers' loss" in script or job.stack == "hf"


def test_the_task_is_a_valid_skypilot_task_for_the_offer() -> None:
    schemas = pytest.importorskip("sky.utils.schemas")
    from sky.utils import common_utils

    job = JobSpec(model="llama-3.1-8b", train_tokens=50_000_000, seq_len=2048)
    checked = 0
    for p in ftsolve.plan(job, CATALOG, top=5).plans:
        files = build_probe(p, job, CATALOG).files
        if TASK_NAME not in files:
            continue
        task = yaml.safe_load(files[TASK_NAME])
        common_utils.validate_schema(task, schemas.get_task_schema(), "invalid task: ")  # type: ignore[no-untyped-call]
        assert task["resources"]["instance_type"] == p.offer.instance_type
        assert SCRIPT_NAME in task["run"] and task["workdir"] == "."
        checked += 1
    assert checked >= 1


def test_catalog_names_cannot_break_out_of_a_comment() -> None:
    job = JobSpec(model="llama-3.1-8b", train_tokens=50_000_000, seq_len=2048)
    p = ftsolve.plan(job, CATALOG, top=1).plans[0]
    evil = p.offer.model_copy(update={"instance_type": "x\nimport os; os.system('boom')\n#"})
    script = build_probe(p.model_copy(update={"offer": evil}), job, CATALOG).files[SCRIPT_NAME]
    assert "\nimport os; os.system" not in script
    compile(script, SCRIPT_NAME, "exec")


def test_latent_attention_models_are_refused_with_a_way_out() -> None:
    arch = TINY.model_copy(
        update={"kv_lora_rank": 16, "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "v_head_dim": 16}
    )
    with pytest.raises(InvalidJobSpec, match="--weights"):
        hf_config(arch, 128)


# --- running it: real torch on CPU, a tiny model through stand-ins for transformers and peft ----

FAKE_TRANSFORMERS = '''
"""A stand-in for transformers with the calls the probe makes: a tiny Llama-shaped causal LM."""
from types import SimpleNamespace

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

__version__ = "4.99.0"


class AutoConfig:
    @staticmethod
    def for_model(model_type, **kw):
        return SimpleNamespace(model_type=model_type, **kw)


class _Layer(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        h, heads, kv = c.hidden_size, c.num_attention_heads, c.num_key_value_heads
        self.d, self.heads, self.kv = h // heads, heads, kv
        self.input_layernorm = torch.nn.LayerNorm(h)
        self.post_attention_layernorm = torch.nn.LayerNorm(h)
        self.self_attn = torch.nn.Module()
        self.self_attn.q_proj = torch.nn.Linear(h, heads * self.d, bias=False)
        self.self_attn.k_proj = torch.nn.Linear(h, kv * self.d, bias=False)
        self.self_attn.v_proj = torch.nn.Linear(h, kv * self.d, bias=False)
        self.self_attn.o_proj = torch.nn.Linear(heads * self.d, h, bias=False)
        self.mlp = torch.nn.Module()
        self.mlp.gate_proj = torch.nn.Linear(h, c.intermediate_size, bias=False)
        self.mlp.up_proj = torch.nn.Linear(h, c.intermediate_size, bias=False)
        self.mlp.down_proj = torch.nn.Linear(c.intermediate_size, h, bias=False)

    def forward(self, x):
        b, t, _ = x.shape
        y = self.input_layernorm(x)
        a = self.self_attn
        q = a.q_proj(y).view(b, t, self.heads, self.d).transpose(1, 2)
        k = a.k_proj(y).view(b, t, self.kv, self.d).transpose(1, 2).repeat_interleave(self.heads // self.kv, 1)
        v = a.v_proj(y).view(b, t, self.kv, self.d).transpose(1, 2).repeat_interleave(self.heads // self.kv, 1)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, -1)
        x = x + a.o_proj(o)
        y = self.post_attention_layernorm(x)
        return x + self.mlp.down_proj(F.silu(self.mlp.gate_proj(y)) * self.mlp.up_proj(y))


class _CausalLM(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        self.config = c
        self.embed_tokens = torch.nn.Embedding(c.vocab_size, c.hidden_size)
        self.layers = torch.nn.ModuleList(_Layer(c) for _ in range(c.num_hidden_layers))
        self.norm = torch.nn.LayerNorm(c.hidden_size)
        self.lm_head = torch.nn.Linear(c.hidden_size, c.vocab_size, bias=False)
        self.checkpointing = False

    def gradient_checkpointing_enable(self, gradient_checkpointing_kwargs=None):
        self.checkpointing = True

    def forward(self, input_ids, labels):
        x = self.embed_tokens(input_ids)
        for layer in self.layers:
            x = checkpoint(layer, x, use_reentrant=False) if self.checkpointing else layer(x)
        logits = self.lm_head(self.norm(x))
        v = logits.shape[-1]
        loss = F.cross_entropy(logits[:, :-1].float().reshape(-1, v), labels[:, 1:].reshape(-1))
        return SimpleNamespace(loss=loss, logits=logits)


class AutoModelForCausalLM:
    @staticmethod
    def from_config(config, torch_dtype=None, dtype=None, attn_implementation=None):
        return _CausalLM(config).to(dtype or torch_dtype or torch.float32)
'''

FAKE_PEFT = '''
"""A stand-in for peft: LoRA adapters on the named linear layers, everything else frozen."""
import torch

__version__ = "0.99.0"


class LoraConfig:
    def __init__(self, r, lora_alpha, lora_dropout, target_modules, modules_to_save=None, task_type=None):
        self.r, self.target_modules = r, target_modules


class _LoraLinear(torch.nn.Module):
    def __init__(self, base, r, dtype):
        super().__init__()
        self.base_layer = base
        self.lora_A = torch.nn.Linear(base.in_features, r, bias=False).to(base.weight.device, dtype)
        self.lora_B = torch.nn.Linear(r, base.out_features, bias=False).to(base.weight.device, dtype)
        torch.nn.init.zeros_(self.lora_B.weight)

    def forward(self, x):
        return self.base_layer(x) + self.lora_B(self.lora_A(x.to(self.lora_A.weight.dtype))).to(x.dtype)


def get_peft_model(model, config, autocast_adapter_dtype=True):
    for p in model.parameters():
        p.requires_grad_(False)
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, torch.nn.Linear) and name in config.target_modules:
                dtype = torch.float32 if autocast_adapter_dtype else child.weight.dtype
                setattr(parent, name, _LoraLinear(child, config.r, dtype))
    return model
'''


@pytest.fixture(scope="module")
def stand_ins(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("torch")
    root = tmp_path_factory.mktemp("stand-ins")
    for name, text in (("transformers", FAKE_TRANSFORMERS), ("peft", FAKE_PEFT)):
        (root / name).mkdir()
        (root / name / "__init__.py").write_text(text)
    return root


def run_probe(folder: Path, python_path: str, *args: str) -> dict[str, Any]:
    env = os.environ | {"PYTHONPATH": python_path, "CUDA_VISIBLE_DEVICES": ""}
    out = folder / "record.json"
    done = subprocess.run(
        [sys.executable, SCRIPT_NAME, "--device", "cpu", "--steps", "2", "--warmup", "1", "--out", str(out), *args],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "wrote" in done.stdout and "predicted" in done.stdout
    record: dict[str, Any] = json.loads(out.read_text())
    return record


@pytest.mark.parametrize(
    ("method", "extra"),
    [
        ("lora", {}),
        ("full", {"optimizer": "adamw"}),
        ("full", {"optimizer": "adamw-fp32"}),
        ("lora", {"stack": "torchtune"}),
    ],
)
def test_the_script_runs_on_cpu_and_its_record_is_read_by_calibrate(
    tmp_path: Path, stand_ins: Path, method: str, extra: dict[str, Any]
) -> None:
    job = JobSpec(
        model=TINY, train_tokens=1_000_000, seq_len=64, gpus=("h100-sxm",), methods=(method,), max_gpus=1, **extra
    )
    p = ftsolve.plan(job, CATALOG, top=1).plans[0]
    probe = build_probe(p, job, CATALOG)
    (tmp_path / SCRIPT_NAME).write_text(probe.files[SCRIPT_NAME])
    record = run_probe(tmp_path, str(stand_ins))
    assert record["format"] == "ftsolve-probe" and record["gpu"]["device"] == "cpu"
    assert record["config"] == probe.config.model_dump(mode="json")
    assert record["measured"]["tokens_per_s"] > 0 and record["measured"]["steps"] == 2
    assert record["versions"]["torch"] and record["plan"]["stack"] == job.stack
    path = tmp_path / "record.json"
    with pytest.raises(CatalogError, match="not a GPU"):
        read_measurements(path)
    # The same record as a GPU writes it: calibrate reads it and fits it.
    record["gpu"] = {"device": "cuda", "name": "NVIDIA H100 80GB HBM3", "memory_gib": 79.19}
    record["measured"] |= {"peak_allocated_gib": 1.3, "peak_reserved_gib": 1.5}
    path.write_text(json.dumps(record))
    (m,) = read_measurements(path)
    assert m.gpu == "h100-sxm" and m.stack == job.stack and m.config == probe.config
    fitted = fit_measurement(m, CATALOG)
    assert fitted.predicted_tokens_per_s == pytest.approx(probe.predicted["tokens_per_s"], rel=1e-3)
    assert fitted.throughput_factor == pytest.approx(m.tokens_per_s / fitted.predicted_tokens_per_s)  # type: ignore[operator]


def test_the_cli_writes_the_probe_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FTSOLVE_HOME", str(tmp_path / "home"))
    out = tmp_path / "probe"
    args = ["probe", "--model", "llama-3.1-8b", "--tokens", "50M", "--seq-len", "2048", "--out", str(out)]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert (out / SCRIPT_NAME).is_file() and "predicted" in result.output
    compile((out / SCRIPT_NAME).read_text(), SCRIPT_NAME, "exec")
    summary = CliRunner().invoke(cli, [*args, "--rank", "2", "--json"])
    assert summary.exit_code == 0, summary.output
    assert json.loads(summary.output)["config"]["seq_len"] == 2048
    bad = CliRunner().invoke(cli, [*args, "--rank", "0"])
    assert bad.exit_code == 2 and bad.output.startswith("Error: invalid rank 0")


def test_given_flags_do_not_override_a_probe_records_own_configuration() -> None:
    record = Path(__file__).parent / "fixtures" / "calibration" / "probe-h100-lora.json"
    (m,) = read_measurements(record, Given(config={"seq_len": 4096}))
    assert m.config.seq_len == 2048


def test_the_script_runs_with_the_real_transformers_and_peft(tmp_path: Path) -> None:
    """Where transformers and peft are installed (not in the dev extra: transformers 5 and
    skypilot pin click apart), the script runs them for real on CPU."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    pytest.importorskip("peft")
    job = JobSpec(model=TINY, train_tokens=1_000_000, seq_len=64, gpus=("h100-sxm",), methods=("lora",), max_gpus=1)
    p = ftsolve.plan(job, CATALOG, top=1).plans[0]
    (tmp_path / SCRIPT_NAME).write_text(build_probe(p, job, CATALOG).files[SCRIPT_NAME])
    record = run_probe(tmp_path, os.environ.get("PYTHONPATH", ""))
    assert record["versions"]["transformers"] and record["measured"]["tokens_per_s"] > 0
