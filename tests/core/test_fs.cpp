#include <dirent.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <map>
#include <vector>

#include "llmtrain/core/error.h"
#include "llmtrain/core/fs.h"
#include "test_util.h"

namespace fs = llmtrain::fs;

TEST(Fs, TempDirIsNewEmptyAndPrivate) {
  const std::string a = fs::make_temp_dir("llmtrain_fs_"), b = fs::make_temp_dir("llmtrain_fs_");
  EXPECT_NE(a, b);
  struct stat st;
  ASSERT_EQ(::stat(a.c_str(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  fs::remove_tree(a);
  fs::remove_tree(b);
  EXPECT_FALSE(fs::exists(a));
}

TEST(Fs, MakeDirsAndRemoveTree) {
  const std::string root = fs::make_temp_dir("llmtrain_fs_");
  fs::make_dirs(root + "/a/b/c");
  fs::make_dirs(root + "/a/b/c");  // existing is fine
  std::ofstream(root + "/a/b/c/file.txt") << "x";
  std::ofstream(root + "/a/other.txt") << "y";
  ASSERT_EQ(::symlink(root.c_str(), (root + "/a/loop").c_str()), 0);  // must not be followed
  EXPECT_TRUE(fs::exists(root + "/a/b/c/file.txt"));
  fs::remove_tree(root + "/a");
  EXPECT_FALSE(fs::exists(root + "/a"));
  EXPECT_TRUE(fs::exists(root));       // the link's target survives
  fs::remove_tree(root + "/missing");  // a missing path is fine
  fs::remove_tree(root);
  EXPECT_FALSE(fs::exists(root));
}

TEST(Fs, MakeDirsNamesThePathOnFailure) {
  const std::string root = fs::make_temp_dir("llmtrain_fs_");
  std::ofstream(root + "/file") << "x";
  try {
    fs::make_dirs(root + "/file/sub");
    FAIL() << "expected llmtrain::Error";
  } catch (const llmtrain::Error& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr(root + "/file"));
  }
  fs::remove_tree(root);
}

namespace {

std::string slurp(const std::string& path) { return fs::read_file(path); }

// A folder as write_dir_atomic leaves it: its marker and one file saying which version it is.
void fill_version(const std::string& dir, const std::string& version) {
  fs::write_file_atomic(dir + "/model.txt", version);
}

// Runs `body` in a child process (fork) with LLMTRAIN_FAILPOINT=`points`; returns the signal that ended
// it (0 when it ended by itself).
template <typename F>
int killed_at(const std::string& points, F&& body) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::setenv("LLMTRAIN_FAILPOINT", points.c_str(), 1);
    try {
      body();
    } catch (...) {
      ::_exit(3);
    }
    ::_exit(0);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFSIGNALED(status) ? WTERMSIG(status) : 0;
}

}  // namespace

TEST(Fs, OutputsNeverTakeTheWorkingFolderHomeRootOrAnInput) {
  llmtrain::testing::TempDir t;
  const std::string in = t.path + "/data";
  fs::make_dirs(in + "/sub");
  const fs::OutputOptions o{"--out", {in + "/sub/*.txt"}, /*force=*/true};  // not even with force
  const auto refused = [&](const std::string& path, const std::string& why) {
    llmtrain::testing::expect_error([&] { fs::check_output(path, o); }, {"--out " + path, why});
  };
  refused(".", "the working folder or a folder above it");
  refused("..", "the working folder or a folder above it");
  refused("./", "the working folder or a folder above it");
  refused("/", "the root folder");
  const char* home = std::getenv("HOME");
  if (home && *home) refused(home, "your home folder");
  refused(in, "holds the input");
  refused(in + "/sub", "is the input");
  refused(in + "/sub/../sub/", "is the input");
  fs::check_output(t.path + "/elsewhere", o);  // fine: new, and no input inside
  fs::check_output(in + "/sub/out", o);        // inside an input's folder is the caller's to judge
}

TEST(Fs, OutputsReplaceOnlyWhatLlmtrainWrote) {
  llmtrain::testing::TempDir t;
  const fs::OutputOptions o{"--to"};
  const std::string foreign = t.path + "/foreign", file = t.path + "/file", link = t.path + "/link";
  fs::make_dirs(foreign);
  fs::write_file_atomic(foreign + "/notes.txt", "mine");
  fs::write_file_atomic(file, "a file");
  ASSERT_EQ(::symlink(foreign.c_str(), link.c_str()), 0);
  const auto fill = [](const std::string& tmp) { fill_version(tmp, "new"); };
  llmtrain::testing::expect_error([&] { fs::write_dir_atomic(foreign, "test", o, fill); },
                                  {"--to " + foreign, "did not write", "--force"});
  llmtrain::testing::expect_error([&] { fs::write_dir_atomic(file, "test", o, fill); }, {"existing file", "--force"});
  llmtrain::testing::expect_error([&] { fs::write_dir_atomic(link, "test", o, fill); }, {"symbolic link"});
  EXPECT_EQ(slurp(foreign + "/notes.txt"), "mine");  // nothing lost
  EXPECT_EQ(slurp(file), "a file");
  EXPECT_EQ(slurp(link + "/notes.txt"), "mine");

  // New, empty and ours are taken; an error in fill leaves the old output as it was and nothing beside it.
  const std::string out = t.path + "/out";
  fs::write_dir_atomic(out, "test", o, [](const std::string& tmp) { fill_version(tmp, "v1"); });
  EXPECT_TRUE(fs::is_our_output(out));
  fs::write_dir_atomic(out, "test", o, [](const std::string& tmp) { fill_version(tmp, "v2"); });
  EXPECT_EQ(slurp(out + "/model.txt"), "v2");
  EXPECT_THROW(fs::write_dir_atomic(out, "test", o, [](const std::string&) { throw llmtrain::Error("disk full"); }),
               llmtrain::Error);
  EXPECT_EQ(slurp(out + "/model.txt"), "v2");
  fs::make_dirs(t.path + "/empty");
  fs::write_dir_atomic(t.path + "/empty", "test", o, fill);
  // With --force a foreign folder is replaced.
  fs::write_dir_atomic(foreign, "test", {"--to", {}, true}, fill);
  EXPECT_EQ(slurp(foreign + "/model.txt"), "new");
  EXPECT_FALSE(fs::exists(foreign + "/notes.txt"));
  // Nothing but the outputs is left in the folder: no temporary or old folders.
  std::vector<std::string> left;
  DIR* d = ::opendir(t.path.c_str());
  while (const dirent* e = ::readdir(d))
    if (e->d_name[0] != '.') left.push_back(e->d_name);
  ::closedir(d);
  std::sort(left.begin(), left.end());
  EXPECT_EQ(left, (std::vector<std::string>{"empty", "file", "foreign", "link", "out"}));
}

// A crash at each step of a replace (the process killed, as by the OOM killer) leaves a complete output:
// the old or the new one under the name, or (without an atomic exchange, between its two renames) both
// under names beside it.
TEST(Fs, ACrashAtAnyStepOfAReplaceLeavesACompleteOutput) {
  llmtrain::testing::TempDir t;
  const std::string out = t.path + "/out";
  fs::write_dir_atomic(out, "test", {"--to"}, [](const std::string& tmp) { fill_version(tmp, "old"); });
  const auto replace = [&] {
    fs::write_dir_atomic(out, "test", {"--to"}, [](const std::string& tmp) { fill_version(tmp, "new"); });
  };
  const auto beside = [&] {  // what lies beside `out`: name -> its version
    std::map<std::string, std::string> found;
    DIR* d = ::opendir(t.path.c_str());
    while (const dirent* e = ::readdir(d)) {
      const std::string name = e->d_name;
      if (name.rfind("out.", 0) == 0)
        found[name] = fs::exists(t.path + "/" + name + "/model.txt") ? slurp(t.path + "/" + name + "/model.txt") : "";
    }
    ::closedir(d);
    return found;
  };
  EXPECT_EQ(killed_at("replace:filled", replace), SIGKILL);
  EXPECT_EQ(slurp(out + "/model.txt"), "old");
  EXPECT_EQ(killed_at("replace:exchanged", replace), SIGKILL);
  EXPECT_EQ(slurp(out + "/model.txt"), "new");  // the exchange happened; only the old copy's removal did not
  EXPECT_TRUE(fs::is_our_output(out));
  EXPECT_EQ(beside().size(), 1u);  // the second crashed write's (it removed the first one's)
  fs::write_dir_atomic(out, "test", {"--to"}, [](const std::string& tmp) { fill_version(tmp, "v2"); });
  EXPECT_TRUE(beside().empty()) << "the next write removes what crashed writes left";
  EXPECT_EQ(slurp(out + "/model.txt"), "v2");

  // Without an atomic exchange, a crash between the two renames leaves both complete beside the name...
  EXPECT_EQ(killed_at("replace:no-exchange,replace:aside", replace), SIGKILL);
  EXPECT_FALSE(fs::exists(out));
  std::vector<std::string> versions;
  for (const auto& [name, version] : beside()) versions.push_back(version);
  std::sort(versions.begin(), versions.end());
  EXPECT_EQ(versions, (std::vector<std::string>{"new", "v2"}));
  // ... and the next write puts the old one back before it replaces it; without a crash the two-rename
  // path ends as the exchange does.
  ::setenv("LLMTRAIN_FAILPOINT", "replace:no-exchange", 1);
  EXPECT_THROW(fs::write_dir_atomic(out, "test", {"--to"}, [](const std::string&) { throw llmtrain::Error("x"); }),
               llmtrain::Error);
  EXPECT_EQ(slurp(out + "/model.txt"), "v2");
  fs::write_dir_atomic(out, "test", {"--to"}, [](const std::string& tmp) { fill_version(tmp, "v3"); });
  ::unsetenv("LLMTRAIN_FAILPOINT");
  EXPECT_EQ(slurp(out + "/model.txt"), "v3");
  EXPECT_TRUE(beside().empty());
}

TEST(Fs, ReadsRefusePipesDevicesFoldersAndOversizedFiles) {
  llmtrain::testing::TempDir t;
  const std::string fifo = t.path + "/fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  // Opening a FIFO with no writer would wait forever; it is refused at once.
  llmtrain::testing::expect_error([&] { fs::read_file(fifo); }, {fifo, "not a regular file"});
  llmtrain::testing::expect_error([&] { fs::read_file("/dev/zero"); }, {"/dev/zero", "not a regular file"});
  llmtrain::testing::expect_error([&] { fs::read_file(t.path); }, {t.path, "a folder"});
  fs::write_file_atomic(t.path + "/big", std::string(1000, 'x'));
  llmtrain::testing::expect_error([&] { fs::read_file(t.path + "/big", 999, "config"); },
                                  {"config " + t.path + "/big: 1000 bytes, more than the 999"});
  EXPECT_EQ(fs::read_file(t.path + "/big", 1000).size(), 1000u);
  llmtrain::testing::expect_error([&] { fs::MappedFile m(fifo, "shard"); }, {"shard " + fifo});
}

// A full disk (a 64 KiB tmpfs in a mount namespace of a child process): the write fails naming the file,
// the old file and folder stay as they were, and no temporary file or folder is left.
TEST(Fs, AFullDiskNamesTheFileAndKeepsTheOldOutput) {
  llmtrain::testing::TempDir t;
  const std::string disk = t.path + "/disk";
  fs::make_dirs(disk);
  const pid_t pid = ::fork();
  if (pid == 0) {
    const bool mounted = ::unshare(CLONE_NEWNS) == 0 &&
                         ::mount("none", "/", nullptr, MS_REC | MS_PRIVATE, nullptr) == 0 &&
                         ::mount("tmpfs", disk.c_str(), "tmpfs", 0, "size=64k") == 0;
    if (!mounted) ::_exit(77);
    int failures = 0;
    const auto expect = [&](bool ok) { failures += ok ? 0 : 1; };
    fs::write_file_atomic(disk + "/file", "old");
    fs::write_dir_atomic(disk + "/out", "test", {"--to"}, [](const std::string& tmp) { fill_version(tmp, "old"); });
    const std::string big(200 * 1024, 'x');
    try {
      fs::write_file_atomic(disk + "/file", big);
      expect(false);
    } catch (const llmtrain::Error& e) {
      expect(std::string(e.what()).find("cannot write " + disk + "/file") != std::string::npos);
      expect(std::string(e.what()).find("No space left on device") != std::string::npos);
    }
    try {
      fs::write_dir_atomic(disk + "/out", "test", {"--to"},
                           [&](const std::string& tmp) { fs::write_file_atomic(tmp + "/model.txt", big); });
      expect(false);
    } catch (const llmtrain::Error& e) {
      expect(std::string(e.what()).find("No space left on device") != std::string::npos);
    }
    expect(fs::read_file(disk + "/file") == "old");
    expect(fs::read_file(disk + "/out/model.txt") == "old");
    DIR* d = ::opendir(disk.c_str());
    int entries = 0;
    while (const dirent* e = ::readdir(d)) entries += e->d_name[0] != '.';
    ::closedir(d);
    expect(entries == 2);  // file and out: nothing beside them
    ::_exit(failures);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status)) << "the child ended by signal " << WTERMSIG(status);
  if (WEXITSTATUS(status) == 77) GTEST_SKIP() << "no tmpfs can be mounted here (no CAP_SYS_ADMIN)";
  EXPECT_EQ(WEXITSTATUS(status), 0) << "checks failed in the child";
}
