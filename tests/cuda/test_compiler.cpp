// NVRTC compilation, compile-error reports, the disk kernel cache and checked
// launches. Everything up to the "GPU" section runs without a GPU (NVRTC and the
// cache format need none); GPU tests skip when kiln::num_gpus() == 0.
#ifdef KILN_WITH_CUDA

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "cuda/compiler.hpp"
#include "cuda/kernel_cache.hpp"
#include "cuda/launch.hpp"
#include "kiln/kiln.hpp"
#include "test_util.hpp"

using namespace kiln;
using namespace kiln::cuda_impl;
namespace fs = std::filesystem;

namespace {

using kiln_test::ScopedEnv;
using kiln_test::TempDir;

std::string read_bytes(const fs::path& path) {
  std::ifstream file(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>()};
}
void write_bytes(const fs::path& path, const std::string& bytes) {
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  file.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

const char* kAxpySource = R"(
extern "C" __global__ void axpy(float a, const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}
)";

// Line 4 uses an undefined name, line 6 has a syntax error.
const char* kBrokenSource =
    "extern \"C\" __global__ void broken(float* y) {\n"  // 1
    "  int i = threadIdx.x;\n"                           // 2
    "  float a = 1.0f;\n"                                // 3
    "  y[i] = a * undefined_name;\n"                     // 4
    "  float b = 2.0f;\n"                                // 5
    "  int c = ;\n"                                      // 6
    "  y[i] += b;\n"                                     // 7
    "  y[i] += 3.0f;\n"                                  // 8
    "  y[i] += 4.0f;\n"                                  // 9
    "  y[i] += 5.0f;\n"                                  // 10
    "  y[i] += 6.0f;\n"                                  // 11
    "}\n";                                               // 12

CompiledImage sample_entry() {
  CompiledImage entry;
  entry.image = "//\n// Generated PTX stand-in\n.version 8.0\n.target sm_90\n.entry k() { ret; }\n";
  entry.is_cubin = false;
  entry.lowered_names = {{"scale<float>", "_Z5scaleIfEvPT_"}, {"scale<double>", "_Z5scaleIdEvPT_"}};
  return entry;
}
std::string sample_material() { return std::string(cache_key_material("source text", "sm_90", {"-DX=1"}, {})); }
CacheKey sample_key() { return cache_key_of(sample_material()); }

}  // namespace

// ---- hashing and keys --------------------------------------------------------------------------

TEST(KernelCache, Xxhash64MatchesReferenceLibrary) {
  // Reference values from the system's libxxhash (XXH64), computed independently.
  EXPECT_EQ(xxhash64("", 0), 0xef46db3751d8e999ULL);
  EXPECT_EQ(xxhash64("a", 1), 0xd24ec4f1a98c6e5bULL);
  EXPECT_EQ(xxhash64("abc", 3), 0x44bc2cf5ad770999ULL);
  EXPECT_EQ(xxhash64("kiln kernel cache", 17), 0xb0fb89b6876e0450ULL);
  const std::string long_text = "The quick brown fox jumps over the lazy dog, twice over: 1234567890";
  EXPECT_EQ(xxhash64(long_text.data(), long_text.size()), 0x77be89cf6db12ca9ULL);
  EXPECT_EQ(xxhash64(long_text.data(), long_text.size(), 0x9E3779B97F4A7C15ULL), 0x0eb6db5bd9e2db3aULL);
}

TEST(KernelCache, KeysDifferWhenSourceOptionsArchOrNameExpressionsDiffer) {
  const CacheKey base = cache_key("src", "sm_90", {"-DA=1"}, {"f<int>"});
  EXPECT_EQ(base, cache_key("src", "sm_90", {"-DA=1"}, {"f<int>"}));
  EXPECT_NE(base, cache_key("src2", "sm_90", {"-DA=1"}, {"f<int>"}));
  EXPECT_NE(base, cache_key("src", "sm_80", {"-DA=1"}, {"f<int>"}));
  EXPECT_NE(base, cache_key("src", "compute_90", {"-DA=1"}, {"f<int>"}));
  EXPECT_NE(base, cache_key("src", "sm_90", {"-DA=2"}, {"f<int>"}));
  EXPECT_NE(base, cache_key("src", "sm_90", {"-DA=1", "--use_fast_math"}, {"f<int>"}));
  EXPECT_NE(base, cache_key("src", "sm_90", {"-DA=1"}, {"f<float>"}));
  EXPECT_NE(base, cache_key("src", "sm_90", {"-DA=1"}, {}));
  // Field boundaries count: the same characters split differently are another key.
  EXPECT_NE(cache_key("src", "sm_90", {"-DA", "=1"}, {}), cache_key("src", "sm_90", {"-DA=", "1"}, {}));
}

