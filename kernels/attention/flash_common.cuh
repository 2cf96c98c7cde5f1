// Device pieces both flash-attention kernels share (included by the .cu files of this folder only).
#pragma once

#include <cutlass/arch/barrier.h>
#include <cutlass/arch/reg_reconfig.h>
#include <cutlass/numeric_types.h>
#include <cute/arch/cluster_sm90.hpp>
#include <cute/tensor.hpp>
#include <cutlass/pipeline/pipeline.hpp>

#include "flash.cuh"

namespace llmtrain::kernels::flash {

using namespace cute;
using Element = cutlass::bfloat16_t;

// (T, D, heads, B) with D contiguous: the global view every TMA load tiles.
using Gmem = Layout<Shape<int, int, int, int>, Stride<int64_t, _1, int64_t, int64_t>>;
using GmemTensor = decltype(make_tensor(make_gmem_ptr(static_cast<Element const*>(nullptr)), Gmem{}));

inline GmemTensor gmem(const FlashTensor& t, int64_t seqlen, int64_t head_dim, int64_t heads, int64_t batch) {
  return make_tensor(make_gmem_ptr(static_cast<Element const*>(t.data)),
                     make_layout(make_shape(int(seqlen), int(head_dim), int(heads), int(batch)),
                                 make_stride(t.row_stride, _1{}, t.head_stride, t.batch_stride)));
}

// A (rows, D, ...) tile's transpose (D, rows, ...) over the same shared memory: the operand of a product
// whose inner dimension is the rows (wgmma reads it MN-major).
template <class L, int kRows, int kD, int kStages>
using Transposed =
    decltype(composition(L{}, make_ordered_layout(Shape<Int<kD>, Int<kRows>, Int<kStages>>{}, Step<_2, _1, _3>{})));

// One batch of wgmma over K: C (+)= A B, waited for before returning. kRegA: A in registers (else
// descriptors of shared memory).
template <bool kZeroInit, bool kRegA, class Mma, class TA, class TB, class TC>
__device__ __forceinline__ void wgmma(Mma& mma, TA& a, TB const& b, TC& c) {
  if constexpr (kRegA) warpgroup_fence_operand(a);
  warpgroup_fence_operand(c);
  warpgroup_arrive();
  if constexpr (kZeroInit) mma.accumulate_ = GMMA::ScaleOut::Zero;
#pragma unroll
  for (int kb = 0; kb < size<2>(a); ++kb) {
    gemm(mma, a(_, _, kb), b(_, _, kb), c);
    mma.accumulate_ = GMMA::ScaleOut::One;
  }
  warpgroup_commit_batch();
  warpgroup_wait<0>();
  warpgroup_fence_operand(c);
  if constexpr (kRegA) warpgroup_fence_operand(a);
}

// The four lanes that hold one accumulator row.
__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// The load pipeline's roles: warpgroup 0 produces (thread 0 issues every TMA load and is the leader),
// the two consumer warpgroups release each stage. `bytes`: what one stage's loads bring.
template <class Pipeline>
__device__ __forceinline__ typename Pipeline::Params pipeline_params(uint32_t bytes) {
  typename Pipeline::Params pp;
  pp.transaction_bytes = bytes;
  pp.role = threadIdx.x < 128 ? Pipeline::ThreadCategory::Producer : Pipeline::ThreadCategory::Consumer;
  pp.is_leader = threadIdx.x == 0;
  pp.num_consumers = 256;
  return pp;
}

// Launches a kernel whose shared memory is the dynamic `smem` bytes (over the 48 KiB default).
template <class Params>
cudaError_t launch_with_smem(void (*kernel)(Params), const Params& p, dim3 grid, int threads, int smem,
                             cudaStream_t stream) {
  const cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (e != cudaSuccess) return e;
  kernel<<<grid, threads, smem, stream>>>(p);
  return cudaGetLastError();
}

// A product's float accumulator rows (c: column pair, r: the two rows, j: column octets) as the bf16
// A operand of the next product, whose inner dimension is those columns: the accumulator's (column
// pair, row, column octet) is the operand's (column pair, row, half of 16 columns) for each 16 columns.
template <int kCols, class Acc>
__device__ __forceinline__ auto to_operand_a(Acc const& acc) {
  Tensor a = make_tensor<Element>(Layout<Shape<Shape<_2, _2, _2>, _1, Int<kCols / 16>>>{});
#pragma unroll
  for (int j = 0; j < kCols / 8; ++j)
#pragma unroll
    for (int r = 0; r < 2; ++r)
#pragma unroll
      for (int c = 0; c < 2; ++c) a(make_coord(c, r, j % 2), 0, j / 2) = Element(acc(make_coord(c, r, j), 0, 0));
  return a;
}

}  // namespace llmtrain::kernels::flash
