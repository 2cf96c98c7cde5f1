// The backward kernel of flash.cuh. A block takes 128 keys of one query head and walks the query blocks
// at and below the diagonal, 64 queries at a time: one producer thread loads the block's keys and values
// once and streams (q, dO) tiles through a two-stage pipeline; two consumer warpgroups, 64 keys each,
// recompute S^T = K Q^T and P^T from the forward's log-sum-exp, form dP^T = V dO^T and
// dS^T = P^T (dP^T - rowsum(dO O)), and accumulate dV += P^T dO and dK += dS^T Q in registers (P^T and
// dS^T as register operands). dQ += dS K goes through dS in shared memory, each warpgroup over its own
// 64 keys, and is added to a float32 buffer (by bulk reductions or atomics; or, deterministic, each
// warpgroup's share is stored apart for the caller to sum in a fixed order); dK and dV are stored per
// query head at the end. A small kernel before it forms rowsum(dO O) and zeroes that buffer.
#include <cuda_bf16.h>

#include <cassert>
#include <cmath>

#include "flash.cuh"
#include "flash_common.cuh"

namespace llmtrain::kernels {
namespace {

using namespace flash;

template <int kD>
struct Bwd {
  static constexpr int kBlockM = 64, kBlockN = 128, kStages = 2, kThreads = 384;
  // S^T, dP^T (keys x queries), dV, dK (keys x D): the two warpgroups stacked along the keys.
  using AlongKeys = Layout<Shape<_2, _1, _1>>;
  using MmaSdP = decltype(make_tiled_mma(
      GMMA::ss_op_selector<Element, Element, float, Shape<_64, Int<kBlockM>, Int<kD>>>(), AlongKeys{}));
  using MmaDKV =
      decltype(make_tiled_mma(GMMA::rs_op_selector<Element, Element, float, Shape<_64, Int<kD>, Int<kBlockM>>,
                                                   GMMA::Major::K, GMMA::Major::MN>(),
                              AlongKeys{}));
  // dQ (queries x D) = dS (queries x keys) K: each warpgroup over its own 64 keys (the dS rows it wrote),
  // so that neither waits for the other; both add their part. kDQ columns a product: at D = 128 two
  // products of 64, so that the consumers' registers hold dV, dK and dQ at once.
  static constexpr int kDQ = kD > 64 ? 64 : kD;
  // How dQ is added to: at D = 128 each row of a warpgroup's share by one bulk reduction from shared memory
  // (H100, B8 H16 T1024: backward 0.72 ms against 0.88 with atomics); at 64 per entry with atomics (0.76
  // against 0.81 by bulk reductions).
  static constexpr bool kBulkDQ = kD > 64;
  static constexpr int kDQRow = kD + 4;  // floats a row of the dQ staging (16-byte aligned rows)
  using MmaDQ = decltype(make_tiled_mma(
      GMMA::ss_op_selector<Element, Element, float, Shape<_64, Int<kDQ>, _64>, GMMA::Major::MN, GMMA::Major::MN>()));
  using Atom = GMMA::Layout_K_SW128_Atom<Element>;
  using SmemKV = decltype(tile_to_shape(Atom{}, Shape<Int<kBlockN>, Int<kD>, _1>{}));
  using SmemKt = Transposed<SmemKV, kBlockN, kD, 1>;  // (D, keys): dQ's B operand
  using SmemQdO = decltype(tile_to_shape(Atom{}, Shape<Int<kBlockM>, Int<kD>, Int<kStages>>{}));
  using SmemQdOt = Transposed<SmemQdO, kBlockM, kD, kStages>;  // (D, queries): dK's and dV's B operands
  // dS^T stored keys x queries (64 queries: one swizzled row per key), read as dS (queries x keys).
  using SmemDSt = decltype(tile_to_shape(Atom{}, Shape<Int<kBlockN>, Int<kBlockM>>{}));
  using SmemDS =
      decltype(composition(SmemDSt{}, make_ordered_layout(Shape<Int<kBlockM>, Int<kBlockN>>{}, Step<_2, _1>{})));
  using Pipeline = cutlass::PipelineTmaAsync<kStages>;

