"""Test peer: multiple-choice and perplexity scores of a Hugging Face folder through transformers, one
sequence at a time in float64, for llmtrain's evaluation tests. It follows the protocol written at the
top of include/llmtrain/eval/tasks.h on its own: the folder's tokenizer through AutoTokenizer, the
windows of Hugging Face's perplexity recipe.

Usage:
  eval_peer.py make-llama DIR            a random Llama (GPT-2's vocabulary, 64 positions) saved into DIR
  eval_peer.py choice DIR DATA KIND BOS OUT
                                         KIND hellaswag or choice; BOS the id inputs start with, -1: none.
                                         OUT: {"loglikelihood": [[...]], "pred_acc", "pred_norm",
                                         "pred_token": [...], "truncated": n}
  eval_peer.py perplexity DIR WINDOW STRIDE BOS OUT FILE...
                                         FILE: text, or an llm.c token shard (.bin). OUT: {"nll": summed
                                         nats, "scored": ids, "bytes": n}
"""
import json
import sys

import numpy as np
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM


def make_llama(path):
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=50257, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                      rms_norm_eps=1e-5, tie_word_embeddings=False, bos_token_id=50256, eos_token_id=50256)
    LlamaForCausalLM(cfg).save_pretrained(path)


def load(path):
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float64).eval()
    return model, AutoTokenizer.from_pretrained(path)


def block_size(model):
    c = model.config
    return getattr(c, "n_positions", None) or c.max_position_embeddings


def encode(tok, text):
    return tok(text, add_special_tokens=False)["input_ids"]


def logprobs(model, ids, n):
    """Log-probabilities of the last n of ids, each given the ids before it."""
    with torch.no_grad():
        logits = model(torch.tensor([ids[:-1]])).logits[0].double()
    lp = torch.log_softmax(logits, -1)
    return [lp[i, ids[i + 1]].item() for i in range(len(ids) - 1 - n, len(ids) - 1)]


def choice(path, data, kind, bos, out):
    model, tok = load(path)
    block, eot = block_size(model), tok.eos_token_id
    hellaswag = kind == "hellaswag"
    res = {"loglikelihood": [], "pred_acc": [], "pred_norm": [], "pred_token": [], "truncated": 0}
    for line in open(data, encoding="utf-8"):
        if not line.strip():
            continue
        ex = json.loads(line)
        ctx = ex["ctx" if hellaswag else "context"]
        choices = ex["endings" if hellaswag else "choices"]
        stripped = ctx.rstrip(" \t\n\r\v\f")
        moved = ctx[len(stripped):]
        ctx_ids = encode(tok, stripped)
        conts = [encode(tok, stripped + moved + (" " if hellaswag else "") + c)[len(ctx_ids):] for c in choices]
        room = block + 1 - max(len(c) for c in conts)
        head = [bos] if bos >= 0 else ([eot] if not ctx_ids else [])
        keep = min(len(ctx_ids), room - len(head))
        res["truncated"] += keep < len(ctx_ids)
        context = head + ctx_ids[len(ctx_ids) - keep:]
        ll = [sum(logprobs(model, context + c, len(c))) for c in conts]
        res["loglikelihood"].append(ll)
        res["pred_acc"].append(int(np.argmax(ll)))
        res["pred_norm"].append(int(np.argmax([v / len(c) for v, c in zip(ll, choices)])))
        res["pred_token"].append(int(np.argmax([v / len(c) for v, c in zip(ll, conts)])))
    json.dump(res, open(out, "w"))


def perplexity(path, window, stride, bos, out, files):
    model, tok = load(path)
    eot = tok.eos_token_id
    start = bos if bos >= 0 else eot
    nll, scored, nbytes = 0.0, 0, 0
    for f in files:
        if f.endswith(".bin"):
            raw = np.fromfile(f, dtype=np.int32, count=256)
            ids = np.fromfile(f, dtype=np.uint16, offset=1024, count=int(raw[2])).tolist()
            nbytes += len(tok.decode([i for i in ids[1:] if i != eot]).encode("utf-8"))
        else:
            text = open(f, encoding="utf-8").read()
            ids = [start] + encode(tok, text)
            nbytes += len(text.encode("utf-8"))
        # Hugging Face's recipe, with each window's loss weighted by the ids it really scored.
        seq = torch.tensor([ids])
        prev_end = 0
        for begin in range(0, len(ids), stride):
            end = min(begin + window, len(ids))
            trg_len = end - prev_end
            input_ids = seq[:, begin:end]
            target = input_ids.clone()
            target[:, :-trg_len] = -100
            n = int((target[:, 1:] != -100).sum())
            if n > 0:
                with torch.no_grad():
                    nll += model(input_ids, labels=target).loss.item() * n
                scored += n
            prev_end = end
            if end == len(ids):
                break
    json.dump({"nll": nll, "scored": scored, "bytes": nbytes}, open(out, "w"))


def main():
    mode = sys.argv[1]
    if mode == "make-llama":
        make_llama(sys.argv[2])
    elif mode == "choice":
        choice(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]), sys.argv[6])
    elif mode == "perplexity":
        perplexity(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), sys.argv[6], sys.argv[7:])
    else:
        raise SystemExit(f"eval_peer.py: unknown mode {mode}")


if __name__ == "__main__":
    main()
