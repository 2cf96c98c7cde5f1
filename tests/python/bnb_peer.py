"""Test peer: bitsandbytes' NF4 quantization (its CPU build) for llmtrain's tests.

Usage:
  bnb_peer.py nf4 IN ROWS COLS OUT   IN holds ROWS x COLS float32 values (raw); quantize_4bit (nf4,
                                     blocksize 64, compress_statistics) writes into the folder OUT:
                                     packed.bin (uint8), absmax.bin (uint8), absmax2.bin (float32),
                                     offset.bin (float32), dynamic.bin (float32, its 8-bit dynamic map)
                                     and dequantized.bin (float32, dequantize_4bit)
"""
import os
import sys

os.environ.setdefault("TORCHDYNAMO_DISABLE", "1")  # bitsandbytes would compile its dequantization: minutes on a CPU

import numpy as np
import torch
import bitsandbytes.functional as F


def nf4(path: str, rows: int, cols: int, out: str) -> None:
    w = torch.from_numpy(np.fromfile(path, dtype=np.float32).reshape(rows, cols))
    q, state = F.quantize_4bit(w, blocksize=64, compress_statistics=True, quant_type="nf4")
    q.numpy().tofile(f"{out}/packed.bin")
    state.absmax.numpy().tofile(f"{out}/absmax.bin")
    state.state2.absmax.float().numpy().tofile(f"{out}/absmax2.bin")
    state.offset.float().reshape(1).numpy().tofile(f"{out}/offset.bin")
    state.state2.code.float().numpy().tofile(f"{out}/dynamic.bin")
    F.dequantize_4bit(q, state).float().numpy().tofile(f"{out}/dequantized.bin")


if __name__ == "__main__":
    assert sys.argv[1] == "nf4"
    nf4(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5])
