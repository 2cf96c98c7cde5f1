// The launch a process belongs to, read from its environment: MPI's variables first (mpirun, srun
// with PMI), then torchrun's.
#include "llmtrain/dist/launch.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <mutex>
#include <string>

#include "env.h"
#include "llmtrain/core/error.h"
#include "llmtrain/dist/gloo.h"
#include "llmtrain/dist/mpi.h"

namespace llmtrain::dist {
namespace {

using detail::env_long;

constexpr long kMaxRanks = 1 << 20;

const char* env_required(const char* name, long world) {
  const char* v = std::getenv(name);
  LLMTRAIN_CHECK(v && *v, "WORLD_SIZE is ", world, " but ", name, " is not set; a torchrun-style launch sets RANK, ",
                 "WORLD_SIZE, MASTER_ADDR and MASTER_PORT for every rank (or launch with mpirun -np N)");
  return v;
}

}  // namespace

int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  const bool ok = fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0;
  if (fd >= 0) ::close(fd);
  LLMTRAIN_CHECK(ok, "found no free TCP port on 127.0.0.1");
  return ntohs(a.sin_port);
}

int local_rank() {
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "LOCAL_RANK", "SLURM_LOCALID"})
    if (std::getenv(name)) return int(env_long(name, 0, 0, kMaxRanks - 1));
  return 0;
}

std::shared_ptr<Communicator> from_environment() {
  const long mpi_size = std::max({env_long("OMPI_COMM_WORLD_SIZE", 0, 1, kMaxRanks),
                                  env_long("PMI_SIZE", 0, 1, kMaxRanks), env_long("PMIX_SIZE", 0, 1, kMaxRanks)});
  if (mpi_size > 1) {
    LLMTRAIN_CHECK(mpi_available(), "this process is one of ", mpi_size,
                   " ranks of an MPI launch, but llmtrain was "
                   "built without MPI (install an MPI, e.g. libopenmpi-dev, and configure again)");
    return MpiCommunicator::world();
  }
  const long world = env_long("WORLD_SIZE", 1, 1, kMaxRanks);  // 0 or less: a broken launch, not one process
  if (world <= 1) return nullptr;
  static std::mutex mutex;
  static std::shared_ptr<GlooCommunicator> made;  // one rendezvous a process
  std::lock_guard<std::mutex> lock(mutex);
  if (made) return made;
  Rendezvous where;
  where.world_size = int(world);
  env_required("RANK", world);
  where.rank = int(env_long("RANK", -1, 0, world - 1));
  where.host = env_required("MASTER_ADDR", world);
  env_required("MASTER_PORT", world);
  where.port = int(env_long("MASTER_PORT", 0, 1, 65535));
  const char* agent = std::getenv("TORCHELASTIC_USE_AGENT_STORE");
  where.agent_store = agent && std::string(agent) == "True";
  where.key_prefix = "llmtrain/" + std::to_string(env_long("TORCHELASTIC_RESTART_COUNT", 0, 0, LONG_MAX)) + "/";
  where.timeout = timeout();
  made = GlooCommunicator::connect(where);
  return made;
}

}  // namespace llmtrain::dist
