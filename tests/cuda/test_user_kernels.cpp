// User ElementwiseKernel and ReductionKernel (include/kiln/kernels.hpp).
// Without a GPU: parameter parsing, placeholder resolution, every argument
// error (checked before the device, so CPU arrays reach them), the DeviceError
// for CPU arrays, and generated variants compiled to PTX with NVRTC (every
// layout class, raw arrays, scalars, float16, reductions of every pass), plus
// the CompileError of a user operation that does not compile. The runs on a
// GPU are in test_user_kernels_gpu.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/indexing.hpp"
#include "core/user_kernel.hpp"
#include "kiln/kiln.hpp"
#include "test_util.hpp"

using namespace kiln;
using kiln_test::expect_error;

namespace {

// ---- parsing and types (pure C++) ------------------------------------------------------------------------

TEST(UserKernelParams, ParsesTypesPlaceholdersAndRaw) {
  auto params = detail::parse_kernel_params("float32 x,  raw T  y ,int8 z", false, "k");
  ASSERT_EQ(params.size(), 3u);
  EXPECT_EQ(params[0].name, "x");
  EXPECT_EQ(params[0].dtype, DType::Float32);
  EXPECT_FALSE(params[0].raw);
  EXPECT_EQ(params[1].name, "y");
  EXPECT_FALSE(params[1].dtype.has_value());
  EXPECT_EQ(params[1].placeholder, "T");
  EXPECT_TRUE(params[1].raw);
  EXPECT_EQ(params[2].dtype, DType::Int8);
  EXPECT_TRUE(detail::parse_kernel_params("  ", true, "k").empty());
  auto outs = detail::parse_kernel_params("bfloat16 out", true, "k");
  ASSERT_EQ(outs.size(), 1u);
  EXPECT_TRUE(outs[0].output);
  EXPECT_EQ(outs[0].dtype, DType::BFloat16);
}

TEST(UserKernelParams, SyntaxErrorsNameKernelAndParameter) {
  expect_error<ValueError>([] { detail::parse_kernel_params("float32", false, "kern"); },
                           {"kern", "syntax error", "\"float32\"", "[raw] type name"});
  expect_error<ValueError>([] { detail::parse_kernel_params("float32 x,", false, "kern"); }, {"kern", "syntax error"});
  expect_error<ValueError>([] { detail::parse_kernel_params("flaot32 x", false, "kern"); },
                           {"kern", "'x'", "unknown type 'flaot32'", "float32"});
  expect_error<ValueError>([] { detail::parse_kernel_params("float x", false, "kern"); },
                           {"unknown type 'float'", "dtype name"});
  expect_error<ValueError>([] { detail::parse_kernel_params("const float32 x", false, "kern"); },
                           {"'x'", "unknown keyword 'const'", "raw"});
  expect_error<ValueError>([] { detail::parse_kernel_params("float32 2x", false, "kern"); }, {"'2x'", "identifier"});
  expect_error<ValueError>([] { detail::parse_kernel_params("float32 kiln_x", false, "kern"); }, {"reserved"});
  expect_error<ValueError>([] { detail::parse_kernel_params("1 x", false, "kern"); }, {"unknown type '1'"});
}

TEST(UserKernelParams, DefinitionErrors) {
  expect_error<ValueError>([] { ElementwiseKernel("float32 x", "float32 x", "x = 1", "dup"); },
                           {"dup", "'x'", "used twice"});
  expect_error<ValueError>([] { ElementwiseKernel("float32 i", "float32 y", "y = i", "idx"); },
                           {"idx", "'i'", "reserved"});
  expect_error<ValueError>([] { ElementwiseKernel("float32 x", "float32 n", "n = x", "size"); }, {"'n'", "reserved"});
  expect_error<ValueError>([] { ElementwiseKernel("T x", "T T", "T = x", "clash"); }, {"placeholder"});
  expect_error<ValueError>([] { ElementwiseKernel("float32 blockDim", "float32 y", "y = blockDim", "bi"); },
                           {"bi", "'blockDim'", "CUDA built-in"});
  expect_error<ValueError>([] { ElementwiseKernel("float32 x", "float32 y", "y = x", "plus-one"); },
                           {"'plus-one'", "identifier"});
  expect_error<ValueError>([] { ReductionKernel("T a", "T y", "a", "a + b", "y = a", "0", "red"); },
                           {"red", "'a'", "reserved"});
  expect_error<ValueError>([] { ReductionKernel("T x", "", "x", "a + b", "", "0", "red"); }, {"red", "output"});
  expect_error<ValueError>([] { ReductionKernel("T x", "raw T y", "x", "a + b", "y[0] = a", "0", "red"); },
                           {"red", "'y'", "raw"});
  expect_error<ValueError>(
      [] { ReductionKernel("T x", "T y", "x", "a + b", "y = a", "0", "red", {.reduce_type = "quad"}); },
      {"red", "reduce_type", "'quad'"});
  expect_error<ValueError>(
      [] { ReductionKernel("T x", "T y", "x", "a + b", "y = a", "0", "red", {.reduce_type = "U"}); },
      {"red", "reduce_type 'U'", "no parameter"});
  EXPECT_EQ(ElementwiseKernel("int32 x", "int32 y", "y = x + 1", "plus_one").nin(), 1);
  EXPECT_EQ(ReductionKernel("T x, T w", "T y", "x * w", "a + b", "y = a", "0", "wsum").nout(), 1);
}

TEST(UserKernelParams, ReduceTypeAcceptsDtypeAndCNames) {
  EXPECT_EQ(detail::parse_type_spec("float64", "k", "reduce_type").dtype, DType::Float64);
  EXPECT_EQ(detail::parse_type_spec("double", "k", "reduce_type").dtype, DType::Float64);
  EXPECT_EQ(detail::parse_type_spec("float", "k", "reduce_type").dtype, DType::Float32);
  EXPECT_EQ(detail::parse_type_spec("long  long", "k", "reduce_type").dtype, DType::Int64);
  EXPECT_EQ(detail::parse_type_spec("T", "k", "reduce_type").placeholder, "T");
}

detail::ArgType arr(DType t) {
  detail::ArgType a;
  a.is_array = true;
  a.dtype = t;
  return a;
}
detail::ArgType sca(Scalar s) {
  detail::ArgType a;
  a.scalar = s;
  return a;
}

TEST(UserKernelTypes, PlaceholdersBindFromArraysThenScalars) {
  auto params = detail::parse_kernel_params("T x, T s, U u", false, "k");
  for (auto& p : detail::parse_kernel_params("T y, V v", true, "k")) params.push_back(p);
  // T from the int16 array (the scalar 3 is weak), U from the scalar 2.5 (float64).
  detail::TypeMap map = detail::resolve_kernel_types("k", params, 3, {arr(DType::Int16), sca(3), sca(2.5)});
  EXPECT_EQ(map.find("T"), DType::Int16);
  EXPECT_EQ(map.find("U"), DType::Float64);
  EXPECT_FALSE(map.find("V").has_value());
  expect_error<DTypeError>([&] { detail::param_dtype("k", params[4], map); },
                           {"k", "cannot determine type V of output 'v'", "pass the output array"});
  // Passed outputs bind too.
  map = detail::resolve_kernel_types("k", params, 3,
                                     {arr(DType::Int16), sca(3), sca(true), arr(DType::Int16), arr(DType::UInt8)});
  EXPECT_EQ(map.find("V"), DType::UInt8);
  EXPECT_EQ(map.find("U"), DType::Bool);
  // Scalars alone promote among themselves: int and float give float64.
  auto two = detail::parse_kernel_params("T a, T b", false, "k");
  EXPECT_EQ(detail::resolve_kernel_types("k", two, 2, {sca(1), sca(0.5)}).find("T"), DType::Float64);
  EXPECT_EQ(detail::resolve_kernel_types("k", two, 2, {sca(1), sca(2)}).find("T"), DType::Int64);
}

TEST(UserKernelTypes, MismatchesNameKernelAndParameter) {
  auto params = detail::parse_kernel_params("T x, T y, float32 f, raw float32 r", false, "kk");
  for (auto& p : detail::parse_kernel_params("int32 out", true, "kk")) params.push_back(p);
  // T bound twice to different dtypes.
  expect_error<DTypeError>(
      [&] {
        detail::resolve_kernel_types(
            "kk", params, 4, {arr(DType::Int32), arr(DType::Float32), arr(DType::Float32), arr(DType::Float32)});
      },
      {"kk", "'y'", "type T", "'x' binds to int32", "float32", "astype"});
  // A fixed input takes safe casts (int16 -> float32) but not float64 -> float32.
  EXPECT_NO_THROW(detail::resolve_kernel_types(
      "kk", params, 4, {arr(DType::Int8), arr(DType::Int8), arr(DType::Int16), arr(DType::Float32)}));
  expect_error<DTypeError>(
      [&] {
        detail::resolve_kernel_types("kk", params, 4,
                                     {arr(DType::Int8), arr(DType::Int8), arr(DType::Float64), arr(DType::Float32)});
      },
      {"kk", "'f'", "declared float32", "float64", "does not cast safely", "astype(float32)"});
  // Raw arrays need their dtype exactly.
  expect_error<DTypeError>(
      [&] {
        detail::resolve_kernel_types("kk", params, 4,
                                     {arr(DType::Int8), arr(DType::Int8), arr(DType::Float32), arr(DType::Float16)});
      },
      {"kk", "'r'", "raw array", "exactly"});
  // Outputs need their dtype exactly.
  expect_error<DTypeError>(
      [&] {
        detail::resolve_kernel_types(
            "kk", params, 4,
            {arr(DType::Int8), arr(DType::Int8), arr(DType::Float32), arr(DType::Float32), arr(DType::Int64)});
      },
      {"kk", "output 'out'", "declared int32", "int64"});
  // Scalars: not for raw, kind and range checked.
  expect_error<ValueError>(
      [&] {
        detail::resolve_kernel_types("kk", params, 4, {sca(1), sca(1), sca(1.0), sca(2.0)});
      },
      {"kk", "raw parameter 'r'", "needs an Array"});
  auto ints = detail::parse_kernel_params("int8 a, T b", false, "kk");
  expect_error<DTypeError>(
      [&] {
        detail::resolve_kernel_types("kk", ints, 2, {sca(1.5), arr(DType::Int8)});
      },
      {"kk", "float scalar 1.5", "'a'", "int8"});
  expect_error<ValueError>(
      [&] {
        detail::resolve_kernel_types("kk", ints, 2, {sca(300), arr(DType::Int8)});
      },
      {"kk", "300", "'a'", "out of range", "int8"});
  EXPECT_EQ(detail::resolve_kernel_types("kk", ints, 2, {sca(1), sca(2.5)}).find("T"), DType::Float64);
}

// ---- calls with CPU arrays: every check runs before the device check -----------------------------------

TEST(UserKernelCalls, CpuArraysThrowDeviceErrorSayingHowToMoveThem) {
  ElementwiseKernel plus_one("int32 x", "int32 y", "y = x + 1", "plus_one");
  if (num_gpus() > 0) {
    expect_error<DeviceError>([&] { plus_one(arange(10, int32, cpu())); },
                              {"plus_one", "CUDA devices", "cpu", ".to(gpu(0))"});
  } else {  // no GPU to move the data to: say so instead of suggesting gpu(0)
    try {
      plus_one(arange(10, int32, cpu()));
      ADD_FAILURE() << "no DeviceError";
    } catch (const DeviceError& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("plus_one: user kernels run on CUDA devices, but the arguments are on cpu; this machine has 0 "
                       "usable GPU(s)"),
                std::string::npos)
          << m;
      EXPECT_EQ(m.find("gpu(0)"), std::string::npos) << m;
    }
  }
  // A safely castable dtype passes the type check and reaches the device check.
  expect_error<DeviceError>([&] { plus_one(arange(10, int8, cpu())); }, {"plus_one", "CUDA"});
  ReductionKernel l2("T x", "T y", "x * x", "a + b", "y = sqrt(a)", "0", "l2norm");
  expect_error<DeviceError>(
      [&] {
        l2(ones({3, 4}, float32, cpu()), 1);
      },
      {"l2norm", "CUDA devices", num_gpus() > 0 ? ".to(gpu(0))" : "usable GPU(s)"});
  // Scalars only (with a size): the current device, the CPU here, is not a GPU.
  ElementwiseKernel fill("T v", "raw T out", "out[i] = v", "fill_raw");
  DeviceGuard guard(cpu());
  expect_error<DeviceError>([&] { fill.call({1.5f, zeros({4}, float32, cpu())}, 4); }, {"fill_raw", "CUDA"});
  expect_error<DeviceError>([&] { fill.call({1.5f}, 4); }, {"fill_raw", "current device is cpu"});
}

