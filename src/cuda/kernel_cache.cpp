// The on-disk kernel cache: the key material (NVRTC's version is part of it), the cache folder, atomic writes
// and checked reads. The file format itself (XXH64, encoding, decoding) is kernel_cache_format.cpp. Every
// failure is a miss: a cache must never make a working program fail.
#include "cuda/kernel_cache.hpp"

#include <nvrtc.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <thread>

#include "core/env.hpp"
#include "kiln/cuda.hpp"
#include "kiln/version.hpp"

namespace kiln::cuda_impl {
namespace {

void append_u32(std::string& out, uint32_t v) { out.append(reinterpret_cast<const char*>(&v), 4); }
void append_u64(std::string& out, uint64_t v) { out.append(reinterpret_cast<const char*>(&v), 8); }
// Length-prefixed, so that ("ab","c") and ("a","bc") give different key material.
void append_field(std::string& out, std::string_view s) {
  append_u64(out, s.size());
  out.append(s);
}

}  // namespace

int nvrtc_version() {
  static const int version = [] {
    int major = 0, minor = 0;
    if (nvrtcVersion(&major, &minor) != NVRTC_SUCCESS) return 0;
    return major * 1000 + minor;
  }();
  return version;
}

std::string_view cache_key_material(std::string_view source, std::string_view target,
                                    const std::vector<std::string>& options,
                                    const std::vector<std::string>& name_expressions) {
  // Gathered into a reused per-thread buffer: no allocation once it has grown.
  thread_local std::string material;
  material.clear();
  append_u32(material, kKernelCacheFormatVersion);
  append_field(material, kVersion);
  append_u32(material, static_cast<uint32_t>(nvrtc_version()));
  for (const char* option : kDefaultNvrtcOptions) append_field(material, option);
  append_field(material, target);
  append_u64(material, options.size());
  for (const auto& option : options) append_field(material, option);
  append_u64(material, name_expressions.size());
  for (const auto& expression : name_expressions) append_field(material, expression);
  append_field(material, source);
  return material;
}

CacheKey cache_key(std::string_view source, std::string_view target, const std::vector<std::string>& options,
                   const std::vector<std::string>& name_expressions) {
  return cache_key_of(cache_key_material(source, target, options, name_expressions));
}

std::string kernel_cache_directory() {
  if (detail::env_flag("KILN_CACHE_IN_MEMORY", false)) return {};
  if (std::optional<std::string> dir = detail::env_string("KILN_CACHE_DIR")) return *dir;
  if (const char* home = std::getenv("HOME"); home != nullptr && home[0] != '\0')
    return std::string(home) + "/.cache/kiln/kernels";
  return {};
}

std::string cache_file_path(const std::string& directory, const CacheKey& key) {
  return (std::filesystem::path(directory) / key.hex()).string();
}

std::optional<CompiledImage> read_cache_file(const std::string& directory, std::string_view material) {
  if (directory.empty()) return std::nullopt;
  try {
    const CacheKey key = cache_key_of(material);
    std::ifstream file(cache_file_path(directory, key), std::ios::binary | std::ios::ate);
    if (!file) return std::nullopt;
    const std::streamoff size = file.tellg();
    if (size < static_cast<std::streamoff>(kKernelCacheHeaderSize) ||
        static_cast<uint64_t>(size) > kKernelCacheMaxPayloadSize + kKernelCacheHeaderSize)
      return std::nullopt;
    std::string bytes(static_cast<size_t>(size), '\0');
    file.seekg(0);
    if (!file.read(bytes.data(), size)) return std::nullopt;
    return decode_cache_entry(bytes, material);
  } catch (...) {  // std::bad_alloc or a stream failure: a miss, never fatal
    return std::nullopt;
  }
}

bool write_cache_file(const std::string& directory, std::string_view material, const CompiledImage& entry) {
  if (directory.empty()) return false;
  try {
    const CacheKey key = cache_key_of(material);
    std::error_code error;
    std::filesystem::create_directories(directory, error);
    if (error && !std::filesystem::is_directory(directory, error)) return false;
    // A temporary name unique to this process and call, in the same folder so that rename is atomic.
    static std::atomic<uint64_t> counter{0};
    const std::string final_path = cache_file_path(directory, key);
    const std::string temp_path = final_path + ".tmp." + std::to_string(::getpid()) + "." +
                                  std::to_string(std::hash<std::thread::id>{}(std::this_thread::get_id()) % 100000) +
                                  "." + std::to_string(counter.fetch_add(1));
    const std::string bytes = encode_cache_entry(material, entry);
    {
      std::ofstream file(temp_path, std::ios::binary | std::ios::trunc);
      if (!file) return false;
      file.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
      file.close();
      if (!file) {
        std::filesystem::remove(temp_path, error);
        return false;
      }
    }
    std::filesystem::rename(temp_path, final_path, error);
    if (error) {
      std::filesystem::remove(temp_path, error);
      return false;
    }
    return true;
  } catch (...) {  // std::bad_alloc or a filesystem failure: the cache is best effort
    return false;
  }
}

}  // namespace kiln::cuda_impl

namespace kiln::cuda {
std::string kernel_cache_directory() { return cuda_impl::kernel_cache_directory(); }
}  // namespace kiln::cuda
