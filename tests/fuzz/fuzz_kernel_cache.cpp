// libFuzzer target: the kernel disk cache's file parser (cuda_impl::decode_cache_entry, kernel_cache_format.cpp,
// built here without CUDA). A file that fails a checksum is a miss at once, so most mutated bytes would never
// reach the parsing behind the checksums; the first byte of the input picks what the rest is:
//   0: the whole file;
//   1: the payload, framed by a valid header (magic, version, key, sizes, checksums) for kMaterial's key;
//   2: what follows the key material in the payload (the name count, the names, the image), framed likewise.
// Every bad file must be a miss (nullopt), never a crash or an exception.
#include <cstring>

#include "cuda/kernel_cache.hpp"
#include "fuzz_util.hpp"

namespace {

namespace ci = kiln::cuda_impl;

// The key material the target decodes against (any bytes; the seeds in corpus/kernel_cache use the same).
constexpr std::string_view kMaterial = "kiln fuzz: kernel cache key material";

void append_u32(std::string& out, uint32_t v) { out.append(reinterpret_cast<const char*>(&v), 4); }
void append_u64(std::string& out, uint64_t v) { out.append(reinterpret_cast<const char*>(&v), 8); }

/// A whole file: the 56-byte header of kernel_cache.hpp in front of `payload`.
std::string framed(std::string_view payload, uint32_t flags) {
  const ci::CacheKey key = ci::cache_key_of(kMaterial);
  std::string out("KILNKERN");
  append_u32(out, ci::kKernelCacheFormatVersion);
  append_u32(out, flags);
  append_u64(out, key.high);
  append_u64(out, key.low);
  append_u64(out, payload.size());
  append_u64(out, ci::xxhash64(payload.data(), payload.size()));
  append_u64(out, ci::xxhash64(out.data(), out.size()));
  out.append(payload);
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  const uint32_t flags = (data[0] >> 2) & 1u;  // CUBIN or PTX
  std::string file;
  switch (data[0] % 3) {
    case 0:
      file = rest;
      break;
    case 1:
      file = framed(rest, flags);
      break;
    default: {
      std::string payload;
      append_u64(payload, kMaterial.size());
      payload.append(kMaterial);
      payload.append(rest);
      file = framed(payload, flags);
    }
  }
  const std::optional<ci::CompiledImage> entry = ci::decode_cache_entry(file, kMaterial);
  if (entry) {
    // A hit re-encodes to the same file: the decoder read every byte and nothing else.
    if (ci::encode_cache_entry(kMaterial, *entry) != file) std::abort();
  }
  return 0;
}
