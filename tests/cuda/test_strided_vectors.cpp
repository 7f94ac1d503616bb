// The strided elementwise path in vectors (every array operand dense along the innermost axis, outer axes
// strided: a slice, a permutation of the outer axes such as an attention layer's heads): the host's width against
// hand-computed cases, the generated kernels compiled to PTX by NVRTC (no GPU needed), and, on a GPU, results bit
// for bit the CPU backend's.
#ifdef KILN_WITH_CUDA

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/backend.hpp"
#include "cuda/codegen.hpp"
#include "cuda/compiler.hpp"
#include "cuda/device_functions.hpp"
#include "cuda/elementwise_layout.hpp"
#include "test_util.hpp"

using namespace kiln;
using namespace kiln::cuda_impl;
using detail::OpCode;

namespace {

using Plan = detail::ElementwiseIteration<detail::kMaxElementwiseOperands>;

/// The vector width the CUDA backend picks for an elementwise problem of `shape` over `arrays` (output first).
int width_of(const Shape& shape, const std::vector<Array>& arrays) {
  std::vector<const Array*> ptrs;
  std::vector<void*> data;
  for (const Array& a : arrays) {
    ptrs.push_back(&a);
    data.push_back(a.data_ptr());
  }
  Plan plan;
  detail::plan_elementwise(plan, shape, ptrs.data(), static_cast<int>(ptrs.size()), "test");
  if (plan.contiguous) return -1;
  return strided_vector_width(plan, ptrs.data(), data.data(), static_cast<int>(ptrs.size()));
}

TEST(StridedVectors, the_width_follows_the_innermost_axis_its_alignment_and_the_outer_strides) {
  // GPT-2's heads: (B, T, 3C) split into q/k/v and viewed as (B, H, T, D); the gradient added into that slice.
  Array qkv = zeros({2, 16, 3 * 4 * 64}, bfloat16, cpu());
  Array q = qkv.slice(2, 0, 256).reshape({2, 16, 4, 64}).permute({0, 2, 1, 3});
  Array g = zeros({2, 4, 16, 64}, bfloat16, cpu());
  EXPECT_EQ(width_of(q.shape(), {q, q, g}), 8);   // 16 bytes of bfloat16
  Array f = zeros({2, 4, 16, 64}, float32, cpu());
  EXPECT_EQ(width_of(q.shape(), {q, q, f}), 4);   // the widest operand decides
  // The k slice starts 256 elements in: still aligned; a slice starting one element in is not.
  Array k = qkv.slice(2, 256, 512).reshape({2, 16, 4, 64}).permute({0, 2, 1, 3});
  EXPECT_EQ(width_of(k.shape(), {k, k, g}), 8);
  Array off = qkv.slice(2, 1, 257).reshape({2, 16, 4, 64}).permute({0, 2, 1, 3});
  EXPECT_EQ(width_of(off.shape(), {g, off}), 1);
  // An innermost axis of 12: vectors of 4 (12 % 8 != 0); an outer stride of 774 (even, not a multiple of 4): 2.
  Array a = zeros({10, 24}, bfloat16, cpu()).slice(1, 0, 12);
  EXPECT_EQ(width_of(a.shape(), {zeros({10, 12}, bfloat16, cpu()), a}), 4);
  Array b = zeros({10, 774}, bfloat16, cpu()).slice(1, 0, 512);
  EXPECT_EQ(width_of(b.shape(), {zeros({10, 512}, bfloat16, cpu()), b}), 2);
  // A transposed operand (innermost stride not 1) or a broadcast one (stride 0): no vectors.
  Array m = zeros({64, 64}, float32, cpu());
  EXPECT_EQ(width_of({64, 64}, {m.slice(1, 0, 64), m.T()}), 1);
  EXPECT_EQ(width_of({64, 64}, {zeros({64, 128}, float32, cpu()).slice(1, 0, 64), zeros({64, 1}, float32, cpu())}),
            1);
}

ElementwiseSpec strided_spec(OpCode op, int num_inputs, DType in, DType out, int ndim, int width) {
  ElementwiseSpec s;
  s.op = op;
  s.num_inputs = num_inputs;
  s.out = out;
  s.compute = op == OpCode::Identity ? out : in;
  for (int k = 0; k < num_inputs; ++k) s.in[k] = in;
  s.layout = EwLayout::Strided;
  s.ndim = ndim;
  s.vector_width = width;
  s.unroll = contiguous_unroll(num_inputs);
  return s;
}

TEST(StridedVectors, generated_kernels_compile_to_ptx_and_are_named_apart) {
  std::vector<ElementwiseSpec> specs{
      strided_spec(OpCode::Add, 2, DType::BFloat16, DType::BFloat16, 4, 8),
      strided_spec(OpCode::Multiply, 2, DType::Float32, DType::Float32, 2, 4),
      strided_spec(OpCode::Identity, 1, DType::BFloat16, DType::Float32, 3, 4),
      strided_spec(OpCode::Exp, 1, DType::Float64, DType::Float64, 2, 2),
  };
  ElementwiseSpec scalar = strided_spec(OpCode::Add, 2, DType::Float16, DType::Float16, 3, 8);
  scalar.scalar[1] = true;
  specs.push_back(scalar);
  ElementwiseSpec copy = strided_spec(OpCode::Identity, 1, DType::Int8, DType::Int8, 2, 16);
  copy.raw_copy = true;
  specs.push_back(copy);
  std::string source = device_prelude();
  for (const ElementwiseSpec& s : specs) source += elementwise_kernel_code(s);
  CompileOptions options;
  options.options = builtin_kernel_options();
  const std::string ptx = compile_ptx(source, "strided_vectors_test", 90, options);
  for (const ElementwiseSpec& s : specs) {
    const std::string name = elementwise_kernel_name(s);
    EXPECT_NE(ptx.find(".entry " + name + "("), std::string::npos) << name;
    EXPECT_NE(name.find("_v" + std::to_string(s.vector_width)), std::string::npos) << name;
  }
  ElementwiseSpec plain = specs[0];
  plain.vector_width = 1;
  EXPECT_NE(elementwise_kernel_name(plain), elementwise_kernel_name(specs[0]));
  EXPECT_NE(plain, specs[0]);
  EXPECT_NE(elementwise_kernel_code(specs[0]).find("reinterpret_cast<const uint4*>(in0)[o1]"), std::string::npos);
}

/// Expects `gpu` to hold exactly the values of `cpu` (same dtype and shape).
void expect_same(const Array& cpu, const Array& gpu, const std::string& what) {
  ASSERT_EQ(cpu.dtype(), gpu.dtype()) << what;
  ASSERT_EQ(cpu.shape(), gpu.shape()) << what;
  EXPECT_EQ(cpu.to_vector<double>(), gpu.to(kiln::cpu()).to_vector<double>()) << what;
}

TEST(StridedVectors, heads_slices_and_permutes_match_the_cpu_on_gpu) {
  KILN_REQUIRE_GPU();
  const Device d = gpu(0);
  for (DType t : {bfloat16, float16, float32, float64, int32}) {
    const std::string tag(dtype_name(t));
    Array qkv = random::normal({2, 16, 3 * 4 * 64}, float32, cpu()).astype(t), qkv_g = qkv.to(d);
    Array g = random::normal({2, 4, 16, 64}, float32, cpu()).astype(t), g_g = g.to(d);
    for (int64_t start : {0, 256, 1}) {  // q, k, and a view one element past a vector boundary
      const std::string at = tag + " from " + std::to_string(start);
      auto heads = [&](const Array& x) {
        return x.slice(2, start, start + 256).reshape({2, 16, 4, 64}).permute({0, 2, 1, 3});
      };
      expect_same(heads(qkv) + g, heads(qkv_g) + g_g, "add " + at);
      expect_same(heads(qkv) * 3, heads(qkv_g) * 3, "scalar " + at);
      expect_same(heads(qkv).contiguous(), heads(qkv_g).contiguous(), "copy " + at);
      expect_same(heads(qkv).astype(float32), heads(qkv_g).astype(float32), "cast " + at);
      // In place into the strided view (the engine's gradient scatter): add(view, g, out=view).
      Array into = qkv.copy(), into_g = qkv_g.copy();
      Array v = heads(into), vg = heads(into_g);
      add(v, g, v);
      add(vg, g_g, vg);
      expect_same(into, into_g, "in place " + at);
    }
  }
  // Rows of a wide slice with an outer stride of 2 mod 4 elements: vectors of 2.
  Array w = random::normal({33, 1030}, float32, cpu()).astype(bfloat16);
  expect_same(w.slice(1, 2, 1026) * w.slice(1, 4, 1028), w.to(d).slice(1, 2, 1026) * w.to(d).slice(1, 4, 1028),
              "slices of 1030-wide rows");
}

}  // namespace

#endif  // KILN_WITH_CUDA
