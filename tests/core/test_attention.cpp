// nn::scaled_dot_product_attention on every backend against a float64 CPU reference written the direct way
// (the whole L x S score matrix, softmax, then the product), for boolean and additive masks broadcast over batch
// and heads, is_causal with L != S, grouped-query heads and a custom scale; gradients by gradcheck (float64) and
// against the reference's recorded gradients; dropout's mask regenerated exactly in backward; many query blocks
// (sequences longer than a block); errors.
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

/// The direct formula in float64 on the CPU: softmax(q k^T * scale + mask) v, k/v heads repeated for GQA.
Array reference(Array q, Array k, Array v, const Array& mask, bool causal, double scale, bool gqa) {
  q = q.to(cpu()).astype(float64);
  k = k.to(cpu()).astype(float64);
  v = v.to(cpu()).astype(float64);
  if (gqa && k.shape(-3) != q.shape(-3)) {
    const int64_t rep = q.shape(-3) / k.shape(-3);
    k = repeat(k, rep, -3);
    v = repeat(v, rep, -3);
  }
  Array s = matmul(q, swapaxes(k, -1, -2)) * scale;
  const int64_t L = q.shape(-2), S = k.shape(-2);
  if (causal) s = where(tril(ones({L, S}, bool_, cpu())), s, -std::numeric_limits<double>::infinity());
  if (mask.defined())
    s = mask.dtype() == bool_ ? where(mask.to(cpu()), s, -std::numeric_limits<double>::infinity())
                              : s + mask.to(cpu()).astype(float64);
  return matmul(nn::softmax(s, -1), v);
}

void expect_close(const Array& got, const Array& want, double tol, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  const std::vector<double> g = got.to(cpu()).astype(float64).to_vector<double>(), w = want.to_vector<double>();
  for (size_t i = 0; i < g.size(); ++i) {
    if (std::isnan(w[i])) {
      EXPECT_TRUE(std::isnan(g[i])) << what << " element " << i;
      continue;
    }
    ASSERT_NEAR(g[i], w[i], tol * (1 + std::abs(w[i]))) << what << " element " << i;
  }
}

Array rand(const Shape& s, DType dtype, Device d) { return random::normal(s, 0.0, 1.0, float64, cpu()).astype(dtype).to(d); }

TEST(Attention, EqualsTheDirectFormulaOnEveryBackendWithMasksCausalGqaAndScale) {
  random::seed(1);
  for (Device d : harness::backends()) {
    for (DType dt : {float32, float64}) {
      const double tol = dt == float64 ? 1e-12 : 2e-5;
      const Array q = rand({2, 4, 7, 8}, dt, d), k = rand({2, 4, 5, 8}, dt, d), v = rand({2, 4, 5, 6}, dt, d);
      const std::string where_ = d.str() + " " + std::string(dtype_name(dt));
      expect_close(nn::scaled_dot_product_attention(q, k, v), reference(q, k, v, {}, false, 1 / std::sqrt(8.0), false),
                   tol, "plain " + where_);
      // A boolean mask over (L, S) broadcast over batch and heads, with at least one key per row.
      const Array bmask = greater(random::uniform({7, 5}, float32, cpu()), 0.3f).to(d);
      const Array bm = logical_or(bmask, eye(7, 5, 0, bool_, d));
      expect_close(nn::scaled_dot_product_attention(q, k, v, bm), reference(q, k, v, bm, false, 1 / std::sqrt(8.0), false),
                   tol, "bool mask " + where_);
      // An additive per-head mask (1, 4, 1, 5) and a custom scale.
      const Array am = rand({1, 4, 1, 5}, dt, d);
      expect_close(nn::scaled_dot_product_attention(q, k, v, am, 0.0, false, 0.3), reference(q, k, v, am, false, 0.3, false),
                   tol, "additive mask " + where_);
      // Causal with more queries than keys (the top-left triangle: row i sees keys 0..i).
      expect_close(nn::scaled_dot_product_attention(q, k, v, {}, 0.0, true), reference(q, k, v, {}, true, 1 / std::sqrt(8.0), false),
                   tol, "causal " + where_);
      // Grouped-query: 4 query heads over 2 k/v heads.
      const Array k2 = rand({2, 2, 5, 8}, dt, d), v2 = rand({2, 2, 5, 6}, dt, d);
      expect_close(nn::scaled_dot_product_attention(q, k2, v2, {}, 0.0, false, {}, true),
                   reference(q, k2, v2, {}, false, 1 / std::sqrt(8.0), true), tol, "gqa " + where_);
    }
  }
}

