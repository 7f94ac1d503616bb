// Convolution, pooling and batch normalisation (NCHW) on every backend: forwards against direct float64 loops
// written here, gradients by gradcheck (central differences in float64), running statistics by hand, errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "harness/op_harness.hpp"
#include "kiln/kiln.hpp"
#include "test_util.hpp"

namespace kiln {
namespace {

using P = std::pair<int64_t, int64_t>;

std::vector<Device> devices() { return harness::backends(); }

/// Float32 convolutions in full float32 for the scope (cuDNN may use TF32 by default, as PyTorch).
struct NoTf32 {
  bool was = cudnn::allow_tf32();
  NoTf32() { cudnn::set_allow_tf32(false); }
  ~NoTf32() { cudnn::set_allow_tf32(was); }
};

/// at(v, shape, i...) for a row-major vector.
double at4(const std::vector<double>& v, const Shape& s, int64_t a, int64_t b, int64_t c, int64_t d) {
  return v[static_cast<size_t>(((a * s[1] + b) * s[2] + c) * s[3] + d)];
}

/// conv2d by its definition, in float64.
std::vector<double> conv_reference(const std::vector<double>& x, const Shape& xs, const std::vector<double>& w,
                                   const Shape& ws, const std::vector<double>& b, P st, P pad, P dil, int64_t groups,
                                   Shape& out_shape) {
  const int64_t n = xs[0], c = xs[1], h = xs[2], wd = xs[3], o = ws[0], kh = ws[2], kw = ws[3];
  const int64_t oh = (h + 2 * pad.first - dil.first * (kh - 1) - 1) / st.first + 1;
  const int64_t ow = (wd + 2 * pad.second - dil.second * (kw - 1) - 1) / st.second + 1;
  out_shape = {n, o, oh, ow};
  std::vector<double> y(static_cast<size_t>(n * o * oh * ow));
  const int64_t cg = c / groups, og = o / groups;
  for (int64_t in = 0; in < n; ++in)
    for (int64_t io = 0; io < o; ++io)
      for (int64_t i = 0; i < oh; ++i)
        for (int64_t j = 0; j < ow; ++j) {
          double acc = b.empty() ? 0.0 : b[static_cast<size_t>(io)];
          const int64_t grp = io / og;
          for (int64_t ic = 0; ic < cg; ++ic)
            for (int64_t p = 0; p < kh; ++p)
              for (int64_t q = 0; q < kw; ++q) {
                const int64_t r = i * st.first - pad.first + p * dil.first;
                const int64_t s = j * st.second - pad.second + q * dil.second;
                if (r < 0 || r >= h || s < 0 || s >= wd) continue;
                acc += at4(x, xs, in, grp * cg + ic, r, s) * at4(w, ws, io, ic, p, q);
              }
          y[static_cast<size_t>(((in * o + io) * oh + i) * ow + j)] = acc;
        }
  return y;
}

Array values(const Shape& s, uint64_t seed, Device d) {
  random::seed(seed);
  return random::normal(s, 0.0, 1.0, float64, cpu()).to(d);
}

TEST(NnConv, Conv2dMatchesItsDefinition) {
  const NoTf32 exact;
  struct Case {
    Shape xs, ws;
    P stride, padding, dilation;
    int64_t groups;
    bool bias;
  };
  const std::vector<Case> cases = {
      {{2, 3, 7, 6}, {4, 3, 3, 3}, {1, 1}, {0, 0}, {1, 1}, 1, true},
      {{2, 4, 7, 6}, {6, 2, 3, 2}, {2, 1}, {1, 0}, {1, 2}, 2, true},
      {{1, 4, 5, 5}, {4, 1, 3, 3}, {1, 2}, {1, 1}, {2, 1}, 4, false},  // depthwise
      {{3, 2, 4, 4}, {5, 2, 1, 1}, {1, 1}, {0, 0}, {1, 1}, 1, true},   // 1x1
      {{2, 6, 7, 5}, {4, 6, 1, 1}, {2, 2}, {0, 0}, {1, 1}, 1, false},  // 1x1 stride 2 (ResNet's downsample)
  };
  for (Device d : devices())
    for (const Case& c : cases) {
      const Array x = values(c.xs, 1, d), w = values(c.ws, 2, d), b = c.bias ? values({c.ws[0]}, 3, d) : Array();
      Shape out_shape;
      const std::vector<double> want = conv_reference(x.to_vector<double>(), c.xs, w.to_vector<double>(), c.ws,
                                                      c.bias ? b.to_vector<double>() : std::vector<double>{}, c.stride,
                                                      c.padding, c.dilation, c.groups, out_shape);
      const Array y = nn::conv2d(x, w, b, c.stride, c.padding, c.dilation, c.groups);
      ASSERT_EQ(y.shape(), out_shape) << d.str();
      const std::vector<double> got = y.to_vector<double>();
      for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-12) << d.str() << " element " << i;
      // float32 agrees with the float64 reference to float32 rounding
      const std::vector<float> y32 =
          nn::conv2d(x.astype(float32), w.astype(float32), c.bias ? b.astype(float32) : Array(), c.stride, c.padding,
                     c.dilation, c.groups)
              .to_vector<float>();
      for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(y32[i], want[i], 1e-4) << d.str() << " float32 " << i;
      // and from channels-last operands (the CPU's oneDNN runs 1x1 kernels on the plain layout, others blocked)
      const Array ycl = nn::conv2d(to_channels_last(x.astype(float32)), to_channels_last(w.astype(float32)),
                                   c.bias ? b.astype(float32) : Array(), c.stride, c.padding, c.dilation, c.groups);
      EXPECT_TRUE(is_channels_last(ycl) || ycl.shape(2) * ycl.shape(3) == 1) << d.str();
      const std::vector<float> ycl_v = ycl.to_vector<float>();
      for (size_t i = 0; i < want.size(); ++i)
        ASSERT_NEAR(ycl_v[i], want[i], 1e-4) << d.str() << " float32 channels-last " << i;
    }
}

TEST(NnConv, Conv2dGradientsPassGradcheck) {
  for (Device d : devices()) {
    for (const auto& [groups, dil] : std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {2, 2}}) {
      const Array x = values({2, 4, 6, 5}, 4, d), w = values({4, 4 / groups, 3, 2}, 5, d), b = values({4}, 6, d);
      const GradcheckResult r = gradcheck(
          [&, groups = groups, dil = dil](const std::vector<Array>& in) {  // clang 14 captures no binding
            return nn::conv2d(in[0], in[1], in[2], {2, 1}, {1, 1}, {dil, 1}, groups);
          },
          {x, w, b});
      EXPECT_TRUE(r.passed) << d.str() << " groups " << groups << ": " << r.report;
    }
  }
}

