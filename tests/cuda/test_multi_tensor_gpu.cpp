// Fused::each on the GPU (multi-tensor kernels). Without a GPU: the tensor-list table fits CUDA's 4 KB of
// kernel parameters for every operand count, and the generated multi-tensor kernels (optimizer updates, a copy,
// one-element broadcast arguments) compile to PTX, where the device source checks the struct's size against the
// host's table. With a GPU: the same bits as the CPU over many tensors of odd sizes (several tables, a tensor
// split across launches), shared 0-d arguments, tensors that are not dense, and few launches per call.
#ifdef KILN_WITH_CUDA

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "core/fusion.hpp"
#include "cuda/compiler.hpp"
#include "cuda/device_functions.hpp"
#include "cuda/elementwise_layout.hpp"
#include "cuda/fusion.hpp"
#include "kiln/cuda.hpp"
#include "kiln/kiln.hpp"
#include "cuda/fuse_codegen_util.hpp"  // tests/cuda
#include "test_util.hpp"

using namespace kiln;
using namespace kiln::cuda_impl;
using kiln_test::expect_compiles;

namespace {

const auto adam_step = [](auto p, auto g, auto m, auto v, auto b1, auto b2, auto step, auto bc2, auto eps) {
  auto m2 = m * b1 + g * (1.0 - b1);
  auto v2 = v * b2 + g * g * (1.0 - b2);
  return std::tuple{p - m2 / (sqrt(v2) / bc2 + eps) * step, m2, v2};
};

FusionKernelSpec multi_spec(uint32_t mask) {
  FusionKernelSpec s;
  s.layout = FusionLayout::MultiTensor;
  s.broadcast_mask = mask;
  return s;
}

std::vector<Array> normal_list(const std::vector<int64_t>& sizes, uint64_t seed, Device d) {
  random::seed(seed);
  std::vector<Array> list;
  for (int64_t n : sizes) list.push_back(random::normal({n}, 0.0, 1.0, float32, cpu()).to(d));
  return list;
}

}  // namespace

// ------------------------------------------------------------------ without a GPU

TEST(MultiTensorCodegen, TheTableFitsTheKernelParametersForEveryOperandCount) {
  for (int operands = 1; operands <= kMaxLayoutOperands; ++operands)
    for (int slots : {0, 9, 40}) {
      const MultiTensorTable t = multi_tensor_table(operands, slots);
      EXPECT_GE(t.tensors, 1);
      EXPECT_LE(t.tensors, 255) << "a block's tensor index is one byte";
      EXPECT_LE(t.bytes + 8 * static_cast<size_t>(slots), 4096u) << operands << " operands, " << slots << " slots";
      EXPECT_EQ(t.sizes, static_cast<size_t>(operands * t.tensors) * 8);
      EXPECT_EQ(t.bytes % 8, 0u);
    }
  // An optimizer's 4 arrays and 9 scalars: dozens of tensors per launch (with every chunk of each).
  const MultiTensorTable adam = multi_tensor_table(7, 9);
  EXPECT_GE(adam.tensors, 30);
}

TEST(MultiTensorCodegen, OptimizerAndCopyKernelsCompile) {
  const auto adam = fuse(adam_step, "adam_multi");
  Array z = zeros({8}, float32, cpu()), one = zeros({}, float32, cpu());
  auto scalars = adam.graph(z, z, z, z, 0.9, 0.999, 0.01, 0.5, 1e-8);
  auto arrays = adam.graph(z, z, z, z, 0.9, 0.999, one, one, 1e-8);  // capturable: the step size on the device
  expect_compiles(*scalars, {multi_spec(0)});
  expect_compiles(*arrays, {multi_spec(0), multi_spec(0b110000), multi_spec(0b010000)});
  const std::string code = fusion_kernel_code(*arrays, multi_spec(0b110000));
  EXPECT_NE(code.find("in4[0]"), std::string::npos) << "a one-element argument reads its element at every index";
  EXPECT_NE(code.find("static_assert(sizeof(TensorList)"), std::string::npos);
  EXPECT_NE(fusion_kernel_name(*arrays, multi_spec(0)), fusion_kernel_name(*arrays, multi_spec(0b110000)));
  const auto copy = fuse([](auto x) { return x; }, "copy_multi");
  for (DType t : {float16, bfloat16, float32, float64})
    expect_compiles(*copy.graph(zeros({4}, t, cpu())), {multi_spec(0)});
}

// ------------------------------------------------------------------ with a GPU

