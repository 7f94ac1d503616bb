// The layers GPT-2's step leans on run as fused kernels on the GPU: cross entropy over 50304 classes,
// LayerNorm forward and backward, and the activations' backward (GELU's tanh form: one kernel, not a dozen), allocate no (rows, columns) temporaries beyond their results (a graph that
// fell back to op-by-op execution would: float64 copies of the logits, centred rows, squares), and equal the
// CPU's results. Skipped without a GPU.
#ifdef KILN_WITH_CUDA

#include <gtest/gtest.h>

#include "kiln/cuda.hpp"
#include "kiln/kiln.hpp"
#include "kiln/nn.hpp"
#include "test_util.hpp"

using namespace kiln;

namespace {

double max_rel_diff(const Array& a, const Array& b) {
  const std::vector<double> x = a.to(cpu()).to_vector<double>(), y = b.to(cpu()).to_vector<double>();
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) worst = std::max(worst, std::abs(x[i] - y[i]) / (1 + std::abs(y[i])));
  return worst;
}

TEST(FusedLayersGpu, cross_entropy_over_50304_classes_makes_no_logit_sized_temporaries) {
  KILN_REQUIRE_GPU();
  const Device g = gpu(0);
  const int64_t n = 2048, c = 50304;
  const Array host = random::normal({n, c}, 0.0, 3.0, float32, cpu());
  const Array labels = random::randint(0, c, {n}, int64, cpu());
  Array x = host.to(g);
  x.set_requires_grad(true);
  synchronize(g);
  const size_t before = cuda::memory_stats(g).allocated;
  cuda::reset_peak_memory_stats(g);
  Array loss = nn::cross_entropy(x, labels.to(g));
  loss.backward();
  synchronize(g);
  const size_t logits = static_cast<size_t>(n * c) * 4;
  // The gradient (one logits-sized array) and small per-row arrays; op by op would add float64 copies.
  EXPECT_LT(cuda::memory_stats(g).peak_allocated - before, logits + logits / 4);
  Array xc = host;
  xc.set_requires_grad(true);
  Array lc = nn::cross_entropy(xc, labels);
  lc.backward();
  EXPECT_LT(max_rel_diff(loss, lc), 1e-6);
  EXPECT_LT(max_rel_diff(x.grad(), xc.grad()), 1e-6);
}

// Under autocast, bfloat16 logits are read as they are and widened inside the kernels: no float32 copy of the
// logits (2x their size) and no float32 gradient (2x again) before the cast's backward rounds it.
TEST(FusedLayersGpu, autocast_cross_entropy_of_bfloat16_logits_makes_no_float32_copy) {
  KILN_REQUIRE_GPU();
  const Device g = gpu(0);
  const int64_t n = 2048, c = 50304;
  const Array host = random::normal({n, c}, 0.0, 3.0, float32, cpu()).astype(bfloat16);
  const Array labels = random::randint(0, c, {n}, int64, cpu());
  for (double ls : {0.0, 0.1}) {
    Array x = host.to(g);
    x.set_requires_grad(true);
    const Array lg = labels.to(g);
    synchronize(g);
    const size_t before = cuda::memory_stats(g).allocated;
    cuda::reset_peak_memory_stats(g);
    Array loss;
    {
      AutocastGuard amp(bfloat16);
      loss = nn::cross_entropy(x, lg, nn::Reduction::Mean, ls);
    }
    loss.backward();
    synchronize(g);
    const size_t logits = static_cast<size_t>(n * c) * 2;
    EXPECT_EQ(x.grad().dtype(), bfloat16);
    // The bfloat16 gradient and per-row arrays; the float32 path held 4x the logits' bytes at its peak.
    EXPECT_LT(cuda::memory_stats(g).peak_allocated - before, logits + logits / 4) << "ls " << ls;
    Array xc = host;
    xc.set_requires_grad(true);
    Array lc;
    {
      AutocastGuard amp(bfloat16);
      lc = nn::cross_entropy(xc, labels, nn::Reduction::Mean, ls);
    }
    lc.backward();
    EXPECT_LT(max_rel_diff(loss, lc), 1e-6) << "ls " << ls;
    EXPECT_LT(max_rel_diff(x.grad(), xc.grad()), 1e-2) << "ls " << ls;
  }
}

