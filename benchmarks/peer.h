// Running a baseline that lives in Python (tiktoken, Hugging Face transformers) from a benchmark: the
// script prints one JSON object, which comes back parsed.
#pragma once

#include <llmtrain/core/error.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace bench {

/// Runs `python script args...` and parses what it printed; throws llmtrain::Error when it fails.
///   auto peer = bench::run_python_json(python, dir + "/hf_generate_speed.py", {"1", "16"});
inline nlohmann::json run_python_json(const std::string& python, const std::string& script,
                                      const std::vector<std::string>& args) {
  std::string cmd = "'" + python + "' '" + script + "'";
  for (const auto& a : args) cmd += " '" + a + "'";
  FILE* pipe = ::popen(cmd.c_str(), "r");
  LLMTRAIN_CHECK(pipe != nullptr, "cannot run ", cmd);
  std::string out;
  char buf[4096];
  while (size_t n = std::fread(buf, 1, sizeof buf, pipe)) out.append(buf, n);
  const int status = ::pclose(pipe);
  LLMTRAIN_CHECK(status == 0, "the baseline failed (exit status ", status, "): ", cmd);
  const auto j = nlohmann::json::parse(out, nullptr, false);
  LLMTRAIN_CHECK(!j.is_discarded(), "the baseline printed no JSON: ", cmd, "\n", out);
  return j;
}

}  // namespace bench