TEST(Attention, ManyQueryBlocksAndAFullyMaskedRow) {
  random::seed(2);
  // 1 x 300 x 4000 scores: more than one block of query rows (a block holds 2^20 scores).
  const Array q = rand({1, 300, 16}, float32, cpu()), k = rand({1, 4000, 16}, float32, cpu()),
              v = rand({1, 4000, 3}, float32, cpu());
  expect_close(nn::scaled_dot_product_attention(q, k, v, {}, 0.0, true),
               reference(q, k, v, {}, true, 0.25, false), 2e-5, "causal, many blocks");
  // Row 1 sees no key: NaN, as PyTorch's softmax of -inf everywhere.
  Array mask = ones({3, 4}, bool_, cpu());
  mask[1] = zeros({4}, bool_, cpu());
  const Array out = nn::scaled_dot_product_attention(rand({3, 2}, float64, cpu()), rand({4, 2}, float64, cpu()),
                                                     rand({4, 2}, float64, cpu()), mask);
  const std::vector<double> o = out.to_vector<double>();
  EXPECT_TRUE(std::isnan(o[2]) && std::isnan(o[3]));
  EXPECT_FALSE(std::isnan(o[0]) || std::isnan(o[5]));
}

TEST(Attention, GradientsPassGradcheckAndEqualTheDirectFormulasOnEveryBackend) {
  random::seed(3);
  const Array q = rand({2, 2, 4, 3}, float64, cpu()), k = rand({2, 1, 5, 3}, float64, cpu()),
              v = rand({2, 1, 5, 2}, float64, cpu());
  const Array am = rand({4, 5}, float64, cpu());
  for (bool causal : {false, true}) {
    const GradcheckResult r = gradcheck(
        [&](const std::vector<Array>& in) {
          return nn::scaled_dot_product_attention(in[0], in[1], in[2], causal ? Array() : am, 0.0, causal, 0.7, true);
        },
        {q, k, v});
    EXPECT_TRUE(r.passed) << r.report;
  }
  for (Device d : harness::backends()) {
    Array qd = q.to(d).astype(float32).set_requires_grad(), kd = k.to(d).astype(float32).set_requires_grad(),
          vd = v.to(d).astype(float32).set_requires_grad();
    const Array w = rand({2, 2, 4, 2}, float32, d);
    sum(nn::scaled_dot_product_attention(qd, kd, vd, {}, 0.0, true, {}, true) * w).backward();
    Array qr = q.copy().set_requires_grad(), kr = k.copy().set_requires_grad(), vr = v.copy().set_requires_grad();
    sum(reference(qr, kr, vr, {}, true, 1 / std::sqrt(3.0), true) * w.to(cpu()).astype(float64)).backward();
    expect_close(qd.grad(), qr.grad(), 2e-5, "dq " + d.str());
    expect_close(kd.grad(), kr.grad(), 2e-5, "dk " + d.str());
    expect_close(vd.grad(), vr.grad(), 2e-5, "dv " + d.str());
  }
}

TEST(Attention, DropoutDropsWeightsAndBackwardUsesTheSameMask) {
  random::seed(4);
  const Array q = rand({1, 6, 4}, float64, cpu()), k = rand({1, 9, 4}, float64, cpu()), v = rand({1, 9, 5}, float64, cpu());
  random::seed(10);
  const Array a = nn::scaled_dot_product_attention(q, k, v, {}, 0.4);
  const random::GeneratorState after = random::get_state();
  random::seed(10);
  const Array b = nn::scaled_dot_product_attention(q, k, v, {}, 0.4);
  EXPECT_EQ(a.to_vector<double>(), b.to_vector<double>());
  EXPECT_EQ(random::get_state().offset, after.offset);
  EXPECT_GT(after.offset, 0u) << "the default generator moves past the draws";
  EXPECT_NE(a.to_vector<double>(), nn::scaled_dot_product_attention(q, k, v).to_vector<double>());
  // The dropped weights are those of the uniform draws below 0.4 from the state the call started at: rebuild
  // the output with those draws and the direct formula.
  random::seed(10);
  const Array keep = (random::uniform({1, 6, 9}, float32, cpu()) >= 0.4f).astype(float64) / 0.6;
  const Array weights = nn::softmax(matmul(q, swapaxes(k, -1, -2)) * 0.5, -1) * keep;
  expect_close(a, matmul(weights, v), 1e-12, "dropout output");
  // Gradients use the same mask: gradcheck with the generator reset before each evaluation.
  const GradcheckResult r = gradcheck(
      [&](const std::vector<Array>& in) {
        random::seed(10);
        return nn::scaled_dot_product_attention(in[0], in[1], in[2], {}, 0.4);
      },
      {q, k, v});
  EXPECT_TRUE(r.passed) << r.report;
}