// The CPU's NCHW max pooling kernel (interior columns a row at a time, edges by index) against the core's
// reference (which channels-last operands run on the CPU): padding, strides, dilation, windows past the edge,
// NaNs (the first NaN of a window wins), in float32 and float64.
TEST(NnConv, CpuMaxPoolKernelAgreesWithTheReference) {
  const std::vector<PoolParams> cases = {{{3, 3}, {2, 2}, {1, 1}, {1, 1}}, {{2, 2}, {1, 1}, {0, 0}, {1, 1}},
                                         {{3, 2}, {1, 3}, {1, 1}, {2, 3}}, {{5, 5}, {2, 2}, {2, 2}, {1, 1}},
                                         {{2, 3}, {3, 1}, {1, 0}, {1, 1}}, {{3, 3}, {1, 1}, {1, 1}, {3, 4}}};
  for (DType t : {float32, float64})
    for (const PoolParams& pp : cases) {
      Array x = values({2, 3, 11, 13}, 21, cpu()).astype(t);
      x.slice(2, 4, 5).slice(3, 5, 6).fill(std::nan(""));  // one NaN inside several windows
      x.slice(2, 0, 1).slice(3, 0, 1).fill(std::nan(""));  // and one in a corner
      const Array y = max_pool2d_forward(x, pp).y;
      const Array want = max_pool2d_forward(to_channels_last(x), pp).y;
      ASSERT_EQ(y.shape(), want.shape());
      EXPECT_TRUE(array_equal(y, want, true))
          << dtype_name(t) << " kernel " << pp.kernel.first << "x" << pp.kernel.second << " stride " << pp.stride.first
          << "," << pp.stride.second;
      EXPECT_TRUE(any(isnan(y)).item<bool>())
          << dtype_name(t) << " kernel " << pp.kernel.first << " stride " << pp.stride.first;
    }
}

