// Walkthrough 4: a whole CUDA C++ module written as a string, compiled at run
// time with NVRTC (cached in memory and on disk) and launched on a 2-d grid.
// res = a + b on a ny x nx grid covered by 2x5 blocks of 16x16 threads.
// Exits 0 without a GPU (it says it skips); with one, checks the result
// against the CPU and returns 1 when it differs.
#include <cstdint>
#include <cstdio>
#include <kiln/kiln.hpp>
#include <vector>

const char* const kSource = R"(
extern "C" __global__ void add_two_array_2d(int nx, int ny, float* res, const float* a, const float* b) {
  const int x = blockIdx.x * blockDim.x + threadIdx.x;  // column
  const int y = blockIdx.y * blockDim.y + threadIdx.y;  // row
  if (x < nx && y < ny) {
    const int i = y * nx + x;
    res[i] = a[i] + b[i];
  }
}
)";

int main() {
  using namespace kiln;
  if (num_gpus() == 0) {
    std::printf("add_two_array_2d: no CUDA GPU (kiln::num_gpus() == 0), skipping\n");
    return 0;
  }
  const Device d = gpu(0);
  // The grid is 2 blocks wide and 5 high, each block 16x16 threads: it covers 32 columns and 80 rows.
  const Dim3 grid = {2, 5}, block = {16, 16};
  const int32_t nx = 2 * 16, ny = 5 * 16;  // int32_t: the kernel's parameters are 4-byte ints

  const Array a_host = random::uniform({ny, nx}, float32, cpu());
  const Array b_host = random::uniform({ny, nx}, float32, cpu());
  const Array a = a_host.to(d), b = b_host.to(d);
  Array res = empty({ny, nx}, float32, d);

  RawModule module(kSource);
  RawKernel kernel = module.function("add_two_array_2d");
  kernel.launch(grid, block, nx, ny, res, a, b);  // asynchronous; to_vector below waits for it

  const std::vector<float> got = res.to_vector<float>();
  const std::vector<float> av = a_host.to_vector<float>(), bv = b_host.to_vector<float>();
  size_t wrong = 0;
  for (size_t i = 0; i < got.size(); ++i)
    if (got[i] != av[i] + bv[i]) ++wrong;
  std::printf("add_two_array_2d: %d x %d floats on %s, grid (2,5) of 16x16 blocks: %s\n", ny, nx, d.str().c_str(),
              wrong == 0 ? "matches the CPU" : "MISMATCH");
  if (wrong != 0) {
    std::printf("%zu of %zu elements differ from the CPU's a + b\n", wrong, got.size());
    return 1;
  }
  return 0;
}
