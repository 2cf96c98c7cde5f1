// Device pieces both flash-attention kernels share (included by the .cu files of this folder only).
#pragma once

#include <type_traits>

#include <cutlass/arch/barrier.h>
#include <cutlass/arch/reg_reconfig.h>
#include <cutlass/float8.h>
#include <cutlass/numeric_types.h>
#include <cute/arch/cluster_sm90.hpp>
#include <cute/tensor.hpp>
#include <cutlass/pipeline/pipeline.hpp>

#include "flash.cuh"

namespace llmtrain::kernels::flash {

using namespace cute;
using Element = cutlass::bfloat16_t;

using Fp8 = cutlass::float_e4m3_t;

// (rows, columns, heads, B) with the columns contiguous: the global view every TMA load tiles, rows and
// columns (T, D) for q, k, v and dO, (D, keys) for the fp8 forward's transposed v.
using Gmem = Layout<Shape<int, int, int, int>, Stride<int64_t, _1, int64_t, int64_t>>;
template <class E = Element>
using GmemTensor = decltype(make_tensor(make_gmem_ptr(static_cast<E const*>(nullptr)), Gmem{}));

template <class E = Element>
GmemTensor<E> gmem(const FlashTensor& t, int64_t rows, int64_t cols, int64_t heads, int64_t batch) {
  return make_tensor(make_gmem_ptr(static_cast<E const*>(t.data)),
                     make_layout(make_shape(int(rows), int(cols), int(heads), int(batch)),
                                 make_stride(t.row_stride, _1{}, t.head_stride, t.batch_stride)));
}

// The shared-memory atom of a K-major operand whose rows are kRowBytes long: 128-byte swizzled rows, or
// 64-byte ones for fp8 heads of 64.
template <class E, int kRowBytes>
using KMajorAtom = std::conditional_t<kRowBytes % 128 == 0, GMMA::Layout_K_SW128_Atom<E>, GMMA::Layout_K_SW64_Atom<E>>;

// A (rows, D, ...) tile's transpose (D, rows, ...) over the same shared memory: the operand of a product
// whose inner dimension is the rows (wgmma reads it MN-major).
template <class L, int kRows, int kD, int kStages>
using Transposed =
    decltype(composition(L{}, make_ordered_layout(Shape<Int<kD>, Int<kRows>, Int<kStages>>{}, Step<_2, _1, _3>{})));

// One batch of wgmma over K: C (+)= A B (C zeroed first with kZeroInit), committed and not waited for: the
// caller waits (warpgroup_wait) and fences C before reading it, and leaves a register A alone until then.
template <bool kZeroInit, class Mma, class TA, class TB, class TC>
__device__ __forceinline__ void wgmma_issue(Mma& mma, TA& a, TB const& b, TC& c) {
  warpgroup_fence_operand(c);
  warpgroup_arrive();
  if constexpr (kZeroInit) mma.accumulate_ = GMMA::ScaleOut::Zero;
#pragma unroll
  for (int kb = 0; kb < size<2>(a); ++kb) {
    gemm(mma, a(_, _, kb), b(_, _, kb), c);
    mma.accumulate_ = GMMA::ScaleOut::One;
  }
  warpgroup_commit_batch();
}

// wgmma_issue, waited for before returning. kRegA: A in registers (else descriptors of shared memory).
template <bool kZeroInit, bool kRegA, class Mma, class TA, class TB, class TC>
__device__ __forceinline__ void wgmma(Mma& mma, TA& a, TB const& b, TC& c) {
  if constexpr (kRegA) warpgroup_fence_operand(a);
  wgmma_issue<kZeroInit>(mma, a, b, c);
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

// dst[0 .. bytes) = src[0 .. bytes) from global memory, one bulk copy that completes `bytes` of the
// transaction barrier `bar` (16-byte aligned pointers, bytes a multiple of 16).
__device__ __forceinline__ void bulk_load(float* dst, const float* src, int bytes, uint64_t* bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                   uint32_t(__cvta_generic_to_shared(dst))),
               "l"(src), "r"(bytes), "r"(uint32_t(__cvta_generic_to_shared(bar)))
               : "memory");
}
// dst[0 .. bytes) += src[0 .. bytes) in float32, one bulk reduction from shared memory (16-byte aligned
// pointers, bytes a multiple of 16), in this thread's current bulk group.
__device__ __forceinline__ void bulk_add(float* dst, const float* src, int bytes) {
  asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;" ::"l"(dst),
               "r"(uint32_t(__cvta_generic_to_shared(src))), "r"(bytes)
               : "memory");
}
// dst[0 .. bytes) = src[0 .. bytes), one bulk copy from shared memory (as bulk_add asks).
__device__ __forceinline__ void bulk_store(float* dst, const float* src, int bytes) {
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(dst),
               "r"(uint32_t(__cvta_generic_to_shared(src))), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }
// Waits for this thread's bulk groups: until their sources are read (kRead), or until they are done.
template <bool kRead>
__device__ __forceinline__ void bulk_wait() {
  if constexpr (kRead) asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
  else asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
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

// A product's float accumulator rows (entries (c, r, j): column 8j + 2t + c of rows g and g + 8, r) as
// the A operand, in E, of the next product, whose inner dimension is those columns. An instruction's A
// takes kK = 16 (bf16) or 32 (fp8) columns: entry (s, r, h) of instruction kb is column
// 4t + s + 16h (fp8) or 2t + s + 8h (bf16) of those. bf16's operand holds the accumulator's entries in
// its own order. fp8's holds columns 2t + (s & 1) + 8 (s >> 1) + 16h in place of 4t + s + 16h, which
// the other operand's rows must follow (FlashFp8's vt); no entry leaves its lane.
template <class E, int kCols, class Acc>
__device__ __forceinline__ auto to_operand_a(Acc const& acc) {
  constexpr int kV = 4 / int(sizeof(E)), kK = 8 * kV;  // entries of a row in a register; columns an instruction
  Tensor a = make_tensor<E>(Layout<Shape<Shape<Int<kV>, _2, _2>, _1, Int<kCols / kK>>>{});
#pragma unroll
  for (int kb = 0; kb < kCols / kK; ++kb)
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int r = 0; r < 2; ++r)
#pragma unroll
        for (int s = 0; s < kV; ++s)
          a(make_coord(s, r, h), 0, kb) = E(acc(make_coord(s & 1, r, kK / 8 * kb + kV / 2 * h + (s >> 1)), 0, 0));
  return a;
}

}  // namespace llmtrain::kernels::flash
