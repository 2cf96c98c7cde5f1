"""Test peer: the Python safetensors package on files an llmtrain test shares with it.

Usage: safetensors_peer.py write PATH   writes the reference tensors below to PATH
       safetensors_peer.py check PATH   reads PATH (written by llmtrain) and checks it holds them
The reference tensors: "a" float32 (2, 3) = arange / 4, "b" bfloat16 (4,) = [1, -2, 0.5, 3],
"c" float16 (3, 1, 2) = arange - 2, "empty" float32 (0, 5); metadata {"format": "pt", "who": "peer"}.
"""
import sys

import torch
from safetensors import safe_open
from safetensors.torch import save_file


def reference() -> dict:
    return {
        "a": torch.arange(6, dtype=torch.float32).reshape(2, 3) / 4,
        "b": torch.tensor([1, -2, 0.5, 3], dtype=torch.bfloat16),
        "c": (torch.arange(6, dtype=torch.float16) - 2).reshape(3, 1, 2),
        "empty": torch.zeros(0, 5, dtype=torch.float32),
    }


def main(mode: str, path: str) -> None:
    want = reference()
    if mode == "write":
        save_file(want, path, metadata={"format": "pt", "who": "peer"})
        return
    with safe_open(path, framework="pt") as f:
        if sorted(f.keys()) != sorted(want):
            sys.exit(f"keys {sorted(f.keys())}, expected {sorted(want)}")
        meta = f.metadata() or {}
        if meta.get("who") != "llmtrain":
            sys.exit(f"metadata {meta}")
        for name, t in want.items():
            got = f.get_tensor(name)
            if got.dtype != t.dtype or got.shape != t.shape or not torch.equal(got, t):
                sys.exit(f"{name}: got {got.dtype} {tuple(got.shape)} {got}, expected {t.dtype} {tuple(t.shape)} {t}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
