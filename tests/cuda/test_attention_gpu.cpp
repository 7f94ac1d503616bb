// Attention over a long sequence on a GPU: a causal attention over T = 32768 with one head of 64 (forward and
// backward) keeps its peak memory to a few MiB beyond its inputs and outputs, where the T x T scores alone would
// take 4 GiB; its output equals the CPU's (float32) on sampled rows. Half-precision operands run cuDNN's fused
// flash attention (kiln/flash_attention.hpp), checked against the blocked float32 computation of the same inputs.
#include <gtest/gtest.h>

#ifdef KILN_WITH_CUDA

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "kiln/cuda.hpp"
#include "kiln/kiln.hpp"
#include "test_util.hpp"

namespace kiln {
namespace {

TEST(AttentionGpu, ACausalAttentionOver32kPositionsNeedsNoTxTMatrix) {
  KILN_REQUIRE_GPU();
  const Device d = gpu(0);
  const int64_t t = 32768, e = 64;
  random::seed(5);
  Array q = random::normal({1, 1, t, e}, float32, d).set_requires_grad(),
        k = random::normal({1, 1, t, e}, float32, d).set_requires_grad(),
        v = random::normal({1, 1, t, e}, float32, d).set_requires_grad();
  const Array g = random::normal({1, 1, t, e}, float32, d);
  synchronize(d);
  cuda::reset_peak_memory_stats(d);
  const size_t base = cuda::memory_stats(d).allocated;
  Array out = nn::scaled_dot_product_attention(q, k, v, {}, 0.0, true);
  sum(out * g).backward();
  synchronize(d);
  const size_t peak = cuda::memory_stats(d).peak_allocated - base;
  const size_t array_bytes = static_cast<size_t>(t * e * 4);  // one (T, 64) float32 array: 8 MiB
  // Output, three gradients, the row statistics and a few block temporaries (4 MiB of scores each): far below
  // the 4 GiB of one T x T float32 matrix.
  EXPECT_LT(peak, 12 * array_bytes + (size_t{64} << 20)) << "peak " << peak << " bytes";
  // Rows 0, 1000 and T-1 against the CPU's float64 computation of the same rows.
  const Array qc = q.detach().to(cpu()).astype(float64), kc = k.detach().to(cpu()).astype(float64),
              vc = v.detach().to(cpu()).astype(float64), oc = out.detach().to(cpu()).astype(float64);
  for (int64_t row : {int64_t{0}, int64_t{1000}, t - 1}) {
    const Array s = matmul(qc.slice(2, row, row + 1), swapaxes(kc.slice(2, 0, row + 1), -1, -2)) * 0.125;
    const Array want = matmul(nn::softmax(s, -1), vc.slice(2, 0, row + 1));
    const std::vector<double> w = want.to_vector<double>(), got = oc.slice(2, row, row + 1).to_vector<double>();
    for (size_t i = 0; i < w.size(); ++i) ASSERT_NEAR(got[i], w[i], 1e-4) << "row " << row << " feature " << i;
  }
}

/// Skips when this build has no fused engine (no cudnn-frontend headers); otherwise the engine must have run.
#define KILN_REQUIRE_FUSED_ENGINE()                                                                \
  do {                                                                                             \
    const FlashAttentionStats s_ = flash_attention_stats();                                        \
    if (s_.refusal.find("no cudnn-frontend") != std::string::npos) GTEST_SKIP() << s_.refusal;     \
  } while (0)

TEST(AttentionGpu, HalfTypesRunTheFusedKernelAndEqualTheBlockedFloat32Computation) {
  KILN_REQUIRE_GPU();
  const Device d = gpu(0);
  random::seed(7);
  struct Case {
    int64_t h, hk, l, s, e;
    bool causal, strided;
  };
  for (DType dt : {bfloat16, float16}) {
    const double tol = dt == float16 ? 5e-3 : 3e-2;
    for (const Case& c : {Case{8, 8, 256, 256, 64, false, false}, Case{8, 8, 256, 256, 64, true, true},
                          Case{8, 2, 200, 320, 128, true, false}, Case{4, 4, 77, 77, 32, false, true}}) {
      const std::string what = std::string(dtype_name(dt)) + " h" + std::to_string(c.h) + "/" + std::to_string(c.hk) +
                               " l" + std::to_string(c.l) + " s" + std::to_string(c.s) + " d" + std::to_string(c.e) +
                               (c.causal ? " causal" : "") + (c.strided ? " strided" : "");
      // Strided: q, k, v as the heads' views of (B, T, H, D) projections, as attention layers make them.
      auto make = [&](int64_t heads, int64_t len) {
        return c.strided ? random::normal({2, len, heads, c.e}, dt, d).permute({0, 2, 1, 3})
                         : random::normal({2, heads, len, c.e}, dt, d);
      };
      Array q = make(c.h, c.l).set_requires_grad(), k = make(c.hk, c.s).set_requires_grad(),
            v = make(c.hk, c.s).set_requires_grad();
      const Array w = random::normal({2, c.h, c.l, c.e}, dt, d);
      const FlashAttentionStats before = flash_attention_stats();
      const Array out = nn::scaled_dot_product_attention(q, k, v, {}, 0.0, c.causal, {}, c.hk != c.h);
      sum((out * w).astype(float32)).backward();
      KILN_REQUIRE_FUSED_ENGINE();
      const FlashAttentionStats after = flash_attention_stats();
      EXPECT_EQ(after.forward, before.forward + 1) << what << ": " << after.refusal;
      EXPECT_EQ(after.backward, before.backward + 1) << what << ": " << after.refusal;
      Array qr = q.detach().astype(float32).set_requires_grad(), kr = k.detach().astype(float32).set_requires_grad(),
            vr = v.detach().astype(float32).set_requires_grad();
      const Array want = nn::scaled_dot_product_attention(qr, kr, vr, {}, 0.0, c.causal, {}, c.hk != c.h);
      sum(want * w.astype(float32)).backward();
      kiln_test::expect_close_scaled(out, want.detach(), tol, "out " + what);
      kiln_test::expect_close_scaled(q.grad(), qr.grad(), tol, "dq " + what);
      kiln_test::expect_close_scaled(k.grad(), kr.grad(), tol, "dk " + what);
      kiln_test::expect_close_scaled(v.grad(), vr.grad(), tol, "dv " + what);
    }
  }
}

TEST(AttentionGpu, AFusedCausalAttentionOver32kPositionsInBfloat16KeepsMemoryLinear) {
  KILN_REQUIRE_GPU();
  const Device d = gpu(0);
  const int64_t t = 32768, e = 64;
  random::seed(8);
  Array q = random::normal({1, 1, t, e}, bfloat16, d).set_requires_grad(),
        k = random::normal({1, 1, t, e}, bfloat16, d).set_requires_grad(),
        v = random::normal({1, 1, t, e}, bfloat16, d).set_requires_grad();
  const Array g = random::normal({1, 1, t, e}, bfloat16, d);
  synchronize(d);
  cuda::reset_peak_memory_stats(d);
  const size_t base = cuda::memory_stats(d).allocated;
  const FlashAttentionStats before = flash_attention_stats();
  Array out = nn::scaled_dot_product_attention(q, k, v, {}, 0.0, true);
  out.backward(g);
  synchronize(d);
  KILN_REQUIRE_FUSED_ENGINE();
  EXPECT_EQ(flash_attention_stats().backward, before.backward + 1) << flash_attention_stats().refusal;
  const size_t peak = cuda::memory_stats(d).peak_allocated - base;
  const size_t array_bytes = static_cast<size_t>(t * e * 2);  // one (T, 64) bfloat16 array: 4 MiB
  // Output, three gradients, the row statistics and cuDNN's workspace: the T x T scores would be 2 GiB.
  EXPECT_LT(peak, 12 * array_bytes + (size_t{64} << 20)) << "peak " << peak << " bytes";
  const Array qc = q.detach().to(cpu()).astype(float64), kc = k.detach().to(cpu()).astype(float64),
              vc = v.detach().to(cpu()).astype(float64), oc = out.detach().to(cpu()).astype(float64);
  for (int64_t row : {int64_t{0}, int64_t{1000}, t - 1}) {
    const Array s = matmul(qc.slice(2, row, row + 1), swapaxes(kc.slice(2, 0, row + 1), -1, -2)) * 0.125;
    const Array want = matmul(nn::softmax(s, -1), vc.slice(2, 0, row + 1));
    const std::vector<double> w = want.to_vector<double>(), got = oc.slice(2, row, row + 1).to_vector<double>();
    for (size_t i = 0; i < w.size(); ++i) ASSERT_NEAR(got[i], w[i], 2e-2) << "row " << row << " feature " << i;
  }
}

TEST(AttentionGpu, TheFusedKernelIsCapturedInACudaGraphAfterAnEagerStep) {
  KILN_REQUIRE_GPU();
  const Device d = gpu(0);
  random::seed(9);
  Array q = random::normal({2, 4, 128, 64}, bfloat16, d).set_requires_grad(),
        k = random::normal({2, 4, 128, 64}, bfloat16, d).set_requires_grad(),
        v = random::normal({2, 4, 128, 64}, bfloat16, d).set_requires_grad();
  const Array g = random::normal({2, 4, 128, 64}, bfloat16, d);
  auto step = [&] {
    Array out = nn::scaled_dot_product_attention(q, k, v, {}, 0.0, true);
    out.backward(g);
    return out;
  };
  // The eager step builds cuDNN's graphs (a capture builds none); its results are the reference.
  const Array eager = step().detach().copy();
  KILN_REQUIRE_FUSED_ENGINE();
  const Array eager_dq = q.grad().copy(), eager_dv = v.grad().copy();
  q.set_grad({}), k.set_grad({}), v.set_grad({});
  synchronize(d);
  const FlashAttentionStats before = flash_attention_stats();
  Stream s = Stream::create(d);
  cuda::Graph graph;
  Array captured;
  {
    cuda::GraphCapture capture(graph, s);
    captured = step();
  }
  const FlashAttentionStats after = flash_attention_stats();
  EXPECT_EQ(after.forward, before.forward + 1) << after.refusal;
  EXPECT_EQ(after.backward, before.backward + 1) << after.refusal;
  graph.replay();
  s.synchronize();
  kiln_test::expect_close_scaled(captured, eager, 1e-2, "captured out");
  kiln_test::expect_close_scaled(q.grad(), eager_dq, 1e-2, "captured dq");
  kiln_test::expect_close_scaled(v.grad(), eager_dv, 1e-2, "captured dv");
}

}  // namespace
}  // namespace kiln

#endif  // KILN_WITH_CUDA