TEST(MultiTensorGpu, EachGivesTheCpusBitsOverManyTensorsAndLaunches) {
  KILN_REQUIRE_GPU();
  const auto adam = fuse(adam_step, "adam_multi");
  // More tensors than one table, a tensor of hundreds of chunks, sizes off the chunk (8192), empty tensors.
  std::vector<int64_t> sizes = {1, 7, 8191, 8192, 8193, 0, 3'000'000};
  for (int i = 0; i < 150; ++i) sizes.push_back(1 + (i * 53) % 977);
  std::vector<std::vector<float>> results[2][3];
  int k = 0;
  for (Device d : {cpu(), gpu(0)}) {
    std::vector<Array> p = normal_list(sizes, 1, d), g = normal_list(sizes, 2, d), m = normal_list(sizes, 3, d),
                       v = normal_list(sizes, 4, d);
    for (Array& x : v) x = square(x);
    const Array step = full({}, 0.01, float32, d), bc2 = full({}, 0.75, float32, d);
    adam.each({p, m, v}, p, g, m, v, 0.9, 0.999, 0.01, 0.5, 1e-8);  // scalars
    adam.each({p, m, v}, p, g, m, v, 0.9, 0.999, step, bc2, 1e-8);  // shared 0-d arrays
    for (size_t i = 0; i < sizes.size(); ++i) {
      results[k][0].push_back(p[i].to_vector<float>());
      results[k][1].push_back(m[i].to_vector<float>());
      results[k][2].push_back(v[i].to_vector<float>());
    }
    ++k;
  }
  for (int out = 0; out < 3; ++out)
    for (size_t i = 0; i < sizes.size(); ++i)
      EXPECT_EQ(results[0][out][i], results[1][out][i]) << "output " << out << ", tensor " << i << " of " << sizes[i];
}

TEST(MultiTensorGpu, TensorsThatAreNotDenseAndChannelsLastMatchTheCpu) {
  KILN_REQUIRE_GPU();
  const auto axpy = fuse([](auto y, auto x, auto a) { return y + x * a; }, "axpy_multi");
  std::vector<float> results[2][3];
  int k = 0;
  for (Device d : {cpu(), gpu(0)}) {
    Array y0 = zeros({3, 4}, float32, d).transpose(), x0 = arange(12, float32).reshape({4, 3}).to(d);
    Array y1 = to_channels_last(ones({2, 3, 2, 2}, float32, d));
    Array x1 = to_channels_last(arange(24, float32).reshape({2, 3, 2, 2}).to(d));
    Array y2 = ones({9000}, float32, d), x2 = arange(9000, float32).to(d);
    std::vector<Array> ys = {y0, y1, y2}, xs = {x0, x1, x2};
    axpy.each({ys}, ys, xs, 0.5);
    for (int i = 0; i < 3; ++i) results[k][i] = ys[static_cast<size_t>(i)].to_vector<float>();
    ++k;
  }
  for (int i = 0; i < 3; ++i) EXPECT_EQ(results[0][i], results[1][i]) << "tensor " << i;
}

TEST(MultiTensorGpu, ManyTensorsAreAFewLaunches) {
  KILN_REQUIRE_GPU();
  const Device d = gpu(0);
  const auto sgd = fuse([](auto p, auto g, auto lr) { return p - g * lr; }, "sgd_multi");
  std::vector<int64_t> sizes(40, 1000);
  std::vector<Array> p = normal_list(sizes, 5, d), g = normal_list(sizes, 6, d);
  sgd.each({p}, p, g, 0.1);  // compiles
  synchronize(d);
  Stream s = Stream::create(d);
  cuda::Graph graph;
  {
    cuda::GraphCapture capture(graph, s);
    sgd.each({p}, p, g, 0.1);
  }
  EXPECT_EQ(graph.num_nodes(), 1u);  // 40 tensors of one block each: one table
}

TEST(MultiTensorGpu, ArraysOnAnotherDeviceThrow) {
  KILN_REQUIRE_GPU();
  const auto sgd = fuse([](auto p, auto g) { return p - g; }, "sgd_devices");
  std::vector<Array> p = {zeros({3}, float32, gpu(0)), zeros({3}, float32, gpu(0))};
  std::vector<Array> g = {zeros({3}, float32, gpu(0)), zeros({3}, float32, cpu())};
  kiln_test::expect_error<DeviceError>([&] { sgd.each({p}, p, g); },
                                       {"fuse(sgd_devices).each", "argument 1 of tensor 1", "once per device"});
}

#endif  // KILN_WITH_CUDA
