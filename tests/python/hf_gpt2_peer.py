"""Test peer: Hugging Face transformers' GPT-2 on folders an llmtrain test shares with it.

Usage: hf_gpt2_peer.py make DIR KIND      a random-init model saved with save_pretrained; KIND:
                                          tiny (GPT2LMHeadModel), tiny-base (GPT2Model: keys without
                                          the transformer. prefix), tiny-sharded (several shards and an
                                          index), gpt2 (the 124M shape)
       hf_gpt2_peer.py logits DIR IDS OUT [DEVICE DTYPE]  from_pretrained(DIR)'s logits for IDS (a JSON
                                          list of lists) as raw little-endian float32
       hf_gpt2_peer.py greedy DIR IDS N OUT [DEVICE DTYPE]  greedy generate() of N new tokens after IDS
                                          (a JSON list), the whole sequence as a JSON list in OUT
DEVICE (cpu) and DTYPE (float32) say where and in which precision the model runs (cuda bfloat16).
"""
import json
import sys

import torch
from transformers import GPT2Config, GPT2LMHeadModel, GPT2Model


def make(path: str, kind: str) -> None:
    torch.manual_seed(0)
    if kind == "gpt2":
        cfg = GPT2Config()
    else:  # a vocabulary that is not a multiple of 128, so llmtrain pads it
        cfg = GPT2Config(vocab_size=1000, n_positions=64, n_embd=32, n_layer=2, n_head=4,
                         bos_token_id=999, eos_token_id=999)
    model = (GPT2Model if kind == "tiny-base" else GPT2LMHeadModel)(cfg)
    with torch.no_grad():  # biases and layer-norm gains away from their 0 / 1 initialisation
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.add_(0.1 * torch.randn_like(p))
    model.save_pretrained(path, max_shard_size="100KB" if kind == "tiny-sharded" else "10GB")


def load(path: str, device: str, dtype: str) -> GPT2LMHeadModel:
    return GPT2LMHeadModel.from_pretrained(path, dtype=getattr(torch, dtype)).to(device).eval()


def main() -> None:
    mode, path = sys.argv[1], sys.argv[2]
    if mode == "make":
        make(path, sys.argv[3])
    elif mode == "logits":
        device, dtype = sys.argv[5:7] if len(sys.argv) > 5 else ("cpu", "float32")
        ids = torch.tensor(json.loads(sys.argv[3]), device=device)
        with torch.no_grad():
            logits = load(path, device, dtype)(ids).logits.float().cpu()
        with open(sys.argv[4], "wb") as f:
            f.write(logits.contiguous().numpy().astype("<f4").tobytes())
    elif mode == "greedy":
        device, dtype = sys.argv[6:8] if len(sys.argv) > 6 else ("cpu", "float32")
        ids = torch.tensor([json.loads(sys.argv[3])], device=device)
        n = int(sys.argv[4])
        model = load(path, device, dtype)
        with torch.no_grad():
            out = model.generate(ids, max_new_tokens=n, min_new_tokens=n, do_sample=False,
                                 attention_mask=torch.ones_like(ids), pad_token_id=model.config.eos_token_id)
        with open(sys.argv[5], "w") as f:
            json.dump(out[0].tolist(), f)
    else:
        sys.exit(f"unknown mode {mode}")


if __name__ == "__main__":
    main()