// Batch-norm evaluation: the CPU's one-pass kernel gives the bits of the core's reference formula (kiln's ops,
// the same roundings), NCHW and channels-last, float32 and float64; a float16 input (the reference) stays close.
TEST(NnConv, CpuBatchNormEvaluationGivesTheReferenceBits) {
  for (DType t : {float32, float64})
    for (bool cl : {false, true}) {
      const Array x0 = values({3, 5, 7, 6}, 31, cpu()).astype(t), w = values({5}, 32, cpu()).astype(t);
      const Array b = values({5}, 33, cpu()).astype(t), rm = values({5}, 34, cpu()).astype(t);
      const Array rv = abs(values({5}, 35, cpu())).astype(t) + 0.5;
      const Array x = cl ? to_channels_last(x0) : x0;
      const BatchNormOutput r = batch_norm_forward(x, w, b, rm, rv, false, 0.1, 1e-5);
      const Array scale = w / sqrt(rv + 1e-5), shift = b - rm * scale;
      const Array want = x0 * scale.reshape({1, 5, 1, 1}) + shift.reshape({1, 5, 1, 1});
      EXPECT_TRUE(array_equal(r.y, want)) << dtype_name(t) << (cl ? " channels-last" : " NCHW");
      EXPECT_EQ(is_channels_last(r.y) && !r.y.is_contiguous(), cl);
    }
  const Array h = values({2, 3, 4, 4}, 36, cpu()).astype(float16);
  const Array rm = zeros({3}, float32, cpu()), rv = ones({3}, float32, cpu());
  const Array y = batch_norm_forward(h, Array(), Array(), rm, rv, false, 0.1, 1e-5).y;
  EXPECT_EQ(y.dtype(), float16);
  EXPECT_TRUE(allclose(y.astype(float32), h.astype(float32), 1e-3, 1e-3));
}

