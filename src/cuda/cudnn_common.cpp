// What cudnn.cpp and cudnn_plans.cpp share (cudnn_common.hpp): the error, the per-thread cuDNN state, workspaces
// and a convolution's operands. Both files depend on this one and cudnn.cpp on cudnn_plans.hpp, never the reverse.
#include "cuda/cudnn_common.hpp"

#include <cstdint>
#include <memory>
#include <string>

#include "cuda/handle_pool.hpp"
#include "cuda/ops.hpp"
#include "kiln/error.hpp"

namespace kiln::cuda_impl {

[[noreturn]] void throw_cudnn_error(cudnnStatus_t status, const char* expr, const char* file, int line) {
  throw DeviceError(std::string("cuDNN: ") + cudnnGetErrorString(status) + " in " + expr + " (" + file + ":" +
                    std::to_string(line) +
                    "); CUDNN_LOGERR_DBG=1 CUDNN_LOGDEST_DBG=stderr in the environment prints cuDNN's reason");
}

namespace {

CudnnState* create_state() {
  auto state = std::make_unique<CudnnState>();
  KILN_CUDNN_CHECK(cudnnCreate(&state->handle));
  return state.release();
}

}  // namespace

CudnnState* thread_state(int device) { return thread_handle<CudnnState>(device, create_state); }

CudnnState* bound_state(int device, cudaStream_t stream) {
  CudnnState* state = thread_state(device);
  KILN_CUDNN_CHECK(cudnnSetStream(state->handle, stream));
  return state;
}

/// Workspace memory from the caching allocator, or null when it cannot be had (the next algorithm is tried).
std::shared_ptr<Storage> try_workspace(int device, size_t bytes, cudaStream_t stream) {
  if (bytes == 0) return nullptr;
  try {
    return device_alloc(device, bytes, stream);
  } catch (const OutOfMemoryError&) {
    return nullptr;
  }
}

ConvPointers conv_pointers(const detail::ConvCall& call) {
  const auto ptr = [](const void* p) { return const_cast<void*>(p); };
  switch (call.kind) {
    case detail::ConvKind::Forward:
      return {{ptr(call.x->data_ptr()), ptr(call.w->data_ptr()), call.out.data_ptr()}};
    case detail::ConvKind::BackwardInput:
      return {{call.out.data_ptr(), ptr(call.w->data_ptr()), ptr(call.dy->data_ptr())}};
    case detail::ConvKind::BackwardWeight:
      return {{ptr(call.x->data_ptr()), call.out.data_ptr(), ptr(call.dy->data_ptr())}};
  }
  return {};
}

int64_t common_alignment(const ConvPointers& p) {
  int64_t align = 16;
  for (void* ptr : p)
    while (align > 1 && reinterpret_cast<uintptr_t>(ptr) % static_cast<uintptr_t>(align) != 0) align /= 2;
  return align;
}

}  // namespace kiln::cuda_impl