TEST(KernelCache, MaterialHoldsEveryInputAndHashesToTheKey) {
  // The memory cache compares this material on a hit: it must tell apart whatever the key tells apart.
  const std::string base(cache_key_material("src", "sm_90", {"-DA=1"}, {"f<int>"}));
  EXPECT_EQ(cache_key_of(base), cache_key("src", "sm_90", {"-DA=1"}, {"f<int>"}));
  EXPECT_NE(base.find("src"), std::string::npos);
  EXPECT_NE(base, cache_key_material("src2", "sm_90", {"-DA=1"}, {"f<int>"}));
  EXPECT_NE(base, cache_key_material("src", "sm_80", {"-DA=1"}, {"f<int>"}));
  EXPECT_NE(base, cache_key_material("src", "sm_90", {"-DA=2"}, {"f<int>"}));
  EXPECT_NE(base, cache_key_material("src", "sm_90", {"-DA=1"}, {"f<float>"}));
  const std::string split(cache_key_material("s", "sm_90", {"-DA", "=1"}, {}));
  EXPECT_NE(split, cache_key_material("s", "sm_90", {"-DA=", "1"}, {}));
}

TEST(KernelCache, KeyHexIsThirtyTwoLowercaseDigits) {
  const CacheKey key{0x0123456789abcdefULL, 0xfedcba9876543210ULL};
  EXPECT_EQ(key.hex(), "0123456789abcdeffedcba9876543210");
  EXPECT_EQ(sample_key().hex().size(), 32u);
}

// ---- the file format ---------------------------------------------------------------------------

TEST(KernelCache, EncodeDecodeRoundTrips) {
  const CompiledImage entry = sample_entry();
  const std::string bytes = encode_cache_entry(sample_material(), entry);
  ASSERT_EQ(bytes.substr(0, 8), "KILNKERN");
  auto decoded = decode_cache_entry(bytes, sample_material());
  ASSERT_TRUE(decoded.has_value());
  EXPECT_EQ(decoded->image, entry.image);
  EXPECT_FALSE(decoded->is_cubin);
  EXPECT_EQ(decoded->lowered_names, entry.lowered_names);

  CompiledImage cubin;
  cubin.image = std::string(
      "\x7f"
      "ELF\0\0binary\0bytes",
      18);  // embedded NULs survive
  cubin.is_cubin = true;
  auto decoded_cubin = decode_cache_entry(encode_cache_entry(sample_material(), cubin), sample_material());
  ASSERT_TRUE(decoded_cubin.has_value());
  EXPECT_TRUE(decoded_cubin->is_cubin);
  EXPECT_EQ(decoded_cubin->image, cubin.image);
  EXPECT_TRUE(decoded_cubin->lowered_names.empty());
}

TEST(KernelCache, EveryFlippedByteIsAMiss) {
  const std::string bytes = encode_cache_entry(sample_material(), sample_entry());
  for (size_t i = 0; i < bytes.size(); ++i) {
    std::string corrupt = bytes;
    corrupt[i] = static_cast<char>(corrupt[i] ^ 0x20);
    EXPECT_FALSE(decode_cache_entry(corrupt, sample_material()).has_value()) << "flipped byte " << i;
  }
}

TEST(KernelCache, TruncatedOrExtendedBytesAreAMiss) {
  const std::string bytes = encode_cache_entry(sample_material(), sample_entry());
  for (size_t size : {size_t{0}, size_t{7}, kKernelCacheHeaderSize - 1, kKernelCacheHeaderSize,
                      kKernelCacheHeaderSize + 3, bytes.size() - 1})
    EXPECT_FALSE(decode_cache_entry(bytes.substr(0, size), sample_material()).has_value()) << "size " << size;
  EXPECT_FALSE(decode_cache_entry(bytes + "x", sample_material()).has_value());
}

TEST(KernelCache, AnotherKeysFileIsAMiss) {
  const std::string bytes = encode_cache_entry(sample_material(), sample_entry());
  const std::string other(cache_key_material("other source", "sm_90", {"-DX=1"}, {}));
  EXPECT_FALSE(decode_cache_entry(bytes, other).has_value());
}

