// A user's program built against kiln (tests/consumer): array ops, a matmul (BLAS), a reduction and a DLPack
// round trip (the installed <dlpack/dlpack.h> is found), checked against hand-computed values. Exits non-zero on
// a mismatch.
#include <cstdio>
#include <kiln/dlpack.hpp>
#include <kiln/kiln.hpp>

int main() {
  using namespace kiln;
  const Array a = arange(6, float32).reshape({2, 3});  // [[0 1 2] [3 4 5]]
  const Array b = ones({3, 2}, float32);
  const double product_sum = matmul(a, b).sum().item<float>();  // [[3 3] [12 12]] -> 30
  const double shifted_sum = (a + 1.0f).sum().item<float>();    // 1 + ... + 6 -> 21
  std::printf("kiln %s: matmul sum %g, (a + 1) sum %g\n", kVersion, product_sum, shifted_sum);
  if (product_sum != 30.0 || shifted_sum != 21.0) {
    std::fprintf(stderr, "consumer: expected 30 and 21\n");
    return 1;
  }
  DLManagedTensorVersioned* exported = to_dlpack_versioned(a);
  const void* exported_data = exported->dl_tensor.data;
  const Array shared = from_dlpack(exported);  // a's memory, released when `shared` goes
  if (exported_data != a.data_ptr() || shared.data_ptr() != a.data_ptr() || shared.sum().item<float>() != 15.0f) {
    std::fprintf(stderr, "consumer: the DLPack round trip should share a's memory (sum 15)\n");
    return 1;
  }
  std::printf("consumer: ok\n");
  return 0;
}
