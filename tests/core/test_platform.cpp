// Facts of the platform that llmtrain relies on and that LibTorch's wheel can break.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>

// PyPI's libtorch.so exports broken copies of std::filesystem functions; the link option on
// llmtrain::llmtrain (src/CMakeLists.txt) makes programs bind to libstdc++'s. Without it this crashed.
TEST(Platform, StdFilesystemWorksBesideLibTorch) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("llmtrain_fs_" + std::to_string(::getpid()));
  fs::create_directories(dir / "a" / "b");
  std::ofstream(dir / "a" / "b" / "file.txt") << "x";
  fs::rename(dir / "a" / "b" / "file.txt", dir / "a" / "moved.txt");
  EXPECT_TRUE(fs::exists(dir / "a" / "moved.txt"));
  EXPECT_EQ(fs::remove_all(dir), 4u);  // dir, a, b, moved.txt
  EXPECT_FALSE(fs::exists(dir));
}