TEST(KernelCache, AFileWhoseKeyCollidesButWhoseMaterialDiffersIsAMiss) {
  // Forge a 128-bit collision: another compilation's file, its header rewritten to carry this key (and
  // a valid header checksum). The stored key material still tells them apart.
  const std::string other(cache_key_material("other source", "sm_90", {"-DX=1"}, {}));
  std::string bytes = encode_cache_entry(other, sample_entry());
  const CacheKey key = sample_key();
  std::memcpy(bytes.data() + 16, &key.high, 8);
  std::memcpy(bytes.data() + 24, &key.low, 8);
  const uint64_t header_checksum = xxhash64(bytes.data(), 48);
  std::memcpy(bytes.data() + 48, &header_checksum, 8);
  EXPECT_FALSE(decode_cache_entry(bytes, other).has_value());  // its own key no longer matches
  EXPECT_FALSE(decode_cache_entry(bytes, sample_material()).has_value());
  // Control: the unforged file of this compilation decodes.
  EXPECT_TRUE(decode_cache_entry(encode_cache_entry(sample_material(), sample_entry()), sample_material()).has_value());
}

// ---- files on disk -----------------------------------------------------------------------------

TEST(KernelCache, WriteThenReadBackGivesTheSameEntryAndLeavesNoTempFile) {
  TempDir dir;
  const std::string folder = (dir.path() / "nested" / "kernels").string();  // created on demand
  ASSERT_TRUE(write_cache_file(folder, sample_material(), sample_entry()));
  EXPECT_TRUE(fs::exists(fs::path(folder) / sample_key().hex()));
  EXPECT_EQ(dir.file_count(), 1u);  // the entry, no temp file
  auto entry = read_cache_file(folder, sample_material());
  ASSERT_TRUE(entry.has_value());
  EXPECT_EQ(entry->image, sample_entry().image);
  EXPECT_EQ(entry->lowered_names, sample_entry().lowered_names);
  // Rewriting replaces the file atomically.
  CompiledImage other = sample_entry();
  other.image += "// v2\n";
  ASSERT_TRUE(write_cache_file(folder, sample_material(), other));
  EXPECT_EQ(dir.file_count(), 1u);  // the entry, no temp file
  EXPECT_EQ(read_cache_file(folder, sample_material())->image, other.image);
}

TEST(KernelCache, CorruptByteInFileIsAMiss) {
  TempDir dir;
  ASSERT_TRUE(write_cache_file(dir.str(), sample_material(), sample_entry()));
  const fs::path file = cache_file_path(dir.str(), sample_key());
  std::string bytes = read_bytes(file);
  bytes[bytes.size() - 10] = static_cast<char>(bytes[bytes.size() - 10] ^ 1);
  write_bytes(file, bytes);
  EXPECT_FALSE(read_cache_file(dir.str(), sample_material()).has_value());
}

TEST(KernelCache, TruncatedFileIsAMiss) {
  TempDir dir;
  ASSERT_TRUE(write_cache_file(dir.str(), sample_material(), sample_entry()));
  const fs::path file = cache_file_path(dir.str(), sample_key());
  fs::resize_file(file, fs::file_size(file) - 5);
  EXPECT_FALSE(read_cache_file(dir.str(), sample_material()).has_value());
  fs::resize_file(file, 0);
  EXPECT_FALSE(read_cache_file(dir.str(), sample_material()).has_value());
}

TEST(KernelCache, MissingFileOrUnreadablePathIsAMiss) {
  TempDir dir;
  EXPECT_FALSE(read_cache_file(dir.str(), sample_material()).has_value());
  EXPECT_FALSE(read_cache_file("", sample_material()).has_value());
  // The key's path is a folder, not a file.
  fs::create_directories(cache_file_path(dir.str(), sample_key()));
  EXPECT_FALSE(read_cache_file(dir.str(), sample_material()).has_value());
}

TEST(KernelCache, UnwritableDirectoryFailsQuietly) {
  // Tests run as root, so permissions cannot make a folder unwritable: a path under a regular file can't exist.
  TempDir dir;
  const fs::path blocker = dir.path() / "a_regular_file";
  write_bytes(blocker, "not a folder");
  const std::string folder = (blocker / "kernels").string();
  bool written = true;
  EXPECT_NO_THROW(written = write_cache_file(folder, sample_material(), sample_entry()));
  EXPECT_FALSE(written);
  EXPECT_NO_THROW(EXPECT_FALSE(read_cache_file(folder, sample_material()).has_value()));
  EXPECT_FALSE(write_cache_file("", sample_material(), sample_entry()));
}

