// Crash-safe file writes: a temporary file in the target's folder, fsync, rename over the target, fsync of the
// folder. rename(2) within one file system replaces the name in one step, so a reader (or a run restarted after
// a crash or a power cut) finds either the whole old file or the whole new one, never a torn mix; the fsyncs
// order the data before the rename and make the rename itself durable.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <functional>
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
  // The temporary's name starts with a dot and ends in a random suffix (mkstemp): hidden from a listing, never
  // one that another writer (another process, or a thread of this one) uses at the same time.
  const std::string folder = folder_of(path);
  const std::string base = path.substr(path.find_last_of('/') == std::string::npos ? 0 : path.find_last_of('/') + 1);
  TemporaryFile temp;
  std::string name = (folder == "/" ? "" : folder) + "/." + base + ".tmp.XXXXXX";
  temp.fd = ::mkstemp(name.data());
  if (temp.fd < 0)
    throw ValueError(op + ": cannot open a temporary file next to " + path + " for writing: " + std::strerror(errno) +
                     " (the previous file, if any, is unchanged; check the folder exists and is writable)");
  temp.path = name;
  // mkstemp makes the file 0600; give it what a plain open would (0666 less the umask), as np.save's file has.
  const mode_t mask = ::umask(0);
  ::umask(mask);
  if (::fchmod(temp.fd, 0666 & ~mask) != 0) fail("setting the permissions of the temporary file for", errno);
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