TEST(UserKernelCalls, ArgumentErrorsNameKernelAndParameter) {
  ElementwiseKernel plus_one("int32 x", "int32 y", "y = x + 1", "plus_one");
  Array x = arange(10, int32, cpu());
  expect_error<ValueError>([&] { plus_one(x, x, x); },
                           {"plus_one", "expected 1 input argument (x)", "2", "y", "got 3"});
  expect_error<ValueError>([&] { plus_one(); }, {"plus_one", "got 0"});
  expect_error<DTypeError>([&] { plus_one(arange(10, float32, cpu())); },
                           {"plus_one", "'x'", "int32", "float32", "astype(int32)"});
  expect_error<DTypeError>([&] { plus_one(x, zeros({10}, int64, cpu())); },
                           {"plus_one", "output 'y'", "int32", "int64"});
  expect_error<ShapeError>([&] { plus_one(x, zeros({5}, int32, cpu())); }, {"plus_one", "output 'y'", "(5,)", "(10,)"});
  // An output larger than the inputs is fine (the inputs broadcast to it): the call reaches the device check.
  expect_error<DeviceError>([&] { plus_one(x, zeros({2, 10}, int32, cpu())); }, {"plus_one", "CUDA"});
  expect_error<ValueError>([&] { plus_one(x, 3); }, {"plus_one", "output 'y' must be an Array"});
  expect_error<ValueError>([&] { plus_one(Array()); }, {"plus_one", "'x'", "undefined"});
  ElementwiseKernel add("T x, T y", "T z", "z = x + y", "my_add");
  expect_error<ShapeError>(
      [&] {
        add(zeros({2, 3}, float32, cpu()), zeros({4}, float32, cpu()));
      },
      {"my_add", "(2, 3)", "(4,)"});
  ElementwiseKernel unbound("T x", "U y", "y = x", "unbound");
  expect_error<DTypeError>([&] { unbound(zeros({2}, float32, cpu())); },
                           {"unbound", "cannot determine type U of output 'y'"});
  ElementwiseKernel two_out("T x", "T y, T z", "y = x; z = x", "two_out");
  expect_error<ValueError>([&] { two_out(zeros({2}, float32, cpu())); }, {"two_out", "2 outputs", "call("});
  ElementwiseKernel raw_only("raw T a", "", "a[i] = 0", "raw_only");
  expect_error<ValueError>([&] { raw_only(zeros({2}, float32, cpu())); }, {"raw_only", "size"});
  expect_error<ValueError>([&] { add.call({zeros({2}, float32, cpu()), 1.0f}, 3); }, {"my_add", "size 3", "2"});
}

