// Walkthrough 4: a GPU kernel from a string, as with cupy.ElementwiseKernel,
// and a reduction kernel (an L2 norm) checked against kiln's built-in norm.
// Without a GPU it says so and exits 0; with one it checks its own results and
// returns 1 when they are wrong.
#include <cmath>
#include <cstdio>
#include <kiln/kiln.hpp>
#include <vector>

using namespace kiln;

int main() {
  if (num_gpus() == 0) {
    std::printf("plus_one: no CUDA GPU found; user kernels run on GPUs only, so this example skips.\n");
    return 0;
  }
  const Device d = gpu(0);

  // y = x + 1 over int32, compiled with NVRTC at the first call and cached (in memory and on disk).
  ElementwiseKernel plus_one("int32 x", "int32 y", "y = x + 1", "plus_one");
  Array y = plus_one(arange(10, int32, d));
  std::printf("plus_one(arange(10)) = %s\n", y.str().c_str());
  const std::vector<int32_t> got = y.to_vector<int32_t>();
  for (int32_t k = 0; k < 10; ++k)
    if (got[static_cast<size_t>(k)] != k + 1) {
      std::printf("plus_one: wrong value at %d: %d\n", k, got[static_cast<size_t>(k)]);
      return 1;
    }

  // A reduction: the square root of the sum of squares, over every row.
  ReductionKernel l2norm("T x", "T y", "x * x", "a + b", "y = sqrt(a)", "0", "l2norm");
  Array m = random::normal({4, 1000}, float32, d);
  const std::vector<float> mine = l2norm(m, 1).to_vector<float>();
  const std::vector<float> builtin = linalg::norm(m, 1).to_vector<float>();
  for (size_t r = 0; r < mine.size(); ++r) {
    std::printf("row %zu: l2norm %.6f, linalg::norm %.6f\n", r, mine[r], builtin[r]);
    if (std::fabs(mine[r] - builtin[r]) > 1e-5f * builtin[r]) {
      std::printf("l2norm: row %zu differs from linalg::norm\n", r);
      return 1;
    }
  }
  return 0;
}