TEST(KernelCache, DirectoryComesFromTheEnvironment) {
  {
    ScopedEnv in_memory("KILN_CACHE_IN_MEMORY", nullptr);
    ScopedEnv dir("KILN_CACHE_DIR", "/tmp/kiln-cache-test-dir");
    EXPECT_EQ(kernel_cache_directory(), "/tmp/kiln-cache-test-dir");
  }
  {
    ScopedEnv in_memory("KILN_CACHE_IN_MEMORY", nullptr);
    ScopedEnv dir("KILN_CACHE_DIR", nullptr);
    ScopedEnv home("HOME", "/home/someone");
    EXPECT_EQ(kernel_cache_directory(), "/home/someone/.cache/kiln/kernels");
  }
  for (const char* on : {"1", "true", "ON", "yes"}) {
    ScopedEnv in_memory("KILN_CACHE_IN_MEMORY", on);
    ScopedEnv dir("KILN_CACHE_DIR", "/tmp/kiln-cache-test-dir");
    EXPECT_EQ(kernel_cache_directory(), "") << on;
  }
  {
    ScopedEnv in_memory("KILN_CACHE_IN_MEMORY", "0");
    ScopedEnv dir("KILN_CACHE_DIR", "/tmp/kiln-cache-test-dir");
    EXPECT_EQ(kernel_cache_directory(), "/tmp/kiln-cache-test-dir");
  }
}

// ---- NVRTC (no GPU needed) ---------------------------------------------------------------------

TEST(Compiler, CompilePtxOfASmallKernelHasItsEntry) {
  const uint64_t compiles_before = cache_stats().nvrtc_compiles;
  const std::string ptx = compile_ptx(kAxpySource, "axpy.cu", 90);
  EXPECT_NE(ptx.find(".entry axpy"), std::string::npos) << ptx;
  EXPECT_NE(ptx.find(".target sm_90"), std::string::npos);
  EXPECT_EQ(ptx.find('\0'), std::string::npos);
  EXPECT_EQ(cache_stats().nvrtc_compiles, compiles_before + 1);
}

TEST(Compiler, CompilePtxTakesUserOptions) {
  const char* source = R"(
extern "C" __global__ void fill(int* y) { y[threadIdx.x] = FILL_VALUE; }
)";
  const std::string ptx = compile_ptx(source, "fill.cu", 80, {{"-DFILL_VALUE=424242"}, {}});
  EXPECT_NE(ptx.find(".entry fill"), std::string::npos);
  EXPECT_NE(ptx.find("424242"), std::string::npos);
  EXPECT_THROW(compile_ptx(source, "fill.cu", 80), CompileError);  // FILL_VALUE undefined
}

TEST(Compiler, NameExpressionsGiveLoweredNames) {
  const char* source = R"(
template <typename T> __global__ void scale(T* y, T factor) { y[threadIdx.x] *= factor; }
)";
  const CompiledImage image =
      compile_image(source, "scale.cu", compile_target(90, false), {{}, {"scale<float>", "scale<double>"}});
  EXPECT_FALSE(image.is_cubin);
  ASSERT_EQ(image.lowered_names.size(), 2u);
  EXPECT_EQ(image.lowered_names[0].first, "scale<float>");
  EXPECT_EQ(image.lowered_names[0].second, "_Z5scaleIfEvPT_S0_");  // Itanium mangling of scale<float>(float*, float)
  EXPECT_EQ(image.lowered_names[1].second, "_Z5scaleIdEvPT_S0_");
  EXPECT_NE(image.image.find(".entry _Z5scaleIfEvPT_S0_"), std::string::npos);
}

TEST(Compiler, CubinTargetGivesAnElfImage) {
  const CompiledImage image = compile_image(kAxpySource, "axpy.cu", compile_target(90), {});
  ASSERT_TRUE(image.is_cubin);
  ASSERT_GE(image.image.size(), 4u);
  EXPECT_EQ(image.image.substr(0, 4),
            "\x7f"
            "ELF");
}

TEST(Compiler, TargetIsClampedToWhatNvrtcSupports) {
  const std::vector<int>& archs = nvrtc_supported_archs();
  ASSERT_FALSE(archs.empty());
  EXPECT_TRUE(std::is_sorted(archs.begin(), archs.end()));
  EXPECT_NE(std::find(archs.begin(), archs.end(), 90), archs.end());  // CUDA 12/13 know the H100
  CompileTarget h100 = compile_target(90);
  EXPECT_EQ(h100.arch, 90);
  EXPECT_TRUE(h100.cubin);
  EXPECT_EQ(h100.name(), "sm_90");
  EXPECT_EQ(compile_target(90, false).name(), "compute_90");
  // A GPU newer than NVRTC knows gets PTX for the newest arch, which the driver compiles.
  CompileTarget future = compile_target(archs.back() + 50);
  EXPECT_EQ(future.arch, archs.back());
  EXPECT_FALSE(future.cubin);
  EXPECT_EQ(future.name(), "compute_" + std::to_string(archs.back()));
  // An arch between two supported ones gets PTX for the one below.
  CompileTarget between = compile_target(91);
  EXPECT_EQ(between.arch, 90);
  EXPECT_FALSE(between.cubin);
  // Older than everything: an error that says what to do.
  try {
    compile_target(archs.front() - 1);
    FAIL() << "expected DeviceError";
  } catch (const DeviceError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("compute capability"), std::string::npos) << message;
    EXPECT_NE(message.find("sm_" + std::to_string(archs.front())), std::string::npos) << message;
  }
}

