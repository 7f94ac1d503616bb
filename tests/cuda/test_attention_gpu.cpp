// Attention over a long sequence on a GPU: a causal attention over T = 32768 with one head of 64 (forward and
// backward) keeps its peak memory to a few MiB beyond its inputs and outputs, where the T x T scores alone would
// take 4 GiB; its output equals the CPU's (float32) on sampled rows.
#include <gtest/gtest.h>

#ifdef KILN_WITH_CUDA

#include <cmath>
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

}  // namespace
}  // namespace kiln

#endif  // KILN_WITH_CUDA
