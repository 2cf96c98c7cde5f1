"""Baseline for bench_tokenizer: tiktoken's "gpt2" encoding of one file, single-threaded, offline.

Usage: tiktoken_speed.py GPT2_DIR TEXT_FILE REPEAT. Prints one JSON object: the best time in seconds
over REPEAT runs of encode_ordinary, the token count and a checksum of the ids.
"""
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "python"))
from tiktoken_ids import gpt2_encoding  # noqa: E402


def main(gpt2_dir: str, path: str, repeat: str) -> None:
    enc = gpt2_encoding(gpt2_dir)
    with open(path, encoding="utf-8") as f:
        text = f.read()
    best, ids = float("inf"), []
    for _ in range(int(repeat)):
        start = time.perf_counter()
        ids = enc.encode_ordinary(text)
        best = min(best, time.perf_counter() - start)
    print(json.dumps({"seconds": best, "tokens": len(ids), "checksum": sum((i + 1) * t for i, t in enumerate(ids)) % (1 << 61)}))


if __name__ == "__main__":
    main(*sys.argv[1:4])
