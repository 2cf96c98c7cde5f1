#include "llmtrain/train/checkpointer.h"

#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "../core/failpoint.h"
#include "llmtrain/core/error.h"

namespace llmtrain::train {
namespace {

// The folder of a checkpoint's step: "step_00000042".
std::string checkpoint_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step_%08lld", static_cast<long long>(step));
  return buf;
}

}  // namespace

Checkpointer::Checkpointer(std::string run_dir, int64_t keep, std::shared_ptr<dist::Communicator> comm)
    : dir_(std::move(run_dir) + "/checkpoints"), keep_(keep), comm_(std::move(comm)) {}

std::vector<std::pair<int64_t, std::string>> Checkpointer::list(const std::string& dir) {
  std::vector<std::pair<int64_t, std::string>> out;
  DIR* d = ::opendir(dir.c_str());
  if (!d) return out;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name.size() != 13 || name.rfind("step_", 0) != 0 ||
        name.find_first_not_of("0123456789", 5) != std::string::npos)
      continue;  // temporary folders ("step_XXXXXXXX.tmp.PID") never count
    if (fs::exists(dir + "/" + name + "/state.json")) out.emplace_back(std::stoll(name.substr(5)), dir + "/" + name);
  }
  ::closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

std::optional<std::string> Checkpointer::newest() const {
  const auto all = list(dir_);
  if (all.empty()) return std::nullopt;
  return all.back().second;
}

void Checkpointer::remove_stale() const {
  DIR* d = ::opendir(dir_.c_str());
  if (!d) return;
  std::vector<std::string> stale;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name.size() > 13 && name.rfind("step_", 0) == 0 &&
        (name.compare(13, 5, ".tmp.") == 0 || name.compare(13, 5, ".old.") == 0))
      stale.push_back(name);
  }
  ::closedir(d);
  for (const auto& name : stale) {
    std::printf("removing %s/%s, an incomplete checkpoint left by a crash or a failed save\n", dir_.c_str(),
                name.c_str());
    fs::remove_tree(dir_ + "/" + name);
  }
}

void Checkpointer::save(int64_t step, const Parts& parts) {
  const int rank = comm_ ? comm_->rank() : 0, world = comm_ ? comm_->world_size() : 1;
  saved_step_ = step;  // on every rank, so that all agree on whether a save is due (a failed one throws)
  const bool per_rank = bool(parts.per_rank);
  if (rank != 0 && !per_rank) {  // rank 0 writes; the others wait so that no rank runs ahead of a checkpoint
    comm_->barrier();
    return;
  }
  const std::string final_dir = dir_ + "/" + checkpoint_name(step);
  int64_t pid = ::getpid();  // rank 0's names the folder
  if (rank == 0) {
    const std::string tmp = final_dir + ".tmp." + std::to_string(pid);
    fs::remove_tree(tmp);  // ours: a folder of this process's name, left by an earlier failed save
    fs::make_dirs(tmp);
  }
  if (per_rank && world > 1) {  // after rank 0 made the folder
    torch::Tensor t = torch::tensor({pid}, torch::kLong);
    comm_->broadcast(t, 0);
    pid = t.item<int64_t>();
  }
  const std::string tmp = final_dir + ".tmp." + std::to_string(pid);
  try {
    if (per_rank) {
      LLMTRAIN_CHECK(
          fs::exists(tmp), "rank ", rank, " cannot see the checkpoint folder ", tmp, " that rank 0 made: ",
          "with train.zero every rank writes its part there, so out_dir must be on a filesystem all ranks share");
      parts.per_rank(tmp);
      if (world > 1) comm_->barrier();  // every rank's part is on disk before rank 0 completes the folder
      if (rank != 0) {
        comm_->barrier();
        return;
      }
    }
    if (parts.shared) parts.shared(tmp);
    llmtrain::detail::failpoint("checkpoint:tensors-written");
    fs::write_file_atomic(tmp + "/state.json", parts.state_json());  // last: marks the folder complete
    llmtrain::detail::failpoint("checkpoint:complete");
    // A checkpoint of this step already there (saved again at the step a run resumed from) is swapped
    // out whole, never removed first.
    fs::replace_dir(tmp, final_dir);
  } catch (...) {
    if (rank == 0) fs::remove_tree(tmp);  // a failed save (a full disk) leaves the earlier checkpoints alone
    throw;
  }
  llmtrain::detail::failpoint("checkpoint:renamed");
  const auto all = list(dir_);
  for (size_t i = 0; i + size_t(keep_) < all.size(); ++i) fs::remove_tree(all[i].second);
  if (world > 1) comm_->barrier();
}

std::string checkpoint_dir(const std::string& path) {
  if (fs::exists(path + "/state.json")) return path;
  const auto all = Checkpointer::list(path + "/checkpoints");
  LLMTRAIN_CHECK(!all.empty(), path,
                 " is neither a checkpoint folder (with state.json) nor a run folder with checkpoints/");
  return all.back().second;
}

}  // namespace llmtrain::train
