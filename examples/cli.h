// What every llmtrain program's command line has: --version, and an example under --help.
#pragma once

#include <llmtrain/config.h>
#include <CLI/CLI.hpp>

#include <string>

namespace llmtrain_cli {

/// Adds --version (llmtrain's version and whether CUDA is compiled in) and an "Example:" footer.
inline void setup(CLI::App& app, const std::string& example) {
  app.set_version_flag("--version",
                       std::string("llmtrain ") + LLMTRAIN_VERSION + (LLMTRAIN_WITH_CUDA ? " (CUDA)" : " (CPU only)"));
  app.footer("Example:\n  " + example);
}

}  // namespace llmtrain_cli
