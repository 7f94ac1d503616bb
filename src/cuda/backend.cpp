// The CUDA backend: kiln's Backend interface on CUDA GPUs, the glue from each op description to the
// NVRTC engines, cuBLAS, cuDNN, cuSOLVER and cuFFT (ops.hpp). Every entry point first makes the array's device
// current for this thread: an array's work runs on its own GPU, whatever kiln's current device is.
// Memory, transfers, streams and events are the CUDA runtime's (device_runtime.cpp).
#include "core/backend.hpp"

#include "core/indexing.hpp"
#include "core/sync_debug.hpp"
#include "core/user_kernel.hpp"
#include "cuda/fusion.hpp"
#include "cuda/ops.hpp"
#include "cuda/raw_module.hpp"
#include "cuda/runtime.hpp"

namespace kiln::cuda_impl {

namespace {

// The GPU ops without complex kernels (elementwise ops, sum/prod/mean and matmul have them) say so here, before
// a generator is asked for a complex kernel.
void reject_complex(const char* op, std::initializer_list<const Array*> arrays) {
  for (const Array* a : arrays)
    if (a && a->defined() && is_complex(a->dtype()))
      throw DTypeError(std::string(op) + ": " + std::string(dtype_name(a->dtype())) +
                       " arrays are not supported by this op on CUDA devices (the CPU runs them); move the operands "
                       "with .to(kiln::cpu()), or split them with real(a) and imag(a)");
}

/// User kernels are C++ over real types: a complex parameter is refused naming the kernel and the fix.
void reject_complex_user_args(const std::string& kernel, const std::vector<detail::BoundArg>& args) {
  for (const detail::BoundArg& a : args)
    if (is_complex(a.dtype))
      throw DTypeError("user kernel " + kernel + ": parameter " + a.param->name + " is " +
                       std::string(dtype_name(a.dtype)) +
                       "; user kernels take real dtypes: pass real(a) and imag(a) as two parameters");
}

class CudaBackend final : public detail::Backend {
 public:
  void elementwise(const detail::ElementwiseCall& call) override {
    set_device(call.out.device().index);
    detail::note_gpu_work(call.out.device().index);
    cuda_elementwise(call);
  }
  void reduce(const detail::ReduceCall& call) override {
    if (call.op != detail::ReduceOp::Sum && call.op != detail::ReduceOp::Prod)  // the core allows only these two
      reject_complex(detail::reduce_info(call.op).name, {call.in, &call.out});
    set_device(call.out.device().index);
    detail::note_gpu_work(call.out.device().index);
    cuda_reduce(call);
  }
  void scan(const detail::ScanCall& call) override {
    reject_complex("scan", {call.in, &call.out});
    set_device(call.out.device().index);
    detail::note_gpu_work(call.out.device().index);
    cuda_scan(call);
  }
  void user_elementwise(const detail::UserElementwiseCall& call) override {
    check_device(call.device.index, call.kernel->name.c_str());
    // kiln's gathers and scatters (take, indexing) are such kernels too, but only copy elements
    if (call.kernel->operation != detail::kGatherOp && call.kernel->operation != detail::kScatterOp)
      reject_complex_user_args(call.kernel->name, call.args);
    cuda_user_elementwise(call);
  }
  void user_reduction(const detail::UserReductionCall& call) override {
    check_device(call.device.index, call.kernel->name.c_str());
    reject_complex_user_args(call.kernel->name, call.args);
    cuda_user_reduction(call);
  }
  void matmul(const detail::MatmulCall& call) override {
    set_device(call.out.device().index);
    detail::note_gpu_work(call.out.device().index);
    cuda_matmul(call);
  }
  bool folds_gelu_grad(DType dtype) const override { return dtype == DType::BFloat16 || dtype == DType::Float16; }
  bool convolution(const detail::ConvCall& call) override {
    set_device(call.out.device().index);
    detail::note_gpu_work(call.out.device().index);
    return cuda_convolution(call);
  }
  bool batch_norm(detail::BatchNormCall& call) override {
    set_device(call.x->device().index);
    detail::note_gpu_work(call.x->device().index);
    // kiln's kernels (batch_norm.cpp says why), cuDNN for what they decline (KILN_BN_NCHW=cudnn).
    return cuda_batch_norm_kernels(call) || cuda_batch_norm(call);
  }
  bool cross_entropy(detail::CrossEntropyCall& call) override {
    set_device(call.logits->device().index);
    detail::note_gpu_work(call.logits->device().index);
    return cuda_cross_entropy(call);
  }
  bool layer_norm_backward(detail::LayerNormBackwardCall& call) override {
    set_device(call.x->device().index);
    detail::note_gpu_work(call.x->device().index);
    return cuda_layer_norm_backward(call);
  }
  bool attention(detail::AttentionCall& call) override {
    set_device(call.q->device().index);
    detail::note_gpu_work(call.q->device().index);
    return cuda_attention(call);
  }
  bool rnn(detail::RnnCall& call) override {
    set_device(call.device.index);
    detail::note_gpu_work(call.device.index);
    return cuda_rnn(call);
  }
  bool pooling(const detail::PoolCall& call) override {
    set_device(call.out.device().index);
    detail::note_gpu_work(call.out.device().index);
    return cuda_pooling(call);
  }
  int linalg_solve(const detail::SolveCall& call) override {
    detail::note_gpu_work(call.a->device().index);
    return cuda_solve(call);
  }
  int linalg_svd(const detail::SvdCall& call) override {
    detail::note_gpu_work(call.a->device().index);
    return cuda_svd(call);
  }
  bool linalg_factor(detail::FactorCall& call) override {
    detail::note_gpu_work(call.a->device().index);
    return cuda_factor(call);
  }
  bool sort(const detail::SortCall& call) override {
    reject_complex("sort", {call.in});
    detail::note_gpu_work(call.in->device().index);
    return cuda_sort(call);
  }
  bool fft(const detail::FftCall& call) override {
    detail::note_gpu_work(call.out.device().index);
    return cuda_fft(call);
  }
  void random(const detail::RandomCall& call) override {
    set_device(call.out.device().index);
    detail::note_gpu_work(call.out.device().index);
    cuda_random(call);
  }
  detail::GraphRandom* graph_random(Device device) override {
    return capture_random(device.index, cuda_impl::current_stream(device.index));
  }
  bool fused(const detail::FusionCall& call) override {
    if (call.graph->complex) return false;  // the fused generator has no complex code: op by op
    set_device(call.outs.at(0).device().index);
    return cuda_fused(call);
  }
  void multi_tensor(const detail::MultiTensorCall& call) override {
    if (call.graph->complex)
      throw DTypeError("multi-tensor apply (" + call.graph->name +
                       "): complex values have no fused GPU kernels; run the ops one by one or on real(a), imag(a)");
    cuda_multi_tensor(call);
  }
  bool check_range(const Array& values, int64_t lo, int64_t hi, int32_t code) override {
    detail::note_gpu_work(values.device().index);
    return cuda_check_range(values, lo, hi, code);
  }
  detail::RawKernelBackend* raw_kernels() override { return &raw_kernel_backend(); }
};

}  // namespace
}  // namespace kiln::cuda_impl

namespace kiln::detail {
Backend& cuda_backend() {
  // Leaked on purpose, as the runtime: ops run from other objects' static destructors find it alive.
  static auto* backend = new cuda_impl::CudaBackend();
  return *backend;
}
}  // namespace kiln::detail
