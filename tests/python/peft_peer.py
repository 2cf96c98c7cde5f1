"""Test peer: PEFT's LoRA adapters for llmtrain's tests.

Usage:
  peft_peer.py make CASE DIR   a random tiny transformers model saved into DIR/base (float32), a LoRA
                               adapter on it with random A and B saved by PEFT into DIR/adapter, and
                               DIR/ids.json (2 rows of 16 ids) with DIR/merged.bin: the logits (raw
                               float32) of the model merge_and_unload() gives. CASE picks the model
                               and the adapter's options:
                                 gpt2    GPT-2 (Conv1D layers), c_attn and c_fc, r 4, alpha 8, and
                                         the final layer norm as a module to save
                                 llama   Llama (tied head), all-linear, r 4, alpha 16, dropout 0.1
                                 qwen2   Qwen2 (q/k/v biases), q_proj, v_proj and down_proj by name,
                                         rsLoRA, a rank and an alpha pattern, the head to save
                               Also DIR/peft.bin: the logits of the PEFT model itself, unmerged.
  peft_peer.py logits BASE ADAPTER IDS OUT
                               the logits (raw float32) on IDS (a JSON list of rows) of the transformers
                               model in BASE with the PEFT adapter in ADAPTER (say, one llmtrain saved)
  peft_peer.py train BASE ADAPTER IDS STEPS LR OUT
                               trains the adapter in ADAPTER on BASE for STEPS steps on the rows in IDS
                               (next-token cross-entropy, the mean over all positions), in float32 with
                               torch's AdamW (constant LR, betas 0.9/0.95, eps 1e-8, weight decay 0.1 on
                               2-D parameters, none on the rest, no clipping; dropout off), and writes
                               OUT/losses.json (the loss before each step) and the trained adapter into
                               OUT/adapter
"""
import json
import sys

import torch
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM, GPT2Config, LlamaConfig, Qwen2Config

MODELS = {
    "gpt2": lambda: GPT2Config(vocab_size=96, n_embd=32, n_layer=2, n_head=4, n_positions=64,
                               bos_token_id=0, eos_token_id=0),
    "llama": lambda: LlamaConfig(vocab_size=96, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                                 num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                 tie_word_embeddings=True),
    "qwen2": lambda: Qwen2Config(vocab_size=96, hidden_size=32, intermediate_size=40, num_hidden_layers=2,
                                 num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                 tie_word_embeddings=False),
}

ADAPTERS = {
    "gpt2": lambda: LoraConfig(r=4, lora_alpha=8, target_modules=["c_attn", "c_fc"], fan_in_fan_out=True,
                               modules_to_save=["ln_f"], init_lora_weights=False),
    "llama": lambda: LoraConfig(r=4, lora_alpha=16, lora_dropout=0.1, target_modules="all-linear",
                                init_lora_weights=False),
    "qwen2": lambda: LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "down_proj"],
                                use_rslora=True, rank_pattern={"down_proj": 2}, alpha_pattern={"v_proj": 3},
                                modules_to_save=["lm_head"], init_lora_weights=False),
}


def load(base: str, adapter: str, trainable: bool):
    from peft import PeftModel
    model = AutoModelForCausalLM.from_pretrained(base, torch_dtype=torch.float32, attn_implementation="eager")
    return PeftModel.from_pretrained(model, adapter, is_trainable=trainable)


def logits_mode(base: str, adapter: str, ids_path: str, out: str) -> None:
    model = load(base, adapter, False).eval()
    with open(ids_path) as f:
        ids = torch.tensor(json.load(f))
    with torch.no_grad():
        model(ids).logits.float().contiguous().numpy().tofile(out)


def train_mode(base: str, adapter: str, ids_path: str, steps: int, lr: float, out: str) -> None:
    model = load(base, adapter, True)
    model.eval()  # dropout off; gradients still flow
    with open(ids_path) as f:
        ids = torch.tensor(json.load(f))
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.1},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    opt = torch.optim.AdamW([g for g in groups if g["params"]], lr=lr, betas=(0.9, 0.95), eps=1e-8)
    losses = []
    for _ in range(steps):
        logits = model(ids[:, :-1]).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)), ids[:, 1:].reshape(-1))
        losses.append(loss.item())
        loss.backward()
        opt.step()
        opt.zero_grad()
    with open(f"{out}/losses.json", "w") as f:
        json.dump(losses, f)
    model.save_pretrained(f"{out}/adapter")


def main() -> None:
    mode = sys.argv[1]
    if mode == "logits":
        logits_mode(*sys.argv[2:6])
        return
    if mode == "train":
        train_mode(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]), float(sys.argv[6]), sys.argv[7])
        return
    case, path = sys.argv[2], sys.argv[3]
    assert mode == "make"
    torch.manual_seed(0)
    cfg = MODELS[case]()
    cfg._attn_implementation = "eager"
    model = AutoModelForCausalLM.from_config(cfg).eval()
    model.save_pretrained(f"{path}/base")
    peft_model = get_peft_model(model, ADAPTERS[case]())
    with torch.no_grad():  # the saved modules differ from the base's, as trained ones would
        for name, p in peft_model.named_parameters():
            if "modules_to_save" in name:
                p.add_(torch.randn_like(p) * 0.1)
    peft_model.save_pretrained(f"{path}/adapter")
    ids = torch.randint(0, cfg.vocab_size, (2, 16))
    with torch.no_grad():
        peft_model.eval()(ids).logits.float().contiguous().numpy().tofile(f"{path}/peft.bin")
    merged = peft_model.merge_and_unload().eval()
    with torch.no_grad():
        logits = merged(ids).logits.float().contiguous()
    with open(f"{path}/ids.json", "w") as f:
        json.dump(ids.tolist(), f)
    logits.numpy().tofile(f"{path}/merged.bin")


if __name__ == "__main__":
    main()