TEST(Compiler, BrokenSourceThrowsCompileErrorWithLogNameAndNumberedLines) {
  try {
    compile_ptx(kBrokenSource, "broken_kernel.cu", 90);
    FAIL() << "expected CompileError";
  } catch (const CompileError& e) {
    const std::string message = e.what();
    // The program name and NVRTC's own log lines.
    EXPECT_NE(message.find("'broken_kernel.cu'"), std::string::npos) << message;
    EXPECT_NE(message.find("broken_kernel.cu(4): error"), std::string::npos) << message;
    EXPECT_NE(message.find("undefined_name"), std::string::npos) << message;
    EXPECT_NE(message.find("broken_kernel.cu(6): error"), std::string::npos) << message;
    // Numbered source lines, error lines marked, with two lines of context (2..8).
    EXPECT_NE(message.find(">     4 |   y[i] = a * undefined_name;"), std::string::npos) << message;
    EXPECT_NE(message.find(">     6 |   int c = ;"), std::string::npos) << message;
    EXPECT_NE(message.find("      2 |   int i = threadIdx.x;"), std::string::npos) << message;
    EXPECT_NE(message.find("      8 |   y[i] += 3.0f;"), std::string::npos) << message;
    EXPECT_EQ(message.find("      1 | "), std::string::npos) << message;  // outside the context
    EXPECT_EQ(message.find("     10 | "), std::string::npos) << message;  // outside the context
  }
}

TEST(Compiler, CompileErrorIsAKilnError) {
  EXPECT_THROW(compile_ptx("this is not C++", "garbage.cu", 90), kiln::Error);
}

TEST(Compiler, UnknownOptionThrowsCompileErrorNamingIt) {
  try {
    compile_ptx(kAxpySource, "axpy.cu", 90, {{"--no-such-option"}, {}});
    FAIL() << "expected CompileError";
  } catch (const CompileError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("--no-such-option"), std::string::npos) << message;
    EXPECT_NE(message.find("'axpy.cu'"), std::string::npos) << message;
  }
}

TEST(Compiler, IncludingCudaHeadersFailsWithAHint) {
  try {
    compile_ptx("#include <cuda_fp16.h>\nextern \"C\" __global__ void k() {}\n", "with_include.cu", 90);
    FAIL() << "expected CompileError";
  } catch (const CompileError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("cuda_fp16.h"), std::string::npos) << message;
    EXPECT_NE(message.find(">     1 | #include <cuda_fp16.h>"), std::string::npos) << message;
    EXPECT_NE(message.find("self-contained"), std::string::npos) << message;
  }
}

// ---- launch configuration (no GPU needed: validation precedes any CUDA call) ------------------

TEST(Launch, InvalidConfigurationsThrowValueErrorNamingKernelAndConfig) {
  const auto expect_invalid = [](dim3 grid, dim3 block, size_t shared, const std::string& expected) {
    try {
      validate_launch_config("my_kernel", grid, block, shared);
      ADD_FAILURE() << "expected ValueError for " << expected;
    } catch (const ValueError& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find("my_kernel"), std::string::npos) << message;
      EXPECT_NE(message.find(expected), std::string::npos) << message;
    }
  };
  expect_invalid(dim3(1), dim3(2048), 0, "block (2048,1,1)");
  expect_invalid(dim3(1), dim3(64, 32), 0, "1024 threads");
  expect_invalid(dim3(1), dim3(1, 1, 65), 0, "(1024,1024,64)");
  expect_invalid(dim3(0), dim3(128), 0, "grid (0,1,1)");
  expect_invalid(dim3(1, 70000), dim3(128), 0, "65535");
  expect_invalid(dim3(1), dim3(0, 1, 1), 0, "at least 1");
  expect_invalid(dim3(1), dim3(32), size_t{1} << 40, "shared memory");
  EXPECT_NO_THROW(validate_launch_config("ok", dim3(2147483647u, 65535, 65535), dim3(32, 32, 1), 0));
  EXPECT_NO_THROW(validate_launch_config("ok", dim3(1), dim3(1, 1, 64), 200 * 1024));
}

