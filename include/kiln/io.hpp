// Printing like NumPy and .npy files, so data moves to and from NumPy.
#pragma once

#include <cstddef>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "kiln/array.hpp"

namespace kiln {

/// How arrays print (NumPy's defaults; floatmode 'maxprec', no suppress_small).
struct PrintOptions {
  int64_t threshold = 1000;  ///< summarise with "..." (and show shape=) above this many elements
  int64_t edgeitems = 3;     ///< elements kept at each edge of an axis when summarising
  int precision = 8;         ///< at most this many digits after the point for floats (0 to 300)
  int linewidth = 75;        ///< characters per line before wrapping
};
/// Sets the process-wide print options (thread-safe); throws ValueError for negative values,
/// linewidth < 1 or precision > 300, leaving the options unchanged.
void set_print_options(const PrintOptions& options);
/// The current print options.
PrintOptions get_print_options();

/// Prints a.str(): NumPy's repr, e.g. `array([[1., 2.], ...], dtype=float32)` (dtype omitted for
/// float64, int64 and bool), with `device='cuda:0'` when not on the CPU. Synchronises and copies GPU arrays.
std::ostream& operator<<(std::ostream& os, const Array& a);

/// A run of bytes for write_file_atomically (not owned: it must outlive the call).
struct FileBytes {
  const void* data = nullptr;
  size_t size = 0;
};
/// Writes `pieces`, in order, as the file `path`, crash-safely: into a temporary file in path's folder, which
/// is fsynced and renamed over `path`, then the folder is fsynced. A crash at any moment leaves either the old
/// file or the whole new one at `path`, never a torn one. Throws ValueError naming `op`, the file and the
/// system's reason (missing folder, no permission, disk full); the temporary is removed and an existing file at
/// `path` stays as it was. save() and nn::save_safetensors write through it.
void write_file_atomically(const std::string& path, const std::vector<FileBytes>& pieces, const std::string& op);

/// Writes `a` as a .npy file exactly as np.save would (format 1.0, or 2.0 when the header exceeds 64 KiB;
/// little-endian, C order, header padded to 64 bytes). Synchronises and copies GPU arrays to the host.
/// Written crash-safely (write_file_atomically: the old file or the new one, never a torn one).
/// Throws DTypeError for bfloat16 (NumPy has no bfloat16: save a.astype(float32)), ValueError when the file
/// cannot be written.
void save(const std::string& path, const Array& a);
/// Reads a .npy file (format 1.0/2.0/3.0; '<', '>', '|' or '=' byte order; C or Fortran order, returned in
/// C order) onto `device` (default: the CPU). Throws ValueError naming the file and the problem: missing file,
/// bad magic, malformed header, truncated data, or a dtype kiln lacks (complex, object, strings, uint16+...).
Array load(const std::string& path, std::optional<Device> device = {});

}  // namespace kiln
