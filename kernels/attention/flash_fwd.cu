// The forward kernel of flash.cuh. Layouts and instructions come from CuTe; the schedule is ours:
// warpgroup 0 produces (one thread issues every TMA load), warpgroups 1 and 2 consume.
#include <cmath>

#include "flash.cuh"
#include "flash_common.cuh"

namespace llmtrain::kernels {
namespace {

using namespace flash;

template <int kD>
struct Fwd {
  static constexpr int kBlockM = 128, kBlockN = 128, kStages = 2, kThreads = 384;
  // Two consumer warpgroups stacked along the queries: each multiplies 64 rows.
  using Warpgroups = Layout<Shape<_2, _1, _1>>;
  using MmaS = decltype(make_tiled_mma(
      GMMA::ss_op_selector<Element, Element, float, Shape<_64, Int<kBlockN>, Int<kD>>>(), Warpgroups{}));
  using MmaO = decltype(make_tiled_mma(GMMA::rs_op_selector<Element, Element, float, Shape<_64, Int<kD>, Int<kBlockN>>,
                                                            GMMA::Major::K, GMMA::Major::MN>(),
                                       Warpgroups{}));
  // Rows of D elements (128 or 256 bytes) in 128-byte swizzled atoms: what both TMA and wgmma read.
  using Atom = GMMA::Layout_K_SW128_Atom<Element>;
  using SmemQ = decltype(tile_to_shape(Atom{}, Shape<Int<kBlockM>, Int<kD>>{}));
  using SmemKV = decltype(tile_to_shape(Atom{}, Shape<Int<kBlockN>, Int<kD>, Int<kStages>>{}));
  // V read as P V's B operand: (D, keys, stage), keys contiguous in the swizzled rows.
  using SmemVt = Transposed<SmemKV, kBlockN, kD, kStages>;
  using Pipeline = cutlass::PipelineTmaAsync<kStages>;

  struct Smem {
    array_aligned<Element, cosize_v<SmemQ>, 1024> q;
    array_aligned<Element, cosize_v<SmemKV>, 1024> k;
    array_aligned<Element, cosize_v<SmemKV>, 1024> v;
    cutlass::arch::ClusterTransactionBarrier q_full;
    typename Pipeline::SharedStorage k_pipe, v_pipe;
  };

  using TmaQ = decltype(make_tma_copy(SM90_TMA_LOAD{}, GmemTensor{}, SmemQ{}, Shape<Int<kBlockM>, Int<kD>>{}, _1{}));
  using TmaKV = decltype(make_tma_copy(SM90_TMA_LOAD{}, GmemTensor{}, take<0, 2>(SmemKV{}),
                                       Shape<Int<kBlockN>, Int<kD>>{}, _1{}));

