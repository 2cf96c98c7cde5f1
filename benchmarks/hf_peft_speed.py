"""Baseline for bench_finetune --hf: transformers' model of a preset (random weights) in bfloat16 with
PEFT's LoRA (rank R, lora_alpha 2R, the given target modules; PEFT keeps the adapters in float32),
training on random tokens on the GPU as a PEFT run with bf16 does: autocast to bfloat16, SDPA
attention, fused AdamW over the adapters, gradient clipping at 1.0, the loss read after each step.

Usage: hf_peft_speed.py MODEL BATCH SEQ STEPS WARMUP R TARGETS (comma-separated, or all-linear).
Prints one JSON object: the seconds per step (mean of STEPS after WARMUP), the peak of allocated
memory in GiB and the last loss.
"""
import json
import sys

import torch
from peft import LoraConfig, get_peft_model

from hf_models import build, time_steps


def main(name: str, batch: str, seq: str, steps: str, warmup: str, r: str, targets: str) -> None:
    b, t, n, w, rank = int(batch), int(seq), int(steps), int(warmup), int(r)
    torch.manual_seed(1337)
    model = build(name).to("cuda", torch.bfloat16)
    target = "all-linear" if targets == "all-linear" else targets.split(",")
    model = get_peft_model(model, LoraConfig(r=rank, lora_alpha=2 * rank, target_modules=target,
                                             task_type="CAUSAL_LM")).train()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=2e-4, weight_decay=0.0, fused=True)
    ids = torch.randint(model.config.vocab_size, (b, t), device="cuda")

    def step() -> float:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.item()

    print(json.dumps(time_steps(step, n, w)))

if __name__ == "__main__":
    main(*sys.argv[1:])
