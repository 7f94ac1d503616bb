// RawModule / RawKernel: compile errors, PTX compilation, name expressions,
// argument packing and launch checks run without a GPU (NVRTC and the packing
// need none); the launches themselves skip when kiln::num_gpus() == 0.
#ifdef KILN_WITH_CUDA

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "cuda/compiler.hpp"
#include "cuda/raw_module.hpp"
#include "gpu_test_util.hpp"
#include "kiln/kiln.hpp"
#include "test_util.hpp"

using namespace kiln;
using kiln::cuda_impl::KernelParam;
using kiln::cuda_impl::PackedArgs;
using kiln_test::expect_error;

namespace {

using kiln_test::ScopedEnv;
using kiln_test::TempDir;

// The walkthrough kernel (examples/add_two_array_2d.cpp): res = a + b over an nx x ny row-major grid of floats.
const char* const kAddTwoArray2d = R"(
extern "C" __global__ void add_two_array_2d(int nx, int ny, float* res, const float* a, const float* b) {
  const int x = blockIdx.x * blockDim.x + threadIdx.x;
  const int y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x < nx && y < ny) {
    const int i = y * nx + x;
    res[i] = a[i] + b[i];
  }
}
)";

const char* const kScaleTemplate = R"(
template <typename T>
__global__ void scale(T* x, T a, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = x[i] * a;
}
)";

// Each block of 1024 threads stages 16384 floats (64 KB) in dynamic shared memory and writes them reversed.
const char* const kReverseBlocks = R"(
extern "C" __global__ void reverse_blocks(float* y, const float* x) {
  extern __shared__ float tile[];
  const int per_block = 16384;
  const float* in = x + blockIdx.x * per_block;
  for (int i = threadIdx.x; i < per_block; i += blockDim.x) tile[i] = in[i];
  __syncthreads();
  float* out = y + blockIdx.x * per_block;
  for (int i = threadIdx.x; i < per_block; i += blockDim.x) out[i] = tile[per_block - 1 - i];
}
)";

// Copies x to y with one block.
const char* const kCopy = R"(
extern "C" __global__ void copy(float* y, const float* x, int n) {
  for (int i = threadIdx.x; i < n; i += blockDim.x) y[i] = x[i];
}
)";

const char* const kNothing =
    "extern \"C\" __global__ void nothing(int* p) { extern __shared__ int s[]; if (p) p[0] = s[0]; }";

template <class T>
T read_at(const PackedArgs& packed, size_t index) {
  T value;
  std::memcpy(&value, packed.buffer.data() + packed.offsets[index], sizeof(T));
  return value;
}

}  // namespace

// ---- compile errors and PTX (no GPU) ------------------------------------------------------------

TEST(RawModule, CompileErrorHoldsLogProgramNameAndNumberedSourceLines) {
  const std::string source =
      "extern \"C\" __global__ void broken_kernel(float* y) {\n"  // 1
      "  int i = threadIdx.x;\n"                                  // 2
      "  y[i] = undeclared_value * 2.0f;\n"                       // 3
      "}\n";                                                      // 4
  try {
    (void)RawModule::compile_ptx(source, {}, 80);
    FAIL() << "expected CompileError";
  } catch (const CompileError& e) {
    // The program is named after the first __global__ function when no name is given.
    EXPECT_EQ(e.program_name(), "broken_kernel");
    EXPECT_NE(e.log().find("broken_kernel(3): error"), std::string::npos) << e.log();
    EXPECT_NE(e.log().find("undeclared_value"), std::string::npos) << e.log();
    EXPECT_NE(e.source_excerpt().find(">     3 |   y[i] = undeclared_value * 2.0f;"), std::string::npos)
        << e.source_excerpt();
    EXPECT_NE(e.source_excerpt().find("      2 |   int i = threadIdx.x;"), std::string::npos) << e.source_excerpt();
    const std::string what = e.what();
    EXPECT_NE(what.find(e.log()), std::string::npos);
    EXPECT_NE(what.find(e.source_excerpt()), std::string::npos);
    EXPECT_NE(what.find("'broken_kernel'"), std::string::npos);
  }
}

