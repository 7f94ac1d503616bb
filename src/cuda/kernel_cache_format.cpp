// The kernel cache's file format (kernel_cache.hpp): XXH64, keys from key material, and the encoding and
// checked decoding of a cache file's bytes. Apart from kernel_cache.cpp, which needs NVRTC (its version is part
// of every key) and does the file I/O, so that the parser of files read from disk is built and fuzzed without
// CUDA (tests/fuzz/fuzz_kernel_cache.cpp).
#include <cstdio>
#include <cstring>

#include "cuda/kernel_cache.hpp"

namespace kiln::cuda_impl {
namespace {

constexpr char kMagic[8] = {'K', 'I', 'L', 'N', 'K', 'E', 'R', 'N'};
constexpr uint32_t kFlagCubin = 1u;

constexpr uint64_t kPrime1 = 0x9E3779B185EBCA87ULL;
constexpr uint64_t kPrime2 = 0xC2B2AE3D27D4EB4FULL;
constexpr uint64_t kPrime3 = 0x165667B19E3779F9ULL;
constexpr uint64_t kPrime4 = 0x85EBCA77C2B2AE63ULL;
constexpr uint64_t kPrime5 = 0x27D4EB2F165667C5ULL;

inline uint64_t rotate_left(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
inline uint64_t read64(const unsigned char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
inline uint32_t read32(const unsigned char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
inline uint64_t xxh_round(uint64_t acc, uint64_t input) {
  acc += input * kPrime2;
  acc = rotate_left(acc, 31);
  return acc * kPrime1;
}
inline uint64_t xxh_merge(uint64_t acc, uint64_t value) {
  acc ^= xxh_round(0, value);
  return acc * kPrime1 + kPrime4;
}

void append_u32(std::string& out, uint32_t v) { out.append(reinterpret_cast<const char*>(&v), 4); }
void append_u64(std::string& out, uint64_t v) { out.append(reinterpret_cast<const char*>(&v), 8); }

// Bounds-checked reader over a file's bytes.
struct Reader {
  std::string_view bytes;
  size_t pos = 0;
  bool ok = true;
  uint32_t u32() {
    if (!ok || bytes.size() - pos < 4) return ok = false, 0u;
    uint32_t v;
    std::memcpy(&v, bytes.data() + pos, 4);
    pos += 4;
    return v;
  }
  uint64_t u64() {
    if (!ok || bytes.size() - pos < 8) return ok = false, uint64_t{0};
    uint64_t v;
    std::memcpy(&v, bytes.data() + pos, 8);
    pos += 8;
    return v;
  }
  std::string text(size_t size) {
    if (!ok || bytes.size() - pos < size) return ok = false, std::string();
    std::string s(bytes.substr(pos, size));
    pos += size;
    return s;
  }
};

}  // namespace

uint64_t xxhash64(const void* data, size_t size, uint64_t seed) {
  const auto* p = static_cast<const unsigned char*>(data);
  const unsigned char* const end = p + size;
  uint64_t h;
  if (size >= 32) {
    uint64_t v1 = seed + kPrime1 + kPrime2, v2 = seed + kPrime2, v3 = seed, v4 = seed - kPrime1;
    const unsigned char* const limit = end - 32;
    do {
      v1 = xxh_round(v1, read64(p));
      v2 = xxh_round(v2, read64(p + 8));
      v3 = xxh_round(v3, read64(p + 16));
      v4 = xxh_round(v4, read64(p + 24));
      p += 32;
    } while (p <= limit);
    h = rotate_left(v1, 1) + rotate_left(v2, 7) + rotate_left(v3, 12) + rotate_left(v4, 18);
    h = xxh_merge(h, v1);
    h = xxh_merge(h, v2);
    h = xxh_merge(h, v3);
    h = xxh_merge(h, v4);
  } else {
    h = seed + kPrime5;
  }
  h += static_cast<uint64_t>(size);
  while (end - p >= 8) {
    h ^= xxh_round(0, read64(p));
    h = rotate_left(h, 27) * kPrime1 + kPrime4;
    p += 8;
  }
  if (end - p >= 4) {
    h ^= static_cast<uint64_t>(read32(p)) * kPrime1;
    h = rotate_left(h, 23) * kPrime2 + kPrime3;
    p += 4;
  }
  while (p < end) {
    h ^= static_cast<uint64_t>(*p) * kPrime5;
    h = rotate_left(h, 11) * kPrime1;
    ++p;
  }
  h ^= h >> 33;
  h *= kPrime2;
  h ^= h >> 29;
  h *= kPrime3;
  h ^= h >> 32;
  return h;
}

std::string CacheKey::hex() const {
  char buffer[33];
  std::snprintf(buffer, sizeof buffer, "%016llx%016llx", static_cast<unsigned long long>(high),
                static_cast<unsigned long long>(low));
  return buffer;
}

CacheKey cache_key_of(std::string_view material) {
  // Hashed twice with different seeds: two independent 64-bit hashes make an accidental collision negligible
  // (the memory cache also compares the material itself).
  return CacheKey{xxhash64(material.data(), material.size(), 0x6B696C6E2D6B6579ULL),
                  xxhash64(material.data(), material.size(), 0x9E3779B97F4A7C15ULL)};
}

std::string encode_cache_entry(std::string_view material, const CompiledImage& entry) {
  const CacheKey key = cache_key_of(material);
  std::string payload;
  append_u64(payload, material.size());
  payload += material;
  append_u32(payload, static_cast<uint32_t>(entry.lowered_names.size()));
  for (const auto& [expression, lowered] : entry.lowered_names) {
    append_u32(payload, static_cast<uint32_t>(expression.size()));
    payload += expression;
    append_u32(payload, static_cast<uint32_t>(lowered.size()));
    payload += lowered;
  }
  payload += entry.image;

  std::string out;
  out.reserve(kKernelCacheHeaderSize + payload.size());
  out.append(kMagic, sizeof kMagic);
  append_u32(out, kKernelCacheFormatVersion);
  append_u32(out, entry.is_cubin ? kFlagCubin : 0u);
  append_u64(out, key.high);
  append_u64(out, key.low);
  append_u64(out, payload.size());
  append_u64(out, xxhash64(payload.data(), payload.size()));
  append_u64(out, xxhash64(out.data(), out.size()));
  out += payload;
  return out;
}

std::optional<CompiledImage> decode_cache_entry(std::string_view bytes, std::string_view material) {
  const CacheKey key = cache_key_of(material);
  if (bytes.size() < kKernelCacheHeaderSize) return std::nullopt;
  if (std::memcmp(bytes.data(), kMagic, sizeof kMagic) != 0) return std::nullopt;
  Reader header{bytes.substr(0, kKernelCacheHeaderSize), sizeof kMagic};
  const uint32_t version = header.u32();
  const uint32_t flags = header.u32();
  const CacheKey stored{header.u64(), header.u64()};
  const uint64_t payload_size = header.u64();
  const uint64_t payload_checksum = header.u64();
  const size_t checked_size = header.pos;
  const uint64_t header_checksum = header.u64();
  if (!header.ok || header_checksum != xxhash64(bytes.data(), checked_size)) return std::nullopt;
  if (version != kKernelCacheFormatVersion || (flags & ~kFlagCubin) != 0 || !(stored == key)) return std::nullopt;
  if (payload_size > kKernelCacheMaxPayloadSize || payload_size != bytes.size() - kKernelCacheHeaderSize)
    return std::nullopt;
  const std::string_view payload = bytes.substr(kKernelCacheHeaderSize);
  if (xxhash64(payload.data(), payload.size()) != payload_checksum) return std::nullopt;

  Reader reader{payload};
  const uint64_t material_size = reader.u64();
  if (!reader.ok || material_size != material.size() || reader.text(material_size) != material) return std::nullopt;
  CompiledImage entry;
  entry.is_cubin = (flags & kFlagCubin) != 0;
  const uint32_t count = reader.u32();
  for (uint32_t i = 0; i < count && reader.ok; ++i) {
    std::string expression = reader.text(reader.u32());
    std::string lowered = reader.text(reader.u32());
    entry.lowered_names.emplace_back(std::move(expression), std::move(lowered));
  }
  if (!reader.ok) return std::nullopt;
  entry.image = std::string(payload.substr(reader.pos));
  if (entry.image.empty()) return std::nullopt;
  return entry;
}

}  // namespace kiln::cuda_impl
