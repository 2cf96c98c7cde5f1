"""Baseline for bench_finetune --hf: transformers' model of a preset (random weights) in bfloat16 with
PEFT's LoRA (rank R, lora_alpha 2R, the given target modules; PEFT keeps the adapters in float32),
training on random tokens on the GPU as a PEFT run with bf16 does: autocast to bfloat16, SDPA
attention, fused AdamW over the adapters, gradient clipping at 1.0, the loss read after each step.
With BASE `nf4` the model is saved and loaded again through bitsandbytes as QLoRA loads it (4-bit NF4,
double quantization, bf16 compute; the head and embeddings stay bf16), the rest the same (no gradient
checkpointing, as in every bench_finetune row).

Usage: hf_peft_speed.py MODEL BATCH SEQ STEPS WARMUP R TARGETS [BASE]  (TARGETS comma-separated, or
all-linear; BASE bf16 (the default) or nf4).
Prints one JSON object: the seconds per step (mean of STEPS after WARMUP), the peak of allocated
memory in GiB and the last loss.
"""
import importlib.util
import json
import sys
import tempfile

import torch
from peft import LoraConfig, get_peft_model

from hf_models import build, time_steps


def nf4_base(model: torch.nn.Module) -> torch.nn.Module:
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig
    quant = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
                               bnb_4bit_compute_dtype=torch.bfloat16)
    with tempfile.TemporaryDirectory() as folder:
        model.save_pretrained(folder)
        del model
        return AutoModelForCausalLM.from_pretrained(folder, quantization_config=quant, dtype=torch.bfloat16,
                                                    device_map={"": 0})


def main(name: str, batch: str, seq: str, steps: str, warmup: str, r: str, targets: str, base: str = "bf16") -> None:
    b, t, n, w, rank = int(batch), int(seq), int(steps), int(warmup), int(r)
    if base not in ("bf16", "nf4"):
        raise SystemExit(f"hf_peft_speed: BASE is bf16 or nf4, not {base}")
    if base == "nf4" and importlib.util.find_spec("bitsandbytes") is None:  # before the model is built and saved
        raise SystemExit(f"hf_peft_speed: BASE nf4 needs bitsandbytes, which {sys.executable} cannot import")
    torch.manual_seed(1337)
    model = build(name).to(torch.bfloat16)
    model = nf4_base(model) if base == "nf4" else model.to("cuda")
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