// float16/bfloat16 4-d operands without a mask take the fused path (cuDNN's flash attention on a GPU; the blocked
// computation where no engine runs them, as on the CPU), forward and backward, causal or not, grouped-query.
TEST(Attention, HalfPrecisionOperandsEqualTheFloat64FormulaForwardAndBackwardOnEveryBackend) {
  random::seed(6);
  struct Case {
    int64_t h, hk, l, s, e;
    bool causal;
  };
  for (Device d : harness::backends()) {
    for (DType dt : {float16, bfloat16}) {
      const double tol = dt == float16 ? 4e-3 : 3e-2;
      for (const Case& c : {Case{4, 4, 16, 16, 64, false}, Case{4, 4, 16, 16, 64, true}, Case{4, 2, 9, 24, 32, true},
                            Case{2, 1, 24, 9, 16, false}}) {
        const std::string what = d.str() + " " + std::string(dtype_name(dt)) + " h" + std::to_string(c.h) + "/" +
                                  std::to_string(c.hk) + " l" + std::to_string(c.l) + " s" + std::to_string(c.s) +
                                  (c.causal ? " causal" : "");
        const Array q0 = rand({2, c.h, c.l, c.e}, dt, cpu()), k0 = rand({2, c.hk, c.s, c.e}, dt, cpu()),
                    v0 = rand({2, c.hk, c.s, c.e}, dt, cpu()), w0 = rand({2, c.h, c.l, c.e}, dt, cpu());
        Array q = q0.to(d).set_requires_grad(), k = k0.to(d).set_requires_grad(), v = v0.to(d).set_requires_grad();
        const Array out = nn::scaled_dot_product_attention(q, k, v, {}, 0.0, c.causal, {}, c.hk != c.h);
        ASSERT_EQ(out.dtype(), dt) << what;
        sum(out * w0.to(d)).backward();
        Array qr = q0.astype(float64).set_requires_grad(), kr = k0.astype(float64).set_requires_grad(),
              vr = v0.astype(float64).set_requires_grad();
        const Array want = reference(qr, kr, vr, {}, c.causal, 1 / std::sqrt(double(c.e)), true);
        sum(want * w0.astype(float64)).backward();
        kiln_test::expect_close_scaled(out, want.detach(), tol, "out " + what);
        kiln_test::expect_close_scaled(q.grad(), qr.grad(), tol, "dq " + what);
        kiln_test::expect_close_scaled(k.grad(), kr.grad(), tol, "dk " + what);
        kiln_test::expect_close_scaled(v.grad(), vr.grad(), tol, "dv " + what);
      }
    }
  }
}

TEST(Attention, TheFusedPrimitiveDeclinesWhereNoEngineRunsItAndChecksItsOperands) {
  using kiln_test::expect_error;
  const Array q = ones({1, 2, 4, 8}, float16, cpu()), k = ones({1, 1, 5, 8}, float16, cpu());
  const int64_t declined = flash_attention_stats().declined;
  EXPECT_FALSE(flash_attention_forward(q, k, k, 0.5, false).has_value());
  const FlashAttentionStats stats = flash_attention_stats();
  EXPECT_EQ(stats.declined, declined + 1);
  EXPECT_NE(stats.refusal.find("no fused attention engine on cpu"), std::string::npos) << stats.refusal;
  expect_error<ShapeError>([&] { (void)flash_attention_forward(q.reshape({2, 4, 8}), k, k, 0.5, false); },
                           {"flash_attention_forward", "4-d", "(2, 4, 8)"});
  expect_error<ShapeError>([&] { (void)flash_attention_forward(ones({1, 3, 4, 8}, float16, cpu()), ones({1, 2, 5, 8}, float16, cpu()),
                                                                ones({1, 2, 5, 8}, float16, cpu()), 0.5, false); },
                           {"number of heads dividing q's"});
  expect_error<DTypeError>([&] { (void)flash_attention_forward(q, k.astype(bfloat16), k, 0.5, false); }, {"one dtype"});
  Array qg = q.copy().set_requires_grad();
  expect_error<DTypeError>([&] { (void)flash_attention_forward(qg, k, k, 0.5, false); },
                           {"flash_attention_forward", "nn::scaled_dot_product_attention"});
  expect_error<ShapeError>([&] { (void)flash_attention_backward(q, k, k, q, q, ones({1, 2, 4}, float16, cpu()), 0.5, false); },
                           {"flash_attention_backward", "lse"});
  // Dropout: a declined call draws nothing from the generator; the probability and the backward's rng are checked.
  const random::GeneratorState state = random::get_state();
  EXPECT_FALSE(flash_attention_forward(q, k, k, 0.5, false, 0.1).has_value());
  EXPECT_EQ(random::get_state().offset, state.offset);
  expect_error<ValueError>([&] { (void)flash_attention_forward(q, k, k, 0.5, false, 1.0); },
                           {"flash_attention_forward", "dropout_p", "[0, 1)"});
  expect_error<ValueError>([&] { (void)flash_attention_forward(q, k, k, 0.5, false, -0.1); }, {"dropout_p"});
  const Array lse = ones({1, 2, 4}, float32, cpu());
  expect_error<ValueError>([&] { (void)flash_attention_backward(q, k, k, q, q, lse, 0.5, false, 0.1); },
                           {"flash_attention_backward", "rng", "same mask"});
  expect_error<ValueError>(
      [&] { (void)flash_attention_backward(q, k, k, q, q, lse, 0.5, false, 0.1, zeros({2}, int32, cpu())); },
      {"flash_attention_backward", "rng"});
}

