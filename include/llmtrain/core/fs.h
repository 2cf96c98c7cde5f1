// File-system helpers on POSIX calls. llmtrain does not call std::filesystem: PyPI's libtorch.so
// exports its own broken copies of those functions (pytorch/pytorch#133437), and which copy a program
// binds to depends on its toolchain's link order (remove_all jumped to address 0 on Ubuntu 24.04).
#pragma once

#include <functional>
#include <string>
#include <string_view>

namespace llmtrain::fs {

/// True when something exists at `path` (a file, a directory, a link).
///   if (llmtrain::fs::exists(dir + "/model.bin")) { ... }
bool exists(const std::string& path);

/// Creates `path` and its missing parents (like mkdir -p); an existing directory is fine.
/// Throws llmtrain::Error naming the path and the reason.
void make_dirs(const std::string& path);

/// Creates a new, empty, private directory under $TMPDIR (else /tmp) whose name starts with `prefix`.
///   const std::string dir = llmtrain::fs::make_temp_dir("llmtrain_test_");
std::string make_temp_dir(const std::string& prefix);

/// Removes `path` and everything under it, without following links; a missing path is fine.
/// Throws llmtrain::Error naming the entry that could not be removed.
void remove_tree(const std::string& path);

/// The whole content of the file at `path`. Throws llmtrain::Error naming the path when it cannot be read.
std::string read_file(const std::string& path);

/// Writes `bytes` to `path` so that a crash never leaves a half file under that name: the bytes go to
/// a temporary file beside it, are flushed to disk, and the file is renamed over `path`.
///   llmtrain::fs::write_file_atomic(dir + "/train_000000.bin", header_and_tokens);
void write_file_atomic(const std::string& path, std::string_view bytes);

/// Fills a folder in `fill(tmp)`, a fresh folder beside `dir`, then renames it over `dir` (replacing
/// what was there), so that a crash or an error in `fill` never leaves a half-written folder at `dir`.
///   llmtrain::fs::write_dir_atomic(out, [&](const std::string& tmp) { save(tmp + "/model.pt"); });
void write_dir_atomic(const std::string& dir, const std::function<void(const std::string& tmp)>& fill);

/// write_file_atomic in pieces, for files too large to hold in memory at once: the pieces go to a
/// temporary file beside `path`, and commit() flushes it and renames it over `path`. Destroyed without
/// commit() (an error on the way), it removes the temporary file and leaves `path` as it was.
///   llmtrain::fs::AtomicFile f(path);  f.write(header);  f.write(data);  f.commit();
class AtomicFile {
 public:
  explicit AtomicFile(std::string path);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  void write(std::string_view bytes);
  void commit();

 private:
  std::string path_, tmp_;
  int fd_ = -1;
};

}  // namespace llmtrain::fs
