#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>

#include "llmtrain/core/error.h"
#include "llmtrain/core/fs.h"

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
  EXPECT_TRUE(fs::exists(root));  // the link's target survives
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