  struct Smem {
    array_aligned<Element, cosize_v<SmemKV>, 1024> k;
    array_aligned<Element, cosize_v<SmemKV>, 1024> v;
    array_aligned<Element, cosize_v<SmemQdO>, 1024> q;
    array_aligned<Element, cosize_v<SmemQdO>, 1024> dout;
    array_aligned<Element, cosize_v<SmemDSt>, 1024> ds;
    // With kBulkDQ, each warpgroup's dQ share of a query block, rows padded (fewer bank conflicts).
    array_aligned<float, kBulkDQ ? 2 * kBlockM * kDQRow : 4, 128> dq;
    cutlass::arch::ClusterTransactionBarrier kv_full;
    typename Pipeline::SharedStorage pipe;
  };

  using TmaKV = decltype(make_tma_copy(SM90_TMA_LOAD{}, GmemTensor<>{}, take<0, 2>(SmemKV{}),
                                       Shape<Int<kBlockN>, Int<kD>>{}, _1{}));
  using TmaQdO = decltype(make_tma_copy(SM90_TMA_LOAD{}, GmemTensor<>{}, take<0, 2>(SmemQdO{}),
                                        Shape<Int<kBlockM>, Int<kD>>{}, _1{}));

  struct Params {
    TmaQdO tma_q, tma_dout;
    TmaKV tma_k, tma_v;
    Gmem q_layout, kv_layout;
    const float* lse;    // (B, H, T)
    const float* delta;  // (B, H, T): rowsum(dO O)
    float* dq;           // (B, H, T, D) float32, added to; or (B, H, dq_parts, T, D), stored
    void* dk;            // (B, H, T, D) float32 or bf16, stored
    void* dv;
    bool bf16_dkv;
    int dq_parts;  // 0: dq added to
    int seqlen, heads, group;
    float scale, scale_log2;
  };
};

template <int kD>
__global__ void __launch_bounds__(Bwd<kD>::kThreads, 1)
    flash_bwd_kernel(const __grid_constant__ typename Bwd<kD>::Params p) {
  using F = Bwd<kD>;
  constexpr int kBlockM = F::kBlockM, kBlockN = F::kBlockN;
  extern __shared__ char smem_raw[];
  auto& smem = *reinterpret_cast<typename F::Smem*>(smem_raw);

  const int n_block = blockIdx.x, h = blockIdx.y, b = blockIdx.z, kv_head = h / p.group;
  // Queries at or after the block's first key (causal), to the end.
  const int m_first = n_block * kBlockN / kBlockM, m_end = ceil_div(p.seqlen, kBlockM);
  const int warpgroup = threadIdx.x / 128;

  if (threadIdx.x == 0) {
    prefetch_tma_descriptor(p.tma_q.get_tma_descriptor());
    prefetch_tma_descriptor(p.tma_dout.get_tma_descriptor());
    prefetch_tma_descriptor(p.tma_k.get_tma_descriptor());
    prefetch_tma_descriptor(p.tma_v.get_tma_descriptor());
    smem.kv_full.init(1);
  }
  const auto pp = pipeline_params<typename F::Pipeline>(2 * kBlockM * kD * sizeof(Element));  // q and dO
  typename F::Pipeline pipe(smem.pipe, pp, Shape<_1, _1, _1>{});
  __syncthreads();

  if (warpgroup == 0) {
    cutlass::arch::warpgroup_reg_dealloc<24>();
    if (threadIdx.x != 0) return;
    Tensor mK = p.tma_k.get_tma_tensor(shape(p.kv_layout));
    Tensor mV = p.tma_v.get_tma_tensor(shape(p.kv_layout));
    Tensor gK = local_tile(mK(_, _, kv_head, b), Shape<Int<kBlockN>, Int<kD>>{}, make_coord(n_block, _0{}));
    Tensor gV = local_tile(mV(_, _, kv_head, b), Shape<Int<kBlockN>, Int<kD>>{}, make_coord(n_block, _0{}));
    Tensor sK = make_tensor(make_smem_ptr(smem.k.data()), typename F::SmemKV{});
    Tensor sV = make_tensor(make_smem_ptr(smem.v.data()), typename F::SmemKV{});
    auto [tKg, tKs] = tma_partition(p.tma_k, _0{}, Layout<_1>{}, group_modes<0, 2>(sK(_, _, 0)), group_modes<0, 2>(gK));
    auto [tVg, tVs] = tma_partition(p.tma_v, _0{}, Layout<_1>{}, group_modes<0, 2>(sV(_, _, 0)), group_modes<0, 2>(gV));
    smem.kv_full.arrive_and_expect_tx(2 * kBlockN * kD * sizeof(Element));
    copy(p.tma_k.with(reinterpret_cast<uint64_t&>(smem.kv_full), 0), tKg, tKs);
    copy(p.tma_v.with(reinterpret_cast<uint64_t&>(smem.kv_full), 0), tVg, tVs);

    Tensor mQ = p.tma_q.get_tma_tensor(shape(p.q_layout));
    Tensor mdO = p.tma_dout.get_tma_tensor(shape(p.q_layout));
    Tensor gQ = local_tile(mQ(_, _, h, b), Shape<Int<kBlockM>, Int<kD>>{}, make_coord(_, _0{}));  // (M, D, m)
    Tensor gdO = local_tile(mdO(_, _, h, b), Shape<Int<kBlockM>, Int<kD>>{}, make_coord(_, _0{}));
    Tensor sQ = make_tensor(make_smem_ptr(smem.q.data()), typename F::SmemQdO{});
    Tensor sdO = make_tensor(make_smem_ptr(smem.dout.data()), typename F::SmemQdO{});
    auto [tQg, tQs] = tma_partition(p.tma_q, _0{}, Layout<_1>{}, group_modes<0, 2>(sQ), group_modes<0, 2>(gQ));
    auto [tdOg, tdOs] = tma_partition(p.tma_dout, _0{}, Layout<_1>{}, group_modes<0, 2>(sdO), group_modes<0, 2>(gdO));
    auto state = cutlass::make_producer_start_state<typename F::Pipeline>();
    for (int m = m_first; m < m_end; ++m) {
      pipe.producer_acquire(state);
      copy(p.tma_q.with(*pipe.producer_get_barrier(state), 0), tQg(_, m), tQs(_, state.index()));
      copy(p.tma_dout.with(*pipe.producer_get_barrier(state), 0), tdOg(_, m), tdOs(_, state.index()));
      ++state;
    }
    return;
  }

  cutlass::arch::warpgroup_reg_alloc<240>();
  const int tid = threadIdx.x - 128;
  typename F::MmaSdP mma_sdp;
  typename F::MmaDKV mma_dkv;
  typename F::MmaDQ mma_dq;
  auto thr_sdp = mma_sdp.get_thread_slice(tid);
  auto thr_dkv = mma_dkv.get_thread_slice(tid);
  const int consumer = tid / 128;  // which 64 keys
  auto thr_dq = mma_dq.get_thread_slice(tid % 128);
  Tensor sK = make_tensor(make_smem_ptr(smem.k.data()), typename F::SmemKV{});
  Tensor sV = make_tensor(make_smem_ptr(smem.v.data()), typename F::SmemKV{});
  Tensor sKt = make_tensor(make_smem_ptr(smem.k.data()), typename F::SmemKt{});
  Tensor sQ = make_tensor(make_smem_ptr(smem.q.data()), typename F::SmemQdO{});
  Tensor sdO = make_tensor(make_smem_ptr(smem.dout.data()), typename F::SmemQdO{});
  Tensor sQt = make_tensor(make_smem_ptr(smem.q.data()), typename F::SmemQdOt{});
  Tensor sdOt = make_tensor(make_smem_ptr(smem.dout.data()), typename F::SmemQdOt{});
  Tensor sdSt = make_tensor(make_smem_ptr(smem.ds.data()), typename F::SmemDSt{});
  Tensor sdS = make_tensor(make_smem_ptr(smem.ds.data()), typename F::SmemDS{});
  // dS^T goes to shared memory with stmatrix: one row address a lane for each 8 x 8 piece, where element
  // stores would keep an address per element live across the loop (ptxas spilled them at D = 128).
  auto store_ds = make_tiled_copy_C(Copy_Atom<SM90_U32x4_STSM_N, Element>{}, mma_sdp);
  auto thr_store_ds = store_ds.get_thread_slice(tid);
  Tensor tDSsDS = thr_store_ds.partition_D(sdSt);

  Tensor tSrK = thr_sdp.partition_fragment_A(sK(_, _, 0));  // (MMA, 1, D / 16)
  Tensor tSrV = thr_sdp.partition_fragment_A(sV(_, _, 0));
  Tensor tSrQ = thr_sdp.partition_fragment_B(sQ);  // (MMA, 1, D / 16, stage)
  Tensor tSrdO = thr_sdp.partition_fragment_B(sdO);
  Tensor tKVrdOt = thr_dkv.partition_fragment_B(sdOt);  // (MMA, 1, queries / 16, stage)
  Tensor tKVrQt = thr_dkv.partition_fragment_B(sQt);
  Tensor tQrdS = thr_dq.partition_fragment_A(local_tile(sdS, Shape<_64, _64>{}, make_coord(0, consumer)));
  Tensor tdVrdV = partition_fragment_C(mma_dkv, Shape<Int<kBlockN>, Int<kD>>{});
  Tensor tdKrdK = partition_fragment_C(mma_dkv, Shape<Int<kBlockN>, Int<kD>>{});
  clear(tdVrdV);
  clear(tdKrdK);
  // Coordinates (key, query) of this thread's score entries, and (query, d) of its dQ entries.
  Tensor tScS = thr_sdp.partition_C(make_identity_tensor(Shape<Int<kBlockN>, Int<kBlockM>>{}));
  Tensor tQcQ = thr_dq.partition_C(make_identity_tensor(Shape<Int<kBlockM>, Int<F::kDQ>>{}));
  const int key0 = n_block * kBlockN;
  // Bulk adds are issued by the lanes of each warpgroup's first warp.
  const bool adds_dq = p.dq_parts == 0, issues = F::kBulkDQ && adds_dq && tid % 128 < 32;
  float* dq_stage = smem.dq.data() + (F::kBulkDQ ? consumer * kBlockM * F::kDQRow : 0);
  const int64_t row_base = (int64_t(b) * p.heads + h) * p.seqlen;  // (b, h, 0) of lse, delta and dq

  smem.kv_full.wait(0);
  typename F::Pipeline::PipelineState state;
  for (int m = m_first; m < m_end; ++m) {
    const int q0 = m * kBlockM;
    pipe.consumer_wait(state);
    Tensor tSrS = partition_fragment_C(mma_sdp, Shape<Int<kBlockN>, Int<kBlockM>>{});  // ((2, 2, 8), 1, 1)
    Tensor tSrdP = partition_fragment_C(mma_sdp, Shape<Int<kBlockN>, Int<kBlockM>>{});
    wgmma<true, false>(mma_sdp, tSrK, tSrQ(_, _, _, state.index()), tSrS);
    wgmma<true, false>(mma_sdp, tSrV, tSrdO(_, _, _, state.index()), tSrdP);
    // P^T = exp(scale S^T - lse[query]) where query >= key (and the query exists), else 0;
    // dS^T = P^T (dP^T - delta[query]). A thread's entries (column pair c, row r, column octet j) hold
    // query 2t + c + 8j of two keys: each query's lse and delta are read once for both.
#pragma unroll
    for (int j = 0; j < kBlockM / 8; ++j)
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        const int query = q0 + get<1>(tScS(make_coord(c, 0, j), 0, 0));
        const bool exists = query < p.seqlen;
        const float lse = exists ? p.lse[row_base + query] * float(M_LOG2E) : 0.f;
        const float delta = exists ? p.delta[row_base + query] : 0.f;
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const auto i = make_coord(make_coord(c, r, j), 0, 0);
          const bool live = exists && query >= key0 + get<0>(tScS(i));
          const float prob = live ? exp2f(tSrS(i) * p.scale_log2 - lse) : 0.f;
          tSrS(i) = prob;
          tSrdP(i) = prob * (tSrdP(i) - delta);
        }
      }
    Tensor tdVrP = to_operand_a<Element, kBlockM>(tSrS);
    Tensor tdKrdS = to_operand_a<Element, kBlockM>(tSrdP);
    wgmma<false, true>(mma_dkv, tdVrP, tKVrdOt(_, _, _, state.index()), tdVrdV);
    wgmma<false, true>(mma_dkv, tdKrdS, tKVrQt(_, _, _, state.index()), tdKrdK);
    pipe.consumer_release(state);  // q and dO read for the last time
    ++state;

