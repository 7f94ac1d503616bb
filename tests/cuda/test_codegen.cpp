// Code generation of the GPU's elementwise and reduction kernels, tested without
// a GPU: every op (for representative dtypes, in every layout class) and every
// reduction generates source that NVRTC compiles to PTX for sm_90, kernels keep
// the name their spec promises (test_kernel_keys.cpp checks that specs and names
// tell kernels apart). Kernels are compiled in
// batches (one prelude, many kernels per program) on all cores, since NVRTC's time
// is mostly per kernel.
#ifdef KILN_WITH_CUDA

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "cpu/elementwise.hpp"
#include "cuda/codegen.hpp"
#include "cuda/compiler.hpp"
#include "cuda/device_functions.hpp"
#include "kiln/kiln.hpp"

using namespace kiln;
using namespace kiln::cuda_impl;
using detail::OpCode;
using detail::ReduceOp;

namespace {

constexpr DType kAllTypes[] = {DType::Bool,  DType::Int8,    DType::Int16,    DType::Int32,   DType::Int64,
                               DType::UInt8, DType::Float16, DType::BFloat16, DType::Float32, DType::Float64};

struct Kernel {
  std::string name, code;
};
using Batch = std::vector<Kernel>;

/// Compiles every batch (prelude + its kernels) to PTX for cc 90 on all cores; returns one message per
/// failure: a compile error, or a kernel whose entry is missing from the PTX.
std::vector<std::string> compile_batches(const std::vector<Batch>& batches) {
  CompileOptions options;
  options.options = builtin_kernel_options();
  std::vector<std::string> failures;
  std::mutex mutex;
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t b = next++; b < batches.size(); b = next++) {
      std::string source = device_prelude();
      for (const Kernel& k : batches[b]) source += k.code;
      try {
        const std::string ptx = compile_ptx(source, "codegen_test_" + std::to_string(b), 90, options);
        for (const Kernel& k : batches[b])
          if (ptx.find(".entry " + k.name + "(") == std::string::npos) {
            std::lock_guard<std::mutex> lock(mutex);
            failures.push_back("no .entry for " + k.name + " in the PTX");
          }
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> lock(mutex);
        failures.push_back(std::string(e.what()).substr(0, 4000));
      }
    }
  };
  const unsigned threads = std::max(2u, std::min(16u, std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t) pool.emplace_back(worker);
  for (auto& t : pool) t.join();
  return failures;
}

bool bool_result(OpCode op) {
  switch (op) {
    case OpCode::IsNan:
    case OpCode::IsInf:
    case OpCode::IsFinite:
    case OpCode::Equal:
    case OpCode::NotEqual:
    case OpCode::Less:
    case OpCode::LessEqual:
    case OpCode::Greater:
    case OpCode::GreaterEqual:
    case OpCode::LogicalNot:
    case OpCode::LogicalAnd:
    case OpCode::LogicalOr:
    case OpCode::LogicalXor:
      return true;
    default:
      return false;
  }
}

/// The spec of `op` over arrays of compute dtype `t` in layout variant `variant`:
/// 0 contiguous (vectorised as the host would), 1 strided rank 3 with a scalar operand (32-bit indices),
/// 2 strided rank 5 with 64-bit indices.
ElementwiseSpec op_spec(OpCode op, DType t, int variant) {
  ElementwiseSpec s;
  s.op = op;
  s.num_inputs = detail::op_info(op).arity;
  s.compute = t;
  for (int k = 0; k < s.num_inputs; ++k) s.in[k] = t;
  if (op == OpCode::Where) s.in[0] = DType::Bool;
  s.out = bool_result(op) ? DType::Bool : t;
  if (variant == 0) {
    const int64_t widest = std::max(itemsize(s.out), itemsize(t));
    s.vector_width = elementwise_vectorizable(op, t) ? static_cast<int>(16 / widest) : 1;
  } else {
    s.layout = EwLayout::Strided;
    s.ndim = variant == 1 ? 3 : 5;
    s.index64 = variant == 2;
    s.unroll = variant == 1 && elementwise_vectorizable(op, t) ? 4 : 1;
    if (variant == 1 && s.num_inputs > 1) {
      s.scalar[1] = true;
      s.in[1] = scalar_argument_dtype(op, 1, t);
    }
  }
  return s;
}