TEST(Launch, NullKernelThrowsBeforeAnyCudaCall) {
  try {
    launch(nullptr, dim3(1), dim3(32), 0, nullptr, nullptr, "missing_kernel");
    FAIL() << "expected ValueError";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("missing_kernel"), std::string::npos) << e.what();
  }
}

TEST(Compiler, LoadModuleOnAMissingGpuThrowsDeviceError) {
  const int missing = num_gpus();  // one past the last GPU (0 without any)
  try {
    load_module(kAxpySource, "axpy.cu", missing);
    FAIL() << "expected DeviceError";
  } catch (const DeviceError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("cuda:" + std::to_string(missing)), std::string::npos) << message;
    EXPECT_NE(message.find("axpy.cu"), std::string::npos) << message;
  }
}

// ---- GPU ---------------------------------------------------------------------------------------

namespace {

// Device buffer of n values, freed at scope exit.
template <typename T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(const std::vector<T>& host) : size_(host.size()) {
    if (cudaMalloc(&data_, size_ * sizeof(T)) != cudaSuccess) throw CudaError("test: cudaMalloc failed");
    if (cudaMemcpy(data_, host.data(), size_ * sizeof(T), cudaMemcpyHostToDevice) != cudaSuccess)
      throw CudaError("test: cudaMemcpy failed");
  }
  ~DeviceBuffer() { cudaFree(data_); }
  T* data() { return data_; }
  std::vector<T> to_host() const {
    std::vector<T> host(size_);
    if (cudaMemcpy(host.data(), data_, size_ * sizeof(T), cudaMemcpyDeviceToHost) != cudaSuccess)
      throw CudaError("test: cudaMemcpy failed");
    return host;
  }

 private:
  T* data_ = nullptr;
  size_t size_;
};

// Runs axpy(a, x, y) with x[i] = i, y[i] = 1 and checks y = a*i + 1 (hand-computed).
void run_axpy_and_check(Module& module, float a, int n) {
  std::vector<float> x(static_cast<size_t>(n)), y(static_cast<size_t>(n), 1.0f);
  for (int i = 0; i < n; ++i) x[static_cast<size_t>(i)] = static_cast<float>(i);
  DeviceBuffer<float> dx(x), dy(y);
  float* x_ptr = dx.data();
  float* y_ptr = dy.data();
  void* args[] = {&a, &x_ptr, &y_ptr, &n};
  launch(module.function("axpy"), dim3(static_cast<unsigned>((n + 127) / 128)), dim3(128), 0, nullptr, args, "axpy");
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<float> out = dy.to_host();
  for (int i = 0; i < n; ++i) ASSERT_EQ(out[static_cast<size_t>(i)], a * static_cast<float>(i) + 1.0f) << "i=" << i;
}

// A source no earlier run can have cached: a unique constant in a comment.
std::string unique_source(const char* base) {
  return std::string(base) + "// unique " + std::to_string(::getpid()) + " " +
         std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()) + "\n";
}

double milliseconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

TEST(CompilerGpu, LoadModuleAndLaunchWritesKnownValues) {
  KILN_REQUIRE_GPU();
  TempDir dir;
  ScopedEnv cache_dir("KILN_CACHE_DIR", dir.str().c_str());
  ScopedEnv in_memory("KILN_CACHE_IN_MEMORY", nullptr);
  auto module = load_module(unique_source(kAxpySource), "axpy.cu", 0);
  run_axpy_and_check(*module, 2.5f, 1000);
  EXPECT_EQ(dir.file_count(), 1u);  // written to the disk cache
}

