// Every write goes to a temporary name beside its target, is flushed (fsync) and renamed over it; a
// folder takes its target's place with renameat2's RENAME_EXCHANGE, so that the target's name always
// names a complete folder, and the old one is removed after. Temporary names carry the process id and
// a counter, so that neither two processes nor two threads share one.
#include "llmtrain/core/fs.h"

#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "failpoint.h"
#include "llmtrain/core/error.h"

namespace llmtrain {
namespace detail {

bool failpoint_set(const char* name) {
  const char* list = std::getenv("LLMTRAIN_FAILPOINT");
  if (!list) return false;
  const std::string_view all(list), want(name);
  for (size_t start = 0; start <= all.size();) {
    const size_t end = std::min(all.find(',', start), all.size());
    if (all.substr(start, end - start) == want) return true;
    start = end + 1;
  }
  return false;
}

void failpoint(const char* name) {
  if (!std::getenv("LLMTRAIN_FAILPOINT")) return;
  if (failpoint_set(name)) ::kill(::getpid(), SIGKILL);
  if (failpoint_set((std::string(name) + "+interrupts").c_str())) {  // a user's Ctrl-C, twice
    ::kill(::getpid(), SIGINT);
    ::kill(::getpid(), SIGINT);
  }
}

}  // namespace detail

namespace fs {
namespace {

std::string errno_text(int err) { return std::strerror(err); }

// A name beside `path` that no other process or thread of this one uses: "path.tmp.PID.N".
std::string temp_name(const std::string& path, const char* what) {
  static std::atomic<uint64_t> counter{0};
  return path + "." + what + "." + std::to_string(::getpid()) + "." + std::to_string(counter++);
}

std::string strip_trailing_slashes(std::string p) {
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  return p;
}

std::string parent_of(const std::string& path) {
  const std::string p = strip_trailing_slashes(path);
  const size_t slash = p.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : p.substr(0, slash);
}

// Makes a rename inside `dir` durable.
void sync_dir(const std::string& dir) {
  if (const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

bool is_within(const std::string& inner, const std::string& outer) {  // both absolute
  return inner == outer || (inner.size() > outer.size() && inner.compare(0, outer.size(), outer) == 0 &&
                            (outer == "/" || inner[outer.size()] == '/'));
}

// The part of a glob before its first component with a wildcard ("data/*/train_*.bin" -> "data").
std::string glob_root(const std::string& pattern) {
  const size_t wild = pattern.find_first_of("*?[");
  if (wild == std::string::npos) return pattern;
  const size_t slash = pattern.rfind('/', wild);
  return slash == std::string::npos ? "." : (slash == 0 ? "/" : pattern.substr(0, slash));
}

}  // namespace

bool exists(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0;
}

bool is_dir(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

void make_dirs(const std::string& path) {
  LLMTRAIN_CHECK(!path.empty(), "make_dirs: empty path");
  for (size_t pos = path.find('/', 1);; pos = path.find('/', pos + 1)) {
    const std::string prefix = path.substr(0, pos);
    if (::mkdir(prefix.c_str(), 0755) != 0 && errno != EEXIST)
      LLMTRAIN_CHECK(false, "cannot create directory ", prefix, ": ", errno_text(errno));
    if (pos == std::string::npos) break;
  }
  LLMTRAIN_CHECK(is_dir(path), "cannot create directory ", path, ": a file of that name exists");
}

std::string make_temp_dir(const std::string& prefix) {
  const char* tmp = std::getenv("TMPDIR");
  std::string templ = std::string(tmp && *tmp ? tmp : "/tmp") + "/" + prefix + "XXXXXX";
  std::vector<char> buf(templ.begin(), templ.end());
  buf.push_back('\0');
  LLMTRAIN_CHECK(::mkdtemp(buf.data()) != nullptr, "cannot create a temporary directory ", templ, ": ",
                 errno_text(errno));
  return buf.data();
}

namespace {
int remove_entry(const char* path, const struct stat*, int, struct FTW*) {
  return ::remove(path) == 0 ? 0 : -1;  // errno stays set for the caller
}
}  // namespace

void remove_tree(const std::string& path) {
  if (!exists(path)) return;
  // FTW_DEPTH visits children before their directory; FTW_PHYS removes links, not their targets.
  LLMTRAIN_CHECK(::nftw(path.c_str(), remove_entry, 16, FTW_DEPTH | FTW_PHYS) == 0, "cannot remove ", path, ": ",
                 errno_text(errno));
}

std::string absolute(const std::string& path) {
  std::string cur;
  if (path.empty() || path[0] != '/') {
    char buf[PATH_MAX];
    LLMTRAIN_CHECK(::getcwd(buf, sizeof buf) != nullptr, "cannot read the working folder: ", errno_text(errno));
    cur = buf;
  } else {
    cur = "/";
  }
  bool real = true;  // `cur` exists, links resolved
  for (size_t start = 0; start <= path.size();) {
    const size_t end = std::min(path.find('/', start), path.size());
    const std::string part = path.substr(start, end - start);
    start = end + 1;
    if (part.empty() || part == ".") continue;
    if (part == "..") {
      cur = cur == "/" ? cur : parent_of(cur);
      continue;
    }
    cur = (cur == "/" ? "/" : cur + "/") + part;
    if (real) {
      char buf[PATH_MAX];
      if (::realpath(cur.c_str(), buf)) cur = buf;
      else real = false;  // the rest does not exist yet: lexical from here
    }
  }
  return cur;
}

int open_regular(const std::string& path, uint64_t* size, const std::string& what) {
  const std::string name = what.empty() ? path : what + " " + path;
  // O_NONBLOCK: opening a FIFO would otherwise wait for a writer.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  LLMTRAIN_CHECK(fd >= 0, name, ": cannot open (", errno_text(errno), ")");
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    const bool dir = S_ISDIR(st.st_mode);
    ::close(fd);
    LLMTRAIN_CHECK(false, name, ": cannot read ",
                   dir ? "a folder" : "what is not a regular file (a pipe, socket or device)", ", expected a file");
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  *size = uint64_t(st.st_size);
  return fd;
}

std::string read_file(const std::string& path, uint64_t limit, const std::string& what) {
  const std::string name = what.empty() ? path : what + " " + path;
  uint64_t size = 0;
  const int fd = open_regular(path, &size, what);
  if (size > limit) {
    ::close(fd);
    LLMTRAIN_CHECK(false, name, ": ", size, " bytes, more than the ", limit, " expected of it");
  }
  std::string out;
  out.reserve(size_t(size));
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 || out.size() + size_t(n) > limit) {  // a read error, or the file grew while read
      const int err = n < 0 ? errno : EFBIG;
      ::close(fd);
      LLMTRAIN_CHECK(false, name, ": cannot read (", errno_text(err), ")");
    }
    if (n == 0) break;
    out.append(buf, size_t(n));
  }
  ::close(fd);
  return out;
}

MappedFile::MappedFile(const std::string& path, const std::string& what, bool copy_on_write) : path_(path) {
  const int fd = open_regular(path, &size_, what);
  if (size_ > 0) {
    void* m = ::mmap(nullptr, size_t(size_), copy_on_write ? PROT_READ | PROT_WRITE : PROT_READ,
                     copy_on_write ? MAP_PRIVATE : MAP_SHARED, fd, 0);
    const int err = errno;
    ::close(fd);
    LLMTRAIN_CHECK(m != MAP_FAILED, what.empty() ? path : what + " " + path, ": cannot map (", errno_text(err), ")");
    data_ = static_cast<unsigned char*>(m);
  } else {
    ::close(fd);
  }
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(data_, size_t(size_));
}

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)), tmp_(temp_name(path_, "tmp")) {
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd_ < 0) fail("create", errno);
}