TEST(RawModule, CompileErrorUsesTheGivenProgramNameAndReportsEveryErrorLine) {
  const std::string source =
      "__device__ int helper() { return 1 }\n"                        // 1: missing ';'
      "extern \"C\" __global__ void k(int* y) { y[0] = nope(); }\n";  // 2: undefined
  RawModuleOptions options;
  options.name = "my_program.cu";
  try {
    (void)RawModule::compile_ptx(source, options, 80);
    FAIL() << "expected CompileError";
  } catch (const CompileError& e) {
    EXPECT_EQ(e.program_name(), "my_program.cu");
    EXPECT_NE(e.log().find("my_program.cu(1): error"), std::string::npos) << e.log();
    EXPECT_NE(e.log().find("my_program.cu(2): error"), std::string::npos) << e.log();
    EXPECT_NE(e.source_excerpt().find(">     1 | __device__ int helper()"), std::string::npos) << e.source_excerpt();
    EXPECT_NE(e.source_excerpt().find(">     2 | extern"), std::string::npos) << e.source_excerpt();
  }
}

TEST(RawModule, DefaultProgramNameSkipsAttributesAndFallsBackToRawModule) {
  const auto program_name = [](const std::string& source) {
    try {
      (void)RawModule::compile_ptx(source, {}, 80);
    } catch (const CompileError& e) {
      return e.program_name();
    }
    return std::string("(compiled)");
  };
  EXPECT_EQ(program_name("extern \"C\" __global__ void __launch_bounds__(128, 2) bounded(float* y) { y[0] = oops; }"),
            "bounded");
  EXPECT_EQ(program_name("__global__ void\ntiled (float* y) { y[0] = oops; }"), "tiled");
  EXPECT_EQ(program_name("__device__ int broken() { return oops; }"), "raw_module");
}

TEST(RawModule, CompileErrorFromABadOptionHasTheLogButNoSourceLines) {
  RawModuleOptions options;
  options.options = {"--no-such-nvrtc-option"};
  try {
    (void)RawModule::compile_ptx(kAddTwoArray2d, options, 80);
    FAIL() << "expected CompileError";
  } catch (const CompileError& e) {
    EXPECT_EQ(e.program_name(), "add_two_array_2d");
    EXPECT_NE(e.log().find("no-such-nvrtc-option"), std::string::npos) << e.log();
    EXPECT_EQ(e.source_excerpt(), "");
  }
}

TEST(RawModule, CompileErrorKeepsTheOneArgumentConstructor) {
  const CompileError e("plain message");
  EXPECT_STREQ(e.what(), "plain message");
  EXPECT_EQ(e.log(), "");
  EXPECT_EQ(e.program_name(), "");
  EXPECT_EQ(e.source_excerpt(), "");
  const Error& base = e;
  EXPECT_STREQ(base.what(), "plain message");
}

TEST(RawModule, CompilePtxTargetsTheGivenArchitecture) {
  const std::string ptx = RawModule::compile_ptx(kAddTwoArray2d, {}, 80);
  EXPECT_NE(ptx.find(".target sm_80"), std::string::npos);
  EXPECT_NE(ptx.find(".entry add_two_array_2d("), std::string::npos) << ptx;
  // Five parameters: int, int and three pointers.
  EXPECT_NE(ptx.find(".param .u32 add_two_array_2d_param_1"), std::string::npos) << ptx;
  EXPECT_NE(ptx.find(".param .u64 add_two_array_2d_param_4"), std::string::npos) << ptx;
  EXPECT_EQ(ptx.find("add_two_array_2d_param_5"), std::string::npos);
}

TEST(RawModule, CompilePtxWithoutArchUsesTheGpuOrTheOldestArchitecture) {
  const std::string ptx = RawModule::compile_ptx(kAddTwoArray2d);
  int arch = 0;
  if (num_gpus() > 0) {
    const DeviceProperties p = device_properties(gpu(0));
    arch = std::min(p.major * 10 + p.minor, cuda_impl::nvrtc_supported_archs().back());
  } else {
    arch = cuda_impl::nvrtc_supported_archs().front();
  }
  EXPECT_NE(ptx.find(".target sm_" + std::to_string(arch)), std::string::npos) << ptx.substr(0, 400);
}

TEST(RawModule, CompilePtxPassesOptions) {
  const std::string source = "extern \"C\" __global__ void put(int* y) { y[0] = FILL_VALUE; }";
  RawModuleOptions options;
  options.options = {"-DFILL_VALUE=123457"};
  EXPECT_NE(RawModule::compile_ptx(source, options, 80).find("123457"), std::string::npos);
  EXPECT_THROW((void)RawModule::compile_ptx(source, {}, 80), CompileError);  // FILL_VALUE undefined
}