TEST(UserKernelCalls, ReadmeCallFormsResolveAndReachTheDeviceCheck) {
  Array x = ones({4, 3}, float32, cpu()), y = ones({4, 3}, float32, cpu()), z = empty({4, 3}, float32, cpu());
  ElementwiseKernel saxpy("T x, T y, T a", "T z", "z = a * x + y", "saxpy");
  expect_error<DeviceError>([&] { saxpy(x, y, 2.5f); }, {"saxpy"});
  expect_error<DeviceError>([&] { saxpy(x, y, 2.5f, z); }, {"saxpy"});
  expect_error<DeviceError>([&] { saxpy.call({x, y, 2.5f}); }, {"saxpy"});
  ReductionKernel l2norm("T x", "T y", "x * x", "a + b", "y = sqrt(a)", "0", "l2norm");
  expect_error<DeviceError>([&] { l2norm(x, {0}, true); }, {"l2norm"});
  expect_error<DeviceError>([&] { l2norm(x, {-1, 0}); }, {"l2norm"});
  ReductionKernel dot("T x, T w", "float64 y", "(double)x * w", "a + b", "y = a", "0", "dot",
                      {.reduce_type = "double"});
  expect_error<DeviceError>([&] { dot({x, ones({3}, float32, cpu())}, 0); }, {"dot"});
  expect_error<DeviceError>([&] { dot.call({x, 2.0f, empty({3}, float64, cpu())}, 0); }, {"dot"});
}

