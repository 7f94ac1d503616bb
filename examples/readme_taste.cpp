#include <cmath>
#include <iostream>
#include <kiln/kiln.hpp>
using namespace kiln;

int main() {
  Device d = try_gpu();                                        // cuda:0, or the CPU when there is no GPU
  Array x = random::normal({64, 3}, float32, d);               // Philox, seeded by random::seed
  Array y = matmul(x, from_data({1.0f, -2.0f, 0.5f}, {3, 1}, d)) + 0.25f;
  Array w = zeros({3, 1}, float32, d).set_requires_grad();
  Array b = zeros({1}, float32, d).set_requires_grad();
  for (int step = 0; step < 200; ++step) {
    Array loss = mean(square(matmul(x, w) + b - y));           // broadcasting, reductions, autograd
    loss.backward();
    NoGradGuard no_grad;
    w -= w.grad() * 0.1f;
    b -= b.grad() * 0.1f;
    w.set_grad(Array());
    b.set_grad(Array());
  }
  std::cout << w.reshape({3}) << " " << b.item<float>() << "\n";  // ~[1, -2, 0.5] 0.25 (copies to the host)
  return std::abs(b.item<float>() - 0.25f) < 1e-3f ? 0 : 1;
}