TEST(NnConv, PoolingMatchesLoopsAndPassesGradcheck) {
  for (Device d : devices()) {
    const Shape xs{2, 3, 7, 6};
    const Array x = values(xs, 7, d);
    const std::vector<double> xv = x.to_vector<double>();
    // max_pool2d 3x3, stride 2, padding 1; avg_pool2d 2x2 stride 2 padding 1 (padding counts as zeros)
    const Array m = nn::max_pool2d(x, {3, 3}, P{2, 2}, {1, 1});
    const Array a = nn::avg_pool2d(x, {2, 2}, P{2, 2}, {1, 1});
    ASSERT_EQ(m.shape(), (Shape{2, 3, 4, 3}));
    ASSERT_EQ(a.shape(), (Shape{2, 3, 4, 4}));
    const std::vector<double> mv = m.to_vector<double>(), av = a.to_vector<double>();
    for (int64_t n = 0; n < 2; ++n)
      for (int64_t c = 0; c < 3; ++c) {
        for (int64_t i = 0; i < 4; ++i)
          for (int64_t j = 0; j < 3; ++j) {
            double best = -std::numeric_limits<double>::infinity();
            for (int64_t p = 0; p < 3; ++p)
              for (int64_t q = 0; q < 3; ++q) {
                const int64_t r = 2 * i - 1 + p, s = 2 * j - 1 + q;
                if (r >= 0 && r < 7 && s >= 0 && s < 6) best = std::max(best, at4(xv, xs, n, c, r, s));
              }
            EXPECT_EQ(mv[static_cast<size_t>(((n * 3 + c) * 4 + i) * 3 + j)], best) << d.str();
          }
        for (int64_t i = 0; i < 4; ++i)
          for (int64_t j = 0; j < 4; ++j) {
            double total = 0;
            for (int64_t p = 0; p < 2; ++p)
              for (int64_t q = 0; q < 2; ++q) {
                const int64_t r = 2 * i - 1 + p, s = 2 * j - 1 + q;
                if (r >= 0 && r < 7 && s >= 0 && s < 6) total += at4(xv, xs, n, c, r, s);
              }
            EXPECT_NEAR(av[static_cast<size_t>(((n * 3 + c) * 4 + i) * 4 + j)], total / 4, 1e-12) << d.str();
          }
      }
    // the backward without indices (after cuDNN's forward, which computes none) recomputes them
    const PoolParams pp{{3, 3}, {2, 2}, {1, 1}, {1, 1}};
    const MaxPoolOutput r = max_pool2d_forward(x, pp);
    const Array g = values(r.y.shape(), 14, d);
    // (without y the engine is skipped: the reference recomputes the maxima from x)
    EXPECT_TRUE(
        allclose(max_pool2d_backward(g, x, r.y, Array(), pp), max_pool2d_backward(g, x, Array(), Array(), pp), 0, 0))
        << d.str();
    // channels-last pooling (the reference on the CPU, cuDNN's NHWC on a GPU) agrees with NCHW's
    const Array xc = to_channels_last(x);
    EXPECT_TRUE(array_equal(max_pool2d_forward(xc, pp).y, r.y)) << d.str();
    EXPECT_TRUE(is_channels_last(max_pool2d_forward(xc, pp).y)) << d.str();
    EXPECT_TRUE(allclose(avg_pool2d_forward(xc, pp), avg_pool2d_forward(x, pp), 1e-12, 1e-12)) << d.str();
    const Array small = values({1, 2, 5, 5}, 8, d);
    for (const auto& [what, f] : std::vector<std::pair<std::string, std::function<Array(const std::vector<Array>&)>>>{
             {"max_pool2d",
              [](auto& in) {
                return nn::max_pool2d(in[0], {3, 3}, P{2, 2}, {1, 1});
              }},
             {"max_pool2d overlapping", [](auto& in) { return nn::max_pool2d(in[0], {2, 2}, P{1, 1}); }},
             {"avg_pool2d", [](auto& in) { return nn::avg_pool2d(in[0], {3, 3}, P{2, 2}, {1, 1}); }},
             {"adaptive_avg_pool2d 1x1", [](auto& in) {
                return nn::adaptive_avg_pool2d(in[0], {1, 1});
              }}}) {
      const GradcheckResult r = gradcheck(f, {small});
      EXPECT_TRUE(r.passed) << what << " on " << d.str() << ": " << r.report;
    }
    EXPECT_EQ(nn::adaptive_avg_pool2d(values({1, 1, 4, 6}, 9, d), {2, 3}).shape(), (Shape{1, 1, 2, 3}));
    // uneven windows (5 -> 2: rows 0..2 and 2..4, overlapping at 2), against a loop, and their gradient
    const Array uneven = nn::adaptive_avg_pool2d(small, {2, 3});
    ASSERT_EQ(uneven.shape(), (Shape{1, 2, 2, 3}));
    const std::vector<double> sv = small.to_vector<double>(), uv = uneven.to_vector<double>();
    for (int64_t c = 0; c < 2; ++c)
      for (int64_t i = 0; i < 2; ++i)
        for (int64_t j = 0; j < 3; ++j) {
          const int64_t r0 = i * 5 / 2, r1 = ((i + 1) * 5 + 1) / 2, c0 = j * 5 / 3, c1 = ((j + 1) * 5 + 2) / 3;
          double total = 0;
          for (int64_t r = r0; r < r1; ++r)
            for (int64_t q = c0; q < c1; ++q) total += at4(sv, {1, 2, 5, 5}, 0, c, r, q);
          EXPECT_NEAR(uv[static_cast<size_t>((c * 2 + i) * 3 + j)], total / static_cast<double>((r1 - r0) * (c1 - c0)),
                      1e-12)
              << d.str();
        }
    const GradcheckResult ru = gradcheck(
        [](const std::vector<Array>& in) {
          return nn::adaptive_avg_pool2d(in[0], {2, 3});
        },
        {small});
    EXPECT_TRUE(ru.passed) << d.str() << ": " << ru.report;
    EXPECT_THROW(nn::adaptive_avg_pool2d(small, {0, 2}), ValueError);
    EXPECT_THROW(nn::max_pool2d(small, {2, 2}, {}, {2, 2}), ValueError);
    EXPECT_THROW(nn::max_pool2d(small.reshape({2, 5, 5}), {2, 2}), ShapeError);
  }
}

