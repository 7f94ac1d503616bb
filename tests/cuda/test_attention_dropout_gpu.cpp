// Dropout inside cuDNN's fused attention (kiln/flash_attention.hpp, nn::scaled_dot_product_attention on a GPU).
// The mask is cuDNN's own (its Philox, from a seed and offset kiln's generator gives it), so the tests recover it
// first: with q = 0 every softmax row is uniform (1/n over the n keys it sees) and with v the identity (T x D,
// D >= T, one-hot rows) the output is the mask itself, out[i][j] = keep[i][j] / ((1 - p) n). With the mask known,
// the fused forward and backward on random operands drawn at the same generator state (hence with the same mask)
// are checked against the composed float32 attention with that mask as an explicit multiplicative factor.
#include <gtest/gtest.h>

#ifdef KILN_WITH_CUDA

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "kiln/cuda.hpp"
#include "kiln/kiln.hpp"
#include "test_util.hpp"

namespace kiln {
namespace {

constexpr int64_t kB = 2, kH = 4, kT = 64, kD = 64;
constexpr double kP = 0.2;

/// Skips when this build has no fused engine (no cudnn-frontend headers); otherwise the engine must have run.
#define KILN_REQUIRE_FUSED_ENGINE()                                                            \
  do {                                                                                         \
    const FlashAttentionStats s_ = flash_attention_stats();                                    \
    if (s_.refusal.find("no cudnn-frontend") != std::string::npos) GTEST_SKIP() << s_.refusal; \
  } while (0)

/// The keys query row i sees: all T, or with is_causal the i + 1 up to it.
int64_t visible(int64_t row, bool causal) { return causal ? row + 1 : kT; }

/// The fused attention of q = 0, k = 0 and v = the identity: out[b][h][i][j] = keep / ((1 - p) n_i).
Array probe(DType dtype, double p, bool causal) {
  const Device d = gpu(0);
  const Array zero = zeros({kB, kH, kT, kD}, dtype, d);
  const Array v = broadcast_to(eye(kT, kD, 0, dtype, d), {kB, kH, kT, kD}).contiguous();
  return nn::scaled_dot_product_attention(zero, zero, v, {}, p, causal);
}

/// The mask (B, H, T, T) of 0 and 1 read from a probe's output, after checking that every entry is either exactly
/// 0 (dropped, or a key the row does not see) or 1 / ((1 - p) n_i) within the dtype's rounding. `kept` and
/// `seen` count the kept and the visible weights.
std::vector<double> recover_mask(const Array& out, double p, bool causal, DType dtype, int64_t& kept, int64_t& seen) {
  const std::vector<double> o = out.to(cpu()).astype(float64).to_vector<double>();
  const double ulp = dtype == bfloat16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11);
  std::vector<double> mask(o.size(), 0.0);
  kept = 0, seen = 0;
  for (int64_t bh = 0; bh < kB * kH; ++bh)
    for (int64_t i = 0; i < kT; ++i) {
      const int64_t n = visible(i, causal);
      const double want = 1.0 / ((1.0 - p) * static_cast<double>(n));
      for (int64_t j = 0; j < kT; ++j) {
        const size_t at = static_cast<size_t>((bh * kT + i) * kD + j);
        const double got = o[at];
        if (j >= n) {
          EXPECT_EQ(got, 0.0) << "row " << i << " key " << j << " is after the causal diagonal";
          continue;
        }
        ++seen;
        if (got == 0.0) continue;
        EXPECT_NEAR(got, want, 2 * ulp * want) << "row " << i << " key " << j << ": neither 0 nor 1/((1-p)n)";
        mask[at] = 1.0;
        ++kept;
      }
    }
  return mask;
}

/// The mask as an array (B, H, T, T) float32 on the GPU: o's (B, H, T, D) layout with D = T.
Array mask_array(const std::vector<double>& mask) {
  return from_data(mask, Shape{kB, kH, kT, kD}, gpu(0)).astype(float32);
}

/// The kept fraction is 1 - p within 5 standard deviations of a binomial count over `seen` weights.
void expect_kept_fraction(int64_t kept, int64_t seen, double p, const std::string& what) {
  const double fraction = static_cast<double>(kept) / static_cast<double>(seen);
  const double sigma = std::sqrt(p * (1 - p) / static_cast<double>(seen));
  EXPECT_NEAR(fraction, 1 - p, 5 * sigma) << what << ": " << kept << " of " << seen << " weights kept";
}

void mask_follows_the_generator(bool causal) {
  for (DType dtype : {bfloat16, float16}) {
    const std::string what = std::string(dtype_name(dtype)) + (causal ? " causal" : "");
    random::seed(21);
    const random::GeneratorState start = random::get_state();
    const FlashAttentionStats before = flash_attention_stats();
    const Array first = probe(dtype, kP, causal);
    KILN_REQUIRE_FUSED_ENGINE();
    ASSERT_EQ(flash_attention_stats().forward, before.forward + 1) << what << ": " << flash_attention_stats().refusal;
    // The generator moves on by one Philox block per attention weight.
    EXPECT_EQ(random::get_state().seed, start.seed);
    EXPECT_EQ(random::get_state().offset, start.offset + static_cast<uint64_t>(kB * kH * kT * kT)) << what;
    int64_t kept = 0, seen = 0;
    const std::vector<double> mask = recover_mask(first, kP, causal, dtype, kept, seen);
    expect_kept_fraction(kept, seen, kP, what);

    // The next call draws another mask: about 2 p (1 - p) of the weights differ between two independent ones.
    int64_t kept2 = 0, seen2 = 0;
    const std::vector<double> next = recover_mask(probe(dtype, kP, causal), kP, causal, dtype, kept2, seen2);
    expect_kept_fraction(kept2, seen2, kP, what + " (second call)");
    int64_t differ = 0;
    for (size_t i = 0; i < mask.size(); ++i) differ += mask[i] != next[i];
    const double expected = 2 * kP * (1 - kP) * static_cast<double>(seen);
    EXPECT_NEAR(static_cast<double>(differ), expected, 5 * std::sqrt(expected)) << what << ": masks of two calls";

    // The same generator state gives the same mask.
    random::set_state(start);
    int64_t kept3 = 0, seen3 = 0;
    const std::vector<double> again = recover_mask(probe(dtype, kP, causal), kP, causal, dtype, kept3, seen3);
    EXPECT_EQ(again, mask) << what << ": the same seed drew another mask";
    random::seed(21);
    EXPECT_EQ(recover_mask(probe(dtype, kP, causal), kP, causal, dtype, kept3, seen3), mask)
        << what << ": random::seed(21) drew another mask";
  }
}

TEST(AttentionDropoutGpu, TheFusedMaskIsRecoverableAndFollowsTheGenerator) {
  KILN_REQUIRE_GPU();
  mask_follows_the_generator(false);
}

TEST(AttentionDropoutGpu, TheFusedCausalMaskIsRecoverableAndFollowsTheGenerator) {
  KILN_REQUIRE_GPU();
  mask_follows_the_generator(true);
}

/// The composed float32 attention with an explicit mask: softmax(q k^T scale [+ causal]) * keep / (1 - p) @ v.
Array composed(const Array& q, const Array& k, const Array& v, const Array& keep, double p, bool causal) {
  Array s = matmul(q, swapaxes(k, -1, -2)) * (1.0 / std::sqrt(static_cast<double>(kD)));
  if (causal) {
    const Array col = arange(int64_t{0}, kT, int64_t{1}, int64, q.device()).reshape({1, kT});
    const Array row = arange(int64_t{0}, kT, int64_t{1}, int64, q.device()).reshape({kT, 1});
    s = s + where(greater(col, row), -std::numeric_limits<double>::infinity(), 0.0).astype(float32);
  }
  return matmul(nn::softmax(s, -1) * keep * (1.0 / (1.0 - p)), v);
}

void fused_dropout_equals_the_composed_attention(bool causal) {
  const Device d = gpu(0);
  for (DType dtype : {bfloat16, float16}) {
    const double tol = dtype == float16 ? 5e-3 : 3e-2;
    const std::string what = std::string(dtype_name(dtype)) + (causal ? " causal" : "");
    random::seed(31);
    Array q = random::normal({kB, kH, kT, kD}, dtype, d).set_requires_grad(),
          k = random::normal({kB, kH, kT, kD}, dtype, d).set_requires_grad(),
          v = random::normal({kB, kH, kT, kD}, dtype, d).set_requires_grad();
    const Array g = random::normal({kB, kH, kT, kD}, dtype, d);
    const random::GeneratorState start = random::get_state();
    int64_t kept = 0, seen = 0;
    const Array keep = mask_array(recover_mask(probe(dtype, kP, causal), kP, causal, dtype, kept, seen));
    KILN_REQUIRE_FUSED_ENGINE();

    random::set_state(start);  // the same mask again
    const FlashAttentionStats before = flash_attention_stats();
    const Array out = nn::scaled_dot_product_attention(q, k, v, {}, kP, causal);
    sum((out * g).astype(float32)).backward();
    const FlashAttentionStats after = flash_attention_stats();
    ASSERT_EQ(after.forward, before.forward + 1) << what << ": " << after.refusal;
    ASSERT_EQ(after.backward, before.backward + 1) << what << ": " << after.refusal;

    Array qr = q.detach().astype(float32).set_requires_grad(), kr = k.detach().astype(float32).set_requires_grad(),
          vr = v.detach().astype(float32).set_requires_grad();
    const Array want = composed(qr, kr, vr, keep, kP, causal);
    sum(want * g.astype(float32)).backward();
    kiln_test::expect_close_scaled(out, want.detach(), tol, "out " + what);
    kiln_test::expect_close_scaled(q.grad(), qr.grad(), tol, "dq " + what);
    kiln_test::expect_close_scaled(k.grad(), kr.grad(), tol, "dk " + what);
    kiln_test::expect_close_scaled(v.grad(), vr.grad(), tol, "dv " + what);
  }
}

TEST(AttentionDropoutGpu, TheFusedForwardAndBackwardEqualTheComposedAttentionWithItsMask) {
  KILN_REQUIRE_GPU();
  fused_dropout_equals_the_composed_attention(false);
}

TEST(AttentionDropoutGpu, TheFusedCausalForwardAndBackwardEqualTheComposedAttentionWithItsMask) {
  KILN_REQUIRE_GPU();
  fused_dropout_equals_the_composed_attention(true);
}

TEST(AttentionDropoutGpu, DropoutZeroAfterDropoutDrawsNothingAndDropsNothing) {
  KILN_REQUIRE_GPU();
  random::seed(41);
  (void)probe(bfloat16, kP, false);  // a dropout plan of the same problem, cached beside the one without
  KILN_REQUIRE_FUSED_ENGINE();
  const random::GeneratorState start = random::get_state();
  const FlashAttentionStats before = flash_attention_stats();
  const std::vector<double> o = probe(bfloat16, 0.0, false).to(cpu()).astype(float64).to_vector<double>();
  EXPECT_EQ(flash_attention_stats().forward, before.forward + 1) << flash_attention_stats().refusal;
  EXPECT_EQ(random::get_state().offset, start.offset);
  // Uniform rows over the identity: every entry is 1/T (exact in bfloat16 for T = 64).
  for (size_t i = 0; i < o.size(); ++i) ASSERT_EQ(o[i], 1.0 / kT) << "entry " << i;
}

TEST(AttentionDropoutGpu, ACapturedStepDrawsANewMaskAtEachReplay) {
  KILN_REQUIRE_GPU();
  const Device d = gpu(0);
  random::seed(51);
  Array q = random::normal({kB, kH, kT, kD}, bfloat16, d).set_requires_grad(),
        k = random::normal({kB, kH, kT, kD}, bfloat16, d).set_requires_grad(),
        v = random::normal({kB, kH, kT, kD}, bfloat16, d).set_requires_grad();
  const Array g = random::normal({kB, kH, kT, kD}, bfloat16, d);
  auto step = [&] {
    Array out = nn::scaled_dot_product_attention(q, k, v, {}, kP, true);
    out.backward(g);
    return out;
  };
  (void)step();  // builds cuDNN's graphs (a capture builds none)
  KILN_REQUIRE_FUSED_ENGINE();
  const random::GeneratorState start = random::get_state();
  q.set_grad({}), k.set_grad({}), v.set_grad({});
  const Array eager = step().detach().copy();
  const Array eager_dq = q.grad().copy();
  q.set_grad({}), k.set_grad({}), v.set_grad({});
  synchronize(d);

  random::set_state(start);
  const FlashAttentionStats before = flash_attention_stats();
  Stream s = Stream::create(d);
  cuda::Graph graph;
  Array captured;
  {
    cuda::GraphCapture capture(graph, s);
    captured = step();
  }
  const FlashAttentionStats after = flash_attention_stats();
  ASSERT_EQ(after.forward, before.forward + 1) << after.refusal;
  ASSERT_EQ(after.backward, before.backward + 1) << after.refusal;
  EXPECT_EQ(random::get_state().offset, start.offset) << "a capture takes its seed at each replay, not now";
  // The first replay draws what the eager step drew from the same state; the second another mask.
  graph.replay();
  s.synchronize();
  kiln_test::expect_close_scaled(captured, eager, 1e-3, "first replay's out");
  kiln_test::expect_close_scaled(q.grad(), eager_dq, 1e-2, "first replay's dq");
  const Array first = captured.copy();
  synchronize(d);  // the copy (on the current stream) reads `captured` before the next replay rewrites it
  graph.replay();
  s.synchronize();
  const double diff = abs(captured.astype(float32) - first.astype(float32)).max().item<double>();
  EXPECT_GT(diff, 0.05) << "the second replay drew the first one's mask";
  EXPECT_EQ(random::get_state().offset, start.offset + 2 * static_cast<uint64_t>(kB * kH * kT * kT));
}

}  // namespace
}  // namespace kiln

#endif  // KILN_WITH_CUDA
