// The CPU backend: the glue from the backend interface to the CPU kernels (elementwise, reduce, matmul,
// random, convolution, pooling, batch norm, Fourier transforms). Memory and copies are the CPU runtime's
// (device_runtime.cpp).
#include "core/backend.hpp"

#include "cpu/elementwise.hpp"
#include "cpu/fft.hpp"
#include "cpu/fused.hpp"
#include "cpu/matmul.hpp"
#include "cpu/multi_tensor.hpp"
#include "cpu/onednn.hpp"
#include "cpu/pooling.hpp"
#include "cpu/random.hpp"
#include "cpu/reduce.hpp"

namespace kiln::cpu_impl {

namespace {

class CpuBackend final : public detail::Backend {
 public:
  void elementwise(const detail::ElementwiseCall& call) override { cpu_elementwise(call); }
  void reduce(const detail::ReduceCall& call) override { cpu_reduce(call); }
  bool fused(const detail::FusionCall& call) override { return cpu_fused(call); }
  void scan(const detail::ScanCall& call) override { cpu_scan(call); }
  void matmul(const detail::MatmulCall& call) override { cpu_matmul(call); }
  bool fft(const detail::FftCall& call) override { return cpu_fft(call); }
  bool convolution(const detail::ConvCall& call) override { return onednn_convolution(call); }
  bool pooling(const detail::PoolCall& call) override { return cpu_pooling(call); }
  bool batch_norm(detail::BatchNormCall& call) override { return cpu_batch_norm(call); }
  void random(const detail::RandomCall& call) override { cpu_random(call); }
  void multi_tensor(const detail::MultiTensorCall& call) override { cpu_multi_tensor(call); }
};

}  // namespace
}  // namespace kiln::cpu_impl

namespace kiln::detail {
Backend& cpu_backend() {
  static cpu_impl::CpuBackend backend;
  return backend;
}
}  // namespace kiln::detail