TEST(UserKernelCalls, ReductionArgumentErrors) {
  ReductionKernel l2("T x", "T y", "x * x", "a + b", "y = sqrt(a)", "0", "l2norm");
  ReductionKernel mx("T x", "T y", "x", "max(a, b)", "y = a", "", "my_max");
  Array x = ones({3, 4}, float32, cpu());
  expect_error<ShapeError>([&] { l2(x, 2); }, {"l2norm", "axis 2", "ndim 2"});
  expect_error<ShapeError>([&] { l2(x, {1, -1}); }, {"l2norm", "duplicate axis"});
  expect_error<ShapeError>(
      [&] {
        l2.call({x, zeros({4}, float32, cpu())}, 1);
      },
      {"l2norm", "output 'y'", "(4,)", "(3,)"});
  expect_error<ShapeError>([&] { l2.call({x, zeros({3}, float32, cpu())}, 1, true); }, {"(3, 1)"});
  expect_error<DTypeError>([&] { l2.call({x, zeros({3}, float64, cpu())}, 1); }, {"l2norm", "'y'", "float64"});
  expect_error<ValueError>(
      [&] {
        mx(zeros({3, 0}, float32, cpu()), 1);
      },
      {"my_max", "zero-size reduction", "no identity"});
  // With an identity an empty reduction is fine: it reaches the device check.
  expect_error<DeviceError>([&] { l2(zeros({3, 0}, float32, cpu()), 1); }, {"l2norm", "CUDA"});
  ReductionKernel unbound("T x", "U y", "x", "a + b", "y = a", "0", "unbound_red");
  expect_error<DTypeError>([&] { unbound(x); }, {"unbound_red", "U"});
}

}  // namespace