Kernel kernel_of(const ElementwiseSpec& s) { return {elementwise_kernel_name(s), elementwise_kernel_code(s)}; }
Kernel kernel_of(const ReduceSpec& s) { return {reduce_kernel_name(s), reduce_kernel_code(s)}; }

void expect_all_compile(const std::vector<Batch>& requested) {
  // The same spec twice would define its kernel twice in one program: keep each kernel once.
  std::set<std::string> seen;
  std::vector<Batch> batches;
  size_t kernels = 0;
  for (const Batch& b : requested) {
    Batch unique;
    for (const Kernel& k : b)
      if (seen.insert(k.name).second) unique.push_back(k);
    kernels += unique.size();
    if (!unique.empty()) batches.push_back(std::move(unique));
  }
  const std::vector<std::string> failures = compile_batches(batches);
  EXPECT_TRUE(failures.empty()) << failures.size() << " of " << batches.size() << " batches (" << kernels
                                << " kernels) failed; first:\n"
                                << (failures.empty() ? "" : failures.front());
}

/// The result dtype the core gives a reduction (src/core/reduce.cpp).
DType reduce_out(ReduceOp op, DType in) {
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Prod:
      return is_floating(in) ? in : DType::Int64;
    case ReduceOp::ArgMax:
    case ReduceOp::ArgMin:
      return DType::Int64;
    case ReduceOp::All:
    case ReduceOp::Any:
      return DType::Bool;
    case ReduceOp::Norm:
      return is_floating(in) ? in : DType::Float64;
    default:
      return in;
  }
}

/// Reduction spec variants: the layouts, group sizes, ranks, vector loads and split passes the host plans.
ReduceSpec reduce_spec(ReduceOp op, DType in, int variant) {
  ReduceSpec s;
  s.op = op;
  s.in = in;
  s.out = reduce_out(op, in);
  s.acc = reduce_accumulator_dtype(op, in, s.out);
  switch (variant % 6) {
    case 0:  // the full-array first pass: block groups, 16-byte loads, partials out
      s.group = kBlockSize;
      s.vector_width = static_cast<int>(16 / itemsize(in));
      s.to_partials = true;
      break;
    case 1:
      s.group = 32;
      s.kept_ndim = 1;
      break;  // a warp per row
    case 2:
      s.group = 4;
      s.kept_ndim = 2;
      s.reduced_ndim = 2;
      break;
    case 3:
      s.layout = ReduceLayout::Columns;
      s.kept_ndim = 1;
      break;
    case 4:
      s.layout = ReduceLayout::Columns;
      s.kept_ndim = 3;
      s.reduced_ndim = 2;
      s.to_partials = true;
      s.index64 = true;
      break;
    default:
      s.group = kBlockSize;
      s.kept_ndim = 1;
      s.from_partials = true;
      break;  // the second pass
  }
  return s;
}

TEST(CudaCodegen, EveryElementwiseOpCompilesForRepresentativeDtypesAndEveryLayout) {
  // Each supported (op, compute dtype) pair once, rotating through the three layout classes; the op's
  // first dtype also gets the other two, so every op is compiled in every layout.
  constexpr DType kTypes[] = {DType::Bool,    DType::Int8,     DType::Int32,   DType::Int64,  DType::UInt8,
                              DType::Float16, DType::BFloat16, DType::Float32, DType::Float64};
  std::vector<Batch> batches;
  int total = 0;
  for (int o = 0; o < static_cast<int>(OpCode::Fill); ++o) {
    const OpCode op = static_cast<OpCode>(o);
    Batch batch;
    int seen = 0;
    for (DType t : kTypes) {
      if (!elementwise_op_supported(op, kernel_compute_dtype(t))) continue;
      if (seen == 0) {
        batch.push_back(kernel_of(op_spec(op, t, 1)));
        batch.push_back(kernel_of(op_spec(op, t, 2)));
      }
      batch.push_back(kernel_of(op_spec(op, t, seen % 3)));
      ++seen;
    }
    ASSERT_GT(seen, 0) << detail::op_info(op).name << " has no supported dtype";
    total += static_cast<int>(batch.size());
    // Several small batches per op keep every core busy.
    for (size_t i = 0; i < batch.size(); i += 4)
      batches.emplace_back(batch.begin() + static_cast<long>(i),
                           batch.begin() + static_cast<long>(std::min(i + 4, batch.size())));
  }
  EXPECT_GT(total, 200);
  expect_all_compile(batches);
}

