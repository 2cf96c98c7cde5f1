"""Baseline for bench_generate: Hugging Face transformers' GPT-2 124M (random weights) in bfloat16 on
the GPU, greedy decoding with its KV cache, one forward call per token (the loop generate() runs,
without its per-step overhead), after a prompt of PROMPT random ids.

Usage: hf_generate_speed.py PROMPT NEW REPEAT BATCH... Prints one JSON object: for each batch size, the
median seconds over REPEAT runs of NEW tokens and of one token (the prompt alone).
"""
import json
import statistics
import sys
import time

import torch
from transformers import GPT2Config, GPT2LMHeadModel


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


def main(prompt_len: str, new: str, repeat: str, *batches: str) -> None:
    torch.manual_seed(1337)
    model = GPT2LMHeadModel(GPT2Config()).to("cuda", torch.bfloat16).eval()
    result = {}
    for b in map(int, batches):
        prompt = torch.randint(50257, (b, int(prompt_len)), device="cuda")
        run(model, prompt, 8)  # warm-up
        result[str(b)] = {"seconds": median_seconds(model, prompt, int(new), int(repeat)),
                          "seconds_prompt": median_seconds(model, prompt, 1, int(repeat))}
    print(json.dumps(result))


if __name__ == "__main__":
    main(*sys.argv[1:])
