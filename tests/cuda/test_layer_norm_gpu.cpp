// kiln's one-pass layer-norm backward (src/cuda/layer_norm.cpp, layer_norm_backward's GPU engine): its source
// compiles for every variant the launcher picks (no GPU needed), and on a GPU its gradients equal the CPU's
// composed path and a float64 reference to float32 rounding, for GPT-2's 768 columns, columns that are no
// multiple of the 4-float runs, a single row, 16384 rows, an operand one element off its allocation's start, no
// weight, and every subset of the gradients; the same inputs give the same bits on a second run.
#include <gtest/gtest.h>

#ifdef KILN_WITH_CUDA

#include <string>
#include <vector>

#include "cuda/codegen.hpp"
#include "cuda/compiler.hpp"
#include "cuda/ops.hpp"
#include "kiln/kiln.hpp"
#include "kiln/nn.hpp"
#include "test_util.hpp"

namespace kiln {
namespace {

TEST(LayerNormCodegen, KernelsCompileForEveryVariant) {
  // (run width, runs a lane, rows kept): 768 columns in 4-float runs, 771 in single floats, 2048 both ways.
  struct Variant {
    int vector, chunks;
    bool keep;
  };
  cuda_impl::CompileOptions options;
  options.options = cuda_impl::builtin_kernel_options();
  for (const Variant v :
       {Variant{4, 6, true}, Variant{1, 25, true}, Variant{4, 16, false}, Variant{1, 64, false}, Variant{4, 1, true}}) {
    const std::string ptx =
        cuda_impl::compile_ptx(cuda_impl::layer_norm_source(v.vector, v.chunks, v.keep), "ln_test", 90, options);
    for (const char* kernel : {"ln_backward_rows", "ln_backward_finish"})
      EXPECT_NE(ptx.find(std::string(".entry ") + kernel + "("), std::string::npos)
          << kernel << " vector " << v.vector << " chunks " << v.chunks << " keep " << v.keep;
  }
}

/// |a - b| / (1 + |b|) at its worst, as the other GPU-against-CPU layer tests compare.
double max_rel_diff(const Array& a, const Array& b) {
  const std::vector<double> x = a.to(cpu()).to_vector<double>(), y = b.to(cpu()).to_vector<double>();
  EXPECT_EQ(x.size(), y.size());
  double worst = 0;
  for (size_t i = 0; i < x.size() && i < y.size(); ++i)
    worst = std::max(worst, std::abs(x[i] - y[i]) / (1 + std::abs(y[i])));
  return worst;
}

/// The largest error of `got` relative to the largest magnitude of float64 `want`.
double scaled_error(const Array& got, const Array& want) {
  const double scale = std::max(max(abs(want)).item<double>(), 1e-30);
  return max(abs(got.to(cpu()).astype(float64) - want)).item<double>() / scale;
}

bool same_bits(const Array& a, const Array& b) {
  if (a.defined() != b.defined()) return false;
  return !a.defined() || a.to(cpu()).to_vector<float>() == b.to(cpu()).to_vector<float>();
}

/// One problem: x, g (M, D), w (D,) float32 on the CPU, and each row's mean and rstd (M, 1) as the forward gives
/// them (float32), with the float64 gradients they imply.
struct Problem {
  Array x, g, w, mu, rstd;
  Array dx64, dw64, db64;
};

Problem make_problem(int64_t m, int64_t d, uint64_t seed) {
  random::seed(seed);
  Problem p;
  p.x = random::normal({m, d}, 0.5, 2.0, float32, cpu());
  p.g = random::normal({m, d}, 0.0, 1.0, float32, cpu());
  p.w = random::normal({d}, 1.0, 0.2, float32, cpu());
  const Array x64 = p.x.astype(float64), g64 = p.g.astype(float64), w64 = p.w.astype(float64);
  const Array mu64 = mean(x64, 1, true);
  const Array rstd64 = 1.0 / sqrt(mean(square(x64 - mu64), 1, true) + 1e-5);
  p.mu = mu64.astype(float32);
  p.rstd = rstd64.astype(float32);
  // The reference from the float32 statistics both engines are given.
  const Array xhat = (x64 - p.mu.astype(float64)) * p.rstd.astype(float64), gw = g64 * w64;
  p.dx64 = (gw - mean(gw, 1, true) - xhat * mean(gw * xhat, 1, true)) * p.rstd.astype(float64);
  p.dw64 = sum(g64 * xhat, 0);
  p.db64 = sum(g64, 0);
  return p;
}

/// `a` (CPU) on the GPU, one element past an aligned start when `offset` (no 16-byte runs then).
Array on_gpu(const Array& a, bool offset = false) {
  const Array g = a.to(gpu(0));
  if (!offset) return g;
  Array flat = zeros({a.size() + 1}, a.dtype(), gpu(0));
  flat.slice(0, 1, std::nullopt).assign(g.flatten());
  return flat.slice(0, 1, std::nullopt).reshape(a.shape());
}

void expect_close(const LayerNormGrads& gpu_grads, const LayerNormGrads& cpu_grads, const Problem& p,
                  LayerNormWanted wanted, const std::string& what) {
  ASSERT_EQ(gpu_grads.input.defined(), wanted.input) << what;
  ASSERT_EQ(gpu_grads.weight.defined(), wanted.weight) << what;
  ASSERT_EQ(gpu_grads.bias.defined(), wanted.bias) << what;
  if (wanted.input) {
    EXPECT_EQ(gpu_grads.input.shape(), p.x.shape()) << what;
    EXPECT_LT(max_rel_diff(gpu_grads.input, cpu_grads.input), 1e-4) << what;
    EXPECT_LT(scaled_error(gpu_grads.input, p.dx64), 1e-5) << what;
  }
  if (wanted.weight) {
    EXPECT_EQ(gpu_grads.weight.shape(), p.w.shape()) << what;
    EXPECT_LT(max_rel_diff(gpu_grads.weight, cpu_grads.weight), 1e-4) << what;
    EXPECT_LT(scaled_error(gpu_grads.weight, p.dw64), 1e-5) << what;
  }
  if (wanted.bias) {
    EXPECT_LT(max_rel_diff(gpu_grads.bias, cpu_grads.bias), 1e-4) << what;
    EXPECT_LT(scaled_error(gpu_grads.bias, p.db64), 1e-5) << what;
  }
}

TEST(LayerNormGpu, OnePassBackwardEqualsTheCpuAndFloat64ForEveryShapeAndSubset) {
  KILN_REQUIRE_GPU();
  struct Shape2 {
    int64_t m, d;
  };
  // GPT-2's rows; columns no multiple of 4; one row; fewer rows than a block's warps; the widest kept and the
  // widest reread rows; a width past the kernel's limit (the composed path).
  const std::vector<Shape2> shapes = {{512, 768},  {37, 771},  {1, 768},  {5, 4},   {3, 1},
                                      {300, 1024}, {70, 2048}, {9, 2047}, {6, 2049}};
  const std::vector<LayerNormWanted> subsets = {{true, true, true},   {true, false, false}, {false, true, false},
                                                {false, false, true}, {false, true, true},  {true, true, false}};
  uint64_t seed = 1;
  for (const Shape2 s : shapes) {
    const Problem p = make_problem(s.m, s.d, seed++);
    const Array x = on_gpu(p.x), g = on_gpu(p.g), w = on_gpu(p.w), mu = on_gpu(p.mu), rstd = on_gpu(p.rstd);
    for (const LayerNormWanted wanted : subsets) {
      const std::string what = std::to_string(s.m) + "x" + std::to_string(s.d) + " wanted " +
                               std::to_string(wanted.input) + std::to_string(wanted.weight) +
                               std::to_string(wanted.bias);
      const LayerNormGrads on_gpu_grads = layer_norm_backward(g, x, w, mu, rstd, wanted);
      const LayerNormGrads on_cpu = layer_norm_backward(p.g, p.x, p.w, p.mu, p.rstd, wanted);
      expect_close(on_gpu_grads, on_cpu, p, wanted, what);
      const LayerNormGrads again = layer_norm_backward(g, x, w, mu, rstd, wanted);
      EXPECT_TRUE(same_bits(on_gpu_grads.input, again.input)) << what;
      EXPECT_TRUE(same_bits(on_gpu_grads.weight, again.weight)) << what;
      EXPECT_TRUE(same_bits(on_gpu_grads.bias, again.bias)) << what;
    }
  }
}

TEST(LayerNormGpu, GptSizedRowsAreDeterministicAndMatchTheCpu) {
  KILN_REQUIRE_GPU();
  const Problem p = make_problem(16384, 768, 7);  // GPT-2 124M's batch of 16 x 1024 tokens
  const Array x = on_gpu(p.x), g = on_gpu(p.g), w = on_gpu(p.w), mu = on_gpu(p.mu), rstd = on_gpu(p.rstd);
  const LayerNormGrads first = layer_norm_backward(g, x, w, mu, rstd);
  const LayerNormGrads on_cpu = layer_norm_backward(p.g, p.x, p.w, p.mu, p.rstd);
  expect_close(first, on_cpu, p, {}, "16384x768");
  for (int run = 0; run < 3; ++run) {
    const LayerNormGrads again = layer_norm_backward(g, x, w, mu, rstd);
    EXPECT_TRUE(same_bits(first.input, again.input)) << run;
    EXPECT_TRUE(same_bits(first.weight, again.weight)) << run;
    EXPECT_TRUE(same_bits(first.bias, again.bias)) << run;
  }
}

TEST(LayerNormGpu, UnalignedOperandsAndNoWeightTakeTheNarrowRuns) {
  KILN_REQUIRE_GPU();
  const Problem p = make_problem(129, 768, 11);
  // x and g one float off a 16-byte boundary: the kernel reads single floats.
  const Array x = on_gpu(p.x, true), g = on_gpu(p.g, true), w = on_gpu(p.w), mu = on_gpu(p.mu), rstd = on_gpu(p.rstd);
  ASSERT_NE(reinterpret_cast<uintptr_t>(x.data_ptr()) % 16, 0u);
  const LayerNormGrads on_gpu_grads = layer_norm_backward(g, x, w, mu, rstd);
  expect_close(on_gpu_grads, layer_norm_backward(p.g, p.x, p.w, p.mu, p.rstd), p, {}, "unaligned");
  // No weight (an unaffine LayerNorm): the input's gradient with w = 1.
  const LayerNormWanted input_only{true, false, false};
  const LayerNormGrads unweighted = layer_norm_backward(g, x, Array(), mu, rstd, input_only);
  const LayerNormGrads unweighted_cpu = layer_norm_backward(p.g, p.x, Array(), p.mu, p.rstd, input_only);
  ASSERT_TRUE(unweighted.input.defined());
  EXPECT_FALSE(unweighted.weight.defined());
  EXPECT_LT(max_rel_diff(unweighted.input, unweighted_cpu.input), 1e-4);
  EXPECT_THROW((void)layer_norm_backward(g, x, Array(), mu, rstd), ValueError);
}

TEST(LayerNormGpu, ModuleGradientsWithAFrozenWeightOrBiasEqualTheCpus) {
  KILN_REQUIRE_GPU();
  const Device dev = gpu(0);
  const int64_t n = 257, d = 771;
  const Array host = random::normal({n, d}, 0.5, 2.0, float32, cpu());
  const Array upstream = random::normal({n, d}, 0.0, 1.0, float32, cpu());
  for (int frozen = 0; frozen < 3; ++frozen) {  // nothing, the weight, the bias
    nn::LayerNorm on_gpu_ln({d}, 1e-5, true, float32, dev), on_cpu_ln({d}, 1e-5, true, float32, cpu());
    for (nn::LayerNorm* ln : {&on_gpu_ln, &on_cpu_ln}) {
      if (frozen == 1) ln->parameter("weight").set_requires_grad(false);
      if (frozen == 2) ln->parameter("bias").set_requires_grad(false);
    }
    Array xg = host.to(dev), xc = host;
    xg.set_requires_grad(true);
    xc.set_requires_grad(true);
    (on_gpu_ln(xg) * upstream.to(dev)).sum().backward();
    (on_cpu_ln(xc) * upstream).sum().backward();
    const std::string what = "frozen " + std::to_string(frozen);
    EXPECT_LT(max_rel_diff(xg.grad(), xc.grad()), 1e-4) << what;
    for (const char* name : {"weight", "bias"}) {
      const Array& pg = on_gpu_ln.parameter(name);
      const Array& pc = on_cpu_ln.parameter(name);
      ASSERT_EQ(pg.grad().defined(), pc.grad().defined()) << what << " " << name;
      if (pg.grad().defined()) {
        EXPECT_LT(max_rel_diff(pg.grad(), pc.grad()), 1e-4) << what << " " << name;
      }
    }
  }
}

}  // namespace
}  // namespace kiln

#endif  // KILN_WITH_CUDA