TEST(RawModule, NameExpressionsInstantiateTemplateKernels) {
  // Without name expressions the template is never instantiated: no kernel at all.
  EXPECT_EQ(RawModule::compile_ptx(kScaleTemplate, {}, 80).find(".entry"), std::string::npos);
  RawModuleOptions options;
  options.name_expressions = {"scale<float>", "scale<double>"};
  const std::string ptx = RawModule::compile_ptx(kScaleTemplate, options, 80);
  // Itanium mangling of void scale<float>(float*, float, int) and of the double instance.
  EXPECT_NE(ptx.find(".entry _Z5scaleIfEvPT_S0_i("), std::string::npos) << ptx;
  EXPECT_NE(ptx.find(".entry _Z5scaleIdEvPT_S0_i("), std::string::npos) << ptx;
}

TEST(RawModule, EveryKernelOfTheGpuTestsCompiles) {
  for (const char* source : {kAddTwoArray2d, kReverseBlocks, kCopy, kNothing}) {
    const std::string ptx = RawModule::compile_ptx(source, {}, 90);
    EXPECT_NE(ptx.find(".entry"), std::string::npos) << source;
  }
}

TEST(RawModule, CompilePtxRejectsANegativeArch) {
  expect_error<ValueError>([] { (void)RawModule::compile_ptx(kAddTwoArray2d, {}, -5); },
                           {"RawModule::compile_ptx", "'add_two_array_2d'", "-5", "major*10+minor"});
}

// ---- construction errors (no GPU) ---------------------------------------------------------------

TEST(RawModule, WithoutAGpuConstructionThrowsDeviceErrorNamingTheGpu) {
  if (num_gpus() > 0) GTEST_SKIP() << "this machine has a GPU";
  expect_error<DeviceError>([] { RawModule m(kAddTwoArray2d); },
                            {"RawModule 'add_two_array_2d'", "cuda:0", "0 usable GPU", "compile_ptx"});
  const std::string ptx = RawModule::compile_ptx(kAddTwoArray2d, {}, 80);
  expect_error<DeviceError>([&] { (void)RawModule::from_ptx(ptx); },
                            {"RawModule::from_ptx 'add_two_array_2d'", "cuda:0", "0 usable GPU"});
  RawModuleOptions on_gpu3;
  on_gpu3.device = Device{DeviceType::CUDA, 3};
  expect_error<DeviceError>([&] { RawModule m(kAddTwoArray2d, on_gpu3); }, {"cuda:3", "0 usable GPU"});
}

TEST(RawModule, CpuDeviceIsRejected) {
  RawModuleOptions options;
  options.device = cpu();
  expect_error<DeviceError>([&] { RawModule m(kAddTwoArray2d, options); },
                            {"RawModule 'add_two_array_2d'", "run on a GPU", "cpu", "RawModuleOptions::device"});
}

TEST(RawModule, FromPtxRejectsTextThatIsNotPtx) {
  expect_error<ValueError>([] { (void)RawModule::from_ptx("extern \"C\" __global__ void k() {}"); },
                           {"RawModule::from_ptx", "not PTX", ".version", "RawModule(source)"});
}

TEST(RawModule, FromCubinRejectsBytesThatAreNotCubinOrFatbin) {
  expect_error<ValueError>([] { (void)RawModule::from_cubin(std::string("\x01\x02\x03\x04\x05", 5)); },
                           {"RawModule::from_cubin 'cubin_module'", "5 bytes", "neither a CUBIN", "from_ptx"});
  expect_error<ValueError>([] { (void)RawModule::from_cubin(""); }, {"0 bytes"});
}

TEST(RawModule, ImagesTakeNoCompileOptions) {
  const std::string ptx = RawModule::compile_ptx(kAddTwoArray2d, {}, 80);
  RawModuleOptions options;
  options.name_expressions = {"f<int>"};
  expect_error<ValueError>([&] { (void)RawModule::from_ptx(ptx, options); },
                           {"RawModule::from_ptx 'add_two_array_2d'", "apply only to CUDA source", "mangled"});
  RawModuleOptions nvrtc;
  nvrtc.options = {"-O3"};
  expect_error<ValueError>(
      [&] {
        (void)RawModule::from_cubin(std::string("\x7f"
                                                "ELF",
                                                4),
                                    nvrtc);
      },
      {"RawModule::from_cubin", "apply only to CUDA source"});
}

// ---- argument packing (no GPU) ------------------------------------------------------------------

