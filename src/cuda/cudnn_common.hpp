// What cudnn.cpp (the descriptor API, pooling, batch norm) and cudnn_plans.cpp (convolutions through the backend
// API's cached execution plans) share, defined in cudnn_common.cpp: the error check, the convolution problem's key,
// the per-thread cuDNN state. cudnn.cpp calls into cudnn_plans.cpp (cudnn_plans.hpp); cudnn_plans.cpp needs only
// this header, so the two files do not depend on each other both ways.
#pragma once

#include <cudnn.h>

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>

#include "core/backend.hpp"
#include "core/kernel_memo.hpp"
#include "cuda/runtime.hpp"

namespace kiln::cuda_impl {

/// Throws DeviceError naming the call, file:line and cuDNN's message (KILN_CUDNN_CHECK's failure).
[[noreturn]] void throw_cudnn_error(cudnnStatus_t status, const char* expr, const char* file, int line);

#define KILN_CUDNN_CHECK(expr)                                                       \
  do {                                                                               \
    cudnnStatus_t kiln_status_ = (expr);                                             \
    if (kiln_status_ != CUDNN_STATUS_SUCCESS)                                        \
      ::kiln::cuda_impl::throw_cudnn_error(kiln_status_, #expr, __FILE__, __LINE__); \
  } while (0)

/// An owned cuDNN descriptor (created on construction, destroyed with the object).
template <class T, cudnnStatus_t (*Create)(T*), cudnnStatus_t (*Destroy)(T)>
class Descriptor {
 public:
  Descriptor() { KILN_CUDNN_CHECK(Create(&desc_)); }
  ~Descriptor() { (void)Destroy(desc_); }
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;
  operator T() const { return desc_; }

 private:
  T desc_ = nullptr;
};

/// cuDNN's data type for a floating dtype; nullopt for the others.
inline std::optional<cudnnDataType_t> data_type(DType t) {
  switch (t) {
    case DType::Float32:
      return CUDNN_DATA_FLOAT;
    case DType::Float64:
      return CUDNN_DATA_DOUBLE;
    case DType::Float16:
      return CUDNN_DATA_HALF;
    case DType::BFloat16:
      return CUDNN_DATA_BFLOAT16;
    default:
      return std::nullopt;
  }
}

/// One convolution problem: what an algorithm choice or an execution plan is made for.
struct ConvKey {
  int device = 0;
  detail::ConvKind kind = detail::ConvKind::Forward;
  DType dtype = DType::Float32;
  bool channels_last = false;
  bool tf32 = false;
  bool benchmark = false;
  std::array<int64_t, 4> x{}, w{}, y{};  // the input side (x or dx), the filter (w or dw), the output side
  std::array<int64_t, 2> stride{}, padding{}, dilation{};
  int64_t groups = 1;
  int64_t alignment = 16;  ///< the operands' common byte alignment (a backend plan assumes it), at most 16
  bool operator==(const ConvKey&) const = default;
};

}  // namespace kiln::cuda_impl

KILN_HASH_EVERY_FIELD(kiln::cuda_impl::ConvKey, device, kind, dtype, channels_last, tf32, benchmark, x, w, y, stride,
                      padding, dilation, groups, alignment);

namespace kiln::cuda_impl {

struct ConvPlan;

struct CudnnState {
  cudnnHandle_t handle = nullptr;
  /// Execution plans of the backend API made with this handle, per problem; a null plan: the backend API
  /// has none for the problem (the descriptor API runs it).
  std::unordered_map<ConvKey, std::shared_ptr<ConvPlan>> plans;
  std::string refusal;  ///< why the last problem without a plan has none
};

/// This thread's cuDNN state of `device` (the current device); bound_state also binds its handle to `stream`.
CudnnState* thread_state(int device);
CudnnState* bound_state(int device, cudaStream_t stream);

/// Workspace memory from the caching allocator, or null when it cannot be had (the next algorithm is tried).
std::shared_ptr<Storage> try_workspace(int device, size_t bytes, cudaStream_t stream);

/// A convolution call's operands: the x side (x or dx), the filter side (w or dw), the y side (y or dy).
using ConvPointers = std::array<void*, 3>;
ConvPointers conv_pointers(const detail::ConvCall& call);
/// The largest power of two up to 16 that divides every operand's address.
int64_t common_alignment(const ConvPointers& p);

}  // namespace kiln::cuda_impl
