// GPT-2's input embedding, out[b, t] = wte[idx[b, t]] + wpe[t], and its backward, deterministic with no
// atomics: dwpe adds the batch's rows for each position in batch order; dwte adds the rows of each id in
// position order, from the ids sorted stably by the caller. Tiles of 32 sorted positions add their runs
// of equal ids; a run that crosses a tile border leaves its part in a per-tile scratch row, and a second
// launch adds those in tile order. Ids are validated on the device: a bad id gives a NaN row (never a
// read outside wte) and is recorded in a BadId that the caller copies back when it likes, so checking
// never makes the host wait.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "common/dtype.h"

namespace llmtrain::kernels {

/// The first bad id a check found: `found` is set to 1 by the first one (later ones leave it as it is).
struct BadId {
  int64_t found;     // 0: none yet
  int64_t tag;       // which check (the caller's number)
  int64_t position;  // flat index into the ids
  int64_t value;
};

/// out[n] = wte[idx[n]] + wpe[start[b] + t] for the N = B * T tokens n = b * T + t (rows of C elements
/// of `dtype`; start null: all 0); an id outside [0, num_ids) gives a NaN row and is recorded into `bad`
/// with `tag`; a position outside wpe's `positions` rows gives a NaN row.
cudaError_t launch_embedding_fwd(const int64_t* idx,                       // (N)
                                 const void* wte, const void* wpe,         // (>= num_ids, C), (positions, C)
                                 const int64_t* start, int64_t positions,  // (B) or null
                                 DType dtype, int64_t N, int64_t T, int64_t C, int64_t num_ids,
                                 void* out,  // (N, C)
                                 BadId* bad, int64_t tag, cudaStream_t stream);

/// Records into `bad` (with `tag`) an id outside [0, num_ids) that is not `ignore_index` (when
/// allow_ignore).
cudaError_t launch_check_ids(const int64_t* ids, int64_t n, int64_t num_ids, bool allow_ignore, int64_t ignore_index,
                             BadId* bad, int64_t tag, cudaStream_t stream);

/// The rows of each scratch buffer launch_embedding_bwd needs for N tokens.
int64_t embedding_bwd_tiles(int64_t N);

/// dwte[v] = sum of dout[n] over the tokens with idx[n] == v, in position order (rows of ids outside
/// [0, rows) are skipped; dwte must be zero beforehand, and rows of absent ids stay so); dwpe[t] = sum of
/// dout[b * T + t] over b, in order.
cudaError_t launch_embedding_bwd(const void* dout,                                 // (N, C)
                                 const int64_t* sorted_ids, const int64_t* order,  // (N): ids sorted stably, and
                                                                                   // the token each came from
                                 DType dtype, int64_t N, int64_t T, int64_t C, int64_t rows, float* head,
                                 float* tail,  // (embedding_bwd_tiles(N), C)
                                 void* dwte,   // (rows, C)
                                 void* dwpe,   // (T, C)
                                 cudaStream_t stream);

}  // namespace llmtrain::kernels