TEST(RawKernelArgs, WithoutParameterInfoArgumentsAreLaidOutAsACStruct) {
  const int32_t n = -7;
  const double scale = 2.5;
  auto* pointer = reinterpret_cast<float*>(uintptr_t{0x1234560});
  const float bias = 1.25f;
  const int8_t small = -3;
  const int64_t big = int64_t{1} << 40;
  const detail::RawLaunchArg args[] = {detail::make_raw_launch_arg(n),       detail::make_raw_launch_arg(scale),
                                       detail::make_raw_launch_arg(pointer), detail::make_raw_launch_arg(bias),
                                       detail::make_raw_launch_arg(small),   detail::make_raw_launch_arg(big)};
  const PackedArgs packed = cuda_impl::pack_kernel_args("k", args, 6, nullptr, 0);
  // struct { int32 n; double scale; float* p; float bias; int8 small; int64 big; }: offsets by hand.
  EXPECT_EQ(packed.offsets, (std::vector<size_t>{0, 8, 16, 24, 28, 32}));
  EXPECT_EQ(packed.buffer.size(), 40u);
  EXPECT_EQ(read_at<int32_t>(packed, 0), -7);
  EXPECT_EQ(read_at<double>(packed, 1), 2.5);
  EXPECT_EQ(read_at<uintptr_t>(packed, 2), uintptr_t{0x1234560});
  EXPECT_EQ(read_at<float>(packed, 3), 1.25f);
  EXPECT_EQ(read_at<int8_t>(packed, 4), -3);
  EXPECT_EQ(read_at<int64_t>(packed, 5), int64_t{1} << 40);
  ASSERT_EQ(packed.pointers.size(), 6u);
  for (size_t i = 0; i < 6; ++i) EXPECT_EQ(packed.pointers[i], packed.buffer.data() + packed.offsets[i]);
  EXPECT_TRUE(packed.arrays.empty());
}

TEST(RawKernelArgs, StructArgumentsKeepTheirAlignment) {
  struct alignas(16) Float4 {
    float x, y, z, w;
  };
  const char c = 'c';
  const Float4 v{1, 2, 3, 4};
  const detail::RawLaunchArg args[] = {detail::make_raw_launch_arg(c), detail::make_raw_launch_arg(v)};
  EXPECT_STREQ(args[1].type_name, "struct");
  const PackedArgs packed = cuda_impl::pack_kernel_args("k", args, 2, nullptr, 0);
  EXPECT_EQ(packed.offsets, (std::vector<size_t>{0, 16}));
  EXPECT_EQ(packed.buffer.size(), 32u);
  EXPECT_EQ(read_at<Float4>(packed, 1).z, 3.0f);
}

TEST(RawKernelArgs, WithParameterInfoTheDriversOffsetsAreUsed) {
  const int32_t a = 11;
  const double b = -0.5;
  const detail::RawLaunchArg args[] = {detail::make_raw_launch_arg(a), detail::make_raw_launch_arg(b)};
  const std::vector<KernelParam> params = {{0, 4}, {16, 8}};  // e.g. a kernel whose double is over-aligned
  const PackedArgs packed = cuda_impl::pack_kernel_args("k", args, 2, &params, 0);
  EXPECT_EQ(packed.offsets, (std::vector<size_t>{0, 16}));
  EXPECT_EQ(packed.buffer.size(), 24u);
  EXPECT_EQ(read_at<int32_t>(packed, 0), 11);
  EXPECT_EQ(read_at<double>(packed, 1), -0.5);
}

TEST(RawKernelArgs, NoArgumentsPackToNothing) {
  const std::vector<KernelParam> none;
  const PackedArgs packed = cuda_impl::pack_kernel_args("empty", nullptr, 0, &none, 0);
  EXPECT_TRUE(packed.buffer.empty());
  EXPECT_TRUE(packed.pointers.empty());
}

TEST(RawKernelArgs, WrongArgumentCountIsAValueErrorNamingTheKernel) {
  const int32_t n = 1;
  const detail::RawLaunchArg args[] = {detail::make_raw_launch_arg(n), detail::make_raw_launch_arg(n)};
  const std::vector<KernelParam> five = {{0, 4}, {4, 4}, {8, 8}, {16, 8}, {24, 8}};
  expect_error<ValueError>([&] { (void)cuda_impl::pack_kernel_args("add_two_array_2d", args, 2, &five, 0); },
                           {"RawKernel 'add_two_array_2d'", "takes 5 parameter(s)", "given 2 argument(s)"});
}

