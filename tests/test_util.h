// Helpers shared by llmtrain's tests: skipping GPU tests without a GPU, the test environment that
// ctest passes in, and a float64 finite-difference check of autograd gradients.
#pragma once

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <torch/ordered_dict.h>
#include <torch/types.h>

#include <dirent.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "llmtrain/core/error.h"
#include "llmtrain/core/fs.h"
#include "llmtrain/nn/gpt2.h"

namespace llmtrain::testing {

/// A fresh temporary directory, removed with everything in it at scope exit.
struct TempDir {
  std::string path = llmtrain::fs::make_temp_dir("llmtrain_test_");
  ~TempDir() { llmtrain::fs::remove_tree(path); }
};

/// Every file and folder under `dir`, by path relative to it, with each file's bytes (a folder: "/"):
/// compared before and after a refused call, it shows that nothing was written, moved or removed.
inline std::map<std::string, std::string> files_under(const std::string& dir, const std::string& rel = "") {
  std::map<std::string, std::string> out;
  DIR* d = ::opendir((dir + rel).c_str());
  if (!d) return out;
  std::vector<std::string> names;
  while (const dirent* e = ::readdir(d))
    if (std::string(e->d_name) != "." && std::string(e->d_name) != "..") names.push_back(e->d_name);
  ::closedir(d);
  for (const auto& n : names) {
    const std::string path = rel + "/" + n;
    if (llmtrain::fs::is_dir(dir + path)) {
      out[path] = "/";
      out.merge(files_under(dir, path));
    } else {
      out[path] = llmtrain::fs::read_file(dir + path);
    }
  }
  return out;
}

/// The State of the Union corpus' files in `data`/sotu (the shared data folder), sorted, as full paths.
inline std::vector<std::string> sotu_files(const std::string& data) {
  std::vector<std::string> out;
  if (DIR* d = ::opendir((data + "/sotu").c_str())) {
    while (const dirent* e = ::readdir(d)) {
      const std::string name = e->d_name;
      if (name.size() > 4 && name.compare(name.size() - 4, 4, ".txt") == 0) out.push_back(data + "/sotu/" + name);
    }
    ::closedir(d);
  }
  std::sort(out.begin(), out.end());
  return out;
}

/// Runs `body`, expecting llmtrain::Error whose message contains every one of `parts`.
template <typename F>
void expect_error(F&& body, std::initializer_list<std::string> parts) {
  try {
    body();
    ADD_FAILURE() << "expected llmtrain::Error";
  } catch (const llmtrain::Error& e) {
    for (const auto& part : parts) EXPECT_THAT(e.what(), ::testing::HasSubstr(part));
  }
}

#define LLMTRAIN_SKIP_WITHOUT_CUDA() \
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device here"

/// The Python that has the peers (torch, transformers) and the source tree, as configured by CMake;
/// the variables LLMTRAIN_PYTHON and LLMTRAIN_SOURCE_DIR override them.
inline std::string test_python() {
  const char* v = std::getenv("LLMTRAIN_PYTHON");
  return v ? v : LLMTRAIN_TEST_PYTHON;
}
inline std::string test_source_dir() {
  const char* v = std::getenv("LLMTRAIN_SOURCE_DIR");
  return v ? v : LLMTRAIN_TEST_SOURCE_DIR;
}

/// The shared data folder (GPT-2 BPE files, the State of the Union corpus) from LLMTRAIN_DATA_DIR,
/// which `make test` sets when ../shared/data exists. Empty when unset; tests then skip, unless
/// LLMTRAIN_REQUIRE_DATA=1 (CI) turns that into a failure.
inline std::string test_data_dir() {
  const char* v = std::getenv("LLMTRAIN_DATA_DIR");
  return v ? v : "";
}
inline bool data_required() {
  const char* v = std::getenv("LLMTRAIN_REQUIRE_DATA");
  return v && std::string(v) == "1";
}
#define LLMTRAIN_REQUIRE_DATA_DIR(dir)                                                            \
  const std::string dir = ::llmtrain::testing::test_data_dir();                                   \
  if (dir.empty()) {                                                                              \
    if (::llmtrain::testing::data_required()) FAIL() << "LLMTRAIN_DATA_DIR is not set";           \
    GTEST_SKIP() << "LLMTRAIN_DATA_DIR is not set (the shared data folder with gpt2/ and sotu/)"; \
  }

/// Runs a shell command; returns its exit status (0 on success).
inline int run_command(const std::string& cmd) { return std::system(cmd.c_str()); }

/// The largest |a - b| as a double.
/// A model that is GPT-2 (as load_model returns it), as its module, for tests that reach inside.
inline nn::GPT2 as_gpt2(const std::shared_ptr<nn::CausalLM>& model) {
  auto gpt2 = std::dynamic_pointer_cast<nn::GPT2Impl>(model);
  EXPECT_TRUE(gpt2) << "not a GPT-2 model";
  return nn::GPT2(gpt2);
}

/// The ids a Python peer wrote as JSON rows of equal length (`path`, e.g. DIR/ids.json), as (rows, length) int64.
inline torch::Tensor ids_file(const std::string& path) {
  const auto j = nlohmann::json::parse(fs::read_file(path));
  std::vector<int64_t> flat;
  for (const auto& row : j)
    for (const auto& id : row) flat.push_back(id.get<int64_t>());
  return torch::tensor(flat, torch::kLong).view({int64_t(j.size()), -1});
}

/// Raw float32 values a Python peer wrote (`path`), as a tensor of `shape`; a size that disagrees fails.
inline torch::Tensor floats_file(const std::string& path, at::IntArrayRef shape) {
  const std::string bytes = fs::read_file(path, uint64_t(1) << 32);
  auto t = torch::empty(shape, torch::kFloat);
  EXPECT_EQ(bytes.size(), t.nbytes()) << path;
  std::memcpy(t.data_ptr(), bytes.data(), std::min(bytes.size(), size_t(t.nbytes())));
  return t;
}

/// t's values as raw float32 (for a Python peer to read), written beside `path` and renamed over it.
inline void write_floats(const std::string& path, const torch::Tensor& t) {
  const auto c = t.detach().contiguous().to(torch::kFloat);
  fs::write_file_atomic(path, std::string(static_cast<const char*>(c.data_ptr()), size_t(c.nbytes())));
}

/// Raw bytes a Python peer wrote (`path`), as a uint8 tensor.
inline torch::Tensor bytes_file(const std::string& path) {
  const std::string bytes = fs::read_file(path, uint64_t(1) << 32);
  auto t = torch::empty({int64_t(bytes.size())}, torch::kByte);
  std::memcpy(t.data_ptr(), bytes.data(), bytes.size());
  return t;
}

inline double max_abs_diff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kDouble) - b.to(torch::kDouble)).abs().max().item<double>();
}