AtomicFile::~AtomicFile() {
  if (fd_ < 0) return;  // committed, or failed and cleaned up
  ::close(fd_);
  ::unlink(tmp_.c_str());
}

// Removes the temporary file, then throws naming the target (and the temporary file being written).
void AtomicFile::fail(const char* doing, int err) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  ::unlink(tmp_.c_str());
  LLMTRAIN_CHECK(false, "cannot write ", path_, " (", doing, " ", tmp_, "): ", errno_text(err),
                 err == ENOSPC ? "; nothing was replaced, free some space and try again" : "");
}

void AtomicFile::write(std::string_view bytes) {
  LLMTRAIN_CHECK(fd_ >= 0, "cannot write ", path_, ": already committed or failed");
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd_, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail("writing", n < 0 ? errno : EIO);
    done += size_t(n);
  }
}

void AtomicFile::commit() {
  LLMTRAIN_CHECK(fd_ >= 0, "cannot write ", path_, ": already committed or failed");
  // Errors of delayed writes (a full disk, NFS) surface at fsync or close.
  if (::fsync(fd_) != 0) fail("flushing", errno);
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) {
    const int err = errno;
    ::unlink(tmp_.c_str());
    LLMTRAIN_CHECK(false, "cannot write ", path_, " (closing ", tmp_, "): ", errno_text(err));
  }
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp_.c_str());
    LLMTRAIN_CHECK(false, "cannot write ", path_, " (renaming ", tmp_, " over it): ", errno_text(err));
  }
  sync_dir(parent_of(path_));
}

