"""Test peer: transformers' Llama, Mistral and Qwen2 for llmtrain's tests.

Usage:
  hf_llama_peer.py make FAMILY DIR      a random tiny model of FAMILY (llama, mistral, qwen2) saved
                                        into DIR (save_pretrained, float32), with DIR/ids.json (2 rows
                                        of 24 ids), DIR/logits.bin (its logits, raw float32) and
                                        DIR/greedy.json (the 32 ids generate() picks greedily with its
                                        KV cache after the first row's first 8 ids)
  hf_llama_peer.py logits DIR OUT       the logits of DIR's model for DIR/ids.json, into OUT
  hf_llama_peer.py count CONFIGS_JSON   for a JSON list of config.json objects, the parameter count of
                                        each one's model, built on the meta device (no memory), a line each
"""
import json
import sys

import torch
from transformers import AutoConfig, AutoModelForCausalLM, LlamaConfig, MistralConfig, Qwen2Config

# The tiny shapes of llmtrain's presets llama-tiny, mistral-tiny and qwen2-tiny: every option of
# each family on (llama3 rope scaling and a tied head; a sliding window shorter than the sequence;
# q/k/v biases), grouped-query attention throughout.
TINY = {
    "llama": lambda: LlamaConfig(
        vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
        rms_norm_eps=1e-5, tie_word_embeddings=True,
        rope_scaling={"rope_type": "llama3", "factor": 4.0, "low_freq_factor": 1.0,
                      "high_freq_factor": 4.0, "original_max_position_embeddings": 64},
        rope_theta=10000.0),
    "mistral": lambda: MistralConfig(
        vocab_size=256, hidden_size=64, intermediate_size=160, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=1, max_position_embeddings=256,
        rms_norm_eps=1e-5, sliding_window=8, head_dim=16, tie_word_embeddings=False),
    "qwen2": lambda: Qwen2Config(
        vocab_size=256, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
        rms_norm_eps=1e-6, rope_theta=1000000.0, tie_word_embeddings=False),
}


def logits(model, ids):
    with torch.no_grad():
        return model(torch.tensor(ids)).logits.float().contiguous()


def main() -> None:
    mode = sys.argv[1]
    if mode == "make":
        family, path = sys.argv[2], sys.argv[3]
        torch.manual_seed(0)
        cfg = TINY[family]()
        cfg._attn_implementation = "eager"
        model = AutoModelForCausalLM.from_config(cfg).eval()
        with torch.no_grad():  # biases and norms away from their zero and one initial values
            for name, p in model.named_parameters():
                if p.dim() == 1:
                    p.add_(torch.randn_like(p) * 0.1)
        model.save_pretrained(path)
        ids = torch.randint(0, cfg.vocab_size, (2, 24)).tolist()
        with open(f"{path}/ids.json", "w") as f:
            json.dump(ids, f)
        logits(model, ids).numpy().tofile(f"{path}/logits.bin")
        model.generation_config.eos_token_id = None  # all 32 tokens, whatever they are
        model.generation_config.pad_token_id = 0
        with torch.no_grad():
            out = model.generate(torch.tensor([ids[0][:8]]), max_new_tokens=32, do_sample=False, use_cache=True)
        with open(f"{path}/greedy.json", "w") as f:
            json.dump(out[0, 8:].tolist(), f)
    elif mode == "logits":
        path, out = sys.argv[2], sys.argv[3]
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32,
                                                     attn_implementation="eager").eval()
        with open(f"{path}/ids.json") as f:
            ids = json.load(f)
        logits(model, ids).numpy().tofile(out)
    elif mode == "count":
        for raw in json.loads(sys.argv[2]):
            cfg = AutoConfig.for_model(raw.pop("model_type"), **raw)
            with torch.device("meta"):
                model = AutoModelForCausalLM.from_config(cfg)
            print(sum(p.numel() for p in model.parameters()))
    else:
        sys.exit(f"unknown mode {mode}")


if __name__ == "__main__":
    main()
