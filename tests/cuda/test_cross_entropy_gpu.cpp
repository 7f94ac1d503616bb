// nn::cross_entropy's GPU engine (kiln/cross_entropy.hpp; src/cuda/cross_entropy.cpp): its kernels compile with
// NVRTC for every logit dtype (no GPU needed), its primitives check their operands and decline on the CPU (whose
// results stay the fused graph's), and on a GPU the loss and the logits' gradient equal the CPU's and a float64
// reference (float32 and bfloat16 logits under autocast, with and without label smoothing, rows whose length is
// not a multiple of a vector, very negative and infinite logits), are the same bits on every run, and the
// gradient matches finite differences. The GPU tests skip without a GPU.
#ifdef KILN_WITH_CUDA

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "cuda/codegen.hpp"
#include "cuda/compiler.hpp"
#include "cuda/ops.hpp"
#include "kiln/kiln.hpp"
#include "test_util.hpp"

using namespace kiln;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

TEST(CrossEntropyKernels, CompileWithNvrtcForEveryLogitDtype) {
  cuda_impl::CompileOptions options;
  options.options = cuda_impl::builtin_kernel_options();
  for (DType t : {DType::Float32, DType::BFloat16, DType::Float16}) {
    std::string ptx;
    try {
      ptx = cuda_impl::compile_ptx(cuda_impl::cross_entropy_source(t), "cross_entropy", 90, options);
    } catch (const std::exception& e) {
      ADD_FAILURE() << dtype_name(t) << ": " << e.what();
      continue;
    }
    for (const char* name : {"ce_forward_warp", "ce_forward_block", "ce_backward_warp", "ce_backward_block"})
      EXPECT_NE(ptx.find(".entry " + std::string(name) + "("), std::string::npos) << name << " " << dtype_name(t);
  }
}

TEST(CrossEntropyRows, DeclinesOnTheCpuAndChecksOperands) {
  const Array x = random::normal({4, 10}, 0.0, 1.0, float32, cpu());
  const Array labels = from_data(std::vector<int64_t>{0, 3, 9, 1});
  EXPECT_FALSE(cross_entropy_rows_forward(x, labels).has_value());
  EXPECT_FALSE(cross_entropy_rows_backward(x, labels, zeros({4}, float32, cpu()), ones({4}, float32, cpu())));
  EXPECT_THROW((void)cross_entropy_rows_forward(x.reshape({40}), labels), ShapeError);
  EXPECT_THROW((void)cross_entropy_rows_forward(x, labels.astype(float32)), DTypeError);
  EXPECT_THROW((void)cross_entropy_rows_forward(x, from_data(std::vector<int64_t>{0, 1})), ShapeError);
  EXPECT_THROW((void)cross_entropy_rows_forward(x, labels, 1.5), ValueError);
  EXPECT_THROW((void)cross_entropy_rows_backward(x, labels, zeros({3}, float32, cpu()), ones({4}, float32, cpu())),
               ShapeError);
  Array leaf = x.copy();
  leaf.set_requires_grad(true);
  EXPECT_THROW((void)cross_entropy_rows_forward(leaf, labels), DTypeError);
}

/// Logits (n, c) drawn from N(0, 3) in `dtype`, with edge rows where there are enough: every other logit very
/// negative (masked classes; not the label's), a third of them -inf (not the label's), an increasing ramp (its max
/// grows chunk after chunk), all -inf but the label's, and one +inf.
Array make_logits(int64_t n, int64_t c, DType dtype, const std::vector<int64_t>& labels, bool edges) {
  std::vector<float> v = random::normal({n, c}, 0.0, 3.0, float32, cpu()).to_vector<float>();
  const auto row = [&](int64_t r) { return v.begin() + r * c; };
  if (edges && n >= 6) {
    for (int64_t j = 0; j < c; j += 2)
      if (j != labels[1]) row(1)[j] = -1e30f;
    for (int64_t j = 0; j < c; j += 3)
      if (j != labels[2]) row(2)[j] = -kInf;
    for (int64_t j = 0; j < c; ++j) row(3)[j] = static_cast<float>(j) * (20.0f / static_cast<float>(c)) - 10.0f;
    for (int64_t j = 0; j < c; ++j) row(4)[j] = j == labels[4] ? 1.5f : -kInf;
    row(5)[(labels[5] + 1) % c] = kInf;
  }
  return from_data(v, Shape{n, c}).astype(dtype);
}

struct Result {
  Array loss, grad;  // on the CPU
};

/// nn::cross_entropy (per row) of `host` on `device`, bfloat16/float16 logits under autocast, and the logits'
/// gradient of sum(loss * w) (each row its own upstream gradient) or, without w, of the mean (one value
/// broadcast over the rows).
Result run(const Array& host, const Array& labels, const Array& w, double ls, Device device) {
  Array x = host.to(device);
  x.set_requires_grad(true);
  Array loss;
  {
    AutocastGuard amp(host.dtype() == float32 ? std::nullopt : std::optional<DType>(host.dtype()));
    loss = nn::cross_entropy(x, labels.to(device), nn::Reduction::None, ls);
  }
  Array total = w.defined() ? sum(loss * w.to(device)) : mean(loss);
  total.backward();
  return {loss.to(cpu()), x.grad().to(cpu())};
}

