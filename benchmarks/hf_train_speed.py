"""Baseline for bench_train --hf: transformers' model of a preset (random weights) training on random
tokens on the GPU as its Trainer does with bf16: autocast to bfloat16 over float32 parameters, SDPA
attention, fused AdamW, gradient clipping at 1.0, the loss read after each step; eager, then under
torch.compile, each in a fresh model.

Usage: hf_train_speed.py MODEL BATCH SEQ STEPS WARMUP. Prints one JSON object: for "eager" and
"compile", the seconds per step (mean of STEPS after WARMUP), the peak of allocated memory in GiB and
the last loss.
"""
import json
import sys

import torch

from hf_models import build, time_steps


def measure(name: str, batch: int, seq: int, steps: int, warmup: int, compiled: bool) -> dict:
    torch.manual_seed(1337)
    model = build(name).to("cuda").train()
    opt = torch.optim.AdamW(model.parameters(), lr=6e-4, weight_decay=0.1, fused=True)
    ids = torch.randint(model.config.vocab_size, (batch, seq), device="cuda")
    forward = torch.compile(model) if compiled else model

    def step() -> float:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = forward(input_ids=ids, labels=ids).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.item()

    result = time_steps(step, steps, warmup)
    del model, opt, forward
    torch.cuda.empty_cache()
    return result


def main(name: str, batch: str, seq: str, steps: str, warmup: str) -> None:
    args = (name, int(batch), int(seq), int(steps), int(warmup))
    print(json.dumps({"eager": measure(*args, compiled=False), "compile": measure(*args, compiled=True)}))


if __name__ == "__main__":
    main(*sys.argv[1:])