TEST(CudaCodegen, CastsBetweenEveryPairOfDtypesAndCopiesCompile) {
  std::vector<Batch> batches;
  for (DType from : kAllTypes) {
    Batch batch;
    for (DType to : kAllTypes) {
      ElementwiseSpec s;
      s.op = OpCode::Identity;
      s.num_inputs = 1;
      s.in[0] = from;
      s.out = to;
      s.compute = to;
      s.raw_copy = from == to;
      s.vector_width = static_cast<int>(16 / std::max(itemsize(from), itemsize(to)));
      batch.push_back(kernel_of(s));
    }
    // A fill: the scalar argument in the compute type, a strided output.
    ElementwiseSpec fill;
    fill.op = OpCode::Identity;
    fill.num_inputs = 1;
    fill.out = fill.compute = from;
    fill.scalar[0] = true;
    fill.in[0] = scalar_argument_dtype(OpCode::Identity, 0, from);
    fill.layout = EwLayout::Strided;
    fill.ndim = 2;
    batch.push_back(kernel_of(fill));
    ElementwiseSpec sequence;
    sequence.layout = EwLayout::Sequence;
    sequence.out = from;
    batch.push_back(kernel_of(sequence));
    batches.push_back(batch);
  }
  expect_all_compile(batches);
}

TEST(CudaCodegen, MixedDtypeInputsConvertToTheComputeType) {
  // int32 + float32 computed in float64; where(bool array, float16, int8 scalar) in float32; clip of
  // bfloat16 with float scalars; a comparison of uint8 with an int64 scalar written into int32.
  ElementwiseSpec add;
  add.op = OpCode::Add;
  add.num_inputs = 2;
  add.in[0] = DType::Int32;
  add.in[1] = DType::Float32;
  add.compute = add.out = DType::Float64;
  add.vector_width = 2;
  ElementwiseSpec where;
  where.op = OpCode::Where;
  where.num_inputs = 3;
  where.in[0] = DType::Bool;
  where.in[1] = DType::Float16;
  where.scalar[2] = true;
  where.in[2] = scalar_argument_dtype(OpCode::Where, 2, DType::Float16);
  where.compute = where.out = DType::Float16;
  where.layout = EwLayout::Strided;
  where.ndim = 2;
  ElementwiseSpec clip;
  clip.op = OpCode::Clip;
  clip.num_inputs = 3;
  clip.in[0] = DType::BFloat16;
  clip.scalar[1] = clip.scalar[2] = true;
  clip.in[1] = clip.in[2] = DType::Float32;
  clip.compute = clip.out = DType::BFloat16;
  clip.vector_width = 8;
  ElementwiseSpec less;
  less.op = OpCode::Less;
  less.num_inputs = 2;
  less.in[0] = DType::UInt8;
  less.scalar[1] = true;
  less.in[1] = DType::Int64;
  less.compute = DType::Int64;
  less.out = DType::Int32;
  less.vector_width = 4;
  EXPECT_EQ(scalar_argument_dtype(OpCode::Where, 0, DType::Float16), DType::Bool);
  EXPECT_EQ(scalar_argument_dtype(OpCode::Clip, 1, DType::BFloat16), DType::Float32);
  expect_all_compile({{kernel_of(add), kernel_of(where), kernel_of(clip), kernel_of(less)}});
}

