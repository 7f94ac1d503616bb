// Crash-safe writes (write_file_atomically, and through it save() and nn::save_safetensors): a write that fails
// part-way (the file-size limit stands in for a full disk, as a crash stands in for nothing at all being
// finished) or cannot start leaves the previous file whole and no temporary file behind.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "kiln/kiln.hpp"

namespace kiln {
namespace {

namespace fs = std::filesystem;

/// A fresh folder for one test, removed afterwards.
struct Folder {
  fs::path path;
  explicit Folder(const std::string& name)
      : path(fs::temp_directory_path() / ("kiln_atomic_" + name + "_" + std::to_string(::getpid()))) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~Folder() { fs::remove_all(path); }
  std::vector<std::string> entries() const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(path)) names.push_back(e.path().filename().string());
    return names;
  }
};

/// Limits the size of any file this process writes (RLIMIT_FSIZE; SIGXFSZ ignored so write() fails with EFBIG
/// instead of killing the process): a disk that fills up in the middle of a write. Restored on destruction.
struct FileSizeLimit {
  rlimit saved{};
  void (*saved_handler)(int) = nullptr;
  explicit FileSizeLimit(rlim_t bytes) {
    ::getrlimit(RLIMIT_FSIZE, &saved);
    saved_handler = std::signal(SIGXFSZ, SIG_IGN);
    rlimit limit = saved;
    limit.rlim_cur = bytes;
    ::setrlimit(RLIMIT_FSIZE, &limit);
  }
  ~FileSizeLimit() {
    ::setrlimit(RLIMIT_FSIZE, &saved);
    std::signal(SIGXFSZ, saved_handler);
  }
};

std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(AtomicFile, ReplacesTheFileWholeAndLeavesNoTemporary) {
  Folder dir("replace");
  const std::string path = (dir.path / "a.txt").string();
  const std::string first = "first version", second = "the second, longer version";
  write_file_atomically(path, {{first.data(), first.size()}}, "test");
  EXPECT_EQ(read_text(path), first);
  const std::string a = "the second, ", b = "longer version";
  write_file_atomically(path, {{a.data(), a.size()}, {b.data(), b.size()}}, "test");
  EXPECT_EQ(read_text(path), second);
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"a.txt"});
  const mode_t mask = ::umask(0);
  ::umask(mask);
  struct stat info {};
  ASSERT_EQ(::stat(path.c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0666 & ~mask) << "the mode a plain open gives (0666 less the umask)";
}

TEST(AtomicFile, AFailedSafetensorsSaveKeepsThePreviousCheckpoint) {
  Folder dir("safetensors");
  const std::string path = (dir.path / "model.safetensors").string();
  nn::StateDict old_state;
  old_state.insert("w", arange(0.0, 6.0, 1.0, float32).reshape({2, 3}));
  nn::save_safetensors(path, old_state);
  nn::StateDict big;
  big.insert("w", ones({256, 256}, float32));  // 256 KiB: far past the limit below
  {
    FileSizeLimit limit(64 * 1024);
    try {
      nn::save_safetensors(path, big);
      ADD_FAILURE() << "a save past the file-size limit did not throw";
    } catch (const ValueError& e) {
      EXPECT_NE(std::string(e.what()).find("save_safetensors"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    }
  }
  const nn::StateDict back = nn::load_safetensors(path);
  ASSERT_EQ(back.size(), 1u);
  const Array w = back.at("w");
  ASSERT_EQ(w.shape(), (Shape{2, 3}));
  const float* values = static_cast<const float*>(w.data_ptr());
  for (int i = 0; i < 6; ++i) EXPECT_EQ(values[i], static_cast<float>(i));
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"model.safetensors"});
}

TEST(AtomicFile, AFailedNpySaveKeepsThePreviousFile) {
  Folder dir("npy");
  const std::string path = (dir.path / "a.npy").string();
  save(path, full({3}, 7.0, float64));
  {
    FileSizeLimit limit(4096);
    EXPECT_THROW(save(path, zeros({100000}, float64)), ValueError);
  }
  const Array back = load(path);
  ASSERT_EQ(back.shape(), (Shape{3}));
  const double* values = static_cast<const double*>(back.data_ptr());
  for (int i = 0; i < 3; ++i) EXPECT_EQ(values[i], 7.0);
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"a.npy"});
}

TEST(AtomicFile, AMissingFolderIsAnErrorNamingThePath) {
  Folder dir("missing");
  const std::string path = (dir.path / "no_such_folder" / "model.safetensors").string();
  nn::StateDict state;
  state.insert("w", zeros({2}, float32));
  try {
    nn::save_safetensors(path, state);
    ADD_FAILURE() << "saving into a missing folder did not throw";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("No such file"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(dir.entries().empty());
}

TEST(AtomicFile, WritesThroughASymlinkAndIntoDevices) {
  Folder dir("links");
  const fs::path target = dir.path / "real.txt", link = dir.path / "link.txt";
  const std::string old_text = "old", new_text = "new";
  write_file_atomically(target.string(), {{old_text.data(), old_text.size()}}, "test");
  fs::create_symlink(target, link);
  write_file_atomically(link.string(), {{new_text.data(), new_text.size()}}, "test");
  EXPECT_TRUE(fs::is_symlink(link));  // the link stays a link; the file it names is replaced
  EXPECT_EQ(read_text(target), new_text);
  // A device node is written in place, never replaced by a rename.
  write_file_atomically("/dev/null", {{new_text.data(), new_text.size()}}, "test");
  EXPECT_TRUE(fs::is_character_file("/dev/null"));
}

}  // namespace
}  // namespace kiln
