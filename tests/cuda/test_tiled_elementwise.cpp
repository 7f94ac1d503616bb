// The tiled elementwise path (an input transposed relative to the output, staged through shared-memory tiles):
// the host's choice and Params words against hand-computed values, the generated kernels compiled to PTX by
// NVRTC (no GPU needed), and, on a GPU, results against the CPU backend for transposed adds, casts, copies,
// 3-d permutes, odd sizes and broadcasts.
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
  std::string source = device_prelude();
  for (const ElementwiseSpec& s : specs) source += elementwise_kernel_code(s);
  CompileOptions options;
  options.options = builtin_kernel_options();
  const std::string ptx = compile_ptx(source, "tiled_test", 90, options);
  for (const ElementwiseSpec& s : specs) {
    const std::string name = elementwise_kernel_name(s);
    EXPECT_NE(ptx.find(".entry " + name + "("), std::string::npos) << name;
    EXPECT_NE(name.find("_tiled"), std::string::npos) << name;
  }
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

}  // namespace

#endif  // KILN_WITH_CUDA
