"""A planning tool calling ftsolve: plans as typed objects, then a launch config for the best one."""

import ftsolve

job = ftsolve.JobSpec(
    model="llama-3.1-8b",
    train_tokens=200_000_000,
    seq_len=4096,
    deadline_hours=12,
    budget_usd=150,
    methods=("lora", "qlora"),
    eu_only=True,
)
plans = ftsolve.plan(job, top=3)
for p in plans.plans:
    print(
        f"{p.rank}. {p.n_gpus}x {p.gpu} {p.method} {p.market} at {p.offer.provider} ({p.offer.country}): "
        f"{p.total_cost_usd:.2f} USD, {p.time.expected_hours:.1f} h, {p.memory.peak_gib:.1f} GiB per GPU"
    )
best = plans.plans[0]
print("cost items:", {c.name: c.usd for c in best.cost_items})
print("accelerate:", ftsolve.export_plan("accelerate", best, job, ftsolve.load_catalog())["distributed_type"])
memory = ftsolve.estimate_memory("llama-3.1-8b", method="qlora", seq_len=4096, gpu="rtx-4090")
print(f"QLoRA on an RTX 4090: {memory.peak_gib:.1f} of {memory.usable_gib:.1f} GiB, fits: {memory.fits}")