TEST(NnConv, BatchNormNormalisesTracksAndPassesGradcheck) {
  for (Device d : devices()) {
    const Array x = values({4, 3, 2, 5}, 10, d) * 2.0 + 1.0;
    nn::BatchNorm2d bn(3, 1e-5, 0.1, true, float64, d);
    const Array y = bn(x);
    // Each channel of the output has mean 0 and (biased) variance ~1.
    const std::vector<double> means = mean(y, {0, 2, 3}).to_vector<double>();
    const std::vector<double> vars = var(y, {0, 2, 3}).to_vector<double>();
    for (int c = 0; c < 3; ++c) {
      EXPECT_NEAR(means[static_cast<size_t>(c)], 0.0, 1e-12) << d.str();
      EXPECT_NEAR(vars[static_cast<size_t>(c)], 1.0, 1e-4) << d.str();
    }
    // running = 0.9 * init + 0.1 * batch statistics (the variance unbiased, n = 40)
    const std::vector<double> bm = mean(x, {0, 2, 3}).to_vector<double>(),
                              bv = var(x, {0, 2, 3}, 1).to_vector<double>();
    const std::vector<double> rm = bn.buffer("running_mean").to_vector<double>();
    const std::vector<double> rv = bn.buffer("running_var").to_vector<double>();
    for (size_t c = 0; c < 3; ++c) {
      EXPECT_NEAR(rm[c], 0.1 * bm[c], 1e-12) << d.str();
      EXPECT_NEAR(rv[c], 0.9 + 0.1 * bv[c], 1e-12) << d.str();
    }
    EXPECT_EQ(bn.buffer("num_batches_tracked").item<int64_t>(), 1);
    bn.eval();
    const std::vector<double> ye = bn(x).to_vector<double>(), xv = x.to_vector<double>();
    EXPECT_NEAR(ye[0], (xv[0] - rm[0]) / std::sqrt(rv[0] + 1e-5), 1e-12) << "eval uses the running statistics";
    const Array w = values({3}, 11, d), b = values({3}, 12, d);
    const GradcheckResult r = gradcheck(
        [&](const std::vector<Array>& in) {
          Array none_mean, none_var;
          return nn::batch_norm2d(in[0], none_mean, none_var, in[1], in[2], true);
        },
        {values({2, 3, 2, 2}, 13, d), w, b});
    EXPECT_TRUE(r.passed) << d.str() << ": " << r.report;
  }
}

TEST(NnConv, ChannelsLastGivesTheSameValuesAndKeepsItsLayout) {
  const NoTf32 exact;
  for (Device d : devices())
    for (const bool benchmark : {false, true}) {
      const bool was = cudnn::benchmark();
      cudnn::set_benchmark(benchmark);
      const Array x = values({2, 6, 7, 5}, 20, d).astype(float32), w = values({4, 3, 3, 3}, 21, d).astype(float32);
      const Array b = values({4}, 22, d).astype(float32);
      const Array xc = to_channels_last(x);
      ASSERT_TRUE(is_channels_last(xc));
      ASSERT_FALSE(xc.is_contiguous());
      ASSERT_EQ(xc.shape(), x.shape());
      const Array y = nn::conv2d(x, w, b, {2, 1}, {1, 1}, {1, 1}, 2);
      const Array yc = nn::conv2d(xc, w, b, {2, 1}, {1, 1}, {1, 1}, 2);
      EXPECT_TRUE(is_channels_last(yc)) << d.str() << ": a channels-last input gives a channels-last output";
      EXPECT_TRUE(allclose(yc, y, 1e-5, 1e-5)) << d.str() << " benchmark " << benchmark;
      // the gradients through both layouts agree
      auto grads = [&](const Array& input) {
        Array xi = input.detach(), wi = w.detach();
        xi.set_requires_grad(true);
        wi.set_requires_grad(true);
        Array out = nn::conv2d(xi, wi, Array(), {1, 1}, {1, 1}, {1, 1}, 2);
        sum(out * out).backward();
        return std::pair<Array, Array>{xi.grad(), wi.grad()};
      };
      const auto [gx, gw] = grads(x);
      const auto [gxc, gwc] = grads(xc);
      EXPECT_TRUE(allclose(gxc, gx, 1e-4, 1e-4)) << d.str();
      EXPECT_TRUE(allclose(gwc, gw, 1e-4, 1e-4)) << d.str();
      // batch normalisation keeps the layout too
      Array rm = zeros({6}, float32, d), rv = ones({6}, float32, d);
      Array rmc = zeros({6}, float32, d), rvc = ones({6}, float32, d);
      const Array bn = nn::batch_norm2d(x, rm, rv, Array(), Array(), true);
      const Array bnc = nn::batch_norm2d(xc, rmc, rvc, Array(), Array(), true);
      EXPECT_TRUE(is_channels_last(bnc)) << d.str();
      EXPECT_TRUE(allclose(bnc, bn, 1e-5, 1e-5)) << d.str();
      EXPECT_TRUE(allclose(rmc, rm, 1e-6, 1e-6)) << d.str();
      EXPECT_TRUE(allclose(rvc, rv, 1e-6, 1e-6)) << d.str();
      // and its gradients (input, weight, bias) agree across layouts
      auto bn_grads = [&](const Array& input) {
        Array xi = input.detach(), wi = values({6}, 23, d).astype(float32), bi = values({6}, 24, d).astype(float32);
        for (Array* a : {&xi, &wi, &bi}) a->set_requires_grad(true);
        Array m0 = zeros({6}, float32, d), v0 = ones({6}, float32, d);
        Array out = nn::batch_norm2d(xi, m0, v0, wi, bi, true);
        sum(out * out * x).backward();
        return std::vector<Array>{xi.grad(), wi.grad(), bi.grad()};
      };
      const std::vector<Array> g_nchw = bn_grads(x), g_cl = bn_grads(xc);
      EXPECT_TRUE(is_channels_last(g_cl[0])) << d.str();
      for (size_t i = 0; i < 3; ++i) EXPECT_TRUE(allclose(g_cl[i], g_nchw[i], 1e-4, 1e-4)) << d.str() << " grad " << i;
      cudnn::set_benchmark(was);
    }
}

