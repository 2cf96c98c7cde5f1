// The backward kernel of flash.cuh. A block takes 128 keys of one query head and walks the query blocks
// at and below the diagonal, 64 queries at a time: one producer thread loads the block's keys and values
// once and streams (q, dO) tiles, with their rows' log-sum-exp and rowsum(dO O), through a two-stage
// pipeline; two consumer warpgroups, 64 keys each, recompute S^T = K Q^T and P^T from the forward's
// log-sum-exp, form dP^T = V dO^T and dS^T = P^T (dP^T - rowsum(dO O)), and accumulate dV += P^T dO and
// dK += dS^T Q in registers (P^T and dS^T as register operands), each product issued as soon as its
// operands are ready and waited for only where its result is read. Both warpgroups' dS^T then go to
// shared memory, and dQ^T = K^T dS^T over the block's 128 keys is split between them; each stages its
// part of the tile in its registers' order and adds it to a float32 buffer in that order with one bulk
// reduction (or, deterministic, stores it apart for the last kernel to sum in the blocks' order). dK and
// dV are stored per query head at the end. A small kernel before it forms rowsum(dO O) (and a copy of
// the log-sum-exp, both padded to whole tiles) and zeroes that buffer; one after it rounds dQ to bf16.
// A head's blocks of keys are launched side by side, longest first (the first keys see the most queries),
// so that the blocks in flight share the head's q and dO in L2.
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
  // dQ^T (D x queries) = K^T (D x keys) dS^T (keys x queries) over all 128 keys, transposed so that dS^T
  // as stored is the B operand: the warpgroups side by side along the queries at D = 64 (32 each), along D
  // at 128 (64 each). kDQN: the queries of one warpgroup's product.
  static constexpr int kDQN = kD > 64 ? kBlockM : kBlockM / 2;
  using DQAtoms = std::conditional_t<(kD > 64), Layout<Shape<_2, _1, _1>>, Layout<Shape<_1, _2, _1>>>;
  using MmaDQ =
      decltype(make_tiled_mma(GMMA::ss_op_selector<Element, Element, float, Shape<_64, Int<kDQN>, Int<kBlockN>>,
                                                   GMMA::Major::MN, GMMA::Major::MN>(),
                              DQAtoms{}));
  // A thread's dQ^T entries (kD * kBlockM / 256), staged and accumulated in its registers' order: warpgroup
  // w's half of a tile holds at float4 c * 128 + t the entries 4c .. 4c + 3 of its thread t (no bank
  // conflicts, and each half one contiguous bulk reduction).
  static constexpr int kDQFrag = kD * kBlockM / 256;
  using Atom = GMMA::Layout_K_SW128_Atom<Element>;
  using SmemKV = decltype(tile_to_shape(Atom{}, Shape<Int<kBlockN>, Int<kD>, _1>{}));
  using SmemKt = Transposed<SmemKV, kBlockN, kD, 1>;  // (D, keys): dQ's B operand
  using SmemQdO = decltype(tile_to_shape(Atom{}, Shape<Int<kBlockM>, Int<kD>, Int<kStages>>{}));
  using SmemQdOt = Transposed<SmemQdO, kBlockM, kD, kStages>;  // (D, queries): dK's and dV's B operands
  // dS^T stored keys x queries in two buffers (one an iteration, so that a warpgroup can write the next
  // while the other still reads this one), with swizzled rows as wide as a warpgroup's kDQN queries; read
  // as (queries x keys), the dQ product's MN-major B operand.
  using SmemDSt = decltype(tile_to_shape(KMajorAtom<Element, kDQN * 2>{}, Shape<Int<kBlockN>, Int<kBlockM>, _2>{}));
  using SmemDS = Transposed<SmemDSt, kBlockN, kBlockM, 2>;
  using Pipeline = cutlass::PipelineTmaAsync<kStages>;

  struct Smem {
    array_aligned<Element, cosize_v<SmemKV>, 1024> k;
    array_aligned<Element, cosize_v<SmemKV>, 1024> v;
    array_aligned<Element, cosize_v<SmemQdO>, 1024> q;
    array_aligned<Element, cosize_v<SmemQdO>, 1024> dout;
    array_aligned<Element, cosize_v<SmemDSt>, 1024> ds;
    array_aligned<float, kD * kBlockM, 128> dq;               // a tile of dQ^T in the registers' order (kDQFrag)
    array_aligned<float, kStages * kBlockM, 128> lse, delta;  // each stage's rows', with q and dO
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
    // (B, H, tiles * kBlockM): rowsum(dO O) (0 past T), then the log-sum-exp times log2(e) (+inf past T)
    const float* delta;
    int64_t lse_at;   // where the log-sum-exp starts in delta
    float* dq_accum;  // (B, H, [parts,] tiles, kBlockM * D) float32: added to, or (parts) stored
    void* dk;         // (B, H, T, D) float32 or bf16, stored
    void* dv;
    bool bf16_dkv;
    int dq_parts;  // 0: dq_accum added to
    int tiles;     // of kBlockM queries, per (b, h)
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
  // A stage: q and dO, their rows' delta and log-sum-exp.
  const auto pp = pipeline_params<typename F::Pipeline>(2 * kBlockM * kD * sizeof(Element) + 2 * kBlockM * 4);
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
      const float* rows = p.delta + (int64_t(b) * p.heads + h) * p.tiles * kBlockM + m * kBlockM;
      bulk_load(smem.delta.data() + state.index() * kBlockM, rows, kBlockM * 4, pipe.producer_get_barrier(state));
      bulk_load(smem.lse.data() + state.index() * kBlockM, rows + p.lse_at, kBlockM * 4,
                pipe.producer_get_barrier(state));
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
  const int consumer = tid / 128;  // which 64 keys (and which part of the dQ tile)
  auto thr_dq = mma_dq.get_thread_slice(tid);
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
  Tensor tQrKt = thr_dq.partition_fragment_A(sKt(_, _, 0));  // (MMA, 1, keys / 16)
  Tensor tQrdS = thr_dq.partition_fragment_B(sdS);           // (MMA, 1, keys / 16, buffer)
  Tensor tdVrdV = partition_fragment_C(mma_dkv, Shape<Int<kBlockN>, Int<kD>>{});
  Tensor tdKrdK = partition_fragment_C(mma_dkv, Shape<Int<kBlockN>, Int<kD>>{});
  clear(tdVrdV);
  clear(tdKrdK);
  // Coordinates (key, query) of this thread's score entries.
  Tensor tScS = thr_sdp.partition_C(make_identity_tensor(Shape<Int<kBlockN>, Int<kBlockM>>{}));
  const int key0 = n_block * kBlockN;
  // Each warpgroup's half of the dQ tile: staged at dq_stage, sent by its first thread.
  constexpr int kHalf = F::kDQFrag * 128;
  const bool issues = tid % 128 == 0;
  float* dq_stage = smem.dq.data() + consumer * kHalf;
  const int64_t row_base = (int64_t(b) * p.heads + h) * p.seqlen;  // (b, h, 0) of dk and dv
  // (b, h, tile 0) of dq_accum, this block's part where the parts are stored apart.
  float* dq_tiles = p.dq_accum +
                    ((int64_t(b) * p.heads + h) * (p.dq_parts ? p.dq_parts : 1) + (p.dq_parts ? n_block : 0)) *
                        p.tiles * (kBlockM * kD) +
                    consumer * kHalf;

  smem.kv_full.wait(0);
  typename F::Pipeline::PipelineState state;
  for (int m = m_first; m < m_end; ++m) {
    const int q0 = m * kBlockM;
    pipe.consumer_wait(state);
    Tensor tSrS = partition_fragment_C(mma_sdp, Shape<Int<kBlockN>, Int<kBlockM>>{});  // ((2, 2, 8), 1, 1)
    Tensor tSrdP = partition_fragment_C(mma_sdp, Shape<Int<kBlockN>, Int<kBlockM>>{});
    // S^T and dP^T issued together; P^T from S^T while dP^T runs, then dV's product issued; dS^T while
    // it runs, then dK's.
    wgmma_issue<true>(mma_sdp, tSrK, tSrQ(_, _, _, state.index()), tSrS);
    wgmma_issue<true>(mma_sdp, tSrV, tSrdO(_, _, _, state.index()), tSrdP);
    // A thread's entries (column pair c, row r, column octet j) hold query 2t + c + 8j of two keys: each
    // query's log-sum-exp and delta are read once for both. Queries past T have lse +inf: P^T is 0 there.
    float lse[kBlockM / 4], delta[kBlockM / 4];
#pragma unroll
    for (int j = 0; j < kBlockM / 8; ++j)
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        const int query = get<1>(tScS(make_coord(c, 0, j), 0, 0));
        lse[2 * j + c] = smem.lse[state.index() * kBlockM + query];
        delta[2 * j + c] = smem.delta[state.index() * kBlockM + query];
      }
    // f(entry, its query's slot in lse and delta) for each of the thread's score entries.
    const auto each_entry = [&](auto f) {
#pragma unroll
      for (int j = 0; j < kBlockM / 8; ++j)
#pragma unroll
        for (int c = 0; c < 2; ++c)
#pragma unroll
          for (int r = 0; r < 2; ++r) f(make_coord(make_coord(c, r, j), 0, 0), 2 * j + c);
    };
    warpgroup_wait<1>();
    warpgroup_fence_operand(tSrS);
    // P^T = exp(scale S^T - lse[query]) where query >= key, else 0.
    each_entry([&](auto i, int q) {
      const bool live = q0 + get<1>(tScS(i)) >= key0 + get<0>(tScS(i));
      tSrS(i) = live ? exp2f(tSrS(i) * p.scale_log2 - lse[q]) : 0.f;
    });
    Tensor tdVrP = to_operand_a<Element, kBlockM>(tSrS);
    warpgroup_fence_operand(tdVrP);
    wgmma_issue<false>(mma_dkv, tdVrP, tKVrdOt(_, _, _, state.index()), tdVrdV);
    warpgroup_wait<1>();
    warpgroup_fence_operand(tSrdP);
    // dS^T = P^T (dP^T - delta[query]).
    each_entry([&](auto i, int q) { tSrdP(i) = tSrS(i) * (tSrdP(i) - delta[q]); });
    Tensor tdKrdS = to_operand_a<Element, kBlockM>(tSrdP);
    warpgroup_fence_operand(tdKrdS);
    wgmma_issue<false>(mma_dkv, tdKrdS, tKVrQt(_, _, _, state.index()), tdKrdK);
    warpgroup_wait<0>();
    warpgroup_fence_operand(tdVrdV);
    warpgroup_fence_operand(tdKrdK);
    warpgroup_fence_operand(tdVrP);
    warpgroup_fence_operand(tdKrdS);
    pipe.consumer_release(state);  // q and dO read for the last time
    ++state;

    // Both warpgroups' dS^T into this iteration's buffer (the other one's last reader, the dQ product of the
    // iteration before last, finished before the barrier of the last iteration), then dQ^T's part.
    const int buffer = (m - m_first) & 1;
    // The operand holds dS^T's entries in the accumulator's order (to_operand_a), so it is read as one.
    copy(store_ds, thr_store_ds.retile_S(make_tensor(tdKrdS.data(), tSrdP.layout())), tDSsDS(_, _, _, buffer));
    cutlass::arch::fence_view_async_shared();
    if (issues) bulk_wait<true>();  // the staging read by the last bulk operation
    cutlass::arch::NamedBarrier::sync(256, 1);
    Tensor tdQrdQ = partition_fragment_C(mma_dq, Shape<Int<kD>, Int<kBlockM>>{});
    wgmma<true, false>(mma_dq, tQrKt, tQrdS(_, _, _, buffer), tdQrdQ);
    static_assert(decltype(size(tdQrdQ))::value == F::kDQFrag);
#pragma unroll
    for (int c = 0; c < F::kDQFrag / 4; ++c)
      reinterpret_cast<float4*>(dq_stage)[c * 128 + tid % 128] =
          make_float4(tdQrdQ(4 * c) * p.scale, tdQrdQ(4 * c + 1) * p.scale, tdQrdQ(4 * c + 2) * p.scale,
                      tdQrdQ(4 * c + 3) * p.scale);
    cutlass::arch::fence_view_async_shared();
    cutlass::arch::NamedBarrier::sync(128, 2 + consumer);
    if (issues) {  // added to the tile in L2 (float32 adds), or stored apart
      float* tile = dq_tiles + int64_t(m) * (kBlockM * kD);
      if (p.dq_parts) bulk_store(tile, dq_stage, kHalf * int(sizeof(float)));
      else bulk_add(tile, dq_stage, kHalf * int(sizeof(float)));
      bulk_commit();
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

// For each (b, h, t) of `tiles` whole tiles a (b, h), rows past T included: delta = rowsum(dO O) in float32
// (0 past T), kD / 8 lanes a row (16 bytes each), and at delta + rows the log-sum-exp times log2(e) (+inf
// past T); and, where dq_accum is given, its rows zeroed (the adds' start).
template <int kD>
__global__ void flash_bwd_prep_kernel(FlashTensor dout, FlashTensor o, const float* lse, int heads, int seqlen,
                                      int tiles, int64_t rows, float* delta, float* dq_accum) {
  constexpr int kLanes = kD / 8, kRows = Bwd<kD>::kBlockM;
  const int64_t row = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / kLanes;  // of (B, H, tiles * kRows)
  const int lane = threadIdx.x % kLanes;
  const int64_t t = row % (int64_t(tiles) * kRows), bh = row / (int64_t(tiles) * kRows);
  const bool valid = row < rows && t < seqlen;  // no early return: the sum below shuffles across the warp
  float sum = 0.f;
  if (valid) {
    const int64_t h = bh % heads, b = bh / heads;
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
  if (row < rows && lane == 0) {
    delta[row] = valid ? sum : 0.f;
    delta[rows + row] = valid ? lse[bh * seqlen + t] * float(M_LOG2E) : INFINITY;
  }
  if (dq_accum && row < rows) {
    float4* z = reinterpret_cast<float4*>(dq_accum + row * kD + lane * 8);
    z[0] = z[1] = make_float4(0.f, 0.f, 0.f, 0.f);
  }
}

// dq from dq_accum: a block of 256 threads a tile of kBlockM queries, each thread reading its kDQFrag
// entries as the backward's thread of the same index staged them (summing the parts of the blocks at or
// before the tile's diagonal, in order, where they were stored apart), through shared memory so that
// rows go out whole, rounded to bf16.
template <int kD>
__global__ void __launch_bounds__(256)
    flash_bwd_dq_kernel(const float* dq_accum, __nv_bfloat16* dq, int64_t batch_stride, int64_t head_stride,
                        int64_t row_stride, int heads, int seqlen, int tiles, int parts) {
  using F = Bwd<kD>;
  constexpr int kBlockM = F::kBlockM, kHalf = F::kDQFrag * 128, kRow = kD + 4;
  __shared__ float tile[kBlockM * kRow];
  const int m = blockIdx.x, h = blockIdx.y, b = blockIdx.z, tid = threadIdx.x;
  typename F::MmaDQ mma_dq;
  Tensor coords = mma_dq.get_thread_slice(tid).partition_C(make_identity_tensor(Shape<Int<kD>, Int<kBlockM>>{}));
  const int64_t bh = int64_t(b) * heads + h, tile_floats = kBlockM * kD;
  const float* src = dq_accum + (parts ? bh * parts * tiles : bh * tiles + m) * tile_floats + (tid / 128) * kHalf;
  const int n_parts = parts ? min(parts, m * kBlockM / F::kBlockN + 1) : 1;  // blocks of keys at or before m
#pragma unroll
  for (int c = 0; c < F::kDQFrag / 4; ++c) {
    const int64_t at = (c * 128 + tid % 128) * 4;
    float4 v = parts ? make_float4(0.f, 0.f, 0.f, 0.f) : *reinterpret_cast<const float4*>(src + at);
    for (int n = 0; parts && n < n_parts; ++n) {
      const float4 x = *reinterpret_cast<const float4*>(src + (int64_t(n) * tiles + m) * tile_floats + at);
      v = make_float4(v.x + x.x, v.y + x.y, v.z + x.z, v.w + x.w);
    }
    const auto put = [&](int i, float x) { tile[get<1>(coords(i)) * kRow + get<0>(coords(i))] = x; };
    put(4 * c, v.x);
    put(4 * c + 1, v.y);
    put(4 * c + 2, v.z);
    put(4 * c + 3, v.w);
  }
  __syncthreads();
  constexpr int kPieces = kD / 8;  // of 8 entries (16 bytes of bf16) a row
  for (int piece = tid; piece < kBlockM * kPieces; piece += 256) {
    const int row = piece / kPieces, col = piece % kPieces * 8, t = m * kBlockM + row;
    if (t >= seqlen) continue;
    const float* x = tile + row * kRow + col;
    uint4 out;
    auto* o2 = reinterpret_cast<__nv_bfloat162*>(&out);
#pragma unroll
    for (int i = 0; i < 4; ++i) o2[i] = __float22bfloat162_rn(make_float2(x[2 * i], x[2 * i + 1]));
    *reinterpret_cast<uint4*>(dq + b * batch_stride + h * head_stride + t * row_stride + col) = out;
  }
}

// Per (b, h): tiles of kBlockM queries, and blocks of kBlockN keys (a deterministic dq's shares); both head
// dims tile alike.
int64_t query_tiles(int64_t seqlen) { return ceil_div(seqlen, int64_t(Bwd<64>::kBlockM)); }
int64_t key_blocks(int64_t seqlen) { return ceil_div(seqlen, int64_t(Bwd<64>::kBlockN)); }

template <int kD>
cudaError_t launch(const FlashBackwardArgs& a, cudaStream_t stream) {
  using F = Bwd<kD>;
  const FlashArgs& f = a.forward;
  const FlashTensor o{f.o, f.o_batch_stride, f.o_head_stride, f.o_row_stride};
  if (!flash_fits(o) || !flash_fits(a.dout) ||
      !flash_fits(FlashTensor{a.dq, a.dq_batch_stride, a.dq_head_stride, a.dq_row_stride}))
    return cudaErrorInvalidValue;
  const auto q = gmem(f.q, f.seqlen, kD, f.heads, f.batch), dout = gmem(a.dout, f.seqlen, kD, f.heads, f.batch);
  const auto k = gmem(f.k, f.seqlen, kD, f.kv_heads, f.batch), v = gmem(f.v, f.seqlen, kD, f.kv_heads, f.batch);
  const auto qdo_tile = Shape<Int<F::kBlockM>, Int<kD>>{};
  const auto kv_tile = Shape<Int<F::kBlockN>, Int<kD>>{};
  const int tiles = int(query_tiles(f.seqlen)), parts = a.deterministic ? int(key_blocks(f.seqlen)) : 0;
  const int64_t rows = f.batch * f.heads * tiles * F::kBlockM;  // of delta, and of the lse after it
  typename F::Params p{make_tma_copy(SM90_TMA_LOAD{}, q, take<0, 2>(typename F::SmemQdO{}), qdo_tile, _1{}),
                       make_tma_copy(SM90_TMA_LOAD{}, dout, take<0, 2>(typename F::SmemQdO{}), qdo_tile, _1{}),
                       make_tma_copy(SM90_TMA_LOAD{}, k, take<0, 2>(typename F::SmemKV{}), kv_tile, _1{}),
                       make_tma_copy(SM90_TMA_LOAD{}, v, take<0, 2>(typename F::SmemKV{}), kv_tile, _1{}),
                       q.layout(),
                       k.layout(),
                       a.delta,
                       rows,
                       a.dq_accum,
                       a.dk,
                       a.dv,
                       a.bf16_dkv,
                       parts,
                       tiles,
                       int(f.seqlen),
                       int(f.heads),
                       int(f.heads / f.kv_heads),
                       f.scale,
                       f.scale * float(M_LOG2E)};
  constexpr int kPrepThreads = 256;
  flash_bwd_prep_kernel<kD><<<unsigned(ceil_div(rows * (kD / 8), int64_t(kPrepThreads))), kPrepThreads, 0, stream>>>(
      a.dout, o, f.lse, int(f.heads), int(f.seqlen), tiles, rows, a.delta, parts ? nullptr : a.dq_accum);
  // Head order (see the top of the file); longest first over all heads cost a third more at D = 128.
  const dim3 grid(unsigned(key_blocks(f.seqlen)), unsigned(f.heads), unsigned(f.batch));
  cudaError_t e = launch_with_smem(&flash_bwd_kernel<kD>, p, grid, F::kThreads, int(sizeof(typename F::Smem)), stream);
  if (e != cudaSuccess) return e;
  flash_bwd_dq_kernel<kD><<<dim3(unsigned(tiles), unsigned(f.heads), unsigned(f.batch)), 256, 0, stream>>>(
      a.dq_accum, static_cast<__nv_bfloat16*>(a.dq), a.dq_batch_stride, a.dq_head_stride, a.dq_row_stride, int(f.heads),
      int(f.seqlen), tiles, parts);
  return cudaGetLastError();
}

}  // namespace

int64_t flash_delta_floats(const FlashArgs& f) {
  return 2 * f.batch * f.heads * query_tiles(f.seqlen) * Bwd<64>::kBlockM;
}

int64_t flash_dq_accum_floats(const FlashArgs& f, bool deterministic) {
  const int64_t parts = deterministic ? key_blocks(f.seqlen) : 1;
  return f.batch * f.heads * parts * query_tiles(f.seqlen) * Bwd<64>::kBlockM * f.head_dim;
}

cudaError_t launch_flash_backward(const FlashBackwardArgs& a, cudaStream_t stream) {
  const FlashArgs& f = a.forward;
  if (f.batch == 0 || f.heads == 0 || f.seqlen == 0) return cudaSuccess;
  return f.head_dim == 64 ? launch<64>(a, stream) : launch<128>(a, stream);
}

}  // namespace llmtrain::kernels
