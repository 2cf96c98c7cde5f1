// How a program finds the run it was started in: an MPI launch (mpirun, or a PMI/PMIx launcher such
// as srun), a torchrun-style one (RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT), or none.
#pragma once

#include <memory>

#include "llmtrain/dist/communicator.h"

namespace llmtrain::dist {

/// The communicator of the run this process belongs to, null for a lone process:
/// - MPI variables (OMPI_COMM_WORLD_SIZE, PMI_SIZE, PMIX_SIZE) above 1: MpiCommunicator::world();
/// - else WORLD_SIZE above 1: a GlooCommunicator meeting at MASTER_ADDR:MASTER_PORT (made once a process).
/// On CUDA the Trainer carries the gradients over NCCL, bootstrapped through it. Throws llmtrain::Error
/// for a launch it cannot join (MPI ranks but no MPI in this build; RANK, MASTER_ADDR or MASTER_PORT
/// missing or malformed; a rendezvous that fails).
///   auto comm = llmtrain::dist::from_environment();  // Trainer(config, comm)
std::shared_ptr<Communicator> from_environment();

/// A TCP port of 127.0.0.1 that nothing listens on now: where ranks started on one machine can meet
/// (MASTER_PORT). Throws llmtrain::Error when the system gives none.
int free_port();

/// This process's rank among those on its node (OMPI_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID,
/// LOCAL_RANK, SLURM_LOCALID; 0 when none is set): which GPU a rank takes.
int local_rank();

}  // namespace llmtrain::dist