TEST(CompilerGpu, TemplateKernelThroughNameExpression) {
  KILN_REQUIRE_GPU();
  TempDir dir;
  ScopedEnv cache_dir("KILN_CACHE_DIR", dir.str().c_str());
  const char* source = R"(
template <typename T> __global__ void scale(T* y, T factor, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] *= factor;
}
)";
  auto module = load_module(source, "scale.cu", 0, {{}, {"scale<double>"}});
  EXPECT_EQ(module->lowered_name("scale<double>"), "_Z5scaleIdEvPT_S0_i");
  std::vector<double> host = {1.0, -2.0, 0.5, 3.0, 10.0};
  DeviceBuffer<double> buffer(host);
  double* pointer = buffer.data();
  double factor = 4.0;
  int n = 5;
  void* args[] = {&pointer, &factor, &n};
  launch(module->function("scale<double>"), dim3(1), dim3(32), 0, nullptr, args, "scale<double>");
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(buffer.to_host(), (std::vector<double>{4.0, -8.0, 2.0, 12.0, 40.0}));
  // The same module from disk keeps the name-expression map.
  clear_memory_cache();
  auto reloaded = load_module(source, "scale.cu", 0, {{}, {"scale<double>"}});
  EXPECT_EQ(reloaded->lowered_name("scale<double>"), "_Z5scaleIdEvPT_S0_i");
  EXPECT_NE(reloaded->function("scale<double>"), nullptr);
}

TEST(CompilerGpu, SecondLoadIsAMemoryHitAndAClearedCacheHitsDisk) {
  KILN_REQUIRE_GPU();
  TempDir dir;
  ScopedEnv cache_dir("KILN_CACHE_DIR", dir.str().c_str());
  ScopedEnv in_memory("KILN_CACHE_IN_MEMORY", nullptr);
  const std::string source = unique_source(kAxpySource);

  const CacheStats s0 = cache_stats();
  auto start = std::chrono::steady_clock::now();
  auto first = load_module(source, "axpy.cu", 0);
  const double cold_ms = milliseconds_since(start);
  const CacheStats s1 = cache_stats();
  EXPECT_EQ(s1.nvrtc_compiles, s0.nvrtc_compiles + 1);
  EXPECT_EQ(s1.disk_misses, s0.disk_misses + 1);

  auto second = load_module(source, "axpy.cu", 0);
  const CacheStats s2 = cache_stats();
  EXPECT_EQ(second.get(), first.get());
  EXPECT_EQ(s2.memory_hits, s1.memory_hits + 1);
  EXPECT_EQ(s2.nvrtc_compiles, s1.nvrtc_compiles);
  constexpr int kLookups = 2000;
  start = std::chrono::steady_clock::now();
  for (int i = 0; i < kLookups; ++i) load_module(source, "axpy.cu", 0);
  const double memory_us = milliseconds_since(start) * 1000.0 / kLookups;
  EXPECT_EQ(cache_stats().memory_hits, s2.memory_hits + kLookups);

  clear_memory_cache();
  start = std::chrono::steady_clock::now();
  auto third = load_module(source, "axpy.cu", 0);
  const double disk_ms = milliseconds_since(start);
  const CacheStats s3 = cache_stats();
  EXPECT_EQ(s3.disk_hits, s2.disk_hits + 1);
  EXPECT_EQ(s3.nvrtc_compiles, s2.nvrtc_compiles);
  EXPECT_NE(third.get(), first.get());
  run_axpy_and_check(*third, -1.5f, 300);
  // NVRTC's --minimal (no texture/runtime declarations) is an option for generated kernels; timed for reference.
  start = std::chrono::steady_clock::now();
  auto minimal = load_module(unique_source(kAxpySource), "axpy.cu", 0, {{"--minimal"}, {}});
  const double minimal_ms = milliseconds_since(start);
  run_axpy_and_check(*minimal, 2.0f, 33);
  std::printf(
      "[ timing ] cold NVRTC compile + load %.2f ms (%.2f ms with --minimal), memory hit %.3f us (mean of "
      "2000), disk hit %.3f ms\n",
      cold_ms, minimal_ms, memory_us, disk_ms);
}

TEST(CompilerGpu, CorruptCacheFileIsRecompiledAndRewritten) {
  KILN_REQUIRE_GPU();
  TempDir dir;
  ScopedEnv cache_dir("KILN_CACHE_DIR", dir.str().c_str());
  ScopedEnv in_memory("KILN_CACHE_IN_MEMORY", nullptr);
  const std::string source = unique_source(kAxpySource);
  load_module(source, "axpy.cu", 0);
  ASSERT_EQ(dir.file_count(), 1u);
  const fs::path file = fs::directory_iterator(dir.path())->path();
  std::string bytes = read_bytes(file);
  bytes[bytes.size() / 2] = static_cast<char>(bytes[bytes.size() / 2] ^ 0x5a);
  write_bytes(file, bytes);

  clear_memory_cache();
  const CacheStats before = cache_stats();
  auto module = load_module(source, "axpy.cu", 0);
  const CacheStats after = cache_stats();
  EXPECT_EQ(after.nvrtc_compiles, before.nvrtc_compiles + 1);
  EXPECT_EQ(after.disk_hits, before.disk_hits);
  run_axpy_and_check(*module, 3.0f, 64);
  EXPECT_NE(read_bytes(file), bytes);  // rewritten
}

