"""Test peer: bitsandbytes' NF4 and int8 quantization and 8-bit AdamW (its CPU build) for llmtrain's tests.

Usage:
  bnb_peer.py nf4 IN ROWS COLS OUT   IN holds ROWS x COLS float32 values (raw); quantize_4bit (nf4,
                                     blocksize 64, compress_statistics) writes into the folder OUT:
                                     packed.bin (uint8), absmax.bin (uint8), absmax2.bin (float32),
                                     offset.bin (float32), dynamic.bin (float32, its 8-bit dynamic map)
                                     and dequantized.bin (float32, dequantize_4bit)
  bnb_peer.py int8 IN ROWS COLS OUT  int8_vectorwise_quant of the ROWS x COLS float32 values in IN: OUT/codes.bin
                                     (int8), OUT/absmax.bin (float32, the rows' statistics) and
                                     OUT/dequantized.bin (float32, int8_vectorwise_dequant)
  bnb_peer.py adamw8bit DIR STEPS LR WD N...
                                     AdamW8bit (betas 0.9, 0.95, eps 1e-8, min_8bit_size 4096) over
                                     tensors of N[i] float32 values: DIR/p{i}.bin the start, DIR/g{s}_{i}.bin
                                     step s's gradients; writes after each step DIR/out{s}_p{i}.bin and
                                     the moments: DIR/out{s}_{i}_{m,v}codes.bin (uint8) and
                                     _{m,v}absmax.bin (float32) where they are 8-bit, DIR/out{s}_{i}_{m,v}.bin
                                     (float32) where not; DIR/udynamic.bin: its unsigned dynamic map
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


def int8(path: str, rows: int, cols: int, out: str) -> None:
    w = torch.from_numpy(np.fromfile(path, dtype=np.float32).reshape(rows, cols))
    codes, stats, _ = F.int8_vectorwise_quant(w)
    codes.numpy().tofile(f"{out}/codes.bin")
    stats.float().numpy().tofile(f"{out}/absmax.bin")
    F.int8_vectorwise_dequant(codes, stats).float().numpy().tofile(f"{out}/dequantized.bin")


def adamw8bit(folder: str, steps: int, lr: float, wd: float, sizes: list) -> None:
    from bitsandbytes.optim import AdamW8bit

    params = [torch.nn.Parameter(torch.from_numpy(np.fromfile(f"{folder}/p{i}.bin", dtype=np.float32)))
              for i in range(len(sizes))]
    assert all(p.numel() == n for p, n in zip(params, sizes))
    opt = AdamW8bit(params, lr=lr, betas=(0.9, 0.95), eps=1e-8, weight_decay=wd, min_8bit_size=4096)
    for s in range(1, steps + 1):
        for i, p in enumerate(params):
            p.grad = torch.from_numpy(np.fromfile(f"{folder}/g{s}_{i}.bin", dtype=np.float32))
        opt.step()
        for i, p in enumerate(params):
            p.detach().numpy().tofile(f"{folder}/out{s}_p{i}.bin")
            st = opt.state[p]
            for name, key in (("m", "1"), ("v", "2")):
                if st["state" + key].dtype == torch.uint8:
                    st["state" + key].numpy().tofile(f"{folder}/out{s}_{i}_{name}codes.bin")
                    st["absmax" + key].float().numpy().tofile(f"{folder}/out{s}_{i}_{name}absmax.bin")
                else:
                    st["state" + key].float().numpy().tofile(f"{folder}/out{s}_{i}_{name}.bin")
    F.create_dynamic_map(signed=False).float().numpy().tofile(f"{folder}/udynamic.bin")


if __name__ == "__main__":
    if sys.argv[1] in ("nf4", "int8"):
        (nf4 if sys.argv[1] == "nf4" else int8)(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5])
    else:
        assert sys.argv[1] == "adamw8bit"
        adamw8bit(sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5]), [int(n) for n in sys.argv[6:]])