#ifdef KILN_WITH_CUDA

#include "cuda/codegen_user.hpp"
#include "cuda/compiler.hpp"

using namespace kiln::cuda_impl;

namespace {

// ---- generated variants compiled to PTX (no GPU) ----------------------------------------------------------

/// Describes one argument of a variant: an array of `storage` dtype (raw or not), or a scalar.
struct ArgDesc {
  bool array = true;
  DType storage = DType::Float32;
  Scalar scalar;
  int raw_ndim = 1;
  bool raw_contiguous = true;
};
ArgDesc a_(DType t) { return ArgDesc{true, t, {}, 1, true}; }
ArgDesc s_(Scalar v) { return ArgDesc{false, DType::Float32, v, 0, true}; }
ArgDesc r_(DType t, int nd, bool contiguous) { return ArgDesc{true, t, {}, nd, contiguous}; }

/// Params, resolved types and parameter specs of a kernel for the given inputs (outputs allocated).
std::vector<UserParamSpec> specs_for(const std::string& in, const std::string& out, const std::string& name,
                                     const std::vector<ArgDesc>& args,
                                     std::vector<std::pair<std::string, DType>>* types) {
  auto params = detail::parse_kernel_params(in, false, name);
  const int nin = static_cast<int>(params.size());
  for (auto& p : detail::parse_kernel_params(out, true, name)) params.push_back(p);
  std::vector<detail::ArgType> arg_types;
  for (const ArgDesc& a : args) arg_types.push_back(a.array ? arr(a.storage) : sca(a.scalar));
  detail::TypeMap map = detail::resolve_kernel_types(name, params, nin, arg_types);
  *types = map.bound;
  std::vector<UserParamSpec> specs;
  for (size_t k = 0; k < params.size(); ++k) {
    UserParamSpec p;
    p.name = params[k].name;
    p.output = params[k].output;
    p.dtype = detail::param_dtype(name, params[k], map);
    p.storage = k < args.size() && args[k].array ? args[k].storage : p.dtype;
    p.kind = k < args.size() && !args[k].array ? UserArgKind::Scalar
             : params[k].raw                   ? UserArgKind::Raw
                                               : UserArgKind::Array;
    if (p.kind == UserArgKind::Raw && k < args.size()) {
      p.raw_ndim = args[k].raw_ndim;
      p.raw_contiguous = args[k].raw_contiguous;
    }
    specs.push_back(p);
  }
  return specs;
}

UserElementwiseSpec ew(const std::string& in, const std::string& out, const std::string& op, const std::string& name,
                       const std::vector<ArgDesc>& args, bool contiguous = true, int ndim = 1, bool index64 = false,
                       const std::string& preamble = "") {
  UserElementwiseSpec spec;
  spec.name = name;
  spec.operation = op;
  spec.preamble = preamble;
  spec.params = specs_for(in, out, name, args, &spec.types);
  spec.contiguous = contiguous;
  spec.ndim = ndim;
  spec.index64 = index64;
  return spec;
}

void expect_ptx_entry(const std::string& source, const std::string& name,
                      const std::vector<std::string>& options = {}) {
  std::string ptx;
  try {
    ptx = compile_ptx(source, name, 90, {options, {}});
  } catch (const std::exception& e) {
    FAIL() << e.what();
  }
  EXPECT_NE(ptx.find(".entry " + name + "("), std::string::npos) << name;
}

TEST(UserKernelCodegen, PlusOneCompilesInEveryLayoutClass) {
  for (bool contiguous : {true, false})
    for (bool index64 : {false, true})
      for (int ndim : {1, 3}) {
        if (contiguous && ndim > 1) continue;
        UserElementwiseSpec spec =
            ew("int32 x", "int32 y", "y = x + 1", "plus_one", {a_(DType::Int32)}, contiguous, ndim, index64);
        const std::string src = user_elementwise_source(spec);
        EXPECT_NE(src.find("extern \"C\" __global__"), std::string::npos);
        expect_ptx_entry(src, "plus_one");
      }
}

TEST(UserKernelCodegen, VariantKeysTellVariantsApart) {
  // The key a call builds: the spec without the user's code (with_code adds it on a miss).
  const auto sig = [](UserElementwiseSpec s) {
    s.name = s.operation = s.preamble = "";
    s.types.clear();
    for (UserParamSpec& p : s.params) p.name.clear();
    return UserVariantKey<UserElementwiseSpec>{0, s};
  };
  const UserVariantKey<UserElementwiseSpec> base = sig(ew("T x", "T y", "y = x", "k", {a_(DType::Float32)}));
  EXPECT_NE(base, sig(ew("T x", "T y", "y = x", "k", {a_(DType::Float64)})));
  EXPECT_NE(base, sig(ew("T x", "T y", "y = x", "k", {s_(1.0f)})));
  EXPECT_NE(base, sig(ew("T x", "T y", "y = x", "k", {a_(DType::Float32)}, false, 2)));
  EXPECT_NE(base, sig(ew("T x", "T y", "y = x", "k", {a_(DType::Float32)}, true, 1, true)));
  EXPECT_EQ(base, sig(ew("T x", "T y", "y = x", "k", {a_(DType::Float32)})));
  // A safely cast input is another variant (it converts on load).
  EXPECT_NE(sig(ew("float32 x", "float32 y", "y = x", "k", {a_(DType::Float32)})),
            sig(ew("float32 x", "float32 y", "y = x", "k", {a_(DType::Int16)})));
}

TEST(UserKernelCodegen, ScalarsRawArraysIndexAndPreambleCompile) {
  // y = a * x + b with scalars, a raw array read backwards through i and n, a preamble function.
  UserElementwiseSpec spec = ew("T x, T a, T b, raw T r", "T y", "y = scale(a * x + b) + r[n - 1 - i]", "saxpy_rev",
                                {a_(DType::Float32), s_(2.0), s_(1), r_(DType::Float32, 2, false)}, false, 2, false,
                                "__device__ float scale(float v) { return v * 0.5f; }");
  const std::string src = user_elementwise_source(spec);
  EXPECT_NE(src.find("typedef float T;"), std::string::npos);
  EXPECT_NE(src.find("kd::raw_array<float, 2, false> r"), std::string::npos);
  EXPECT_NE(src.find("const float a"), std::string::npos);
  expect_ptx_entry(src, "saxpy_rev");
  // Raw outputs written through a[j], contiguous, int64, 0-d raw arrays, atomics through a reference.
  expect_ptx_entry(
      user_elementwise_source(ew("raw int64 src, raw int64 total", "raw int64 dst",
                                 "dst[i] = src[i] * 2; if (i == 0) atomicAdd((unsigned long long*)&total[0], "
                                 "(unsigned long long)n)",
                                 "raw_copy", {r_(DType::Int64, 1, true), r_(DType::Int64, 0, true)})),
      "raw_copy");
}

UserReductionSpec red(const std::string& in, const std::string& out, const std::string& map, const std::string& reduce,
                      const std::string& post, const std::string& identity, const std::string& name,
                      const std::vector<ArgDesc>& args, DType reduce_type, int kept, int reduced, int group,
                      UserReducePass pass, bool index64 = false) {
  UserReductionSpec spec;
  spec.name = name;
  spec.map_expr = map;
  spec.reduce_expr = reduce;
  spec.post_map_expr = post;
  spec.identity = identity;
  spec.params = specs_for(in, out, name, args, &spec.types);
  spec.reduce_type = reduce_type;
  spec.kept_ndim = kept;
  spec.reduced_ndim = reduced;
  spec.group = group;
  spec.pass = pass;
  spec.index64 = index64;
  return spec;
}

TEST(UserKernelCodegen, UserNamesCannotClashWithTheGeneratedCode) {
  // Parameters and locals named like the offset code's scratch variables (p, q, r, d, rem, o0, step, w).
  UserElementwiseSpec spec = ew("int32 p, int32 q, int32 r", "int32 d",
                                "int rem = p + q; int o0 = rem * r; int step = o0; int w = step; d = w", "clash_k",
                                {a_(DType::Int32), a_(DType::Int32), s_(3)}, false, 3, false);
  expect_ptx_entry(user_elementwise_source(spec), "clash_k");
  UserReductionSpec red_spec =
      red("int32 p, int32 q", "int32 d", "p * q", "a + b", "int rem = 0; int r = 1; d = a + rem * r", "0", "clash_red",
          {a_(DType::Int32), s_(2)}, DType::Int32, 3, 3, 64, UserReducePass::Single);
  expect_ptx_entry(user_reduction_source(red_spec), "clash_red");
}

TEST(UserKernelCodegen, HalfTypesComputeInFloatAndRoundOnStore) {
  for (DType t : {DType::Float16, DType::BFloat16}) {
    UserElementwiseSpec spec = ew("T x, raw T r", "T y", "y = x * 0.5f + r[i]; r[i] += y; r[i] = r[i]", "half_k",
                                  {a_(t), r_(t, 1, false)}, false, 2);
    const std::string src = user_elementwise_source(spec);
    EXPECT_NE(src.find("typedef float T;"), std::string::npos);
    EXPECT_NE(src.find("float y = kd::widen(kiln_ptr_y["), std::string::npos);
    EXPECT_NE(src.find("] = kd::cast<" + std::string(t == DType::Float16 ? "kd::half_t" : "kd::bf16_t") + ">(y);"),
              std::string::npos);
    expect_ptx_entry(src, "half_k");
  }
  // Every dtype as input and output, with a safe cast on one input.
  for (DType t : {DType::Bool, DType::Int8, DType::Int16, DType::Int32, DType::Int64, DType::UInt8, DType::Float16,
                  DType::BFloat16, DType::Float32, DType::Float64}) {
    const std::string name = std::string("copy_") + std::string(dtype_name(t));
    expect_ptx_entry(
        user_elementwise_source(ew("T x, T s", "T y", "y = x; if (i == 0) y = s", name, {a_(t), s_(true)}, false, 1)),
        name);
  }
  expect_ptx_entry(
      user_elementwise_source(ew("float64 x", "float32 y", "y = (float)x", "widen_in", {a_(DType::Float16)})),
      "widen_in");
}

TEST(UserKernelCodegen, UserOptionsReachNvrtc) {
  UserElementwiseSpec spec = ew("T x", "T y", "y = x * FACTOR", "with_define", {a_(DType::Float32)});
  expect_ptx_entry(user_elementwise_source(spec), "with_define", {"-DFACTOR=3.0f", "--use_fast_math"});
  EXPECT_THROW(compile_ptx(user_elementwise_source(spec), "with_define", 90), CompileError);
}

TEST(UserKernelCodegen, BadOperationThrowsCompileErrorWithLogAndNumberedLines) {
  UserElementwiseSpec spec = ew("int32 x", "int32 y", "y = x + undefined_thing", "bad_kernel", {a_(DType::Int32)});
  try {
    compile_ptx(user_elementwise_source(spec), "bad_kernel", 90);
    FAIL() << "expected CompileError";
  } catch (const CompileError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("'bad_kernel'"), std::string::npos) << message;
    EXPECT_NE(message.find("undefined_thing"), std::string::npos) << message;
    EXPECT_NE(message.find("error"), std::string::npos) << message;
    EXPECT_NE(message.find("| y = x + undefined_thing"), std::string::npos) << message;  // the numbered line
  }
}