    // This warpgroup's dS^T rows into shared memory once its last dQ product is done with them (and its dQ
    // staging once the last bulk add has read it), then dQ.
    if (issues) bulk_wait<true>();
    cutlass::arch::NamedBarrier::sync(128, 1 + consumer);
    // The operand holds dS^T's entries in the accumulator's order (to_operand_a), so it is read as one.
    copy(store_ds, thr_store_ds.retile_S(make_tensor(tdKrdS.data(), tSrdP.layout())), tDSsDS);
    cutlass::arch::fence_view_async_shared();
    cutlass::arch::NamedBarrier::sync(128, 1 + consumer);
#pragma unroll
    for (int slice = 0; slice < kD / F::kDQ; ++slice) {
      Tensor tQrKt =
          thr_dq.partition_fragment_B(local_tile(sKt(_, _, 0), Shape<Int<F::kDQ>, _64>{}, make_coord(slice, consumer)));
      Tensor tdQrdQ = partition_fragment_C(mma_dq, Shape<Int<kBlockM>, Int<F::kDQ>>{});
      wgmma<true, false>(mma_dq, tQrdS, tQrKt, tdQrdQ);
      // Added (staged for the bulk adds below, or with atomics), or (deterministic) this warpgroup's share of
      // the block's rows stored apart.
      float* dq = adds_dq ? p.dq + row_base * kD
                          : p.dq + ((int64_t(b) * p.heads + h) * p.dq_parts + 2 * n_block + consumer) * p.seqlen * kD;
#pragma unroll
      for (int i = 0; i < size(tdQrdQ); ++i) {
        const int row = get<0>(tQcQ(i)), col = slice * F::kDQ + get<1>(tQcQ(i));
        const float value = tdQrdQ(i) * p.scale;
        if (F::kBulkDQ && adds_dq) {
          dq_stage[row * F::kDQRow + col] = value;
        } else if (q0 + row < p.seqlen) {
          float* at = dq + int64_t(q0 + row) * kD + col;
          if (adds_dq) atomicAdd(at, value);
          else *at = value;
        }
      }
    }
    if (F::kBulkDQ && adds_dq) {  // each row added to dq by one bulk reduction (float32 adds in L2)
      cutlass::arch::fence_view_async_shared();
      cutlass::arch::NamedBarrier::sync(128, 1 + consumer);
      if (issues) {
        for (int row = tid % 32; row < kBlockM && q0 + row < p.seqlen; row += 32)
          bulk_add(p.dq + (row_base + q0 + row) * kD, dq_stage + row * F::kDQRow, kD * int(sizeof(float)));
        bulk_commit();
      }
    }
  }
  if (issues) bulk_wait<false>();  // the last adds done before the block's shared memory goes