TEST(CudaCodegen, EveryReductionCompilesForEveryDtypeAndLayout) {
  std::vector<Batch> batches;
  for (int o = 0; o < detail::kNumReduceKernels; ++o) {
    const ReduceOp op = static_cast<ReduceOp>(o);
    Batch batch;
    int variant = o;
    for (DType in : kAllTypes) batch.push_back(kernel_of(reduce_spec(op, in, variant++)));
    // Every layout variant at least once per op, with float32 input.
    for (int v = 0; v < 6; ++v) batch.push_back(kernel_of(reduce_spec(op, DType::Float32, v)));
    for (size_t i = 0; i < batch.size(); i += 4)
      batches.emplace_back(batch.begin() + static_cast<long>(i),
                           batch.begin() + static_cast<long>(std::min(i + 4, batch.size())));
  }
  // mean's sum: float32 input into a float64 output accumulates in float64.
  ReduceSpec mean_sum = reduce_spec(ReduceOp::Sum, DType::Float32, 1);
  mean_sum.out = DType::Float64;
  mean_sum.acc = reduce_accumulator_dtype(ReduceOp::Sum, DType::Float32, DType::Float64);
  EXPECT_EQ(mean_sum.acc, DType::Float64);
  batches.push_back({kernel_of(mean_sum)});
  expect_all_compile(batches);
}

TEST(CudaCodegen, AccumulatorDtypesFollowTheDocumentedChoice) {
  EXPECT_EQ(reduce_accumulator_dtype(ReduceOp::Sum, DType::Float16, DType::Float16), DType::Float32);
  EXPECT_EQ(reduce_accumulator_dtype(ReduceOp::Sum, DType::BFloat16, DType::BFloat16), DType::Float32);
  EXPECT_EQ(reduce_accumulator_dtype(ReduceOp::Sum, DType::Float32, DType::Float32), DType::Float32);
  EXPECT_EQ(reduce_accumulator_dtype(ReduceOp::Sum, DType::Float32, DType::Float64), DType::Float64);
  EXPECT_EQ(reduce_accumulator_dtype(ReduceOp::Prod, DType::Float64, DType::Float64), DType::Float64);
  EXPECT_EQ(reduce_accumulator_dtype(ReduceOp::Sum, DType::UInt8, DType::Int64), DType::Int64);
  EXPECT_EQ(reduce_accumulator_dtype(ReduceOp::Sum, DType::Bool, DType::Int64), DType::Int64);
  EXPECT_EQ(reduce_accumulator_dtype(ReduceOp::Max, DType::Int8, DType::Int8), DType::Int64);
  EXPECT_EQ(reduce_accumulator_dtype(ReduceOp::Min, DType::Float16, DType::Float16), DType::Float32);
  EXPECT_EQ(reduce_accumulator_dtype(ReduceOp::ArgMax, DType::Float64, DType::Int64), DType::Float64);
  EXPECT_EQ(reduce_accumulator_dtype(ReduceOp::Any, DType::Float32, DType::Bool), DType::Bool);
  EXPECT_EQ(reduce_accumulator_dtype(ReduceOp::Norm, DType::Float16, DType::Float16), DType::Float64);
  EXPECT_EQ(reduce_accumulator_dtype(ReduceOp::Norm, DType::Float32, DType::Float32), DType::Float64);
  EXPECT_EQ(reduce_accumulator_dtype(ReduceOp::Norm, DType::Int32, DType::Float64), DType::Float64);
  ReduceSpec arg;
  arg.op = ReduceOp::ArgMin;
  arg.acc = DType::Float32;
  EXPECT_EQ(reduce_accumulator_size(arg), 16);  // (float value, int64 index) pairs
}

TEST(CudaCodegen, NormSquaresOnLoadAndTakesTheRootOnlyInTheFinalStore) {
  ReduceSpec one = reduce_spec(ReduceOp::Norm, DType::Float32, 1);  // one pass: a warp per row
  const std::string code = reduce_kernel_code(one);
  EXPECT_NE(code.find("(ACC)kd::widen(x) * (ACC)kd::widen(x)"), std::string::npos) << code;
  EXPECT_NE(code.find("kd::cast<float>(sqrt(a))"), std::string::npos) << code;
  EXPECT_NE(code.find("typedef double ACC;"), std::string::npos) << code;
  ReduceSpec first = reduce_spec(ReduceOp::Norm, DType::Float32, 0);  // split: partial sums of squares
  ASSERT_TRUE(first.to_partials);
  EXPECT_EQ(reduce_kernel_code(first).find("sqrt"), std::string::npos);
  ReduceSpec final_pass = one;
  final_pass.from_partials = true;  // sums the partials as they are, then the root
  const std::string final_code = reduce_kernel_code(final_pass);
  EXPECT_EQ(final_code.find("kd::widen(x) * "), std::string::npos) << final_code;
  EXPECT_NE(final_code.find("sqrt(a)"), std::string::npos) << final_code;
}

