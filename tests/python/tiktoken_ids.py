"""Test peer: tiktoken's "gpt2" ids, run offline from the GPT-2 files of a data directory.

Usage: tiktoken_ids.py GPT2_DIR IN OUT. IN is a JSON list of strings; OUT gets a JSON list of id
lists (special tokens encoded as text). tiktoken finds encoder.json and vocab.bpe in its cache under
the sha1 of their download addresses, so they are copied into a private cache first.
"""
import hashlib
import json
import os
import shutil
import sys
import tempfile


def gpt2_encoding(gpt2_dir: str):
    cache = tempfile.mkdtemp(prefix="llmtrain_tiktoken_")
    base = "https://openaipublic.blob.core.windows.net/gpt-2/encodings/main/"
    for name in ("vocab.bpe", "encoder.json"):
        key = hashlib.sha1((base + name).encode()).hexdigest()
        shutil.copy(os.path.join(gpt2_dir, name), os.path.join(cache, key))
    os.environ["TIKTOKEN_CACHE_DIR"] = cache
    import tiktoken

    return tiktoken.get_encoding("gpt2")


def main(gpt2_dir: str, src: str, dst: str) -> None:
    enc = gpt2_encoding(gpt2_dir)
    with open(src, encoding="utf-8") as f:
        texts = json.load(f)
    with open(dst, "w") as f:
        json.dump([enc.encode(t, disallowed_special=()) for t in texts], f)


if __name__ == "__main__":
    main(*sys.argv[1:4])