TEST(FusedLayersGpu, layer_norm_forward_and_backward_make_no_row_sized_temporaries) {
  KILN_REQUIRE_GPU();
  const Device g = gpu(0);
  const int64_t n = 8192, d = 768;
  nn::LayerNorm ln_gpu({d}, 1e-5, true, float32, g), ln_cpu({d}, 1e-5, true, float32, cpu());
  const Array w = random::normal({d}, 1.0, 0.1, float32, cpu()), b = random::normal({d}, 0.0, 0.1, float32, cpu());
  {
    NoGradGuard no_grad;
    ln_gpu.parameter("weight").assign(w.to(g));
    ln_gpu.parameter("bias").assign(b.to(g));
    ln_cpu.parameter("weight").assign(w);
    ln_cpu.parameter("bias").assign(b);
  }
  const Array host = random::normal({n, d}, 0.5, 2.0, float32, cpu());
  const Array upstream = random::normal({n, d}, 0.0, 1.0, float32, cpu());
  Array x = host.to(g);
  x.set_requires_grad(true);
  const Array up = upstream.to(g);
  synchronize(g);
  const size_t before = cuda::memory_stats(g).allocated;
  cuda::reset_peak_memory_stats(g);
  Array y = ln_gpu(x);
  (y * up).sum().backward();
  synchronize(g);
  const size_t bytes = static_cast<size_t>(n * d) * 4;
  // y, y * up, its gradient's broadcast, dx: a few row-sized arrays, not the composed ops' ten.
  EXPECT_LT(cuda::memory_stats(g).peak_allocated - before, 5 * bytes);
  Array xc = host;
  xc.set_requires_grad(true);
  Array yc = ln_cpu(xc);
  (yc * upstream).sum().backward();
  EXPECT_LT(max_rel_diff(y, yc), 1e-5);
  EXPECT_LT(max_rel_diff(x.grad(), xc.grad()), 1e-4);
  EXPECT_LT(max_rel_diff(ln_gpu.parameter("weight").grad(), ln_cpu.parameter("weight").grad()), 1e-4);
  EXPECT_LT(max_rel_diff(ln_gpu.parameter("bias").grad(), ln_cpu.parameter("bias").grad()), 1e-4);
}

TEST(FusedLayersGpu, activation_backward_makes_no_temporaries_of_the_activations_size) {
  KILN_REQUIRE_GPU();
  const Device g = gpu(0);
  const int64_t n = 4096, d = 3072;  // GPT-2's MLP activation of 4 x 1024 tokens
  for (DType t : {float32, bfloat16}) {
    for (const std::string name : {"gelu_tanh", "gelu", "silu", "tanh", "sigmoid"}) {
      auto f = [&](const Array& a) {
        return name == "gelu_tanh" ? gelu_tanh(a)
               : name == "gelu"    ? gelu(a)
               : name == "silu"    ? silu(a)
               : name == "tanh"    ? tanh(a)
                                   : sigmoid(a);
      };
      const Array host = random::normal({n, d}, 0.0, 2.0, float32, cpu()).astype(t);
      const Array upstream = random::normal({n, d}, 0.0, 1.0, float32, cpu()).astype(t);
      Array x = host.to(g);
      x.set_requires_grad(true);
      const Array up = upstream.to(g);
      Array y = f(x);
      synchronize(g);
      const size_t before = cuda::memory_stats(g).allocated;
      cuda::reset_peak_memory_stats(g);
      y.backward(up);
      synchronize(g);
      const size_t bytes = static_cast<size_t>(n * d) * itemsize(t);
      // The gradient itself; the composed formula made ten or so arrays of this size.
      EXPECT_LT(cuda::memory_stats(g).peak_allocated - before, 2 * bytes) << name << " " << dtype_name(t);
      Array xc = host;
      xc.set_requires_grad(true);
      f(xc).backward(upstream);
      EXPECT_LT(max_rel_diff(x.grad(), xc.grad()), t == bfloat16 ? 2e-2 : 1e-5) << name << " " << dtype_name(t);
    }
  }
}

}  // namespace

#endif  // KILN_WITH_CUDA
