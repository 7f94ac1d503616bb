// The on-disk kernel cache and its keys (internal; used by compiler.cpp and
// tested without a GPU). A compiled kernel image is stored in one file per key,
// named by the key in hex, under KILN_CACHE_DIR (default ~/.cache/kiln/kernels).
// The file is a fixed header followed by the payload:
//   header (56 bytes, native little-endian):
//     char[8] magic "KILNKERN" | u32 format version | u32 flags (bit 0: CUBIN, else PTX)
//     u64 key high | u64 key low | u64 payload size | u64 payload checksum (XXH64)
//     u64 header checksum (XXH64 of the 48 bytes before it)
//   payload: u64 size, the key material (every input of the key, see cache_key_material),
//            u32 count, then count x (u32 size, name expression, u32 size, lowered name),
//            then the image bytes to the end of the file.
// A reader compares the stored key material with its own, byte for byte: a file whose 128-bit name
// collides with another compilation's is a miss, never the wrong program.
// Files are written to a temporary file in the same folder and renamed into
// place, so readers see a whole file or none. Every failure (missing, corrupt,
// truncated or unreadable file, unwritable folder) is a miss, never an exception.
// Contains no CUDA headers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kiln::cuda_impl {

/// Version of the file format and of the key recipe; bump it when either changes.
inline constexpr uint32_t kKernelCacheFormatVersion = 2;
/// Size of the fixed file header in bytes.
inline constexpr size_t kKernelCacheHeaderSize = 56;
/// A payload larger than this is not a cache file of kiln's (the PTX or CUBIN of a generated kernel is kilobytes).
inline constexpr uint64_t kKernelCacheMaxPayloadSize = uint64_t{1} << 30;
/// NVRTC options kiln always passes (before -arch and the user's options); part of every key.
inline constexpr const char* kDefaultNvrtcOptions[] = {"--std=c++17", "-default-device"};

/// 128-bit name of one compilation (source, options, target, NVRTC and kiln versions).
struct CacheKey {
  uint64_t high = 0;
  uint64_t low = 0;
  bool operator==(const CacheKey&) const = default;
  /// 32 lowercase hex digits: the cache file's name.
  std::string hex() const;
};

/// What a compilation produces and the disk cache stores.
struct CompiledImage {
  std::string image;  ///< CUBIN bytes, or PTX text (loaded with a terminating NUL, which std::string keeps)
  bool is_cubin = false;
  /// Name expression given at compile time -> its lowered (mangled) name.
  std::vector<std::pair<std::string, std::string>> lowered_names;
};

/// NVRTC's version as major*1000+minor (13000 for 13.0); 0 when it cannot be queried.
int nvrtc_version();

/// XXH64 of `size` bytes (the standard xxHash 64-bit algorithm).
uint64_t xxhash64(const void* data, size_t size, uint64_t seed = 0);

/// The key of compiling `source` for `target` (an NVRTC -arch value such as "sm_90" or "compute_90")
/// with the user `options` and `name_expressions`; also covers kiln's default NVRTC options, the NVRTC
/// version, kiln's version and kKernelCacheFormatVersion. No GPU needed.
CacheKey cache_key(std::string_view source, std::string_view target, const std::vector<std::string>& options,
                   const std::vector<std::string>& name_expressions);
/// The bytes cache_key hashes: every input above, length-prefixed (in a per-thread buffer, valid until the
/// thread's next call). The memory cache compares them on a hit, so a 128-bit collision cannot load another
/// program's module.
std::string_view cache_key_material(std::string_view source, std::string_view target,
                                    const std::vector<std::string>& options,
                                    const std::vector<std::string>& name_expressions);
/// The key of cache_key_material's bytes (cache_key is cache_key_of(cache_key_material(...))).
CacheKey cache_key_of(std::string_view material);

/// The disk cache folder: KILN_CACHE_DIR, else $HOME/.cache/kiln/kernels; "" (no disk cache) when
/// KILN_CACHE_IN_MEMORY is 1/true/on/yes or neither variable is set. Read on every call.
std::string kernel_cache_directory();

/// Path of `key`'s file in `directory`.
std::string cache_file_path(const std::string& directory, const CacheKey& key);

// The format (kernel_cache_format.cpp, built without CUDA: tests/fuzz fuzzes the decoder).
/// Serialises `entry`, compiled from `material` (cache_key_material's bytes), into the file format above,
/// under the key cache_key_of(material).
std::string encode_cache_entry(std::string_view material, const CompiledImage& entry);
/// Parses a file's bytes; nullopt when anything is off (magic, version, key, stored key material that
/// differs from `material`, sizes, checksums).
std::optional<CompiledImage> decode_cache_entry(std::string_view bytes, std::string_view material);

/// Reads and checks the file of `material`'s key in `directory`; nullopt on any failure (never throws).
std::optional<CompiledImage> read_cache_file(const std::string& directory, std::string_view material);
/// Writes the file of `material`'s key atomically (temporary file in the same folder, then rename),
/// creating the folder; false on any failure (never throws).
bool write_cache_file(const std::string& directory, std::string_view material, const CompiledImage& entry);

}  // namespace kiln::cuda_impl