TEST(UserKernelCodegen, ReductionsCompileForEveryPassGroupAndRank) {
  int count = 0;
  for (UserReducePass pass : {UserReducePass::Single, UserReducePass::ToPartials, UserReducePass::FromPartials})
    for (int group : {1, 8, 32, 256})
      for (bool identity : {true, false}) {
        const std::string name = "l2_" + std::to_string(count++);
        UserReductionSpec spec = red("T x", "T y", "x * x", "a + b", "y = sqrt(a)", identity ? "0" : "", name,
                                     {a_(DType::Float32)}, DType::Float32, 2, 2, group, pass, count % 2 == 0);
        expect_ptx_entry(user_reduction_source(spec), name);
      }
  // Two inputs (a dot product in float64), a scalar, a raw array, two outputs, float16 in and out.
  expect_ptx_entry(user_reduction_source(red("T x, T w, T s, raw int32 idx", "T y, float32 z", "x * w * s + idx[0]",
                                             "a + b", "y = a; z = (float)a", "0", "dot_k",
                                             {a_(DType::Float16), a_(DType::Float16), s_(2), r_(DType::Int32, 1, true)},
                                             DType::Float64, 0, 1, 256, UserReducePass::Single)),
                   "dot_k");
  // CUDA's max() overloads serve a user max over floats and integers (the GPU tests' user_max).
  for (DType t : {DType::Float32, DType::Int32, DType::Float16})
    for (UserReducePass pass : {UserReducePass::Single, UserReducePass::ToPartials, UserReducePass::FromPartials}) {
      const std::string name = "user_max_" + std::string(dtype_name(t)) + "_" + std::to_string(static_cast<int>(pass));
      expect_ptx_entry(
          user_reduction_source(red("T x", "T y", "x", "max(a, b)", "y = a", "", name, {a_(t)}, t, 1, 1, 256, pass)),
          name);
    }
  // A full reduction of a 0-d problem, int8 with a C-type reduce type.
  expect_ptx_entry(user_reduction_source(red("int8 x", "int64 y", "x", "a > b ? a : b", "y = a", "-128", "max_i8",
                                             {a_(DType::Int8)}, DType::Int64, 0, 1, 1, UserReducePass::Single)),
                   "max_i8");
}

