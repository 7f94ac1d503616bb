// The generated complex kernels, without a GPU: every elementwise op the op list allows on complex64 and
// complex128, in each layout (contiguous with and without vectors, strided, tiled, scalar operands), every cast
// between a complex dtype and every other dtype, and the complex reductions compile with NVRTC to PTX.
#ifdef KILN_WITH_CUDA

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/op_table.hpp"
#include "cuda/codegen.hpp"
#include "cuda/compiler.hpp"
#include "cuda/device_functions.hpp"
#include "cuda/matmul.hpp"
#include "kiln/dtype.hpp"
#include "kiln/error.hpp"

using namespace kiln;
using namespace kiln::cuda_impl;

namespace {

/// Compiles the kernels of `specs` in one program (sm_90) and checks every entry is in the PTX.
void expect_elementwise_compiles(const std::vector<ElementwiseSpec>& specs) {
  std::string source = device_prelude();
  for (const ElementwiseSpec& spec : specs) source += elementwise_kernel_code(spec);
  CompileOptions options;
  options.options = builtin_kernel_options();
  std::string ptx;
  ASSERT_NO_THROW(ptx = compile_ptx(source, "complex_test", 90, options));
  for (const ElementwiseSpec& spec : specs)
    EXPECT_NE(ptx.find(".entry " + elementwise_kernel_name(spec) + "("), std::string::npos)
        << elementwise_kernel_name(spec);
}

ElementwiseSpec op_spec(detail::OpCode op, DType compute) {
  ElementwiseSpec spec;
  spec.op = op;
  spec.num_inputs = detail::op_info(op).arity;
  spec.compute = compute;
  spec.out = detail::returns_bool(op) ? DType::Bool : detail::returns_real(op) ? real_dtype(compute) : compute;
  for (int k = 0; k < spec.num_inputs; ++k) spec.in[k] = op == detail::OpCode::Where && k == 0 ? DType::Bool : compute;
  return spec;
}

}  // namespace

TEST(ComplexKernels, EveryComplexOpCompilesInEveryLayout) {
  for (DType c : {DType::Complex64, DType::Complex128}) {
    std::vector<ElementwiseSpec> specs;
    for (int i = 0; i < detail::kNumOps; ++i) {
      const auto op = static_cast<detail::OpCode>(i);
      if (detail::op_info(op).arity == 0 || !detail::op_supports(op, c)) continue;
      EXPECT_TRUE(elementwise_op_supported(op, c)) << detail::op_info(op).name;
      ElementwiseSpec spec = op_spec(op, c);
      spec.vector_width = c == DType::Complex64 ? 2 : 1;
      specs.push_back(spec);
      spec.vector_width = 1;
      spec.scalar[spec.num_inputs - 1] = true;  // the last operand a kernel argument
      specs.push_back(spec);
      spec = op_spec(op, c);
      spec.layout = EwLayout::Strided;
      spec.ndim = 3;
      spec.unroll = 4;
      specs.push_back(spec);
      spec.layout = EwLayout::Tiled;
      spec.tiled_inputs = 1;
      specs.push_back(spec);
    }
    EXPECT_GE(specs.size(), 4u * 20u);
    expect_elementwise_compiles(specs);
  }
}

TEST(ComplexKernels, CastsBetweenComplexAndEveryDtypeCompile) {
  std::vector<ElementwiseSpec> specs;
  for (int s = 0; s < kNumDTypes; ++s) {
    for (int t = 0; t < kNumDTypes; ++t) {
      const DType from = static_cast<DType>(s), to = static_cast<DType>(t);
      if (!is_complex(from) && !is_complex(to)) continue;
      ElementwiseSpec spec;
      spec.op = detail::OpCode::Identity;
      spec.num_inputs = 1;
      spec.in[0] = from;
      spec.out = to;
      spec.compute = to;
      spec.raw_copy = from == to;
      spec.layout = EwLayout::Strided;
      spec.ndim = 2;
      specs.push_back(spec);
    }
  }
  EXPECT_EQ(specs.size(), 2u * 2u * kNumDTypes - 4u);
  expect_elementwise_compiles(specs);
}

TEST(ComplexKernels, SumAndProdCompileInEveryReductionLayout) {
  std::string source = device_prelude();
  std::vector<std::string> names;
  for (DType c : {DType::Complex64, DType::Complex128}) {
    for (detail::ReduceOp op : {detail::ReduceOp::Sum, detail::ReduceOp::Prod}) {
      ReduceSpec spec;
      spec.op = op;
      spec.in = c;
      spec.out = c;
      spec.acc = reduce_accumulator_dtype(op, c, c);
      EXPECT_EQ(spec.acc, DType::Complex128);  // as the CPU's complex accumulators
      std::vector<ReduceSpec> shapes;
      spec.vector_width = c == DType::Complex64 ? 2 : 1;  // rows, vector loads, warp combine
      shapes.push_back(spec);
      spec.vector_width = 1;
      spec.group = kBlockSize;
      spec.kept_ndim = 2;
      spec.to_partials = true;  // rows, block combine, a split's first pass
      shapes.push_back(spec);
      spec.to_partials = false;
      spec.from_partials = true;  // the split's second pass
      shapes.push_back(spec);
      spec.from_partials = false;
      spec.layout = ReduceLayout::Columns;
      spec.reduced_ndim = 2;
      shapes.push_back(spec);
      for (const ReduceSpec& shape : shapes) {
        source += reduce_kernel_code(shape);
        names.push_back(reduce_kernel_name(shape));
      }
    }
  }
  CompileOptions options;
  options.options = builtin_kernel_options();
  std::string ptx;
  ASSERT_NO_THROW(ptx = compile_ptx(source, "complex_reduce_test", 90, options));
  for (const std::string& name : names) EXPECT_NE(ptx.find(".entry " + name + "("), std::string::npos) << name;
}

TEST(ComplexKernels, MatmulFallbackCompiles) {
  CompileOptions options;
  options.options = builtin_kernel_options();
  for (DType c : {DType::Complex64, DType::Complex128}) {
    std::string ptx;
    ASSERT_NO_THROW(ptx = compile_ptx(matmul_fallback_source(c), matmul_fallback_kernel_name(c), 90, options));
    EXPECT_NE(ptx.find(".entry " + matmul_fallback_kernel_name(c) + "("), std::string::npos);
  }
}

TEST(ComplexKernels, OpsTheListRefusesOnComplexHaveNoGpuKernel) {
  for (detail::OpCode op : {detail::OpCode::Less, detail::OpCode::Maximum, detail::OpCode::Floor,
                            detail::OpCode::Remainder, detail::OpCode::Sign, detail::OpCode::Arctan2}) {
    EXPECT_FALSE(elementwise_op_supported(op, DType::Complex64)) << detail::op_info(op).name;
    EXPECT_THROW((void)elementwise_kernel_code(op_spec(op, DType::Complex64)), DTypeError);
  }
}

#endif  // KILN_WITH_CUDA