TEST(CudaCodegen, CpuAndGpuHaveKernelsForTheSameDtypesOfEveryOp) {
  // Both backends read detail::op_supports (the op list's dtypes column); this catches a backend that adds
  // its own condition. divide once disagreed: the CPU claimed integer kernels the GPU did not have.
  int supported = 0;
  for (int o = 0; o < detail::kNumOps; ++o)
    for (DType t : kAllTypes) {
      const OpCode op = static_cast<OpCode>(o);
      const bool cpu = cpu_impl::cpu_has_kernel(op, t), gpu = elementwise_op_supported(op, kernel_compute_dtype(t));
      EXPECT_EQ(cpu, gpu) << detail::op_info(op).name << " computing in " << dtype_name(t);
      supported += cpu ? 1 : 0;
    }
  EXPECT_FALSE(elementwise_op_supported(OpCode::Divide, DType::Int32));
  EXPECT_FALSE(cpu_impl::cpu_has_kernel(OpCode::Divide, DType::Int32));
  EXPECT_GT(supported, 300);
}

TEST(CudaCodegen, NamesDescribeTheKernel) {
  ElementwiseSpec a = op_spec(OpCode::Add, DType::Float32, 0);
  EXPECT_EQ(elementwise_kernel_name(a), "kiln_add_f32_f32_cf32_f32_contig_v4_i32");
  ElementwiseSpec c = op_spec(OpCode::Add, DType::Float32, 1);
  EXPECT_EQ(elementwise_kernel_name(c), "kiln_add_f32_sf32_cf32_f32_strided3_u4_i32");
  EXPECT_EQ(reduce_kernel_name(reduce_spec(ReduceOp::Sum, DType::Float32, 0)),
            "kiln_sum_f32_af32_partial_rows_g256_k0_r1_v4_i32");
}

TEST(CudaCodegen, UnsupportedSpecsThrowBeforeNvrtc) {
  ElementwiseSpec sine = op_spec(OpCode::Sin, DType::Float32, 0);
  sine.compute = DType::Int32;
  try {
    (void)elementwise_source(sine);
    FAIL() << "expected DTypeError";
  } catch (const DTypeError& e) {
    EXPECT_NE(std::string(e.what()).find("sin"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("int32"), std::string::npos);
  }
  ElementwiseSpec wide = op_spec(OpCode::Add, DType::Float32, 1);
  wide.ndim = kMaxRank + 1;
  EXPECT_THROW((void)elementwise_source(wide), ValueError);
  ElementwiseSpec odd = op_spec(OpCode::Add, DType::Float32, 0);
  odd.vector_width = 3;
  EXPECT_THROW((void)elementwise_source(odd), ValueError);
  ElementwiseSpec arity = op_spec(OpCode::Add, DType::Float32, 0);
  arity.num_inputs = 1;
  EXPECT_THROW((void)elementwise_source(arity), ValueError);
  ReduceSpec group = reduce_spec(ReduceOp::Sum, DType::Float32, 1);
  group.group = 64;
  try {
    (void)reduce_source(group);
    FAIL() << "expected ValueError";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("group"), std::string::npos);
  }
  ReduceSpec vec = reduce_spec(ReduceOp::Sum, DType::Float32, 2);  // two reduced axes cannot be vectorised
  vec.vector_width = 4;
  EXPECT_THROW((void)reduce_source(vec), ValueError);
}

TEST(CudaCodegen, HeavyOpsAreNotUnrolledIntoVectors) {
  EXPECT_TRUE(elementwise_vectorizable(OpCode::Add, DType::Float32));
  EXPECT_TRUE(elementwise_vectorizable(OpCode::Exp, DType::Float32));
  EXPECT_TRUE(elementwise_vectorizable(OpCode::FloorDivide, DType::Int32));
  EXPECT_FALSE(elementwise_vectorizable(OpCode::FloorDivide, DType::Float32));
  EXPECT_FALSE(elementwise_vectorizable(OpCode::Tan, DType::Float32));
  EXPECT_FALSE(elementwise_vectorizable(OpCode::Exp, DType::Float64));
}

}  // namespace

#endif  // KILN_WITH_CUDA
