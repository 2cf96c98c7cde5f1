"""Test peer: Hugging Face GPT2LMHeadModel's logits for weights that an llmtrain test wrote.

Usage: hf_gpt2_logits.py IN OUT. IN (torch.save format, written by torch::pickle_save) holds a dict:
"config" = int64 tensor [vocab_size, block_size, n_layer, n_head, n_embd], "idx" = (B, T) ids, and
llmtrain's named parameters. Every Hugging Face parameter must come from exactly one llmtrain
parameter and every llmtrain parameter must be used, so a naming mismatch fails here. OUT gets the
logits (B, T, vocab_size) as raw little-endian float32.
"""
import sys

import torch
import torch.jit._pickle
from transformers import GPT2Config, GPT2LMHeadModel

# Hugging Face keeps these as Conv1D weights, (in, out); llmtrain's Linear stores (out, in).
CONV1D = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")


def main(src: str, dst: str) -> None:
    # torch::pickle_save tags the dict's key and value types; allow that one helper.
    with torch.serialization.safe_globals([torch.jit._pickle.restore_type_tag]):
        blob = torch.load(src, weights_only=True)
    vocab, block, n_layer, n_head, n_embd = blob.pop("config").tolist()
    idx = blob.pop("idx")
    cfg = GPT2Config(vocab_size=vocab, n_positions=block, n_layer=n_layer, n_head=n_head,
                     n_embd=n_embd, activation_function="gelu_new", resid_pdrop=0.0,
                     embd_pdrop=0.0, attn_pdrop=0.0, layer_norm_epsilon=1e-5,
                     bos_token_id=vocab - 1, eos_token_id=vocab - 1)
    model = GPT2LMHeadModel(cfg).eval()
    ours = dict(blob)
    state = {}
    for name, param in model.named_parameters():
        if name == "lm_head.weight":  # tied to transformer.wte.weight
            continue
        if name not in ours:
            sys.exit(f"llmtrain has no parameter for Hugging Face's {name}")
        t = ours.pop(name)
        if name.endswith(CONV1D):
            t = t.t()
        if name == "transformer.wte.weight":
            t = t[:vocab]  # llmtrain pads the vocabulary
        if t.shape != param.shape:
            sys.exit(f"{name}: llmtrain shape {tuple(t.shape)}, Hugging Face {tuple(param.shape)}")
        state[name] = t.contiguous()
    if ours:
        sys.exit(f"llmtrain parameters unknown to Hugging Face: {sorted(ours)}")
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [m for m in missing if m != "lm_head.weight" and not m.endswith(("attn.bias", "attn.masked_bias"))]
    if missing or unexpected:
        sys.exit(f"load_state_dict: missing {missing}, unexpected {unexpected}")
    with torch.no_grad():
        logits = model(idx).logits.float()
    with open(dst, "wb") as f:
        f.write(logits.contiguous().numpy().astype("<f4").tobytes())


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