  // dK = scale dS^T Q (dV has no scale; dQ = scale dS K above), this query head's, stored.
  Tensor tKVc = thr_dkv.partition_C(make_identity_tensor(Shape<Int<kBlockN>, Int<kD>>{}));
  // Entries 2j and 2j + 1 of an accumulator are neighbouring columns of one row: stored as pairs.
#pragma unroll
  for (int i = 0; i < size(tdKrdK); i += 2) {
    const int key = key0 + get<0>(tKVc(i));
    assert(get<0>(tKVc(i + 1)) == get<0>(tKVc(i)) && get<1>(tKVc(i + 1)) == get<1>(tKVc(i)) + 1);
    if (key >= p.seqlen) continue;
    const int64_t at = (row_base + key) * kD + get<1>(tKVc(i));
    const float2 dk{tdKrdK(i) * p.scale, tdKrdK(i + 1) * p.scale}, dv{tdVrdV(i), tdVrdV(i + 1)};
    if (p.bf16_dkv) {
      *reinterpret_cast<__nv_bfloat162*>(static_cast<__nv_bfloat16*>(p.dk) + at) = __float22bfloat162_rn(dk);
      *reinterpret_cast<__nv_bfloat162*>(static_cast<__nv_bfloat16*>(p.dv) + at) = __float22bfloat162_rn(dv);
    } else {
      *reinterpret_cast<float2*>(static_cast<float*>(p.dk) + at) = dk;
      *reinterpret_cast<float2*>(static_cast<float*>(p.dv) + at) = dv;
    }
  }
}