TEST(UserKernelCodegen, ReductionVariantKeysTellPassesApart) {
  UserReductionSpec a = red("T x", "T y", "x", "a + b", "y = a", "0", "s", {a_(DType::Float32)}, DType::Float32, 1, 1,
                            32, UserReducePass::Single);
  UserReductionSpec b = a;
  b.pass = UserReducePass::FromPartials;
  UserReductionSpec c = a;
  c.group = 1;
  UserReductionSpec d = a;
  d.reduce_type = DType::Float64;
  detail::KernelMemo<UserVariantKey<UserReductionSpec>> memo;
  for (const UserReductionSpec* s : {&a, &b, &c, &d, &a}) memo.insert({0, *s}, std::make_shared<int>(0));
  memo.insert({1, a}, std::make_shared<int>(0));  // another device
  EXPECT_EQ(memo.size(), 5u);
}

// a raw 1-d contiguous view of the storage read or written at int64 storage offsets.
TEST(UserKernelCodegen, IndexingGatherAndScatterCompileForEveryDtype) {
  for (int t = 0; t < kNumDTypes; ++t) {
    const DType d = static_cast<DType>(t);
    for (bool contiguous : {true, false}) {
      expect_ptx_entry(
          user_elementwise_source(ew(detail::kGatherIn, detail::kGatherOut, detail::kGatherOp, "index_gather",
                                     {r_(d, 1, true), a_(DType::Int64)}, contiguous, contiguous ? 1 : 3)),
          "index_gather");
      expect_ptx_entry(
          user_elementwise_source(ew(detail::kScatterIn, detail::kScatterOut, detail::kScatterOp, "index_scatter",
                                     {a_(d), a_(DType::Int64), r_(d, 1, true)}, contiguous, contiguous ? 1 : 3)),
          "index_scatter");
    }
  }
}

TEST(UserKernelCodegen, TakeBackwardRowsCompilesForFloat32AndFloat64) {
  for (DType d : {DType::Float32, DType::Float64}) {
    for (bool index64 : {false, true}) {
      const Scalar k(int64_t{6}), inner(int64_t{4}), nrows(int64_t{5});
      expect_ptx_entry(user_elementwise_source(ew(detail::kTakeRowsIn, detail::kTakeRowsOut, detail::kTakeRowsOp,
                                                  "take_backward_rows",
                                                  {r_(DType::Int64, 1, true), r_(DType::Int64, 1, true),
                                                   r_(d, 1, true), s_(k), s_(inner), s_(nrows), r_(d, 1, true)},
                                                  true, 1, index64)),
                       "take_backward_rows");
    }
  }
}

}  // namespace

#endif  // KILN_WITH_CUDA
