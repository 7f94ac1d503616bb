// RMSNorm, RotaryEmbedding and MultiheadAttention on every backend against hand-written float64 references
// (the formulas in their direct form), PyTorch's parameter names, masks in the module's convention (true = not
// allowed), batch_first, need_weights averaged or per head, gradcheck.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "harness/op_harness.hpp"
#include "kiln/kiln.hpp"
#include "test_util.hpp"

namespace kiln {
namespace {

void expect_close(const Array& got, const Array& want, double tol, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  const std::vector<double> g = got.to(cpu()).astype(float64).to_vector<double>();
  const std::vector<double> w = want.to(cpu()).astype(float64).to_vector<double>();
  for (size_t i = 0; i < g.size(); ++i) ASSERT_NEAR(g[i], w[i], tol * (1 + std::abs(w[i]))) << what << " element " << i;
}

Array rand(const Shape& s) { return random::normal(s, 0.0, 1.0, float64, cpu()); }

TEST(AttentionLayers, RmsNormIsXOverItsRootMeanSquareTimesWeight) {
  random::seed(1);
  for (Device d : harness::backends()) {
    nn::RMSNorm norm({4}, std::nullopt, true, float32, d);
    {
      NoGradGuard no_grad;
      norm.parameter("weight").assign(from_data(std::vector<float>{1, 2, 3, 4}).to(d));
    }
    const Array x = from_data(std::vector<float>{1, 2, 3, 4, -1, 0, 0, 1}).reshape({2, 4}).to(d);
    // Row 0: mean square 7.5; row 1: 0.5; eps = float32's epsilon.
    const double e = std::numeric_limits<float>::epsilon();
    const double r0 = 1 / std::sqrt(7.5 + e), r1 = 1 / std::sqrt(0.5 + e);
    const Array want = from_data(std::vector<double>{1 * r0, 4 * r0, 9 * r0, 16 * r0, -1 * r1, 0, 0, 4 * r1}).reshape({2, 4});
    expect_close(norm(x), want, 1e-6, "rmsnorm " + d.str());
  }
  EXPECT_EQ(nn::RMSNorm({8}).named_parameters()[0].first, "weight");
  kiln_test::expect_error<ShapeError>([] { (void)nn::RMSNorm({8})(ones({2, 4}, float32, cpu())); }, {"RMSNorm((8,))", "must be (8,)"});
}

TEST(AttentionLayers, RotaryEmbeddingRotatesHalfPairsByPositionTimesFrequency) {
  nn::RotaryEmbedding rope(4, 100.0);
  // Pairs (x0, x2) turn by pos * 1, (x1, x3) by pos * 100^(-1/2) = pos * 0.1.
  const Array x = from_data(std::vector<double>{1, 2, 3, 4, 1, 2, 3, 4}).reshape({2, 4});
  for (int64_t offset : {int64_t{0}, int64_t{5}}) {
    std::vector<double> want;
    for (int64_t pos = offset; pos < offset + 2; ++pos) {
      const double a = static_cast<double>(pos), b = 0.1 * static_cast<double>(pos);
      want.insert(want.end(), {1 * std::cos(a) - 3 * std::sin(a), 2 * std::cos(b) - 4 * std::sin(b),
                               3 * std::cos(a) + 1 * std::sin(a), 4 * std::cos(b) + 2 * std::sin(b)});
    }
    // The angles are float32 (as Hugging Face's): within float32 rounding of the angle.
    expect_close(rope.rotate(x, offset), from_data(want).reshape({2, 4}), 1e-5, "offset " + std::to_string(offset));
  }
  kiln_test::expect_error<ValueError>([] { nn::RotaryEmbedding(5); }, {"even"});
}

/// PyTorch's multi-head attention forward, written out: projections, heads, masks (true = not allowed),
/// softmax, the product, the heads joined and the output projection. Inputs batch-first, float64.
std::pair<Array, Array> mha_reference(nn::MultiheadAttention& m, const Array& q, const Array& k, const Array& v,
                                      const Array& kpm, const Array& attn, int64_t heads) {
  const Array w = m.parameter("in_proj_weight").to(cpu()).astype(float64);
  const Array b = m.parameter("in_proj_bias").to(cpu()).astype(float64);
  const int64_t n = q.shape(0), l = q.shape(1), s = k.shape(1), e = q.shape(2), d = e / heads;
  auto proj = [&](const Array& x, int64_t part, int64_t len) {
    const Array y = matmul(x, w.slice(0, part * e, (part + 1) * e).T()) + b.slice(0, part * e, (part + 1) * e);
    return swapaxes(y.reshape({n, len, heads, d}), 1, 2);
  };
  Array scores = matmul(proj(q, 0, l), swapaxes(proj(k, 1, s), 2, 3)) / std::sqrt(double(d));
  const double inf = std::numeric_limits<double>::infinity();
  if (attn.defined()) scores = scores + attn.to(cpu()).astype(float64);
  if (kpm.defined()) scores = where(kpm.to(cpu()).reshape({n, 1, 1, s}), -inf, scores);
  const Array weights = nn::softmax(scores, -1);
  const Array heads_out = swapaxes(matmul(weights, proj(v, 2, s)), 1, 2).reshape({n, l, e});
  auto& out_proj = dynamic_cast<nn::Linear&>(*m.named_children()[0].second);
  const Array out = matmul(heads_out, out_proj.weight().to(cpu()).astype(float64).T()) +
                    out_proj.bias().to(cpu()).astype(float64);
  return {out, weights};
}

TEST(AttentionLayers, MultiheadAttentionEqualsItsFormulaWithMasksOnEveryBackend) {
  random::seed(2);
  for (Device d : harness::backends()) {
    for (bool batch_first : {false, true}) {
      nn::MultiheadAttention mha(8, 2, 0.0, true, batch_first, float64, d);
      // Non-zero biases, so their use is checked too.
      {
        NoGradGuard no_grad;
        mha.parameter("in_proj_bias").assign(rand({24}).to(d));
      }
      const Array q = rand({3, 4, 8}), k = rand({3, 5, 8}), v = rand({3, 5, 8});  // (N, L, E)
      Array kpm = zeros({3, 5}, bool_, cpu());
      kpm[0][4] = ones({}, bool_, cpu());  // batch 0 ignores key 4
      kpm[2][0] = ones({}, bool_, cpu());
      const Array attn = rand({4, 5});
      auto in = [&](const Array& x) { return (batch_first ? x : swapaxes(x, 0, 1)).to(d); };
      NoGradGuard no_grad;
      const auto [out, weights] = mha.forward(in(q), in(k), in(v), kpm.to(d), true, attn.to(d));
      const auto [want_out, want_w] = mha_reference(mha, q, k, v, kpm, attn, 2);
      const std::string what = d.str() + (batch_first ? " batch_first" : "");
      expect_close(batch_first ? out : swapaxes(out, 0, 1), want_out, 1e-12, "output " + what);
      expect_close(weights, want_w.mean({1}), 1e-12, "averaged weights " + what);
      // Without weights: the blocked attention, same output.
      const auto [out2, none] = mha.forward(in(q), in(k), in(v), kpm.to(d), false, attn.to(d));
      EXPECT_FALSE(none.defined());
      expect_close(batch_first ? out2 : swapaxes(out2, 0, 1), want_out, 1e-12, "no weights " + what);
      const auto [out3, per_head] = mha.forward(in(q), in(k), in(v), kpm.to(d), true, attn.to(d), false);
      expect_close(per_head, want_w, 1e-12, "per-head weights " + what);
    }
  }
}

TEST(AttentionLayers, MultiheadAttentionHasPyTorchsNamesAndGradients) {
  random::seed(3);
  nn::MultiheadAttention mha(4, 2, 0.0, true, true, float64, cpu());
  std::vector<std::string> names;
  for (const auto& [name, p] : mha.named_parameters()) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{"in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias"}));
  EXPECT_EQ(abs(mha.parameter("in_proj_bias")).max().item<double>(), 0.0);
  // xavier_uniform over (12, 4): bound sqrt(6 / 16).
  EXPECT_LE(abs(mha.parameter("in_proj_weight")).max().item<double>(), std::sqrt(6.0 / 16.0));
  const Array x = rand({2, 3, 4});
  const GradcheckResult r = gradcheck(
      [&](const std::vector<Array>& in) { return mha.forward(in[0], in[0], in[0], {}, false, {}, true, true).first; },
      {x});
  EXPECT_TRUE(r.passed) << r.report;
  kiln_test::expect_error<ValueError>([] { nn::MultiheadAttention(6, 4); }, {"multiple of num_heads"});
  kiln_test::expect_error<ShapeError>([&] { (void)mha.forward(x, x, x, ones({2, 4}, bool_, cpu())); },
                                      {"key_padding_mask must be (N, S) = (2, 3)"});
}

}  // namespace
}  // namespace kiln
