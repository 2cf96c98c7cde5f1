// File-system helpers on POSIX calls, and the one rule for everything llmtrain writes: an output is
// made beside its target and renamed over it, so that at every instant the old or the new complete
// output exists, and nothing llmtrain did not write is deleted or overwritten without --force.
// llmtrain does not call std::filesystem: PyPI's libtorch.so exports its own broken copies of those
// functions (pytorch/pytorch#133437), and which copy a program binds to depends on its toolchain's link
// order (remove_all jumped to address 0 on Ubuntu 24.04).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace llmtrain::fs {

/// True when something exists at `path` (a file, a directory, a link).
///   if (llmtrain::fs::exists(dir + "/model.bin")) { ... }
bool exists(const std::string& path);

/// True when `path` is a directory (following links).
bool is_dir(const std::string& path);

/// Creates `path` and its missing parents (like mkdir -p); an existing directory is fine.
/// Throws llmtrain::Error naming the path and the reason.
void make_dirs(const std::string& path);

/// Creates a new, empty, private directory under $TMPDIR (else /tmp) whose name starts with `prefix`.
///   const std::string dir = llmtrain::fs::make_temp_dir("llmtrain_test_");
std::string make_temp_dir(const std::string& prefix);

/// Removes `path` and everything under it, without following links; a missing path is fine.
/// Throws llmtrain::Error naming the entry that could not be removed.
void remove_tree(const std::string& path);

/// The absolute form of `path`: its longest existing prefix with links resolved, the rest normalised
/// ("a/./b/../c" -> "a/c"). `path` need not exist.
std::string absolute(const std::string& path);

/// The most read_file reads unless told otherwise: the configs, vocabularies and lists it is for are
/// far smaller, and a larger file is a mistake better named than loaded.
constexpr uint64_t kReadLimit = uint64_t(1) << 30;

/// Opens `path` for reading and returns the descriptor, its size in `*size`. Refuses what is not a
/// regular file: a folder, a FIFO or a device could block a read forever or never end. Errors read
/// "<what> <path>: cannot open (reason)" (`what`: "shard", "safetensors", ... or nothing).
int open_regular(const std::string& path, uint64_t* size, const std::string& what = "");

/// The whole content of the regular file at `path`. Throws llmtrain::Error naming it (as open_regular)
/// when it cannot be read, is not a regular file, or holds more than `limit` bytes.
std::string read_file(const std::string& path, uint64_t limit = kReadLimit, const std::string& what = "");

/// A regular file mapped into memory, read-only or copy-on-write (writes change the pages, never the
/// file). Throws llmtrain::Error naming the path when it cannot be opened or mapped.
///   llmtrain::fs::MappedFile f("train_000000.bin");  const unsigned char* p = f.data();
class MappedFile {
 public:
  /// `what` names the file's kind in errors, as for open_regular.
  explicit MappedFile(const std::string& path, const std::string& what = "", bool copy_on_write = false);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  const std::string& path() const { return path_; }
  unsigned char* data() const { return data_; }  // null for an empty file
  uint64_t size() const { return size_; }

 private:
  std::string path_;
  unsigned char* data_ = nullptr;
  uint64_t size_ = 0;
};

/// Writes `bytes` to `path` so that a crash never leaves a half file under that name: the bytes go to a
/// temporary file beside it, are flushed to disk, and the file is renamed over `path`. A failed write
/// (a full disk) throws llmtrain::Error naming `path`, removes the temporary file and leaves `path` as it was.
///   llmtrain::fs::write_file_atomic(dir + "/config.json", text);
void write_file_atomic(const std::string& path, std::string_view bytes);

/// Appends `bytes` to `path` (created when missing); a failed write throws llmtrain::Error naming it.
void append_file(const std::string& path, std::string_view bytes);

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
  void fail(const char* doing, int err);
  std::string path_, tmp_;
  int fd_ = -1;
};

/// The file that marks a folder as an output llmtrain wrote (a JSON line saying which kind): what may be
/// replaced without --force.
constexpr const char* kOutputMarker = ".llmtrain";

/// True when `dir` is a folder holding kOutputMarker.
bool is_our_output(const std::string& dir);

/// Writes kOutputMarker into `dir`, saying it is an output of `kind` ("run", "shards", ...).
void mark_output(const std::string& dir, const std::string& kind);

/// What an output folder may replace, and what it must leave alone.
struct OutputOptions {
  std::string what = "output";      // how errors name it: "--out", "--to", "out_dir"
  std::vector<std::string> inputs;  // what the job reads (files, folders or globs): never an output
  bool force = false;               // replace an existing file or folder that llmtrain did not write
};

/// Throws llmtrain::Error naming `path` unless it may be taken as an output folder: it is none of "/",
/// the home folder, the working folder or a folder above it, an input or a folder holding one (not even
/// with force); and it does not exist, is an empty folder, or is an output of llmtrain's (its marker),
/// or force is set.
///   llmtrain::fs::check_output("exported", {"--to", {"runs/base"}});
void check_output(const std::string& path, const OutputOptions& options);

/// Puts the complete folder `fresh` at `dir`: a rename when nothing is there, else one atomic exchange
/// (renameat2's RENAME_EXCHANGE), after which the old folder is removed; where the filesystem has no
/// exchange (NFS), the old folder is renamed aside, `fresh` renamed in, and the old one removed. At every
/// instant a complete folder exists, under `dir` or (on that fallback, between the two renames) under
/// the two names beside it. The caller owns both.
void replace_dir(const std::string& fresh, const std::string& dir);

/// Writes the folder `dir` whole: check_output, then `fill(tmp)` fills a fresh folder beside it, the
/// marker (of `kind`) is added, everything is flushed, and the new folder takes `dir`'s place in one
/// atomic exchange (where the filesystem has none: the old folder renamed aside, the new one renamed
/// in); the old one is removed last. An error in `fill` (a full disk) removes the new folder and leaves
/// `dir` as it was.
///   llmtrain::fs::write_dir_atomic(out, "hf-gpt2", {"--to"}, [&](const std::string& tmp) { ... });
void write_dir_atomic(const std::string& dir, const std::string& kind, const OutputOptions& options,
                      const std::function<void(const std::string& tmp)>& fill);

}  // namespace llmtrain::fs