void write_file_atomic(const std::string& path, std::string_view bytes) {
  AtomicFile f(path);
  f.write(bytes);
  f.commit();
}

void append_file(const std::string& path, std::string_view bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  LLMTRAIN_CHECK(fd >= 0, "cannot write ", path, ": ", errno_text(errno));
  for (size_t done = 0; done < bytes.size();) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : EIO;
      ::close(fd);
      LLMTRAIN_CHECK(false, "cannot write ", path, ": ", errno_text(err));
    }
    done += size_t(n);
  }
  LLMTRAIN_CHECK(::close(fd) == 0, "cannot write ", path, ": ", errno_text(errno));
}

bool is_our_output(const std::string& dir) {
  struct stat st;
  return ::lstat((dir + "/" + kOutputMarker).c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

void mark_output(const std::string& dir, const std::string& kind) {
  write_file_atomic(dir + "/" + kOutputMarker, "{\"written_by\": \"llmtrain\", \"kind\": \"" + kind + "\"}\n");
}

void check_output(const std::string& path, const OutputOptions& o) {
  LLMTRAIN_CHECK(!path.empty(), o.what, " is empty: name a folder to write");
  const std::string abs = absolute(path);
  LLMTRAIN_CHECK(abs != "/", o.what, " ", path, " is the root folder: name a folder of its own to write into");
  if (const char* home = std::getenv("HOME"); home && *home)
    LLMTRAIN_CHECK(abs != absolute(home), o.what, " ", path,
                   " is your home folder: name a folder of its own to write into, e.g. ", path, "/out");
  LLMTRAIN_CHECK(!is_within(absolute("."), abs), o.what, " ", path,
                 " is the working folder or a folder above it: name a folder of its own to write into, e.g. ",
                 strip_trailing_slashes(path), "/out");
  for (const auto& in : o.inputs) {
    if (in.empty()) continue;
    const std::string in_abs = absolute(glob_root(in));
    LLMTRAIN_CHECK(!is_within(in_abs, abs), o.what, " ", path, in_abs == abs ? " is" : " holds", " the input ", in,
                   ": write the output somewhere else");
  }
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0 || o.force) return;
  LLMTRAIN_CHECK(!S_ISLNK(st.st_mode), o.what, " ", path,
                 " is a symbolic link: name a real folder, or pass --force to replace the link");
  LLMTRAIN_CHECK(
      S_ISDIR(st.st_mode), o.what, " ", path,
      " is an existing file, not a folder llmtrain wrote: choose another name, or pass --force to replace it");
  if (is_our_output(path)) return;
  DIR* d = ::opendir(path.c_str());
  LLMTRAIN_CHECK(d != nullptr, "cannot read ", path, ": ", errno_text(errno));
  bool empty = true;
  while (const dirent* e = ::readdir(d))
    if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) empty = false;
  ::closedir(d);
  LLMTRAIN_CHECK(empty, o.what, " ", path, " holds files that llmtrain did not write (it has no ", kOutputMarker,
                 " marker): choose another folder, or pass --force to replace it");
}

