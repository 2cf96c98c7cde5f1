"""The transformers models of the presets that bench_train, bench_finetune and bench_generate compare
against, built from their published shapes with random weights; and the timing of training steps.
"""
import time
from typing import Callable

import torch


def build(name: str) -> torch.nn.Module:
    """The transformers model of preset `name` (gpt2, gpt2-xl or llama-3.2-1b), on the CPU, in float32."""
    if name in ("gpt2", "gpt2-xl"):
        from transformers import GPT2Config, GPT2LMHeadModel
        xl = dict(n_embd=1600, n_layer=48, n_head=25) if name == "gpt2-xl" else {}
        return GPT2LMHeadModel(GPT2Config(**xl))
    if name == "llama-3.2-1b":
        from transformers import LlamaConfig, LlamaForCausalLM
        config = LlamaConfig(vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                             num_attention_heads=32, num_key_value_heads=8, head_dim=64,
                             max_position_embeddings=131072, rms_norm_eps=1e-5, tie_word_embeddings=True,
                             rope_theta=500000.0,
                             rope_scaling={"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                                           "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
                             attn_implementation="sdpa")
        return LlamaForCausalLM(config)
    raise SystemExit(f"hf_models: no transformers model for preset {name} (gpt2, gpt2-xl or llama-3.2-1b)")


def time_steps(step: Callable[[], float], steps: int, warmup: int) -> dict:
    """Runs `step` (one training step, returning its loss) `warmup` times, then `steps` timed times on
    the GPU: the seconds per step, the peak of allocated memory over the timed steps in GiB, the last loss."""
    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    for _ in range(steps):
        loss = step()
    torch.cuda.synchronize()
    seconds = (time.perf_counter() - start) / steps
    return {"seconds_per_step": seconds, "peak_gib": torch.cuda.max_memory_allocated() / 2**30, "loss": loss}