// delta = rowsum(dO O) in float32 for each of the `rows` (b, h, t), kD / 8 lanes a row (16 bytes each),
// and dq's rows zeroed where dq is given (the adds' start).
template <int kD>
__global__ void flash_bwd_prep_kernel(FlashTensor dout, FlashTensor o, int heads, int seqlen, int64_t rows,
                                      float* delta, float* dq) {
  constexpr int kLanes = kD / 8;
  const int64_t row = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / kLanes;
  const int lane = threadIdx.x % kLanes;
  const bool valid = row < rows;  // no early return: the sum below shuffles across the warp
  float sum = 0.f;
  if (valid) {
    const int64_t t = row % seqlen, bh = row / seqlen, h = bh % heads, b = bh / heads;
    const auto at = [&](const FlashTensor& x) {
      return reinterpret_cast<const uint4*>(static_cast<const __nv_bfloat16*>(x.data) + b * x.batch_stride +
                                            h * x.head_stride + t * x.row_stride + lane * 8);
    };
    const uint4 g = *at(dout), y = *at(o);
    const auto* g2 = reinterpret_cast<const __nv_bfloat162*>(&g);
    const auto* y2 = reinterpret_cast<const __nv_bfloat162*>(&y);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 a = __bfloat1622float2(g2[i]), c = __bfloat1622float2(y2[i]);
      sum += a.x * c.x + a.y * c.y;
    }
  }
