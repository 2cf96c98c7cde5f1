// LibTorch's serialization under llmtrain's file rules: written beside the target and renamed, and load
// errors that name the checkpoint and its file.
#pragma once

#include <torch/serialize.h>

#include <functional>
#include <string>

#include "llmtrain/core/error.h"
#include "llmtrain/core/fs.h"

namespace llmtrain::train::detail {

// torch::save(value) into `path` through an fs::AtomicFile (written beside, flushed, renamed). PyTorch's
// zip writer is never shown a failed write: its destructor would write again and throw out of a
// destructor (an abort). A write that fails (a full disk) is kept and reported once save_to is done.
template <typename Value>
void save_torch(const Value& value, const std::string& path) {
  fs::AtomicFile file(path);
  std::string error;
  const std::function<size_t(const void*, size_t)> writer = [&](const void* data, size_t n) {
    if (error.empty()) {
      try {
        file.write({static_cast<const char*>(data), n});
      } catch (const std::exception& e) {
        error = e.what();
      }
    }
    return n;
  };
  torch::save(value, writer);
  LLMTRAIN_CHECK(error.empty(), error);
  file.commit();
}

// Runs `body(dir/file)`, turning LibTorch's load errors into one naming the checkpoint and the file.
template <typename F>
void load_part(const std::string& dir, const std::string& file, F&& body) {
  try {
    body(dir + "/" + file);
  } catch (const c10::Error& e) {
    LLMTRAIN_CHECK(false, "checkpoint ", dir, ": cannot load ", file, " (", e.what_without_backtrace(), ")");
  }
}

}  // namespace llmtrain::train::detail