TEST(NnConv, LowPrecisionAndTf32StayCloseToFloat64) {
  for (Device d : devices()) {
    const Array x = values({2, 8, 9, 9}, 30, d), w = values({16, 8, 3, 3}, 31, d) * 0.2;
    const Array want = conv2d_forward(x, w, {.padding = {1, 1}});
    const double scale = max(abs(want)).item<double>();
    std::vector<DType> dtypes{float32, float16};
    dtypes.push_back(bfloat16);  // Ampere and newer GPUs (the lent H100/H200)
    for (DType t : dtypes) {
      const Array got = conv2d_forward(x.astype(t), w.astype(t), {.padding = {1, 1}});
      ASSERT_EQ(got.dtype(), t);
      const double err = max(abs(got.astype(float64) - want)).item<double>() / scale;
      const double tol = t == float32 ? 2e-3 : t == float16 ? 5e-3 : 3e-2;  // TF32 / half / bfloat16 rounding
      EXPECT_LT(err, tol) << d.str() << " " << dtype_name(t);
    }
    // batch statistics of a float16 input are float32, as the running ones
    Array rm = zeros({8}, float32, d), rv = ones({8}, float32, d);
    const BatchNormOutput r = batch_norm_forward(x.astype(float16), Array(), Array(), rm, rv, true, 0.1, 1e-5);
    EXPECT_EQ(r.y.dtype(), float16);
    EXPECT_EQ(r.mean.dtype(), float32);
    EXPECT_TRUE(allclose(r.mean, mean(x, {0, 2, 3}).astype(float32), 1e-3, 1e-3)) << d.str();
    // channels-last bfloat16 (the GPU's own kernels): the same statistics and normalised values
    Array rm2 = zeros({8}, float32, d), rv2 = ones({8}, float32, d);
    const BatchNormOutput rc =
        batch_norm_forward(to_channels_last(x.astype(bfloat16)), Array(), Array(), rm2, rv2, true, 0.1, 1e-5);
    EXPECT_TRUE(is_channels_last(rc.y));
    EXPECT_TRUE(allclose(rc.mean, mean(x, {0, 2, 3}).astype(float32), 1e-2, 1e-2)) << d.str();
    const Array xhat = (x - mean(x, {0, 2, 3}, true)) / sqrt(var(x, {0, 2, 3}, 0, true) + 1e-5);
    EXPECT_LT(max(abs(rc.y.astype(float64) - xhat)).item<double>(), 5e-2) << d.str();
    kiln_test::expect_error<DTypeError>(
        [&] { (void)batch_norm_forward(x.astype(float16), Array(), Array(), rm.astype(float16), rv, true, 0.1, 1e-5); },
        {"batch_norm", "running mean", "float32"});
  }
}

