"""bench_eval's baseline: transformers scoring a HellaSwag-format file's first LIMIT examples by
completion likelihood, as an lm-evaluation-harness style loop does: EXAMPLES examples per forward (all
their endings as rows, right-padded), bf16 on the GPU, each ending's summed log-probability taken from
a float32 log-softmax, copied to the host once per batch. Random GPT-2 124M weights (the speed does not depend on them). Prints
{"examples", "seconds", "tokens"} (tokenization excluded from the time, as in bench_eval's row).

Usage: hf_eval_speed.py DATA VOCAB_DIR LIMIT EXAMPLES
"""
import json
import shutil
import sys
import tempfile
import time

import torch
from transformers import GPT2Config, GPT2LMHeadModel, GPT2TokenizerFast


def main(data, vocab_dir, limit, per_batch):
    limit, per_batch = int(limit), int(per_batch)
    # OpenAI's encoder.json and vocab.bpe are a save_pretrained folder's vocab.json and merges.txt.
    folder = tempfile.mkdtemp()
    shutil.copy(f"{vocab_dir}/encoder.json", f"{folder}/vocab.json")
    shutil.copy(f"{vocab_dir}/vocab.bpe", f"{folder}/merges.txt")
    tok = GPT2TokenizerFast.from_pretrained(folder)
    shutil.rmtree(folder)
    rows = []  # per example: (context ids, [ending ids])
    for line in open(data, encoding="utf-8"):
        if len(rows) == limit:
            break
        ex = json.loads(line)
        ctx = tok(ex["ctx"], add_special_tokens=False)["input_ids"]
        rows.append((ctx, [tok(ex["ctx"] + " " + e, add_special_tokens=False)["input_ids"][len(ctx):]
                           for e in ex["endings"]]))
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config()).to("cuda", torch.bfloat16).eval()

    def run(examples):
        tokens = 0
        for first in range(0, len(examples), per_batch):
            seqs = [(c, e) for c, ends in examples[first:first + per_batch] for e in ends]
            T = max(len(c) + len(e) - 1 for c, e in seqs)
            ids = torch.zeros(len(seqs), T, dtype=torch.long)
            for i, (c, e) in enumerate(seqs):
                full = c + e
                ids[i, :len(full) - 1] = torch.tensor(full[:-1])
            tokens += ids.numel()
            with torch.no_grad():
                logits = model(ids.cuda()).logits
            sums = []
            for i, (c, e) in enumerate(seqs):
                n0 = len(c) - 1
                lp = torch.log_softmax(logits[i, n0:n0 + len(e)].float(), -1)
                sums.append(lp.gather(1, torch.tensor(e, device="cuda").unsqueeze(1)).sum())
            torch.stack(sums).tolist()  # one copy to the host per batch
        return tokens

    run(rows[:per_batch])  # warm-up
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    tokens = run(rows)
    torch.cuda.synchronize()
    print(json.dumps({"examples": len(rows), "seconds": time.perf_counter() - t0, "tokens": tokens}))


if __name__ == "__main__":
    main(*sys.argv[1:])
