#include "llmtrain/core/fs.h"

#include <fcntl.h>
#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "llmtrain/core/error.h"

namespace llmtrain::fs {

bool exists(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0;
}

void make_dirs(const std::string& path) {
  LLMTRAIN_CHECK(!path.empty(), "make_dirs: empty path");
  for (size_t pos = path.find('/', 1);; pos = path.find('/', pos + 1)) {
    const std::string prefix = path.substr(0, pos);
    if (::mkdir(prefix.c_str(), 0755) != 0 && errno != EEXIST)
      LLMTRAIN_CHECK(false, "cannot create directory ", prefix, ": ", std::strerror(errno));
    if (pos == std::string::npos) break;
  }
  struct stat st;
  LLMTRAIN_CHECK(::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode), "cannot create directory ", path,
                 ": a file of that name exists");
}

std::string make_temp_dir(const std::string& prefix) {
  const char* tmp = std::getenv("TMPDIR");
  std::string templ = std::string(tmp && *tmp ? tmp : "/tmp") + "/" + prefix + "XXXXXX";
  std::vector<char> buf(templ.begin(), templ.end());
  buf.push_back('\0');
  LLMTRAIN_CHECK(::mkdtemp(buf.data()) != nullptr, "cannot create a temporary directory ", templ, ": ",
                 std::strerror(errno));
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
  LLMTRAIN_CHECK(::nftw(path.c_str(), remove_entry, 16, FTW_DEPTH | FTW_PHYS) == 0, "cannot remove ", path,
                 ": ", std::strerror(errno));
}

std::string read_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  LLMTRAIN_CHECK(fd >= 0, "cannot read ", path, ": ", std::strerror(errno));
  std::string out;
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      LLMTRAIN_CHECK(false, "cannot read ", path, ": ", std::strerror(err));
    }
    if (n == 0) break;
    out.append(buf, size_t(n));
  }
  ::close(fd);
  return out;
}

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)), tmp_(path_ + ".tmp." + std::to_string(::getpid())) {
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  LLMTRAIN_CHECK(fd_ >= 0, "cannot write ", tmp_, ": ", std::strerror(errno));
}

AtomicFile::~AtomicFile() {
  if (fd_ < 0) return;  // committed
  ::close(fd_);
  ::unlink(tmp_.c_str());
}

void AtomicFile::write(std::string_view bytes) {
  LLMTRAIN_CHECK(fd_ >= 0, "cannot write ", path_, ": already committed");
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd_, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    LLMTRAIN_CHECK(n > 0, "cannot write ", tmp_, ": ", std::strerror(errno));
    done += size_t(n);
  }
}

void AtomicFile::commit() {
  LLMTRAIN_CHECK(fd_ >= 0, "cannot write ", path_, ": already committed");
  const bool synced = ::fsync(fd_) == 0;
  const int err = errno;
  ::close(fd_);
  fd_ = -1;
  if (!synced || ::rename(tmp_.c_str(), path_.c_str()) != 0) {
    const int e = synced ? errno : err;
    ::unlink(tmp_.c_str());
    LLMTRAIN_CHECK(false, "cannot write ", path_, ": ", std::strerror(e));
  }
  // The rename itself is durable once the directory is flushed.
  const size_t slash = path_.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : path_.substr(0, slash));
  if (const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

void write_dir_atomic(const std::string& dir, const std::function<void(const std::string& tmp)>& fill) {
  std::string final_dir = dir;
  while (final_dir.size() > 1 && final_dir.back() == '/') final_dir.pop_back();
  const std::string tmp = final_dir + ".tmp." + std::to_string(::getpid());
  remove_tree(tmp);
  make_dirs(tmp);
  try {
    fill(tmp);
  } catch (...) {
    remove_tree(tmp);
    throw;
  }
  remove_tree(final_dir);
  LLMTRAIN_CHECK(::rename(tmp.c_str(), final_dir.c_str()) == 0, "cannot rename ", tmp, " to ", final_dir, ": ",
                 std::strerror(errno));
}

void write_file_atomic(const std::string& path, std::string_view bytes) {
  AtomicFile f(path);
  f.write(bytes);
  f.commit();
}

}  // namespace llmtrain::fs