// On the CPU, half-precision 4-d operands with dropout draw kiln's mask (uniform draws below p, from the state the
// call starts at), as every dtype does there: only a GPU's fused engine draws its own.
TEST(Attention, HalfPrecisionDropoutOnTheCpuDrawsKilnsMask) {
  random::seed(12);
  const Array q = rand({1, 2, 6, 8}, float64, cpu()), k = rand({1, 2, 9, 8}, float64, cpu()),
              v = rand({1, 2, 9, 8}, float64, cpu());
  for (DType dtype : {bfloat16, float16}) {
    random::seed(13);
    const Array a = nn::scaled_dot_product_attention(q.astype(dtype), k.astype(dtype), v.astype(dtype), {}, 0.3);
    random::seed(13);
    const Array keep = (random::uniform({1, 2, 6, 9}, float32, cpu()) >= 0.3f).astype(float64) / 0.7;
    const Array qd = q.astype(dtype).astype(float64), kd = k.astype(dtype).astype(float64),
                vd = v.astype(dtype).astype(float64);
    const Array weights = nn::softmax(matmul(qd, swapaxes(kd, -1, -2)) / std::sqrt(8.0), -1) * keep;
    kiln_test::expect_close_scaled(a, matmul(weights, vd), dtype == float16 ? 2e-3 : 1e-2,
                                   std::string("dropout output ") + std::string(dtype_name(dtype)));
  }
}

TEST(Attention, BadInputsAreNamed) {
  const Array q = ones({2, 3, 4}, float32, cpu()), k = ones({2, 5, 4}, float32, cpu()), v = ones({2, 5, 4}, float32, cpu());
  using kiln_test::expect_error;
  expect_error<ShapeError>([&] { (void)nn::scaled_dot_product_attention(q, ones({2, 5, 3}, float32, cpu()), v); },
                           {"scaled_dot_product_attention", "key has 3 features", "query has 4"});
  expect_error<ShapeError>([&] { (void)nn::scaled_dot_product_attention(q, k, ones({2, 6, 4}, float32, cpu())); },
                           {"value has 6 positions", "key has 5"});
  expect_error<DTypeError>([&] { (void)nn::scaled_dot_product_attention(q, k.astype(float64), v); }, {"one dtype"});
  expect_error<DTypeError>([&] { (void)nn::scaled_dot_product_attention(q.astype(int32), k, v); }, {"floating"});
  expect_error<ValueError>([&] { (void)nn::scaled_dot_product_attention(q, k, v, ones({3, 5}, bool_, cpu()), 0.0, true); },
                           {"either attn_mask or is_causal"});
  expect_error<ShapeError>([&] { (void)nn::scaled_dot_product_attention(q, k, v, ones({4, 5}, bool_, cpu())); },
                           {"attn_mask of shape (4, 5)", "does not broadcast"});
  expect_error<ValueError>([&] { (void)nn::scaled_dot_product_attention(q, k, v, {}, 1.0); }, {"dropout_p"});
  expect_error<ShapeError>(
      [&] {
        (void)nn::scaled_dot_product_attention(ones({1, 3, 2, 4}, float32, cpu()), ones({1, 2, 5, 4}, float32, cpu()),
                                               ones({1, 2, 5, 4}, float32, cpu()), {}, 0.0, false, {}, true);
      },
      {"multiple of key's (2)"});
  expect_error<ShapeError>(
      [&] {
        (void)nn::scaled_dot_product_attention(ones({1, 4, 2, 4}, float32, cpu()), ones({1, 2, 5, 4}, float32, cpu()),
                                               ones({1, 2, 5, 4}, float32, cpu()));
      },
      {"do not broadcast", "enable_gqa"});
}

}  // namespace
}  // namespace kiln
