// The forward kernel of flash.cuh. Layouts and instructions come from CuTe; the schedule is ours:
// warpgroup 0 produces (one thread issues every TMA load), warpgroups 1 and 2 consume.
#include <cmath>
#include <type_traits>

#include "flash.cuh"
#include "flash_common.cuh"

namespace llmtrain::kernels {
namespace {

using namespace flash;

// E: bf16, or e4m3 for the fp8 forward. Its P V reads v transposed (D, keys), K-major, since fp8
// products take no MN-major operand; bf16's reads v as loaded, (keys, D), MN-major.
template <int kD, class E>
struct Fwd {
  static constexpr bool kFp8 = std::is_same_v<E, Fp8>;
  static constexpr int kBlockM = 128, kBlockN = 128, kStages = 2, kThreads = 384;
  // Two consumer warpgroups stacked along the queries: each multiplies 64 rows.
  using Warpgroups = Layout<Shape<_2, _1, _1>>;
  using MmaS =
      decltype(make_tiled_mma(GMMA::ss_op_selector<E, E, float, Shape<_64, Int<kBlockN>, Int<kD>>>(), Warpgroups{}));
  static constexpr GMMA::Major kVMajor = kFp8 ? GMMA::Major::K : GMMA::Major::MN;
  using MmaO = decltype(make_tiled_mma(
      GMMA::rs_op_selector<E, E, float, Shape<_64, Int<kD>, Int<kBlockN>>, GMMA::Major::K, kVMajor>(), Warpgroups{}));
  // Rows of D elements in swizzled atoms: what both TMA and wgmma read.
  static constexpr int kRowBytes = kD * int(sizeof(E));
  using Atom = KMajorAtom<E, kRowBytes>;
  using SmemQ = decltype(tile_to_shape(Atom{}, Shape<Int<kBlockM>, Int<kD>>{}));
  using SmemK = decltype(tile_to_shape(Atom{}, Shape<Int<kBlockN>, Int<kD>, Int<kStages>>{}));
  // V as loaded: (keys, D, stage) for bf16, (D, keys, stage) for fp8; and as P V's B operand, (D, keys, stage).
  using TileV = std::conditional_t<kFp8, Shape<Int<kD>, Int<kBlockN>>, Shape<Int<kBlockN>, Int<kD>>>;
  using SmemV = std::conditional_t<
      kFp8, decltype(tile_to_shape(KMajorAtom<E, kBlockN>{}, Shape<Int<kD>, Int<kBlockN>, Int<kStages>>{})), SmemK>;
  using SmemVt = std::conditional_t<kFp8, SmemV, Transposed<SmemK, kBlockN, kD, kStages>>;
  using Pipeline = cutlass::PipelineTmaAsync<kStages>;

  struct Smem {
    array_aligned<E, cosize_v<SmemQ>, 1024> q;
    array_aligned<E, cosize_v<SmemK>, 1024> k;
    array_aligned<E, cosize_v<SmemV>, 1024> v;
    cutlass::arch::ClusterTransactionBarrier q_full;
    typename Pipeline::SharedStorage k_pipe, v_pipe;
  };

  using TmaQ = decltype(make_tma_copy(SM90_TMA_LOAD{}, GmemTensor<E>{}, SmemQ{}, Shape<Int<kBlockM>, Int<kD>>{}, _1{}));
  using TmaK = decltype(make_tma_copy(SM90_TMA_LOAD{}, GmemTensor<E>{}, take<0, 2>(SmemK{}),
                                      Shape<Int<kBlockN>, Int<kD>>{}, _1{}));
  using TmaV = decltype(make_tma_copy(SM90_TMA_LOAD{}, GmemTensor<E>{}, take<0, 2>(SmemV{}), TileV{}, _1{}));

