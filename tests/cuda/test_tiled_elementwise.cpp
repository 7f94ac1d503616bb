// The tiled elementwise path (an input transposed relative to the output, staged through shared-memory tiles)
// and the strided path in vectors (every array dense along the innermost axis, the outer axes strided: a slice,
// an attention layer's heads): the host's choices and Params words against hand-computed values, the generated
// kernels compiled to PTX by NVRTC (no GPU needed), and, on a GPU, results against the CPU backend for
// transposed adds, casts, copies, 3-d permutes, odd sizes, broadcasts, heads and slices.
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

Plan plan_of(const Shape& shape, const std::vector<Array>& arrays) {
  std::vector<const Array*> pointers;
  for (const Array& a : arrays) pointers.push_back(&a);
  Plan plan;
  detail::plan_elementwise(plan, shape, pointers.data(), static_cast<int>(pointers.size()), "test");
  return plan;
}

Array values(const Shape& shape) { return arange(shape_numel(shape), float32, cpu()).reshape(shape); }


/// The specs' kernels compiled by NVRTC into one module's PTX (for sm_90): each is an entry of it, and each name
/// holds `tag`. Returns the PTX.
std::string expect_compiled(const std::vector<ElementwiseSpec>& specs, const std::string& module,
                            const std::string& tag) {
  std::string source = device_prelude();
  for (const ElementwiseSpec& s : specs) source += elementwise_kernel_code(s);
  CompileOptions options;
  options.options = builtin_kernel_options();
  const std::string ptx = compile_ptx(source, module, 90, options);
  for (const ElementwiseSpec& s : specs) {
    const std::string name = elementwise_kernel_name(s);
    EXPECT_NE(ptx.find(".entry " + name + "("), std::string::npos) << name;
    EXPECT_NE(name.find(tag), std::string::npos) << name;
  }
  return ptx;
}

TEST(TiledElementwise, a_transposed_input_is_tiled_along_its_unit_stride) {
  const Shape shape{64, 48};
  Plan p = plan_of(shape, {empty(shape), values({48, 64}).T()});  // input strides (1, 64)
  const TileChoice c = choose_tiles(p);
  EXPECT_EQ(c.axis_a, 1);
  EXPECT_EQ(c.axis_b, 0);
  EXPECT_EQ(c.tiled, 0b10);
  uint64_t words[kTiledWords<4>] = {};
  EXPECT_EQ(tiled_words(p, c, words), 2 * 2);
  // size_a, size_b, tiles_a, tiles_b, tiles; stride_a (out, in); stride_b (out, in); no batch axes.
  const std::vector<uint64_t> expected{48, 64, 2, 2, 4, 1, 64, 48, 1};
  EXPECT_EQ(std::vector<uint64_t>(words, words + 9), expected);
}

TEST(TiledElementwise, a_3d_permute_keeps_the_third_axis_as_a_batch) {
  // in (5, 40, 36) permuted (0, 2, 1): shape (5, 36, 40), strides (1440, 1, 36).
  const Shape shape{5, 36, 40};
  Array in = values({5, 40, 36}).permute({0, 2, 1});
  Plan p = plan_of(shape, {empty(shape), in, values({40}).broadcast_to(shape)});  // plus a broadcast row, read directly
  const TileChoice c = choose_tiles(p);
  EXPECT_EQ(c.axis_a, 2);
  EXPECT_EQ(c.axis_b, 1);
  EXPECT_EQ(c.tiled, 0b010);
  uint32_t words[kTiledWords<4>] = {};
  EXPECT_EQ(tiled_words(p, c, words), 2 * 2 * 5);
  const std::vector<uint32_t> expected{40, 36, 2, 2, 20,  // sizes and tiles
                                       1, 36, 1,          // stride_a: out, in, row
                                       40, 1, 0,          // stride_b
                                       5,                 // batch size
                                       1440, 1440, 0};    // batch strides
  EXPECT_EQ(std::vector<uint32_t>(words, words + expected.size()), expected);
}

