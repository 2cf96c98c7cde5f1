// MPI_Init_thread on first use (MPI_THREAD_FUNNELED: one thread calls MPI), MPI_Finalize from an
// atexit handler. Tensors are made contiguous CPU buffers for the call and copied back when they were
// not; 16-bit floats travel as float32, since MPI has no sum for them.
#include "llmtrain/dist/mpi.h"

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <string>
#include <utility>

#include "check.h"
#include "llmtrain/config.h"
#include "llmtrain/core/error.h"

#if LLMTRAIN_WITH_MPI
#include <mpi.h>
#endif

namespace llmtrain::dist {
namespace {

#if LLMTRAIN_WITH_MPI
void check_mpi(int code, const char* what) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, text, &len);
  LLMTRAIN_CHECK(false, "MPI: ", what, " failed: ", std::string(text, size_t(len)));
}

// The MPI type a tensor travels as, and the tensor that travels (a contiguous copy where needed).
std::pair<MPI_Datatype, torch::Tensor> wire(const torch::Tensor& t, const char* what) {
  LLMTRAIN_CHECK(t.device().is_cpu(), "MpiCommunicator::", what, ": the tensor is on ", t.device(),
                 "; MPI takes CPU tensors (NCCL takes CUDA ones)");
  switch (t.scalar_type()) {
    case torch::kFloat: return {MPI_FLOAT, t.contiguous()};
    case torch::kDouble: return {MPI_DOUBLE, t.contiguous()};
    case torch::kLong: return {MPI_INT64_T, t.contiguous()};
    case torch::kBFloat16:
    case torch::kHalf: return {MPI_FLOAT, t.to(torch::kFloat)};
    default: LLMTRAIN_CHECK(false, "MpiCommunicator::", what, ": no MPI type for ", t.scalar_type());
  }
  return {};
}

void copy_back(torch::Tensor& t, const torch::Tensor& sent) {
  if (!sent.is_same(t)) t.copy_(sent);
}
#endif

}  // namespace

bool mpi_available() { return LLMTRAIN_WITH_MPI != 0; }

std::shared_ptr<MpiCommunicator> MpiCommunicator::world() {
#if LLMTRAIN_WITH_MPI
  static std::once_flag once;
  static std::shared_ptr<MpiCommunicator> comm;
  std::call_once(once, [] {
    int ready = 0;
    check_mpi(MPI_Initialized(&ready), "MPI_Initialized");
    if (!ready) {
      int provided = 0;
      check_mpi(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
      std::atexit([] {
        int done = 0;
        MPI_Finalized(&done);
        if (!done) MPI_Finalize();
      });
    }
    // Errors come back as codes (turned into llmtrain::Error) instead of ending the job at once.
    check_mpi(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
    int rank = 0, size = 1;
    check_mpi(MPI_Comm_rank(MPI_COMM_WORLD, &rank), "MPI_Comm_rank");
    check_mpi(MPI_Comm_size(MPI_COMM_WORLD, &size), "MPI_Comm_size");
    comm.reset(new MpiCommunicator(rank, size));
  });
  return comm;
#else
  LLMTRAIN_CHECK(false,
                 "MpiCommunicator: llmtrain was built without MPI (install an MPI, e.g. libopenmpi-dev, and "
                 "configure again)");
  return nullptr;
#endif
}

#if LLMTRAIN_WITH_MPI
void MpiCommunicator::all_reduce_sum(torch::Tensor& t) {
  auto [type, sent] = wire(t, "all_reduce_sum");
  check_mpi(MPI_Allreduce(MPI_IN_PLACE, sent.data_ptr(), int(sent.numel()), type, MPI_SUM, MPI_COMM_WORLD),
            "MPI_Allreduce");
  copy_back(t, sent);
}

void MpiCommunicator::reduce_scatter_sum(const torch::Tensor& input, torch::Tensor& output) {
  detail::check_parts("reduce_scatter_sum", input, output, size_);
  auto [type, in] = wire(input, "reduce_scatter_sum");
  auto [out_type, out] = wire(output, "reduce_scatter_sum");
  check_mpi(MPI_Reduce_scatter_block(in.data_ptr(), out.data_ptr(), int(out.numel()), type, MPI_SUM, MPI_COMM_WORLD),
            "MPI_Reduce_scatter_block");
  copy_back(output, out);
}

void MpiCommunicator::all_gather(const torch::Tensor& input, torch::Tensor& output) {
  detail::check_parts("all_gather", output, input, size_);
  auto [type, in] = wire(input, "all_gather");
  auto [out_type, out] = wire(output, "all_gather");
  check_mpi(MPI_Allgather(in.data_ptr(), int(in.numel()), type, out.data_ptr(), int(in.numel()), type, MPI_COMM_WORLD),
            "MPI_Allgather");
  copy_back(output, out);
}

void MpiCommunicator::broadcast(torch::Tensor& t, int root) {
  LLMTRAIN_CHECK(root >= 0 && root < size_, "MpiCommunicator::broadcast: root ", root, " is not a rank of ", size_);
  auto [type, sent] = wire(t, "broadcast");
  check_mpi(MPI_Bcast(sent.data_ptr(), int(sent.numel()), type, root, MPI_COMM_WORLD), "MPI_Bcast");
  copy_back(t, sent);
}

void MpiCommunicator::barrier() { check_mpi(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier"); }

void MpiCommunicator::abort(int code) {
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);  // not reached
}
#else
void MpiCommunicator::all_reduce_sum(torch::Tensor&) {}
void MpiCommunicator::reduce_scatter_sum(const torch::Tensor&, torch::Tensor&) {}
void MpiCommunicator::all_gather(const torch::Tensor&, torch::Tensor&) {}
void MpiCommunicator::broadcast(torch::Tensor&, int) {}
void MpiCommunicator::barrier() {}
void MpiCommunicator::abort(int code) { std::_Exit(code); }
#endif

}  // namespace llmtrain::dist