TEST(CompilerGpu, UnwritableCacheDirectoryStillLoads) {
  KILN_REQUIRE_GPU();
  TempDir dir;
  write_bytes(dir.path() / "file", "x");
  ScopedEnv cache_dir("KILN_CACHE_DIR", (dir.path() / "file" / "kernels").string().c_str());
  ScopedEnv in_memory("KILN_CACHE_IN_MEMORY", nullptr);
  const CacheStats before = cache_stats();
  auto module = load_module(unique_source(kAxpySource), "axpy.cu", 0);
  EXPECT_EQ(cache_stats().disk_write_failures, before.disk_write_failures + 1);
  run_axpy_and_check(*module, 0.5f, 10);
}

TEST(CompilerGpu, InMemoryModeWritesNothing) {
  KILN_REQUIRE_GPU();
  TempDir dir;
  ScopedEnv cache_dir("KILN_CACHE_DIR", dir.str().c_str());
  ScopedEnv in_memory("KILN_CACHE_IN_MEMORY", "1");
  auto module = load_module(unique_source(kAxpySource), "axpy.cu", 0);
  run_axpy_and_check(*module, 1.0f, 17);
  EXPECT_EQ(dir.file_count(), 0u);
}

TEST(CompilerGpu, MissingKernelNameThrowsListingTheKernels) {
  KILN_REQUIRE_GPU();
  ScopedEnv in_memory("KILN_CACHE_IN_MEMORY", "1");
  auto module = load_module(kAxpySource, "axpy.cu", 0);
  try {
    module->function("axpby");
    FAIL() << "expected ValueError";
  } catch (const ValueError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("'axpby'"), std::string::npos) << message;
    EXPECT_NE(message.find("axpy.cu"), std::string::npos) << message;
    EXPECT_NE(message.find("its kernels: axpy"), std::string::npos) << message;
  }
}

TEST(CompilerGpu, ModuleFromPtxBytesRuns) {
  KILN_REQUIRE_GPU();
  int device_cc = 0, major = 0, minor = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0), cudaSuccess);
  ASSERT_EQ(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0), cudaSuccess);
  device_cc = major * 10 + minor;
  auto module = load_module_image(compile_ptx(kAxpySource, "axpy_ptx.cu", device_cc), "axpy_ptx.cu", 0);
  run_axpy_and_check(*module, 4.0f, 257);
}

TEST(CompilerGpu, LargeDynamicSharedMemoryIsRequestedAndTooMuchThrows) {
  KILN_REQUIRE_GPU();
  ScopedEnv in_memory("KILN_CACHE_IN_MEMORY", "1");
  // Each block stages its values through dynamic shared memory, reversed, to use all of it.
  const char* source = R"(
extern "C" __global__ void reverse_block(const int* x, int* y, int words) {
  extern __shared__ int stage[];
  for (int i = threadIdx.x; i < words; i += blockDim.x) stage[i] = x[i];
  __syncthreads();
  for (int i = threadIdx.x; i < words; i += blockDim.x) y[i] = stage[words - 1 - i];
}
)";
  auto module = load_module(source, "reverse_block.cu", 0);
  const int words = 96 * 1024 / 4;  // 96 KB: above the 48 KB default, below every Hopper/Ampere limit
  std::vector<int> host(static_cast<size_t>(words));
  for (int i = 0; i < words; ++i) host[static_cast<size_t>(i)] = i * 3;
  DeviceBuffer<int> x(host), y(std::vector<int>(static_cast<size_t>(words), 0));
  int* x_ptr = x.data();
  int* y_ptr = y.data();
  int count = words;
  void* args[] = {&x_ptr, &y_ptr, &count};
  cudaKernel_t kernel = module->function("reverse_block");
  launch(kernel, dim3(1), dim3(256), static_cast<size_t>(words) * 4, nullptr, args, "reverse_block");
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<int> out = y.to_host();
  for (int i = 0; i < words; ++i) ASSERT_EQ(out[static_cast<size_t>(i)], (words - 1 - i) * 3) << i;

  try {
    launch(kernel, dim3(1), dim3(256), 4 * 1024 * 1024, nullptr, args, "reverse_block");
    FAIL() << "expected CudaError";
  } catch (const CudaError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("reverse_block"), std::string::npos) << message;
    EXPECT_NE(message.find("4194304 bytes"), std::string::npos) << message;
  }
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);  // the failure left no error behind
}

#endif  // KILN_WITH_CUDA