TEST(TiledElementwise, no_tiles_when_nothing_is_transposed_or_axes_are_short) {
  const Shape shape{64, 48};
  EXPECT_EQ(choose_tiles(plan_of(shape, {empty(shape), values({48}).broadcast_to(shape)})).tiled, 0);
  EXPECT_EQ(choose_tiles(plan_of(shape, {empty(shape), values({64, 96}).index({Slice(), Slice(0, 48)})})).tiled, 0);
  const Shape thin{64, 3};  // the output's inner axis is too short for a 32-wide tile
  EXPECT_EQ(choose_tiles(plan_of(thin, {empty(thin), values({3, 64}).T()})).tiled, 0);
}

TEST(TiledElementwise, a_transposed_output_is_walked_in_its_memory_order_and_tiled_along_the_input) {
  // The plan orders axes by the output's strides, so a transposed output has unit stride innermost and the
  // C-ordered input is the transposed side: the mirror of a transposed input, tiled the same way.
  const Shape shape{64, 48};
  const Plan p = plan_of(shape, {empty({48, 64}).T(), values(shape)});
  EXPECT_EQ(p.strides[0][p.ndim - 1], 1);
  EXPECT_EQ(choose_tiles(p).tiled, 2);
}

ElementwiseSpec tiled_spec(OpCode op, int num_inputs, DType in, DType out, int tiled, int ndim, bool index64) {
  ElementwiseSpec s;
  s.op = op;
  s.num_inputs = num_inputs;
  s.out = out;
  s.compute = op == OpCode::Identity ? out : in;
  for (int k = 0; k < num_inputs; ++k) s.in[k] = in;
  if (op == OpCode::Where) s.in[0] = DType::Bool;
  s.layout = EwLayout::Tiled;
  s.tiled_inputs = tiled;
  s.ndim = ndim;
  s.index64 = index64;
  return s;
}

TEST(TiledElementwise, generated_kernels_compile_to_ptx) {
  std::vector<ElementwiseSpec> specs{
      tiled_spec(OpCode::Add, 2, DType::Float32, DType::Float32, 0b01, 2, false),
      tiled_spec(OpCode::Add, 2, DType::Float32, DType::Float32, 0b11, 3, true),
      tiled_spec(OpCode::Multiply, 2, DType::Float16, DType::Float16, 0b10, 4, false),
      tiled_spec(OpCode::Identity, 1, DType::Float64, DType::BFloat16, 0b1, 2, false),
      tiled_spec(OpCode::Where, 3, DType::Int64, DType::Int64, 0b101, 2, false),
  };
  ElementwiseSpec scalar = tiled_spec(OpCode::Add, 2, DType::Float32, DType::Float32, 0b01, 2, false);
  scalar.scalar[1] = true;
  specs.push_back(scalar);
  ElementwiseSpec copy = tiled_spec(OpCode::Identity, 1, DType::Int8, DType::Int8, 0b1, 2, false);
  copy.raw_copy = true;
  specs.push_back(copy);
  const std::string ptx = expect_compiled(specs, "tiled_test", "_tiled");
  EXPECT_NE(ptx.find(".shared"), std::string::npos);
}

TEST(TiledElementwise, names_and_specs_tell_tiled_kernels_apart) {
  const ElementwiseSpec a = tiled_spec(OpCode::Add, 2, DType::Float32, DType::Float32, 0b01, 2, false);
  ElementwiseSpec b = a;
  b.tiled_inputs = 0b11;
  ElementwiseSpec c = a;
  c.ndim = 3;
  ElementwiseSpec strided = a;
  strided.layout = EwLayout::Strided;
  strided.tiled_inputs = 0;
  EXPECT_EQ(elementwise_kernel_name(a), "kiln_add_f32_f32_cf32_f32_tiled2_t1_i32");
  EXPECT_NE(elementwise_kernel_name(a), elementwise_kernel_name(b));
  EXPECT_NE(elementwise_kernel_name(a), elementwise_kernel_name(c));
  EXPECT_NE(a, b);  // whole-spec keys: different specs, different kernel-table entries
  EXPECT_NE(a, c);
  EXPECT_NE(a, strided);
  ElementwiseSpec none = a;
  none.tiled_inputs = 0;
  EXPECT_THROW((void)elementwise_source(none), ValueError);
  ElementwiseSpec flat = a;
  flat.ndim = 1;
  EXPECT_THROW((void)elementwise_source(flat), ValueError);
}

