"""Baseline for bench_generate: transformers' model of a preset (GPT-2 124M, Llama-3.2-1B; random
weights) in bfloat16 on the GPU, greedy decoding with its KV cache, one forward call per token (the loop generate() runs,
without its per-step overhead), after a prompt of PROMPT random ids.

Usage: hf_generate_speed.py MODEL PROMPT NEW REPEAT BATCH... Prints one JSON object: for each batch size, the
median seconds over REPEAT runs of NEW tokens and of one token (the prompt alone).
"""
import json
import statistics
import sys
import time

import torch
from hf_models import build


def run(model, prompt: torch.Tensor, new: int) -> None:
    with torch.no_grad():
        out = model(prompt, use_cache=True)
        for _ in range(new - 1):
            nxt = out.logits[:, -1].argmax(-1, keepdim=True)
            out = model(nxt, past_key_values=out.past_key_values, use_cache=True)
        out.logits[:, -1].argmax(-1)
    torch.cuda.synchronize()


def median_seconds(model, prompt: torch.Tensor, new: int, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        run(model, prompt, new)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main(name: str, prompt_len: str, new: str, repeat: str, *batches: str) -> None:
    torch.manual_seed(1337)
    model = build(name).to("cuda", torch.bfloat16).eval()
    result = {}
    for b in map(int, batches):
        prompt = torch.randint(model.config.vocab_size, (b, int(prompt_len)), device="cuda")
        run(model, prompt, 8)  # warm-up
        result[str(b)] = {"seconds": median_seconds(model, prompt, int(new), int(repeat)),
                          "seconds_prompt": median_seconds(model, prompt, 1, int(repeat))}
    print(json.dumps(result))


if __name__ == "__main__":
    main(*sys.argv[1:])
