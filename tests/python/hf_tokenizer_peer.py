"""Test peer: an exported folder as transformers reads it (AutoTokenizer, AutoConfig, generate).

Usage: hf_tokenizer_peer.py DIR TEXTS OUT
  TEXTS: a JSON list of strings. Writes to OUT a JSON object: "ids" (AutoTokenizer's ids of each text,
  no special tokens added), "decoded" (each decoded back), "bos_token_id" / "eos_token_id" of the
  tokenizer and of config.json, and "generated": the new ids of a greedy generate() of 8 tokens after the
  first text's ids (it stops at the eos id config.json names).
"""
import json
import sys

import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer


def main() -> None:
    folder, texts, out = sys.argv[1], json.load(open(sys.argv[2])), sys.argv[3]
    tok = AutoTokenizer.from_pretrained(folder)
    cfg = AutoConfig.from_pretrained(folder)
    ids = [tok.encode(t, add_special_tokens=False) for t in texts]
    model = AutoModelForCausalLM.from_pretrained(folder).eval()
    prompt = torch.tensor([ids[0]])
    with torch.no_grad():
        gen = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=8, do_sample=False)
    json.dump({"ids": ids, "decoded": [tok.decode(i) for i in ids], "tokenizer_class": type(tok).__name__,
               "bos_token_id": tok.bos_token_id, "eos_token_id": tok.eos_token_id,
               "config_bos": cfg.bos_token_id, "config_eos": cfg.eos_token_id,
               "generated": gen[0, len(ids[0]):].tolist()}, open(out, "w"))


if __name__ == "__main__":
    main()