/// Expects `gpu` to hold exactly the values of `cpu` (same dtype and shape).
void expect_same(const Array& cpu, const Array& gpu, const std::string& what) {
  ASSERT_EQ(cpu.dtype(), gpu.dtype()) << what;
  ASSERT_EQ(cpu.shape(), gpu.shape()) << what;
  EXPECT_EQ(cpu.to_vector<double>(), gpu.to(kiln::cpu()).to_vector<double>()) << what;
}

TEST(TiledElementwise, transposed_operands_match_the_cpu_on_gpu) {
  KILN_REQUIRE_GPU();
  const Device g = gpu(0);
  for (const Shape& s : {Shape{64, 64}, Shape{33, 65}, Shape{1000, 17}, Shape{17, 1000}, Shape{257, 129}}) {
    const std::string tag = shape_str(s);
    Array m = random::normal(s, float32, cpu());
    Array mg = m.to(g);
    expect_same(add(m.T(), 1), add(mg.T(), 1), "add(m.T(), 1) " + tag);
    expect_same(m.T().astype(float16), mg.T().astype(float16), "cast " + tag);
    expect_same(m.T().astype(int32), mg.T().astype(int32), "cast to int32 " + tag);
    expect_same(m.T().contiguous(), mg.T().contiguous(), "copy " + tag);
    Array other = random::normal({s[1], s[0]}, float32, cpu());
    expect_same(m.T() * other, mg.T() * other.to(g), "multiply " + tag);
    expect_same(other + m.T(), other.to(g) + mg.T(), "transposed second operand " + tag);
    Array row = random::normal({s[0]}, float32, cpu());
    expect_same(m.T() - row, mg.T() - row.to(g), "broadcast row " + tag);
    expect_same(where(m.T() > 0, m.T(), other), where(mg.T() > 0, mg.T(), other.to(g)), "where " + tag);
  }
}

TEST(TiledElementwise, permuted_3d_and_4d_operands_match_the_cpu_on_gpu) {
  KILN_REQUIRE_GPU();
  const Device g = gpu(0);
  Array x = random::normal({7, 45, 38}, float64, cpu());
  Array xg = x.to(g);
  for (const Shape& perm : {Shape{0, 2, 1}, Shape{2, 1, 0}, Shape{1, 2, 0}, Shape{2, 0, 1}}) {
    const std::string tag = shape_str(perm);
    expect_same(x.permute(perm).contiguous(), xg.permute(perm).contiguous(), "permute copy " + tag);
    expect_same(x.permute(perm) * 2.0 + 1.0, xg.permute(perm) * 2.0 + 1.0, "arithmetic " + tag);
    expect_same(x.permute(perm).astype(float32), xg.permute(perm).astype(float32), "cast " + tag);
  }
  Array y = random::normal({3, 40, 5, 36}, float32, cpu());
  expect_same(y.permute({0, 3, 2, 1}) + 2.5f, y.to(g).permute({0, 3, 2, 1}) + 2.5f, "4-d permute");
  // A reversed, transposed input (negative strides) through the tile.
  Array base = random::normal({50, 70}, float32, cpu());
  Array r = base.index({Slice({}, {}, -1)}).T(), rg = base.to(g).index({Slice({}, {}, -1)}).T();
  expect_same(r * 3.0f, rg * 3.0f, "reversed transposed");
}

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
  (void)expect_compiled(specs, "strided_vectors_test", "_v");
  for (const ElementwiseSpec& s : specs)
    EXPECT_NE(elementwise_kernel_name(s).find("_v" + std::to_string(s.vector_width)), std::string::npos);
  ElementwiseSpec plain = specs[0];
  plain.vector_width = 1;
  EXPECT_NE(elementwise_kernel_name(plain), elementwise_kernel_name(specs[0]));
  EXPECT_NE(plain, specs[0]);
  EXPECT_NE(elementwise_kernel_code(specs[0]).find("reinterpret_cast<const uint4*>(in0)[o1]"), std::string::npos);
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