TEST(RawKernelArgs, WrongArgumentSizeIsAValueErrorNamingIndexExpectedAndGiven) {
  const int32_t nx = 4;
  const double ny = 4;  // the kernel takes an int
  float* p = nullptr;
  const detail::RawLaunchArg args[] = {detail::make_raw_launch_arg(nx), detail::make_raw_launch_arg(ny),
                                       detail::make_raw_launch_arg(p)};
  const std::vector<KernelParam> params = {{0, 4}, {4, 4}, {8, 8}};
  expect_error<ValueError>(
      [&] { (void)cuda_impl::pack_kernel_args("k2", args, 3, &params, 0); },
      {"RawKernel 'k2'", "parameter 1 (counting from 0) is 4 bytes", "argument 1", "float64 (8 bytes)", "int32_t"});
  const Array host = zeros({2}, float32, cpu());
  const detail::RawLaunchArg array_for_int[] = {detail::make_raw_launch_arg(host)};
  const std::vector<KernelParam> one_int = {{0, 4}};
  expect_error<ValueError>(
      [&] { (void)cuda_impl::pack_kernel_args("k3", array_for_int, 1, &one_int, 0); },
      {"RawKernel 'k3'", "parameter 0", "is 4 bytes", "an array (passed as an 8-byte device pointer)"});
}

TEST(RawKernelArgs, HostArraysAreADeviceErrorSayingHowToMoveThem) {
  const Array host = zeros({3}, float32, cpu());
  const int32_t n = 3;
  const detail::RawLaunchArg args[] = {detail::make_raw_launch_arg(n), detail::make_raw_launch_arg(host)};
  expect_error<DeviceError>(
      [&] { (void)cuda_impl::pack_kernel_args("k", args, 2, nullptr, 1); },
      {"RawKernel 'k'", "runs on cuda:1", "argument 1", "host memory (cpu)", "a.to(kiln::gpu(1))"});
}

TEST(RawKernelArgs, ArraysOfAnotherGpuAreADeviceError) {
  if (num_gpus() < 2) GTEST_SKIP() << "needs 2 GPUs (has " << num_gpus() << ")";
  const Array on1 = zeros({3}, float32, gpu(1));
  const detail::RawLaunchArg args[] = {detail::make_raw_launch_arg(on1)};
  expect_error<DeviceError>([&] { (void)cuda_impl::pack_kernel_args("k", args, 1, nullptr, 0); },
                            {"RawKernel 'k'", "runs on cuda:0", "argument 0 is an array on cuda:1",
                             "a.to(kiln::gpu(0))", "RawModuleOptions::device"});
}

TEST(RawKernelArgs, EmptyArrayIsAValueError) {
  const Array none;
  const detail::RawLaunchArg args[] = {detail::make_raw_launch_arg(none)};
  expect_error<ValueError>([&] { (void)cuda_impl::pack_kernel_args("k", args, 1, nullptr, 0); },
                           {"RawKernel 'k'", "argument 0 is an empty Array"});
}

TEST(RawKernelArgs, MoreThanCudasParameterSpaceIsAValueError) {
  struct Big {
    unsigned char bytes[32768];
  };
  static const Big big{};
  const detail::RawLaunchArg args[] = {detail::make_raw_launch_arg(big)};
  expect_error<ValueError>([&] { (void)cuda_impl::pack_kernel_args("k", args, 1, nullptr, 0); },
                           {"RawKernel 'k'", "32768 bytes", "32764", "pass the array"});
}

TEST(RawKernelArgs, LaunchDimensionsAreCheckedBeforeLaunch) {
  const auto [g, b] = cuda_impl::launch_dims("k", {2, 5}, {16, 16}, 0);
  EXPECT_EQ(g.x, 2u);
  EXPECT_EQ(g.y, 5u);
  EXPECT_EQ(g.z, 1u);
  EXPECT_EQ(b.x, 16u);
  EXPECT_EQ(b.y, 16u);
  EXPECT_EQ(b.z, 1u);
  expect_error<ValueError>([] { (void)cuda_impl::launch_dims("neg", {-1}, {32}, 0); },
                           {"kernel 'neg'", "grid (-1,1,1)", "grid dimension -1 is out of range"});
  expect_error<ValueError>(
      [] {
        (void)cuda_impl::launch_dims("zero", {4}, {0, 1, 1}, 0);
      },
      {"kernel 'zero'", "block dimension 0"});
  expect_error<ValueError>([] { (void)cuda_impl::launch_dims("huge", {int64_t{1} << 33}, {32}, 0); },
                           {"kernel 'huge'", "8589934592"});
  expect_error<ValueError>([] { (void)cuda_impl::launch_dims("wide", {1}, {2048}, 0); },
                           {"kernel 'wide'", "block (2048,1,1)", "(1024,1024,64)"});
  expect_error<ValueError>(
      [] {
        (void)cuda_impl::launch_dims("tall", {1, 70000}, {32}, 0);
      },
      {"kernel 'tall'", "grid (1,70000,1)", "65535"});
}