TEST(NnConv, BatchNormEvaluationPassesGradcheck) {
  for (Device d : devices()) {
    Array rm = values({3}, 40, d) * 0.1, rv = values({3}, 41, d) * 0.1 + 1.0;
    const GradcheckResult r =
        gradcheck([&](const std::vector<Array>& in) { return nn::batch_norm2d(in[0], rm, rv, in[1], in[2], false); },
                  {values({2, 3, 2, 2}, 42, d), values({3}, 43, d), values({3}, 44, d)});
    EXPECT_TRUE(r.passed) << d.str() << ": " << r.report;
  }
}

TEST(NnConv, BatchNormWithoutAffineParametersHasGradients) {
  // BatchNorm2d(affine = false): no weight or bias; the input's gradient, training and evaluation.
  for (Device d : devices()) {
    const GradcheckResult train = gradcheck(
        [&](const std::vector<Array>& in) {
          Array none_mean, none_var;
          return nn::batch_norm2d(in[0], none_mean, none_var, Array(), Array(), true);
        },
        {values({2, 3, 2, 2}, 45, d)});
    EXPECT_TRUE(train.passed) << d.str() << ": " << train.report;
    Array rm = values({3}, 46, d) * 0.1, rv = values({3}, 47, d) * 0.1 + 1.0;
    const GradcheckResult eval = gradcheck(
        [&](const std::vector<Array>& in) { return nn::batch_norm2d(in[0], rm, rv, Array(), Array(), false); },
        {values({2, 3, 2, 2}, 48, d)});
    EXPECT_TRUE(eval.passed) << d.str() << ": " << eval.report;
  }
}

TEST(NnConv, BatchNormReluIsReluOfBatchNormAndPassesGradcheck) {
  // batch_norm_relu2d: the values and gradients of relu(batch_norm2d(...)) (bit for bit: the fused kernels and
  // the mask they recompute give the same numbers), NCHW and channels-last, training and evaluation; gradcheck.
  for (Device d : devices())
    for (bool cl : {false, true})
      for (bool training : {true, false}) {
        const std::string what = d.str() + (cl ? " channels-last" : " NCHW") + (training ? " training" : " eval");
        Array x = values({4, 3, 5, 2}, 50, d) * 2.0 + 0.3;
        if (cl) x = to_channels_last(x);
        Array w = values({3}, 51, d), b = values({3}, 52, d);
        Array rm0 = values({3}, 53, d) * 0.1, rv0 = values({3}, 54, d) * 0.1 + 1.0;
        Array rm1 = rm0.copy(), rv1 = rv0.copy();
        const Array v = values({4, 3, 5, 2}, 55, d);  // projects the output: L = sum(y * v)
        std::vector<Array> grads[2];
        Array ys[2];
        for (int fused = 0; fused < 2; ++fused) {
          const Array xi = x.detach().set_requires_grad(true), wi = w.detach().set_requires_grad(true),
                      bi = b.detach().set_requires_grad(true);
          ys[fused] = fused ? nn::batch_norm_relu2d(xi, rm1, rv1, wi, bi, training)
                            : relu(nn::batch_norm2d(xi, rm0, rv0, wi, bi, training));
          sum(ys[fused] * v).backward();
          grads[fused] = {xi.grad(), wi.grad(), bi.grad()};
        }
        EXPECT_TRUE(array_equal(ys[0], ys[1])) << what;
        EXPECT_EQ(is_channels_last(ys[1]) && !ys[1].is_contiguous(), cl) << what;
        EXPECT_TRUE(array_equal(rm0, rm1) && array_equal(rv0, rv1)) << what << " running statistics";
        for (size_t i = 0; i < 3; ++i) EXPECT_TRUE(array_equal(grads[0][i], grads[1][i])) << what << " gradient " << i;
        const GradcheckResult r = gradcheck(
            [&](const std::vector<Array>& in) {
              Array m = rm0.copy(), var = rv0.copy();
              return nn::batch_norm_relu2d(in[0], m, var, in[1], in[2], training);
            },
            {x.slice(0, 0, 2), w, b});
        EXPECT_TRUE(r.passed) << what << ": " << r.report;
      }
  // The backward's operands are checked: y's shape, scale_shift's shape.
  const Array x = values({2, 3, 2, 2}, 56, cpu()), m = zeros({3}, float64, cpu()), is = ones({3}, float64, cpu());
  kiln_test::expect_error<ShapeError>(
      [&] { (void)batch_norm_relu_backward(x, x, x.slice(0, 0, 1), Array(), m, is, Array(), 1e-5); },
      {"batch_norm_relu_backward", "output"});
  kiln_test::expect_error<ValueError>(
      [&] { (void)batch_norm_relu_backward(x, x, x, Array(), m, is, zeros({3}, float64, cpu()), 1e-5); },
      {"batch_norm_relu_backward", "scale_shift", "(6,)"});
}