/// The float64 reference of run(): the logits as their dtype holds them, widened exactly.
Result reference(const Array& host, const std::vector<int64_t>& labels, const Array& w, double ls) {
  const int64_t n = host.shape(0), c = host.shape(1);
  const std::vector<double> x = host.astype(float64).to_vector<double>();
  const std::vector<double> g =
      w.defined() ? w.astype(float64).to_vector<double>() : std::vector<double>(n, 1.0 / static_cast<double>(n));
  std::vector<double> loss(n), grad(n * c);
  for (int64_t i = 0; i < n; ++i) {
    const double* r = x.data() + i * c;
    double m = -INFINITY, s = 0, t = 0;
    for (int64_t j = 0; j < c; ++j) m = std::max(m, r[j]);
    const double shift = std::isfinite(m) ? m : 0.0;
    for (int64_t j = 0; j < c; ++j) s += std::exp(r[j] - shift), t += r[j];
    const double lse = std::log(s) + shift;
    // Without smoothing the mean is not part of the loss (0 * -inf would be NaN for a row holding -inf).
    loss[i] = lse - (1 - ls) * r[labels[i]];
    if (ls > 0) loss[i] -= ls * t / static_cast<double>(c);
    for (int64_t j = 0; j < c; ++j)
      grad[i * c + j] = (std::exp(r[j] - lse) - (j == labels[i] ? 1 - ls : 0.0) - ls / static_cast<double>(c)) * g[i];
  }
  return {from_data(loss, Shape{n}), from_data(grad, Shape{n, c})};
}

/// The largest |a - b| / (1 + |b|) over the elements (NaN and infinities must match exactly), as the fused-layer
/// tests measure; `where` names the worst element.
double max_rel_diff(const Array& a, const Array& b, std::string& where) {
  const std::vector<double> x = a.astype(float64).to_vector<double>(), y = b.astype(float64).to_vector<double>();
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    double d;
    if (std::isnan(x[i]) || std::isnan(y[i]) || std::isinf(x[i]) || std::isinf(y[i]))
      d = (std::isnan(x[i]) && std::isnan(y[i])) || x[i] == y[i] ? 0.0 : INFINITY;
    else
      d = std::abs(x[i] - y[i]) / (1 + std::abs(y[i]));
    if (d > worst) {
      worst = d;
      where = "element " + std::to_string(i) + ": " + std::to_string(x[i]) + " vs " + std::to_string(y[i]);
    }
  }
  return worst;
}

void expect_close(const Array& a, const Array& b, double tol, const std::string& what) {
  std::string where;
  const double d = max_rel_diff(a, b, where);
  EXPECT_LE(d, tol) << what << ": " << where;
}

TEST(CrossEntropyGpu, EqualsTheCpuAndAFloat64Reference) {
  KILN_REQUIRE_GPU();
  const Device g = gpu(0);
  struct Shape2 {
    int64_t n, c;
  };
  for (const Shape2 s : {Shape2{1, 10}, Shape2{7, 1000}, Shape2{33, 1001}, Shape2{64, 50304}, Shape2{9, 50257}}) {
    const std::vector<int64_t> labels = random::randint(0, s.c, {s.n}, int64, cpu()).to_vector<int64_t>();
    const Array lab = from_data(labels, Shape{s.n});
    for (DType dt : {float32, bfloat16}) {
      const Array host = make_logits(s.n, s.c, dt, labels, true);
      const Array w = random::normal({s.n}, 0.0, 1.0, float32, cpu());
      for (double ls : {0.0, 0.1}) {
        for (bool per_row : {true, false}) {
          const std::string what = std::to_string(s.n) + "x" + std::to_string(s.c) + " " + std::string(dtype_name(dt)) +
                                   " ls " + std::to_string(ls) + (per_row ? " per-row g" : " mean");
          const Array wr = per_row ? w : Array();
          const Result gpu_r = run(host, lab, wr, ls, g), cpu_r = run(host, lab, wr, ls, cpu());
          const Result ref = reference(host, labels, wr, ls);
          EXPECT_EQ(gpu_r.grad.dtype(), dt) << what;
          // float32 tolerances: lse within an ulp or two (~1e-6 at lse ~ 14), which exp(x - lse) carries into
          // the gradient; smoothing's mean sums the row's logits in float32 (the masked row's are -1e30).
          const double ltol = ls > 0 ? 1e-5 : 2e-6;
          expect_close(gpu_r.loss, cpu_r.loss, ltol, what + " loss vs CPU");
          expect_close(gpu_r.loss, ref.loss, ltol, what + " loss vs float64");
          // The gradient is rounded to the logits' dtype: bfloat16 keeps 8 bits.
          const double gtol = dt == float32 ? 2e-6 : 1e-2;
          expect_close(gpu_r.grad, cpu_r.grad, gtol, what + " grad vs CPU");
          expect_close(gpu_r.grad, ref.grad, gtol, what + " grad vs float64");
        }
      }
    }
  }
}