// ---- launches (GPU) -----------------------------------------------------------------------------

TEST(RawKernelGpu, SeedExampleAddTwoArray2d) {
  KILN_REQUIRE_GPU();
  // 2x5 blocks of 16x16 threads cover nx = 32, ny = 80 exactly; use a little less to exercise the bounds check.
  const int32_t nx = 30, ny = 77;
  const Device d = gpu(0);
  const Array a_host = random::uniform({ny, nx}, float32, cpu()), b_host = random::uniform({ny, nx}, float32, cpu());
  const Array a = a_host.to(d), b = b_host.to(d);
  Array res = full({ny, nx}, -1.0f, float32, d);
  RawModule module(kAddTwoArray2d);
  EXPECT_EQ(module.name(), "add_two_array_2d");
  EXPECT_EQ(module.device(), d);
  RawKernel kernel = module.function("add_two_array_2d");
  EXPECT_EQ(kernel.num_params(), 5);
  kernel.launch({2, 5}, {16, 16}, nx, ny, res, a, b);
  const std::vector<float> got = res.to_vector<float>();
  const std::vector<float> av = a_host.to_vector<float>(), bv = b_host.to_vector<float>();
  ASSERT_EQ(got.size(), av.size());
  for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], av[i] + bv[i]) << "at " << i;
}

TEST(RawKernelGpu, TemplateKernelThroughNameExpressions) {
  KILN_REQUIRE_GPU();
  RawModuleOptions options;
  options.name_expressions = {"scale<float>", "scale<double>"};
  RawModule module(kScaleTemplate, options);
  const int32_t n = 1000;
  Array x = arange(n, float64, gpu(0));
  module.function("scale<double>").launch({(n + 255) / 256}, {256}, x, 0.5, n);
  const std::vector<double> got = x.to_vector<double>();
  for (int i = 0; i < n; ++i) ASSERT_EQ(got[static_cast<size_t>(i)], 0.5 * i);
  Array y = ones({n}, float32, gpu(0));
  module.get_function("scale<float>")(n, 1, y, 3.0f, n);  // one thread per block, CuPy-style call
  EXPECT_EQ(y.sum().item<float>(), 3.0f * n);
  const std::vector<std::string> names = module.kernel_names();
  EXPECT_NE(std::find(names.begin(), names.end(), "_Z5scaleIfEvPT_S0_i"), names.end());
  // The mangled name works too; an unknown name lists the kernels.
  EXPECT_EQ(module.function("_Z5scaleIfEvPT_S0_i").name(), "_Z5scaleIfEvPT_S0_i");
  expect_error<ValueError>([&] { (void)module.function("scale<int>"); },
                           {"'scale<int>' not found", "_Z5scaleIdEvPT_S0_i", "name_expressions"});
}

TEST(RawKernelGpu, DynamicSharedMemoryAbove48KB) {
  KILN_REQUIRE_GPU();
  RawModule module(kReverseBlocks);
  const int64_t blocks = 3, per_block = 16384;
  const Array x = arange(blocks * per_block, float32, gpu(0));
  Array y = zeros({blocks * per_block}, float32, gpu(0));
  module.function("reverse_blocks").launch({blocks}, {1024}, y, x, LaunchOptions{.shared_mem = per_block * 4});
  const std::vector<float> got = y.to_vector<float>();
  for (int64_t blk = 0; blk < blocks; ++blk)
    for (int64_t i = 0; i < per_block; ++i)
      ASSERT_EQ(got[static_cast<size_t>(blk * per_block + i)], static_cast<float>(blk * per_block + per_block - 1 - i));
}

TEST(RawKernelGpu, FromPtxAndFromCubin) {
  KILN_REQUIRE_GPU();
  const std::string ptx = RawModule::compile_ptx(kAddTwoArray2d);
  const RawModule from_ptx = RawModule::from_ptx(ptx);
  EXPECT_EQ(from_ptx.name(), "add_two_array_2d");  // the first .entry
  const DeviceProperties p = device_properties(gpu(0));
  const auto cubin =
      cuda_impl::compile_image(kAddTwoArray2d, "add", cuda_impl::compile_target(p.major * 10 + p.minor), {});
  RawModuleOptions named;
  named.name = "add_cubin";
  const RawModule from_cubin = RawModule::from_cubin(cubin.image, named);
  EXPECT_EQ(from_cubin.name(), "add_cubin");
  for (const RawModule& module : {from_ptx, from_cubin}) {
    const int32_t nx = 5, ny = 3;
    const Array a = arange(15, float32, gpu(0)).reshape({3, 5}), b = full({3, 5}, 10.0f, float32, gpu(0));
    Array res = zeros({3, 5}, float32, gpu(0));
    module.function("add_two_array_2d").launch({1}, {8, 4}, nx, ny, res, a, b);
    const std::vector<float> got = res.to_vector<float>();
    for (int i = 0; i < 15; ++i) ASSERT_EQ(got[static_cast<size_t>(i)], i + 10.0f) << module.name();
  }
}

