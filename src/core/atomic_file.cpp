// Crash-safe file writes: a temporary file in the target's folder, fsync, rename over the target, fsync of the
// folder. rename(2) within one file system replaces the name in one step, so a reader (or a run restarted after
// a crash or a power cut) finds either the whole old file or the whole new one, never a torn mix; the fsyncs
// order the data before the rename and make the rename itself durable.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "kiln/io.hpp"

namespace kiln {

namespace {

std::string folder_of(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

/// Closes and removes the temporary file unless released (on every error path).
struct TemporaryFile {
  std::string path;
  int fd = -1;
  bool keep = false;
  ~TemporaryFile() {
    if (fd >= 0) ::close(fd);
    if (!keep && !path.empty()) ::unlink(path.c_str());
  }
};

void write_pieces(int fd, const std::vector<FileBytes>& pieces, const std::function<void(const char*, int)>& fail) {
  for (const FileBytes& piece : pieces) {
    const char* p = static_cast<const char*>(piece.data);
    size_t left = piece.size;
    while (left > 0) {
      const ssize_t n = ::write(fd, p, left);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) fail("writing", n < 0 ? errno : ENOSPC);
      p += n;
      left -= static_cast<size_t>(n);
    }
  }
}

}  // namespace

void write_file_atomically(const std::string& given_path, const std::vector<FileBytes>& pieces, const std::string& op) {
  std::string path = given_path;
  auto fail = [&](const char* what, int error) {
    throw ValueError(op + ": " + what + " " + path + " failed: " + std::strerror(error) +
                     " (the previous file, if any, is unchanged; check the folder exists, is writable and has space)");
  };
  struct stat info {};
  if (::lstat(path.c_str(), &info) == 0 && S_ISLNK(info.st_mode)) {
    // Replace the file the link points to, not the link (as a plain open for writing would).
    char* target = ::realpath(path.c_str(), nullptr);
    if (target) {
      path = target;
      std::free(target);
    }
  }
  if (::stat(path.c_str(), &info) == 0 && !S_ISREG(info.st_mode)) {
    // A device or a pipe (/dev/null, a FIFO) is written in place: renaming over it would replace the node.
    const int fd = ::open(path.c_str(), O_WRONLY | O_TRUNC);
    if (fd < 0) fail("opening", errno);
    write_pieces(fd, pieces, fail);
    ::close(fd);
    return;
  }
  // The temporary's name starts with a dot (hidden from a listing) and ends in this process's id, a counter and
  // a random number: never one that another writer (another process, or a thread of this one) uses at the same
  // time; O_EXCL refuses a leftover of the same name, and the next try takes another. Opened with mode 0666 so
  // that the umask applies as to a plain open (np.save's file), and O_CLOEXEC so that a child started meanwhile
  // does not hold it.
  const std::string folder = folder_of(path);
  const std::string base = path.substr(path.find_last_of('/') == std::string::npos ? 0 : path.find_last_of('/') + 1);
  static std::atomic<uint64_t> counter{0};
  thread_local std::mt19937_64 random_bits{std::random_device{}()};
  TemporaryFile temp;
  for (int attempt = 0; attempt < 100 && temp.fd < 0; ++attempt) {
    const std::string name = (folder == "/" ? "" : folder) + "/." + base + ".tmp." + std::to_string(::getpid()) +
                             "." + std::to_string(counter++) + "." + std::to_string(random_bits() % 1000000);
    temp.fd = ::open(name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (temp.fd >= 0) temp.path = name;
    if (temp.fd < 0 && errno != EEXIST) break;
  }
  if (temp.fd < 0)
    throw ValueError(op + ": cannot open a temporary file next to " + path + " for writing: " + std::strerror(errno) +
                     " (the previous file, if any, is unchanged; check the folder exists and is writable)");
  write_pieces(temp.fd, pieces, fail);
  if (::fsync(temp.fd) != 0) fail("flushing (fsync)", errno);
  const int fd = temp.fd;
  temp.fd = -1;
  if (::close(fd) != 0) fail("closing the temporary file of", errno);
  if (::rename(temp.path.c_str(), path.c_str()) != 0) fail("renaming the temporary file over", errno);
  temp.keep = true;  // it is `path` now
  // The rename is in the folder's entries: without this fsync a power cut could still bring back the old file.
  const int dir = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY);
  if (dir >= 0) {
    ::fsync(dir);  // some file systems refuse fsync on a folder (EINVAL); the rename has happened regardless
    ::close(dir);
  }
}

}  // namespace kiln