  struct Params {
    TmaQ tma_q;
    TmaK tma_k;
    TmaV tma_v;
    Gmem q_layout, k_layout, v_layout;
    Element* o;
    int64_t o_batch, o_head, o_row;
    float* lse;
    const float *q_descale, *k_descale, *v_descale;  // fp8: (B, H), (B, KV), (B, KV)
    int seqlen, heads, group;                        // group: query heads per key/value head
    float scale;
  };
};

template <int kD, class E>
__global__ void __launch_bounds__(Fwd<kD, E>::kThreads, 1)
    flash_fwd_kernel(const __grid_constant__ typename Fwd<kD, E>::Params p) {
  using F = Fwd<kD, E>;
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
  const auto pp = pipeline_params<typename F::Pipeline>(kBlockN * kD * sizeof(E));
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
    smem.q_full.arrive_and_expect_tx(kBlockM * kD * sizeof(E));
    copy(p.tma_q.with(reinterpret_cast<uint64_t&>(smem.q_full), 0), tQg, tQs);

    Tensor mK = p.tma_k.get_tma_tensor(shape(p.k_layout));
    Tensor mV = p.tma_v.get_tma_tensor(shape(p.v_layout));
    Tensor gK = local_tile(mK(_, _, kv_head, b), Shape<Int<kBlockN>, Int<kD>>{}, make_coord(_, _0{}));  // (N, D, n)
    // (N, D, n), or for fp8 (D, N, n): the transposed v's tiles along its columns
    Tensor gV = [&] {
      if constexpr (F::kFp8) return local_tile(mV(_, _, kv_head, b), typename F::TileV{}, make_coord(_0{}, _));
      else return local_tile(mV(_, _, kv_head, b), typename F::TileV{}, make_coord(_, _0{}));
    }();
    Tensor sK = make_tensor(make_smem_ptr(smem.k.data()), typename F::SmemK{});
    Tensor sV = make_tensor(make_smem_ptr(smem.v.data()), typename F::SmemV{});
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
  Tensor sK = make_tensor(make_smem_ptr(smem.k.data()), typename F::SmemK{});
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
  // The scores' scale, for fp8 times the codes' (q's and k's); o's (v's codes'). fp8's P is taken 2^8
  // times larger (exponents 8 higher), so that small probabilities stay in e4m3's normal range; the
  // softmax's sum, made of the same terms, cancels it.
  float score_scale = p.scale, out_scale = 1.f;
  if constexpr (F::kFp8) {
    const int kv = b * (p.heads / p.group) + h / p.group;
    score_scale *= p.q_descale[b * p.heads + h] * p.k_descale[kv];
    out_scale = p.v_descale[kv];
  }
  const float score_log2 = score_scale * float(M_LOG2E);
  constexpr float kPExponent = F::kFp8 ? 8.f : 0.f;
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
      const float base = mx == -INFINITY ? 0.f : mx * score_log2;
      rescale[r] = row_max[r] == -INFINITY ? 0.f : exp2f(row_max[r] * score_log2 - base);
      const float p_base = base - kPExponent;
      row_max[r] = mx;
      float sum = 0.f;
#pragma unroll
      for (int j = 0; j < kBlockN / 8; ++j) {
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          float& s = tSrS(make_coord(c, r, j), 0, 0);
          s = exp2f(s * score_log2 - p_base);
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
    Tensor tOrP = to_operand_a<E, kBlockN>(tSrS);
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
    const float inv = sum > 0.f ? out_scale / sum : 0.f;
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
      p.lse[(int64_t(b) * p.heads + h) * p.seqlen + row] =
          sum > 0.f ? row_max[r] * score_scale + logf(sum) - kPExponent * float(M_LN2) : -INFINITY;
  }
}

// bf16 reads q, k and v of `a`; fp8 (E = Fp8) the codes.
template <int kD, class E>
cudaError_t launch(const FlashArgs& a, const FlashFp8& codes, cudaStream_t stream) {
  using F = Fwd<kD, E>;
  const int64_t T = a.seqlen, H = a.heads, KV = a.kv_heads, keys = flash_fp8_keys(T);
  const FlashTensor q_in = F::kFp8 ? FlashTensor{codes.q, H * T * kD, T * kD, kD} : a.q;
  const FlashTensor k_in = F::kFp8 ? FlashTensor{codes.k, KV * T * kD, T * kD, kD} : a.k;
  const auto q = gmem<E>(q_in, T, kD, H, a.batch), k = gmem<E>(k_in, T, kD, KV, a.batch);
  const auto v = F::kFp8 ? gmem<E>({codes.vt, KV * kD * keys, kD * keys, keys}, kD, keys, KV, a.batch)
                         : gmem<E>(a.v, T, kD, KV, a.batch);
  typename F::Params p{
      make_tma_copy(SM90_TMA_LOAD{}, q, typename F::SmemQ{}, Shape<Int<F::kBlockM>, Int<kD>>{}, _1{}),
      make_tma_copy(SM90_TMA_LOAD{}, k, take<0, 2>(typename F::SmemK{}), Shape<Int<F::kBlockN>, Int<kD>>{}, _1{}),
      make_tma_copy(SM90_TMA_LOAD{}, v, take<0, 2>(typename F::SmemV{}), typename F::TileV{}, _1{}),
      q.layout(),
      k.layout(),
      v.layout(),
      static_cast<Element*>(a.o),
      a.o_batch_stride,
      a.o_head_stride,
      a.o_row_stride,
      a.lse,
      codes.q_descale,
      codes.k_descale,
      codes.v_descale,
      int(T),
      int(H),
      int(H / KV),
      a.scale};
  const dim3 grid(unsigned(ceil_div(T, int64_t(F::kBlockM))), unsigned(H), unsigned(a.batch));
  return launch_with_smem(&flash_fwd_kernel<kD, E>, p, grid, F::kThreads, int(sizeof(typename F::Smem)), stream);
}

bool aligned(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

bool flash_fits(const FlashTensor& t) {
  return aligned(t.data) && t.batch_stride % 8 == 0 && t.head_stride % 8 == 0 && t.row_stride % 8 == 0;
}

bool flash_fits(const FlashArgs& a) {
  return a.dtype == DType::kBFloat16 && (a.head_dim == 64 || a.head_dim == 128) && a.kv_heads > 0 &&
         a.heads % a.kv_heads == 0 && a.seqlen > 0 && a.seqlen < (int64_t(1) << 31) && a.batch < 65536 &&
         a.heads < 65536 && a.batch * a.heads < (int64_t(1) << 31) && flash_fits(a.q) && flash_fits(a.k) &&
         flash_fits(a.v) && aligned(a.o) && a.o_row_stride % 2 == 0;
}

cudaError_t launch_flash_forward(const FlashArgs& a, cudaStream_t stream) {
  if (a.batch == 0 || a.heads == 0 || a.seqlen == 0) return cudaSuccess;
  return a.head_dim == 64 ? launch<64, Element>(a, {}, stream) : launch<128, Element>(a, {}, stream);
}

cudaError_t launch_flash_fp8_forward(const FlashArgs& a, const FlashFp8& codes, cudaStream_t stream) {
  if (a.batch == 0 || a.heads == 0 || a.seqlen == 0) return cudaSuccess;
  return a.head_dim == 64 ? launch<64, Fp8>(a, codes, stream) : launch<128, Fp8>(a, codes, stream);
}

}  // namespace llmtrain::kernels