TEST(RawKernelGpu, StreamOption) {
  KILN_REQUIRE_GPU();
  RawModule module(kScaleTemplate, RawModuleOptions{.name_expressions = {"scale<float>"}});
  const Device d = gpu(0);
  Stream s = Stream::create(d, {.non_blocking = true});
  const int32_t n = 1 << 20;
  Array x = ones({n}, float32, d);
  synchronize(d);
  module.function("scale<float>").launch({n / 256}, {256}, x, 4.0f, n, LaunchOptions{.stream = s});
  s.synchronize();
  EXPECT_EQ(x.sum().item<float>(), 4.0f * n);
  if (num_gpus() >= 2) {
    Stream other = Stream::create(gpu(1));
    expect_error<DeviceError>(
        [&] { module.function("scale<float>").launch({1}, {1}, x, 1.0f, n, LaunchOptions{.stream = other}); },
        {"RawKernel 'scale<float>'", "runs on cuda:0", "stream of cuda:1"});
  }
}

TEST(RawKernelGpu, ArraysFreedRightAfterLaunchAreNotReusedEarly) {
  KILN_REQUIRE_GPU();
  // A long kernel on a side stream reads an array dropped right after the launch; an allocation made on the
  // default stream right after must not get that memory while the kernel runs.
  RawModule module(kCopy);
  const Device d = gpu(0);
  Stream s = Stream::create(d, {.non_blocking = true});
  const int32_t n = 1 << 16;
  Array y = zeros({n}, float32, d);
  {
    Array x = full({n}, 7.0f, float32, d);
    synchronize(d);
    kiln_test::spin(s, 0.2);  // the copy starts after 200 ms of GPU time
    module.function("copy").launch({1}, {256}, y, x, n, LaunchOptions{.stream = s});
  }                                        // x released while the copy may still wait or run
  Array z = full({n}, -1.0f, float32, d);  // would overwrite x's memory if it were handed out again
  s.synchronize();
  EXPECT_EQ(y.sum().item<float>(), 7.0f * n);
  EXPECT_EQ(z.sum().item<float>(), -1.0f * n);
}

TEST(RawKernelGpu, ModuleKeepsItsDeviceWhateverIsCurrent) {
  KILN_REQUIRE_GPU();
  // Built while the current device is the CPU: the module goes to gpu(0) and its kernels run there.
  RawModule module = [] {
    DeviceGuard g(cpu());
    return RawModule(kAddTwoArray2d);
  }();
  EXPECT_EQ(module.device(), gpu(0));
  if (num_gpus() < 2) GTEST_SKIP() << "launch on a non-current GPU needs 2 GPUs (has " << num_gpus() << ")";
  RawModule on1(kAddTwoArray2d, RawModuleOptions{.device = gpu(1)});
  EXPECT_EQ(on1.device(), gpu(1));
  {
    DeviceGuard g(gpu(1));
    RawModule current(kAddTwoArray2d);
    EXPECT_EQ(current.device(), gpu(1));  // the current GPU when none is given
  }
  const Array a = full({4, 4}, 1.0f, float32, gpu(1)), b = full({4, 4}, 2.0f, float32, gpu(1));
  Array res = zeros({4, 4}, float32, gpu(1));
  {
    DeviceGuard g(gpu(0));
    on1.function("add_two_array_2d").launch({1}, {4, 4}, int32_t{4}, int32_t{4}, res, a, b);
    const Array on0 = zeros({4, 4}, float32, gpu(0));
    expect_error<DeviceError>(
        [&] {
          on1.function("add_two_array_2d").launch({1}, {4, 4}, int32_t{4}, int32_t{4}, on0, a, b);
        },
        {"runs on cuda:1", "argument 2 is an array on cuda:0", "a.to(kiln::gpu(1))"});
  }
  EXPECT_EQ(res.sum().item<float>(), 48.0f);
}