  struct Params {
    TmaQ tma_q;
    TmaKV tma_k, tma_v;
    Gmem q_layout, kv_layout;
    Element* o;
    int64_t o_batch, o_head, o_row;
    float* lse;
    int seqlen, heads, group;  // group: query heads per key/value head
    float scale, scale_log2;
  };
};

template <int kD>
__global__ void __launch_bounds__(Fwd<kD>::kThreads, 1)
    flash_fwd_kernel(const __grid_constant__ typename Fwd<kD>::Params p) {
  using F = Fwd<kD>;
  constexpr int kBlockM = F::kBlockM, kBlockN = F::kBlockN;
  extern __shared__ char smem_raw[];
  auto& smem = *reinterpret_cast<typename F::Smem*>(smem_raw);

  // The longest rows first: under the causal mask the last query blocks have the most keys.
  const int m_block = int(gridDim.x) - 1 - int(blockIdx.x), h = blockIdx.y, b = blockIdx.z;
  const int n_blocks = min(ceil_div(p.seqlen, kBlockN), ceil_div((m_block + 1) * kBlockM, kBlockN));
  const int warpgroup = threadIdx.x / 128;

  if (threadIdx.x == 0) {
    prefetch_tma_descriptor(p.tma_q.get_tma_descriptor());
    prefetch_tma_descriptor(p.tma_k.get_tma_descriptor());
    prefetch_tma_descriptor(p.tma_v.get_tma_descriptor());
    smem.q_full.init(1);
  }
  const auto pp = pipeline_params<typename F::Pipeline>(kBlockN * kD * sizeof(Element));
  typename F::Pipeline k_pipe(smem.k_pipe, pp, Shape<_1, _1, _1>{}), v_pipe(smem.v_pipe, pp, Shape<_1, _1, _1>{});
  __syncthreads();

  if (warpgroup == 0) {
    cutlass::arch::warpgroup_reg_dealloc<24>();
    if (threadIdx.x != 0) return;
    const int kv_head = h / p.group;
    Tensor mQ = p.tma_q.get_tma_tensor(shape(p.q_layout));
    Tensor gQ = local_tile(mQ(_, _, h, b), Shape<Int<kBlockM>, Int<kD>>{}, make_coord(m_block, _0{}));
    Tensor sQ = make_tensor(make_smem_ptr(smem.q.data()), typename F::SmemQ{});
    auto [tQg, tQs] = tma_partition(p.tma_q, _0{}, Layout<_1>{}, group_modes<0, 2>(sQ), group_modes<0, 2>(gQ));
    smem.q_full.arrive_and_expect_tx(kBlockM * kD * sizeof(Element));
    copy(p.tma_q.with(reinterpret_cast<uint64_t&>(smem.q_full), 0), tQg, tQs);

    Tensor mK = p.tma_k.get_tma_tensor(shape(p.kv_layout));
    Tensor mV = p.tma_v.get_tma_tensor(shape(p.kv_layout));
    Tensor gK = local_tile(mK(_, _, kv_head, b), Shape<Int<kBlockN>, Int<kD>>{}, make_coord(_, _0{}));  // (N, D, n)
    Tensor gV = local_tile(mV(_, _, kv_head, b), Shape<Int<kBlockN>, Int<kD>>{}, make_coord(_, _0{}));
    Tensor sK = make_tensor(make_smem_ptr(smem.k.data()), typename F::SmemKV{});
    Tensor sV = make_tensor(make_smem_ptr(smem.v.data()), typename F::SmemKV{});
    auto [tKg, tKs] = tma_partition(p.tma_k, _0{}, Layout<_1>{}, group_modes<0, 2>(sK), group_modes<0, 2>(gK));
    auto [tVg, tVs] = tma_partition(p.tma_v, _0{}, Layout<_1>{}, group_modes<0, 2>(sV), group_modes<0, 2>(gV));
    auto state = cutlass::make_producer_start_state<typename F::Pipeline>();
    for (int n = n_blocks - 1; n >= 0; --n) {
      k_pipe.producer_acquire(state);
      copy(p.tma_k.with(*k_pipe.producer_get_barrier(state), 0), tKg(_, n), tKs(_, state.index()));
      v_pipe.producer_acquire(state);
      copy(p.tma_v.with(*v_pipe.producer_get_barrier(state), 0), tVg(_, n), tVs(_, state.index()));
      ++state;
    }
    return;
  }

  cutlass::arch::warpgroup_reg_alloc<240>();
  const int tid = threadIdx.x - 128;
  typename F::MmaS mma_s;
  typename F::MmaO mma_o;
  auto thr_s = mma_s.get_thread_slice(tid);
  auto thr_o = mma_o.get_thread_slice(tid);
  Tensor sQ = make_tensor(make_smem_ptr(smem.q.data()), typename F::SmemQ{});
  Tensor sK = make_tensor(make_smem_ptr(smem.k.data()), typename F::SmemKV{});
  Tensor sVt = make_tensor(make_smem_ptr(smem.v.data()), typename F::SmemVt{});
  Tensor tSrQ = thr_s.partition_fragment_A(sQ);                               // (MMA, 1, D / 16): descriptors
  Tensor tSrK = thr_s.partition_fragment_B(sK);                               // (MMA, 1, D / 16, stage)
  Tensor tOrV = thr_o.partition_fragment_B(sVt);                              // (MMA, 1, keys / 16, stage)
  Tensor tOrO = partition_fragment_C(mma_o, Shape<Int<kBlockM>, Int<kD>>{});  // ((2, 2, D / 8), 1, 1)
  clear(tOrO);
  Tensor tScS = thr_s.partition_C(make_identity_tensor(Shape<Int<kBlockM>, Int<kBlockN>>{}));
  static_assert(decltype(size<1>(tOrO))::value == 1 && decltype(size<2>(tOrO))::value == 1);

  // A thread holds two rows of the accumulators (r = 0, 1: eight rows apart): their running max
  // (in score units) and its own part of their sums.
  float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.f, 0.f};
  const int row0 = m_block * kBlockM;
  smem.q_full.wait(0);
  typename F::Pipeline::PipelineState state;
  for (int n = n_blocks - 1; n >= 0; --n) {
    Tensor tSrS = partition_fragment_C(mma_s, Shape<Int<kBlockM>, Int<kBlockN>>{});  // ((2, 2, N / 8), 1, 1)
    k_pipe.consumer_wait(state);
    wgmma<true, false>(mma_s, tSrQ, tSrK(_, _, _, state.index()), tSrS);
    k_pipe.consumer_release(state);

    if ((n + 1) * kBlockN > row0 || (n + 1) * kBlockN > p.seqlen) {  // the diagonal or the end
#pragma unroll
      for (int i = 0; i < size(tSrS); ++i) {
        const int row = row0 + get<0>(tScS(i)), col = n * kBlockN + get<1>(tScS(i));
        if (col > row || col >= p.seqlen) tSrS(i) = -INFINITY;
      }
    }
    float rescale[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float mx = row_max[r];
#pragma unroll
      for (int j = 0; j < kBlockN / 8; ++j)
        mx = fmaxf(mx, fmaxf(tSrS(make_coord(0, r, j), 0, 0), tSrS(make_coord(1, r, j), 0, 0)));
      mx = quad_max(mx);
      // A row with no key yet (every score -inf) keeps the exponents finite: they come out 0.
      const float base = mx == -INFINITY ? 0.f : mx * p.scale_log2;
      rescale[r] = row_max[r] == -INFINITY ? 0.f : exp2f(row_max[r] * p.scale_log2 - base);
      row_max[r] = mx;
      float sum = 0.f;
#pragma unroll
      for (int j = 0; j < kBlockN / 8; ++j) {
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          float& s = tSrS(make_coord(c, r, j), 0, 0);
          s = exp2f(s * p.scale_log2 - base);
          sum += s;
        }
      }
      row_sum[r] = row_sum[r] * rescale[r] + sum;
#pragma unroll
      for (int j = 0; j < kD / 8; ++j) {
        tOrO(make_coord(0, r, j), 0, 0) *= rescale[r];
        tOrO(make_coord(1, r, j), 0, 0) *= rescale[r];
      }
    }
    Tensor tOrP = to_operand_a<kBlockN>(tSrS);
    v_pipe.consumer_wait(state);
    wgmma<false, true>(mma_o, tOrP, tOrV(_, _, _, state.index()), tOrO);
    v_pipe.consumer_release(state);
    ++state;
  }