TEST(CrossEntropyGpu, TheEngineRunsForContiguousFloat32AndHalfLogitsOnly) {
  KILN_REQUIRE_GPU();
  const Device g = gpu(0);
  const Array labels = random::randint(0, 100, {8}, int64, g);
  for (DType dt : {float32, bfloat16, float16})
    EXPECT_TRUE(cross_entropy_rows_forward(random::normal({8, 100}, 0.0, 1.0, float32, g).astype(dt), labels))
        << dtype_name(dt);
  EXPECT_FALSE(cross_entropy_rows_forward(random::normal({8, 100}, 0.0, 1.0, float64, g), labels));
  EXPECT_FALSE(cross_entropy_rows_forward(random::normal({100, 8}, 0.0, 1.0, float32, g).transpose(), labels));
  // int32 labels are taken (converted); the result is that of int64 labels.
  const Array x = random::normal({8, 100}, 0.0, 1.0, float32, g);
  const std::optional<CrossEntropyRows> a = cross_entropy_rows_forward(x, labels, 0.1);
  const std::optional<CrossEntropyRows> b = cross_entropy_rows_forward(x, labels.astype(int32), 0.1);
  ASSERT_TRUE(a && b);
  EXPECT_TRUE(array_equal(a->loss, b->loss));
}

TEST(CrossEntropyGpu, NonContiguousLogitsAndInt32LabelsTakeTheFusedPath) {
  KILN_REQUIRE_GPU();
  const Device g = gpu(0);
  const Array host = random::normal({300, 7}, 0.0, 2.0, float32, cpu()).transpose();  // (7, 300), strided
  const std::vector<int64_t> labels = random::randint(0, 300, {7}, int64, cpu()).to_vector<int64_t>();
  const Array lab = from_data(labels, Shape{7}).astype(int32);
  const Array w = random::normal({7}, 0.0, 1.0, float32, cpu());
  const Result gpu_r = run(host, lab, w, 0.2, g), ref = reference(host, labels, w, 0.2);
  expect_close(gpu_r.loss, ref.loss, 1e-6, "loss");
  expect_close(gpu_r.grad, ref.grad, 1e-6, "grad");
}

TEST(CrossEntropyGpu, RunsTwiceToTheSameBits) {
  KILN_REQUIRE_GPU();
  const Device g = gpu(0);
  const int64_t n = 64, c = 50304;
  const std::vector<int64_t> labels = random::randint(0, c, {n}, int64, cpu()).to_vector<int64_t>();
  const Array lab = from_data(labels, Shape{n});
  for (DType dt : {float32, bfloat16}) {
    const Array host = make_logits(n, c, dt, labels, false);
    const Array w = random::normal({n}, 0.0, 1.0, float32, cpu());
    const Result a = run(host, lab, w, 0.1, g), b = run(host, lab, w, 0.1, g);
    const std::vector<float> la = a.loss.to_vector<float>(), lb = b.loss.to_vector<float>();
    EXPECT_EQ(std::memcmp(la.data(), lb.data(), la.size() * sizeof(float)), 0) << dtype_name(dt);
    const std::vector<float> ga = a.grad.astype(float32).to_vector<float>(),
                             gb = b.grad.astype(float32).to_vector<float>();
    EXPECT_EQ(std::memcmp(ga.data(), gb.data(), ga.size() * sizeof(float)), 0) << dtype_name(dt);
  }
}

TEST(CrossEntropyGpu, GradientMatchesFiniteDifferences) {
  KILN_REQUIRE_GPU();
  const Device g = gpu(0);
  const int64_t n = 3, c = 10;
  const std::vector<int64_t> labels{2, 0, 9};
  const Array lab = from_data(labels, Shape{n}).to(g);
  const Array host = random::normal({n, c}, 0.0, 1.0, float32, cpu());
  const Array w = from_data(std::vector<float>{1.0f, -0.5f, 2.0f}, Shape{n});
  for (double ls : {0.0, 0.3}) {
    const Array grad = run(host, from_data(labels, Shape{n}), w, ls, g).grad;
    const std::vector<float> x0 = host.to_vector<float>(), analytic = grad.to_vector<float>();
    const float h = 1e-2f;
    const auto total = [&](std::vector<float> v) {
      NoGradGuard no_grad;
      const Array loss = nn::cross_entropy(from_data(v, Shape{n, c}).to(g), lab, nn::Reduction::None, ls);
      return sum(loss * w.to(g)).item<double>();
    };
    for (int64_t k = 0; k < n * c; ++k) {
      std::vector<float> up = x0, down = x0;
      up[k] += h, down[k] -= h;
      const double fd = (total(up) - total(down)) / (2.0 * static_cast<double>(h));
      EXPECT_NEAR(analytic[k], fd, 2e-3) << "element " << k << " ls " << ls;
    }
  }
}

}  // namespace

#endif  // KILN_WITH_CUDA