TEST(NnConv, PrimitivesRefuseBadOperands) {
  for (Device d : devices()) {
    const Array x = values({1, 2, 4, 4}, 50, d), w = values({3, 2, 3, 3}, 51, d);
    kiln_test::expect_error<DTypeError>([&] { (void)conv2d_forward(x.astype(int32), w.astype(int32)); },
                                        {"conv2d_forward", "floating", "int32", "astype(float32)"});
    kiln_test::expect_error<DTypeError>([&] { (void)conv2d_forward(x, w.astype(float32)); },
                                        {"conv2d_forward", "float64", "float32"});
    Array xg = x.detach();
    xg.set_requires_grad(true);
    kiln_test::expect_error<DTypeError>([&] { (void)conv2d_forward(xg, w); }, {"conv2d_forward", "nn::conv2d"});
    kiln_test::expect_error<ShapeError>(
        [&] {
          (void)conv2d_backward_input(values({1, 3, 3, 3}, 52, d), w, {1, 2, 4, 4});
        },
        {"conv2d_backward_input", "output gradient", "(1, 3, 2, 2)"});
    kiln_test::expect_error<ShapeError>(
        [&] {
          (void)to_channels_last(values({2, 3, 4}, 53, d));
        },
        {"to_channels_last", "(N, C, H, W)"});
  }
}

TEST(NnConv, ModulesAndErrors) {
  for (Device d : devices()) {
    random::seed(1);
    nn::Conv2d conv(4, 6, {3, 3}, {.padding = {1, 1}, .groups = 2}, float32, d);
    EXPECT_EQ(conv.weight().shape(), (Shape{6, 2, 3, 3}));
    const double bound = 1.0 / std::sqrt(18.0);  // PyTorch's default: 1/sqrt(fan_in) for both
    EXPECT_LE(max(abs(conv.weight())).item<double>(), bound + 1e-7);
    EXPECT_LE(max(abs(conv.parameter("bias"))).item<double>(), bound + 1e-7);
    const Array x = random::normal({2, 4, 5, 5}, 0.0, 1.0, float32, d);
    EXPECT_EQ(conv(x).shape(), (Shape{2, 6, 5, 5}));
    nn::Sequential net;
    net.push_back(std::make_shared<nn::Conv2d>(4, 8, P{3, 3}, nn::Conv2dOptions{.stride = {2, 2}}, float32, d));
    net.push_back(std::make_shared<nn::BatchNorm2d>(8, 1e-5, 0.1, true, float32, d));
    net.push_back(std::make_shared<nn::ReLU>());
    net.push_back(std::make_shared<nn::MaxPool2d>(P{2, 2}));
    net.push_back(std::make_shared<nn::AdaptiveAvgPool2d>(P{1, 1}));
    net.push_back(std::make_shared<nn::Flatten>());
    const Array out = net(random::normal({3, 4, 9, 9}, 0.0, 1.0, float32, d));
    EXPECT_EQ(out.shape(), (Shape{3, 8}));
    sum(out).backward();
    EXPECT_TRUE(net.named_parameters().front().second.grad().defined());
    kiln_test::expect_error<ShapeError>(
        [&] {
          (void)conv(random::normal({2, 3, 5, 5}, 0.0, 1.0, float32, d));
        },
        {"conv2d", "an input of shape (2, 3, 5, 5)", "(6, 2, 3, 3)", "groups 2"});
    kiln_test::expect_error<ShapeError>(
        [&] {
          (void)nn::conv2d(x, ones({6, 4, 7, 7}, float32, d));
        },
        {"conv2d", "smaller than the dilated kernel"});
    EXPECT_THROW(nn::Conv2d(4, 6, {3, 3}, {.groups = 4}), ValueError);
  }
}

}  // namespace
}  // namespace kiln