/// A model on the GPU, `gpu` (a clone of `cpu`), computes what it does on the CPU for ids and targets
/// (B, T) on the CPU: logits within 1e-4, the loss within 1e-5, and after both losses' backward each
/// gradient within 1e-5 plus 1e-3 of the largest of its CPU gradient. For a model whose forward(idx,
/// targets) returns {logits, loss}.
template <typename Cpu, typename Gpu>
void expect_gpu_matches_cpu(Cpu& cpu, Gpu& gpu, const torch::Tensor& idx, const torch::Tensor& targets) {
  const auto ref = cpu->forward(idx, targets);
  const auto out = gpu->forward(idx.cuda(), targets.cuda());
  const torch::Tensor ref_loss = ref.loss, loss = out.loss;
  EXPECT_LT(max_abs_diff(out.logits.cpu(), ref.logits), 1e-4);
  EXPECT_NEAR(loss.item<double>(), ref_loss.item<double>(), 1e-5);
  ref_loss.backward();
  loss.backward();
  const torch::OrderedDict<std::string, torch::Tensor> ref_params = cpu->named_parameters();
  for (const auto& item : gpu->named_parameters()) {
    const torch::Tensor expected = ref_params[item.key()].grad();
    const torch::Tensor grad = item.value().grad();
    EXPECT_LT(max_abs_diff(grad.cpu(), expected), 1e-5 + 1e-3 * expected.abs().max().item<double>()) << item.key();
  }
}

/// Checks autograd's gradient of the scalar f() with respect to `params` against central differences
/// along random directions: one over all parameters at once, then one inside each parameter alone, so
/// an error in one tensor cannot hide behind another. Parameters must be float64 and require grad.
inline void expect_gradients_match(const std::function<torch::Tensor()>& f, const std::vector<torch::Tensor>& params,
                                   const std::vector<std::string>& names, double eps = 1e-6, double rtol = 1e-6) {
  for (auto& p : params) p.mutable_grad() = torch::Tensor();
  f().backward();
  std::vector<torch::Tensor> grads;
  for (const auto& p : params) grads.push_back(p.grad().defined() ? p.grad().clone() : torch::zeros_like(p));

  const auto check = [&](const std::vector<torch::Tensor>& dirs, const std::string& what) {
    double analytic = 0;
    for (size_t i = 0; i < params.size(); ++i) analytic += (grads[i] * dirs[i]).sum().item<double>();
    const auto shifted = [&](double step) {
      torch::NoGradGuard no_grad;
      for (size_t i = 0; i < params.size(); ++i) params[i].add_(dirs[i], step);
      const double value = f().item<double>();
      for (size_t i = 0; i < params.size(); ++i) params[i].sub_(dirs[i], step);
      return value;
    };
    const double numeric = (shifted(eps) - shifted(-eps)) / (2 * eps);
    EXPECT_NEAR(analytic, numeric, rtol * std::max(1.0, std::abs(numeric))) << "directional derivative along " << what;
  };

  std::vector<torch::Tensor> all;
  for (const auto& p : params) all.push_back(torch::randn_like(p));
  check(all, "all parameters");
  for (size_t j = 0; j < params.size(); ++j) {
    std::vector<torch::Tensor> one;
    for (size_t i = 0; i < params.size(); ++i)
      one.push_back(i == j ? torch::randn_like(params[i]) : torch::zeros_like(params[i]));
    check(one, names[j]);
  }
}

}  // namespace llmtrain::testing