void replace_dir(const std::string& fresh, const std::string& dir) {
  const std::string parent = parent_of(dir);
  if (!exists(dir)) {
    LLMTRAIN_CHECK(::rename(fresh.c_str(), dir.c_str()) == 0, "cannot rename ", fresh, " to ", dir, ": ",
                   errno_text(errno));
    sync_dir(parent);
    return;
  }
  if (!detail::failpoint_set("replace:no-exchange")) {
    if (::renameat2(AT_FDCWD, fresh.c_str(), AT_FDCWD, dir.c_str(), RENAME_EXCHANGE) == 0) {
      sync_dir(parent);
      detail::failpoint("replace:exchanged");
      remove_tree(fresh);  // the old folder now
      return;
    }
    LLMTRAIN_CHECK(errno == EINVAL || errno == ENOSYS || errno == ENOTSUP, "cannot exchange ", fresh, " and ", dir,
                   ": ", errno_text(errno));
  }
  const std::string old = temp_name(dir, "old");
  LLMTRAIN_CHECK(::rename(dir.c_str(), old.c_str()) == 0, "cannot rename ", dir, " to ", old, ": ", errno_text(errno));
  detail::failpoint("replace:aside");  // both complete, as `old` and `fresh`
  if (::rename(fresh.c_str(), dir.c_str()) != 0) {
    const int err = errno;
    ::rename(old.c_str(), dir.c_str());
    LLMTRAIN_CHECK(false, "cannot rename ", fresh, " to ", dir, ": ", errno_text(err));
  }
  sync_dir(parent);
  remove_tree(old);
}

namespace {

// The folders a write of `target` left when a crash interrupted it: "<target>.tmp.PID.N" and
// "<target>.old.PID.N" of a process that no longer runs. An old output renamed aside (the two-rename
// path) is put back when `target` is missing; the rest are removed.
void recover(const std::string& target) {
  const std::string parent = parent_of(target), base = target.substr(target.rfind('/') + 1);
  DIR* d = ::opendir(parent.c_str());
  if (!d) return;
  std::vector<std::pair<std::string, bool>> stale;  // (path, an old output)
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name.size() <= base.size() + 5 || name.compare(0, base.size(), base) != 0) continue;
    const std::string rest = name.substr(base.size());  // ".tmp.PID.N"
    const bool old = rest.compare(0, 5, ".old.") == 0;
    if (!old && rest.compare(0, 5, ".tmp.") != 0) continue;
    const size_t dot = rest.find('.', 5);
    if (dot == std::string::npos || rest.find_first_not_of("0123456789", 5) != dot ||
        rest.find_first_not_of("0123456789", dot + 1) != std::string::npos || dot + 1 == rest.size())
      continue;
    const pid_t pid = pid_t(std::atol(rest.substr(5, dot - 5).c_str()));
    if (pid == ::getpid() || ::kill(pid, 0) == 0 || errno != ESRCH) continue;  // its writer may be running
    stale.emplace_back(parent + "/" + name, old);
  }
  ::closedir(d);
  for (const auto& [path, old] : stale) {
    if (old && !exists(target) && is_our_output(path) && ::rename(path.c_str(), target.c_str()) == 0) continue;
    remove_tree(path);
  }
}

}  // namespace

void write_dir_atomic(const std::string& dir, const std::string& kind, const OutputOptions& o,
                      const std::function<void(const std::string& tmp)>& fill) {
  const std::string target = strip_trailing_slashes(dir);
  recover(target);
  check_output(dir, o);
  const std::string tmp = temp_name(target, "tmp");
  make_dirs(tmp);
  try {
    fill(tmp);
    mark_output(tmp, kind);
    sync_dir(tmp);
    detail::failpoint("replace:filled");
    replace_dir(tmp, target);
  } catch (...) {
    remove_tree(tmp);
    throw;
  }
}

}  // namespace fs
}  // namespace llmtrain
