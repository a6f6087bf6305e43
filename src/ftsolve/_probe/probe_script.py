# type: ignore
"""ftsolve probe: a few training steps of one planned configuration, measured.

Written by `ftsolve probe`. It needs torch and transformers, peft for LoRA and QLoRA, and
bitsandbytes for 4-bit and int8 bases and 8-bit or paged optimizers, as installed where it runs;
nothing else. No dataset: the tokens are random. No weights: the model is initialized at random
from its architecture (the same shapes, so the same memory and speed); --weights loads the real
ones. It runs the plan's method, precision, checkpointing, micro-batch and sequence length on one
GPU, a few warm-up steps and a few timed ones, and writes one JSON record for `ftsolve calibrate`.

    python ftsolve_probe.py --out probe-record.json
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import platform
import re
import sys
import time

PLAN = {}  # <ftsolve: planned configuration>

GIB = 2**30
FORMAT = "ftsolve-probe"
# Leaf names of the linear layers a LoRA target set adapts, across the usual model families.
ATTENTION = re.compile(r"^(q_proj|k_proj|v_proj|o_proj|qkv_proj|query_key_value|c_attn|out_proj|dense)$")
MLP = re.compile(r"^(gate_proj|up_proj|down_proj|gate_up_proj|fc1|fc2|c_fc|c_proj|w1|w2|w3)$")
QV = re.compile(r"^(q_proj|v_proj|query|value)$")


def parse_args(argv):
    p = argparse.ArgumentParser(description="Measure one planned training configuration (ftsolve probe).")
    p.add_argument("--out", default="probe-record.json", help="where the JSON record goes")
    p.add_argument("--steps", type=int, default=PLAN.get("steps", 5), help="timed optimizer steps")
    p.add_argument("--warmup", type=int, default=PLAN.get("warmup", 2), help="untimed steps first")
    p.add_argument("--device", default="auto", help="cuda, cpu or auto (cuda when there is one)")
    p.add_argument("--weights", action="store_true", help="load the real weights of the base model (downloads)")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def versions():
    out = {"python": platform.python_version()}
    for name in ("torch", "transformers", "peft", "bitsandbytes"):
        with contextlib.suppress(Exception):
            out[name] = str(__import__(name).__version__)
    return out


def quant_bits(config):
    precision = config.get("weight_precision", "auto")
    if precision == "nf4" or (precision == "auto" and config["method"] == "qlora"):
        return 4
    return 8 if precision == "int8" else 16


def dtype_kwarg(transformers, dtype):
    """transformers 4.56 renamed torch_dtype to dtype (the old name warns, and goes in 5)."""
    found = re.match(r"(\d+)\.(\d+)", str(getattr(transformers, "__version__", "")))
    version = (int(found.group(1)), int(found.group(2))) if found else (4, 0)
    return {"dtype": dtype} if version >= (4, 56) else {"torch_dtype": dtype}


def quantize_linears(torch, model, bits, double_quant, compute_dtype):
    """Replace the decoder's linear layers by bitsandbytes ones (quantized when moved to the GPU);
    lm_head stays 16-bit, as transformers keeps it."""
    import bitsandbytes as bnb

    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if not isinstance(child, torch.nn.Linear) or name == "lm_head":
                continue
            bias = child.bias is not None
            if bits == 4:
                q = bnb.nn.Linear4bit(
                    child.in_features,
                    child.out_features,
                    bias=bias,
                    compute_dtype=compute_dtype,
                    compress_statistics=double_quant,
                    quant_type="nf4",
                )
                q.weight = bnb.nn.Params4bit(
                    child.weight.data, requires_grad=False, compress_statistics=double_quant, quant_type="nf4"
                )
            else:
                q = bnb.nn.Linear8bitLt(
                    child.in_features, child.out_features, bias=bias, has_fp16_weights=False, threshold=6.0
                )
                q.weight = bnb.nn.Int8Params(child.weight.data, requires_grad=False, has_fp16_weights=False)
            if bias:
                q.bias = child.bias
            setattr(parent, name, q)


def lora_targets(torch, model, which):
    if which == "all-linear":
        pattern = re.compile(f"{ATTENTION.pattern}|{MLP.pattern}")
    else:
        pattern = {"attention": ATTENTION, "mlp": MLP, "qv": QV}[which]
    names = set()
    for full, module in model.named_modules():
        leaf = full.rsplit(".", 1)[-1]
        if ".layers." in f".{full}" and pattern.match(leaf) and "Linear" in type(module).__name__:
            names.add(leaf)
    if not names:
        raise SystemExit(f"no linear layers match the LoRA targets {which!r}")
    return sorted(names)


def add_lora(torch, model, config, recipe, dtype):
    from peft import LoraConfig, get_peft_model

    rank = int(config.get("lora_rank", 16))
    lora = LoraConfig(
        r=rank,
        lora_alpha=2 * rank,
        lora_dropout=float(recipe.get("lora_dropout") or 0.0),
        target_modules=lora_targets(torch, model, recipe.get("lora_targets") or "all-linear"),
        modules_to_save=["embed_tokens", "lm_head"] if recipe.get("train_embeddings") else None,
        task_type="CAUSAL_LM",
    )
    fp32 = (recipe.get("adapter_dtype") or "fp32") == "fp32"
    try:
        model = get_peft_model(model, lora, autocast_adapter_dtype=fp32)
    except TypeError:  # peft before 0.12
        model = get_peft_model(model, lora)
    for name, p in model.named_parameters():
        if p.requires_grad and "lora_" in name:
            p.data = p.data.float() if fp32 else p.data.to(dtype)
    return model


def build_model(torch, args, device, dtype):
    import transformers

    config, recipe = PLAN["config"], PLAN["config"].get("recipe", {})
    bits = quant_bits(config)
    full_fp32 = config["method"] == "full" and recipe.get("optimizer") == "adamw-fp32"
    kwargs = dtype_kwarg(transformers, torch.float32 if full_fp32 else dtype)
    kwargs["attn_implementation"] = "sdpa" if recipe.get("flash_attention", True) else "eager"
    if args.weights:
        if bits != 16:
            kwargs["quantization_config"] = transformers.BitsAndBytesConfig(
                load_in_4bit=bits == 4,
                load_in_8bit=bits == 8,
                bnb_4bit_quant_type="nf4",
                bnb_4bit_use_double_quant=bool(recipe.get("double_quant", True)),
                bnb_4bit_compute_dtype=dtype,
            )
        model = transformers.AutoModelForCausalLM.from_pretrained(PLAN["base_model"], **kwargs)
    else:
        hf_config = transformers.AutoConfig.for_model(**PLAN["hf_config"])
        # A quantized base is built on the CPU and quantized on its way to the GPU, so that its
        # 16-bit weights never sit there.
        with torch.device("cpu" if bits != 16 else device):
            model = transformers.AutoModelForCausalLM.from_config(hf_config, **kwargs)
        if bits != 16:
            quantize_linears(torch, model, bits, bool(recipe.get("double_quant", True)), dtype)
    model = model.to(device)
    model.config.use_cache = False
    if config.get("gradient_checkpointing"):
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if config["method"] == "full":
        for p in model.parameters():
            p.requires_grad_(True)
        return model
    for p in model.parameters():
        p.requires_grad_(False)
    return add_lora(torch, model, config, recipe, dtype)


def make_optimizer(torch, name, params, step="fused"):
    if name in ("adamw", "adamw-fp32", "adamw-bf16"):
        # The step the plan priced: fused in place, or foreach with its copy of the second
        # moments (off CUDA, the per-parameter loop stands in for fused).
        fused = step == "fused" and all(p.is_cuda for p in params)
        return torch.optim.AdamW(params, lr=1e-5, fused=fused, foreach=step == "foreach")
    if name == "sgd":
        return torch.optim.SGD(params, lr=1e-5, momentum=0.9)
    if name == "adafactor":
        from transformers.optimization import Adafactor

        return Adafactor(params, lr=1e-5, relative_step=False, scale_parameter=False, warmup_init=False)
    import bitsandbytes as bnb

    return {
        "adamw-8bit": bnb.optim.AdamW8bit,
        "paged-adamw-8bit": bnb.optim.PagedAdamW8bit,
        "paged-adamw": bnb.optim.PagedAdamW,
    }[name](params, lr=1e-5)


def make_step(torch, model, device, dtype, batch, accum):
    """One optimizer step over `accum` micro-batches, as the plan's optimizer regime keeps its state:
    full fine-tuning with adamw, paged-adamw, sgd or adafactor steps an fp32 master copy of the
    16-bit weights (2 + 2 + the optimizer's bytes per parameter); adamw-fp32 trains an fp32 model
    under bf16 autocast; the others step the trainable parameters in their own dtype."""
    config = PLAN["config"]
    name = config.get("recipe", {}).get("optimizer") or "adamw"
    how = config.get("recipe", {}).get("optimizer_step") or "fused"
    trainable = [p for p in model.parameters() if p.requires_grad]
    masters = None
    if config["method"] == "full" and name in ("adamw", "paged-adamw", "sgd", "adafactor"):
        masters = [p.detach().float() for p in trainable]
        optimizer = make_optimizer(torch, name, masters, how)
    else:
        optimizer = make_optimizer(torch, name, trainable, how)
    mixed = any(p.dtype == torch.float32 for p in trainable)
    autocast = (lambda: torch.autocast(device.type, dtype=dtype)) if mixed else contextlib.nullcontext

    def step():
        total = 0.0
        for _ in range(accum):
            with autocast():
                loss = model(input_ids=batch, labels=batch).loss / accum
            loss.backward()
            total += float(loss.detach())
        if masters is None:
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            return total
        # One fp32 gradient at a time: the master copy is stepped parameter by parameter.
        for p, m in zip(trainable, masters, strict=True):
            m.grad = p.grad.float()
            p.grad = None
            optimizer.step()
            m.grad = None
            p.data.copy_(m)
        return total

    return step


def gpu_info(torch, device):
    if device.type != "cuda":
        return {"device": device.type, "name": platform.processor() or device.type}
    props = torch.cuda.get_device_properties(device)
    return {
        "device": "cuda",
        "name": torch.cuda.get_device_name(device),
        "memory_gib": round(props.total_memory / GIB, 3),
        "capability": f"{props.major}.{props.minor}",
        "count": torch.cuda.device_count(),
        "cuda": torch.version.cuda,
    }


def measure(torch, args, device):
    config = PLAN["config"]
    bf16 = device.type == "cpu" or torch.cuda.is_bf16_supported()
    dtype = torch.bfloat16 if bf16 else torch.float16
    torch.manual_seed(args.seed)
    model = build_model(torch, args, device, dtype)
    model.train()
    micro, seq, accum = int(config["micro_batch"]), int(config["seq_len"]), int(config["grad_accum"])
    batch = torch.randint(0, int(PLAN["hf_config"]["vocab_size"]), (micro, seq), device=device)
    step = make_step(torch, model, device, dtype, batch, accum)
    cuda = device.type == "cuda"
    if cuda:
        # The peak of training, not of loading: loading's transients are freed first.
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    for _ in range(args.warmup):
        step()
    if cuda:
        torch.cuda.synchronize()
    start = time.perf_counter()
    loss = 0.0
    for _ in range(args.steps):
        loss = step()
    if cuda:
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    tokens = micro * seq * accum * args.steps
    out = {
        "tokens_per_s": round(tokens / seconds, 3),
        "step_s": round(seconds / args.steps, 6),
        "steps": args.steps,
        "warmup_steps": args.warmup,
        "loss": round(loss, 4),
    }
    if cuda:
        free, total = torch.cuda.mem_get_info(device)
        out["peak_allocated_gib"] = round(torch.cuda.max_memory_allocated(device) / GIB, 4)
        out["peak_reserved_gib"] = round(torch.cuda.max_memory_reserved(device) / GIB, 4)
        out["device_used_gib"] = round((total - free) / GIB, 4)
    return out


def main(argv=None):
    args = parse_args(argv)
    if args.steps < 1 or args.warmup < 0:
        raise SystemExit("--steps must be at least 1 and --warmup at least 0")
    import torch

    name = args.device if args.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    started = dt.datetime.now(dt.timezone.utc)
    try:
        measured = measure(torch, args, device)
    except torch.cuda.OutOfMemoryError:
        raise SystemExit(
            "out of memory: this configuration does not fit here; the plan under-predicts its peak "
            "(no record written)"
        ) from None
    record = {
        "format": FORMAT,
        "schema_version": 1,
        "created": started.isoformat(timespec="seconds"),
        "runner": "ftsolve probe: transformers + PEFT",
        "plan": PLAN.get("plan", {}),
        "config": PLAN["config"],
        "gpu": gpu_info(torch, device),
        "versions": versions(),
        "options": {"weights": bool(args.weights), "seed": args.seed},
        "measured": measured,
        "predicted": PLAN.get("predicted", {}),
    }
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(record, f, indent=2)
        f.write("\n")
    report(record, args.out)
    return 0


def report(record, out):
    m, p = record["measured"], record.get("predicted") or {}
    print(f"wrote {out} ({record['gpu']['name']})")
    line = f"  tokens/s  measured {m['tokens_per_s']:,.0f}"
    if p.get("tokens_per_s"):
        line += f"  predicted {p['tokens_per_s']:,.0f} (x{m['tokens_per_s'] / p['tokens_per_s']:.2f})"
    print(line)
    if "peak_reserved_gib" in m:
        line = f"  peak      measured {m['peak_reserved_gib']:.2f} GiB reserved"
        line += f", {m['peak_allocated_gib']:.2f} allocated"
        if p.get("reserved_gib"):
            line += f"  predicted {p['reserved_gib']:.2f} GiB reserved"
        print(line)
    print("next: ftsolve calibrate " + out)


if __name__ == "__main__":
    sys.exit(main())