#pragma unroll
  for (int m = kLanes / 2; m > 0; m /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, m);
  if (!valid) return;
  if (lane == 0) delta[row] = sum;
  if (dq) {
    float4* z = reinterpret_cast<float4*>(dq + row * kD + lane * 8);
    z[0] = z[1] = make_float4(0.f, 0.f, 0.f, 0.f);
  }
}

template <int kD>
cudaError_t launch(const FlashBackwardArgs& a, cudaStream_t stream) {
  using F = Bwd<kD>;
  const FlashArgs& f = a.forward;
  const auto q = gmem(f.q, f.seqlen, kD, f.heads, f.batch), dout = gmem(a.dout, f.seqlen, kD, f.heads, f.batch);
  const auto k = gmem(f.k, f.seqlen, kD, f.kv_heads, f.batch), v = gmem(f.v, f.seqlen, kD, f.kv_heads, f.batch);
  const auto qdo_tile = Shape<Int<F::kBlockM>, Int<kD>>{};
  const auto kv_tile = Shape<Int<F::kBlockN>, Int<kD>>{};
  typename F::Params p{make_tma_copy(SM90_TMA_LOAD{}, q, take<0, 2>(typename F::SmemQdO{}), qdo_tile, _1{}),
                       make_tma_copy(SM90_TMA_LOAD{}, dout, take<0, 2>(typename F::SmemQdO{}), qdo_tile, _1{}),
                       make_tma_copy(SM90_TMA_LOAD{}, k, take<0, 2>(typename F::SmemKV{}), kv_tile, _1{}),
                       make_tma_copy(SM90_TMA_LOAD{}, v, take<0, 2>(typename F::SmemKV{}), kv_tile, _1{}),
                       q.layout(),
                       k.layout(),
                       f.lse,
                       a.delta,
                       a.dq,
                       a.dk,
                       a.dv,
                       a.bf16_dkv,
                       a.deterministic ? int(flash_dq_parts(f.seqlen)) : 0,
                       int(f.seqlen),
                       int(f.heads),
                       int(f.heads / f.kv_heads),
                       f.scale,
                       f.scale * float(M_LOG2E)};
  const FlashTensor o{f.o, f.o_batch_stride, f.o_head_stride, f.o_row_stride};
  if (!flash_fits(o) || !flash_fits(a.dout)) return cudaErrorInvalidValue;
  const int64_t rows = f.batch * f.heads * f.seqlen;
  constexpr int kPrepThreads = 256;
  flash_bwd_prep_kernel<kD><<<unsigned(ceil_div(rows * (kD / 8), int64_t(kPrepThreads))), kPrepThreads, 0, stream>>>(
      a.dout, o, int(f.heads), int(f.seqlen), rows, a.delta, a.deterministic ? nullptr : a.dq);
  const dim3 grid(unsigned(ceil_div(f.seqlen, int64_t(F::kBlockN))), unsigned(f.heads), unsigned(f.batch));
  return launch_with_smem(&flash_bwd_kernel<kD>, p, grid, F::kThreads, int(sizeof(typename F::Smem)), stream);
}

}  // namespace

int64_t flash_dq_parts(int64_t seqlen) { return 2 * ceil_div(seqlen, int64_t(Bwd<64>::kBlockN)); }

cudaError_t launch_flash_backward(const FlashBackwardArgs& a, cudaStream_t stream) {
  const FlashArgs& f = a.forward;
  if (f.batch == 0 || f.heads == 0 || f.seqlen == 0) return cudaSuccess;
  return f.head_dim == 64 ? launch<64>(a, stream) : launch<128>(a, stream);
}

}  // namespace llmtrain::kernels