  // O / l, and the rows' log-sum-exp (natural log, of the scaled scores).
  Tensor tOcO = thr_o.partition_C(make_identity_tensor(Shape<Int<kBlockM>, Int<kD>>{}));
  Element* o = p.o + int64_t(b) * p.o_batch + int64_t(h) * p.o_head;
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float sum = quad_sum(row_sum[r]);
    const float inv = sum > 0.f ? 1.f / sum : 0.f;
    const int row = row0 + get<0>(tOcO(make_coord(0, r, 0), 0, 0));
    if (row >= p.seqlen) continue;
#pragma unroll
    for (int j = 0; j < kD / 8; ++j) {
      const int col = get<1>(tOcO(make_coord(0, r, j), 0, 0));
      __nv_bfloat162 pair =
          __floats2bfloat162_rn(tOrO(make_coord(0, r, j), 0, 0) * inv, tOrO(make_coord(1, r, j), 0, 0) * inv);
      *reinterpret_cast<__nv_bfloat162*>(o + row * p.o_row + col) = pair;
    }
    if (lane % 4 == 0 && p.lse)
      p.lse[(int64_t(b) * p.heads + h) * p.seqlen + row] = sum > 0.f ? row_max[r] * p.scale + logf(sum) : -INFINITY;
  }
}

template <int kD>
cudaError_t launch(const FlashArgs& a, cudaStream_t stream) {
  using F = Fwd<kD>;
  const auto q = gmem(a.q, a.seqlen, kD, a.heads, a.batch), k = gmem(a.k, a.seqlen, kD, a.kv_heads, a.batch);
  const auto v = gmem(a.v, a.seqlen, kD, a.kv_heads, a.batch);
  typename F::Params p{
      make_tma_copy(SM90_TMA_LOAD{}, q, typename F::SmemQ{}, Shape<Int<F::kBlockM>, Int<kD>>{}, _1{}),
      make_tma_copy(SM90_TMA_LOAD{}, k, take<0, 2>(typename F::SmemKV{}), Shape<Int<F::kBlockN>, Int<kD>>{}, _1{}),
      make_tma_copy(SM90_TMA_LOAD{}, v, take<0, 2>(typename F::SmemKV{}), Shape<Int<F::kBlockN>, Int<kD>>{}, _1{}),
      q.layout(),
      k.layout(),
      static_cast<Element*>(a.o),
      a.o_batch_stride,
      a.o_head_stride,
      a.o_row_stride,
      a.lse,
      int(a.seqlen),
      int(a.heads),
      int(a.heads / a.kv_heads),
      a.scale,
      a.scale * float(M_LOG2E)};
  const dim3 grid(unsigned(ceil_div(a.seqlen, int64_t(F::kBlockM))), unsigned(a.heads), unsigned(a.batch));
  return launch_with_smem(&flash_fwd_kernel<kD>, p, grid, F::kThreads, int(sizeof(typename F::Smem)), stream);
}

bool aligned(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

bool flash_fits(const FlashTensor& t) {
  return aligned(t.data) && t.batch_stride % 8 == 0 && t.head_stride % 8 == 0 && t.row_stride % 8 == 0;
}

bool flash_fits(const FlashArgs& a) {
  return a.dtype == DType::kBFloat16 && (a.head_dim == 64 || a.head_dim == 128) && a.kv_heads > 0 &&
         a.heads % a.kv_heads == 0 && a.seqlen > 0 && a.seqlen < (int64_t(1) << 31) && a.batch < 65536 &&
         a.heads < 65536 && flash_fits(a.q) && flash_fits(a.k) && flash_fits(a.v) && aligned(a.o) &&
         a.o_row_stride % 2 == 0;
}

cudaError_t launch_flash_forward(const FlashArgs& a, cudaStream_t stream) {
  if (a.batch == 0 || a.heads == 0 || a.seqlen == 0) return cudaSuccess;
  return a.head_dim == 64 ? launch<64>(a, stream) : launch<128>(a, stream);
}

}  // namespace llmtrain::kernels