TEST(RawKernelGpu, SizeAndCountMismatchesThrowBeforeLaunch) {
  KILN_REQUIRE_GPU();
  RawModule module(kAddTwoArray2d);
  RawKernel kernel = module.function("add_two_array_2d");
  const Array a = ones({16, 16}, float32, gpu(0)), b = ones({16, 16}, float32, gpu(0));
  Array res = zeros({16, 16}, float32, gpu(0));
  expect_error<ValueError>(
      [&] {
        kernel.launch({1}, {16, 16}, 16, 16.0, res, a, b);
      },
      {"RawKernel 'add_two_array_2d'", "parameter 1 (counting from 0) is 4 bytes", "float64 (8 bytes)"});
  expect_error<ValueError>(
      [&] {
        kernel.launch({1}, {16, 16}, size_t{16}, 16, res, a, b);
      },
      {"parameter 0 (counting from 0) is 4 bytes", "uint64 (8 bytes)"});
  expect_error<ValueError>(
      [&] {
        kernel.launch({1}, {16, 16}, 16, 16, res, a);
      },
      {"takes 5 parameter(s)", "given 4 argument(s)"});
  const Array host = ones({16, 16}, float32, cpu());
  expect_error<DeviceError>(
      [&] {
        kernel.launch({1}, {16, 16}, 16, 16, res, host, b);
      },
      {"argument 3", "host memory (cpu)", "a.to(kiln::gpu(0))"});
  EXPECT_EQ(res.sum().item<float>(), 0.0f);  // nothing ran
  kernel.launch({1}, {16, 16}, 16, 16, res, a, b);
  EXPECT_EQ(res.sum().item<float>(), 512.0f);
}

TEST(RawKernelGpu, OutOfRangeLaunchConfiguration) {
  KILN_REQUIRE_GPU();
  RawModule module(kNothing);
  RawKernel kernel = module.function("nothing");
  int* none = nullptr;
  expect_error<ValueError>([&] { kernel.launch({1}, {2048}, none); }, {"kernel 'nothing'", "block (2048,1,1)"});
  expect_error<ValueError>([&] { kernel.launch({1, 1, 70000}, {32}, none); }, {"kernel 'nothing'", "65535"});
  expect_error<ValueError>([&] { kernel.launch({0}, {32}, none); }, {"kernel 'nothing'", "at least 1"});
  // More dynamic shared memory than any GPU has: CUDA refuses, kiln names the kernel and configuration.
  expect_error<CudaError>([&] { kernel.launch({1}, {32}, none, LaunchOptions{.shared_mem = 4u << 20}); },
                          {"kernel 'nothing'", "4194304 bytes of dynamic shared memory"});
  kernel.launch({1}, {32}, none);  // the kernel still launches afterwards
  synchronize(gpu(0));
  const KernelAttributes attributes = kernel.attributes();
  EXPECT_GE(attributes.max_threads_per_block, 32);
  EXPECT_GT(attributes.binary_version, 0);
}

TEST(RawKernelGpu, InMemoryCacheSkipsTheDiskAndTheDiskCacheIsWrittenOtherwise) {
  KILN_REQUIRE_GPU();
  TempDir dir;
  ScopedEnv cache_dir("KILN_CACHE_DIR", dir.str().c_str());
  const std::string unique = std::to_string(::getpid()) + "_" + std::to_string(std::rand());
  {
    ScopedEnv in_memory("KILN_CACHE_IN_MEMORY", "1");
    RawModule m("extern \"C\" __global__ void mem_only_" + unique + "(int* p) { p[0] = 1; }");
    EXPECT_EQ(dir.file_count(), 0u);
  }
  {
    ScopedEnv in_memory("KILN_CACHE_IN_MEMORY", nullptr);
    const auto before = cuda_impl::cache_stats();
    RawModule m("extern \"C\" __global__ void on_disk_" + unique + "(int* p) { p[0] = 2; }");
    EXPECT_EQ(dir.file_count(), 1u);
    EXPECT_EQ(cuda_impl::cache_stats().nvrtc_compiles, before.nvrtc_compiles + 1);
    // A fresh memory cache finds it on disk: no compile.
    cuda_impl::clear_memory_cache();
    RawModule again("extern \"C\" __global__ void on_disk_" + unique + "(int* p) { p[0] = 2; }");
    const auto after = cuda_impl::cache_stats();
    EXPECT_EQ(after.nvrtc_compiles, before.nvrtc_compiles + 1);
    EXPECT_EQ(after.disk_hits, before.disk_hits + 1);
  }
}

#endif  // KILN_WITH_CUDA
