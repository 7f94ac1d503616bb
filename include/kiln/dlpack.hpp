// DLPack exchange: kiln arrays handed to any library that speaks DLPack (PyTorch, CuPy, NumPy, JAX, TVM...)
// and theirs viewed by kiln, zero-copy, through the C structs of <dlpack/dlpack.h> (DLPack 1.1, installed
// beside kiln's headers). Not part of kiln.hpp: include it where the exchange happens, so that the DL* C names
// stay out of every other translation unit.
//
// Ownership follows the DLPack spec: the producer allocates a DLManagedTensor(Versioned) whose deleter the
// consumer calls exactly once when it no longer needs the memory. kiln's exports keep the array's storage alive
// until that call; kiln's imports call the producer's deleter when the last kiln array viewing it is destroyed.
#pragma once

#include <dlpack/dlpack.h>

#include <optional>

#include "kiln/array.hpp"
#include "kiln/stream.hpp"

namespace kiln {

/// How an export orders kiln's pending GPU work on the array before the consumer reads it (CPU arrays need
/// nothing: kiln's CPU ops are done when they return).
struct DLPackExportOptions {
  /// The stream the consumer will read on (a stream of the array's GPU, possibly not kiln's: wrap a foreign
  /// cudaStream_t as Stream(device, handle, nullptr)). kiln records an event on its current stream of that GPU
  /// and makes this stream wait for it: the host does not block. Unset: the host waits for kiln's current
  /// stream of that GPU (not the whole device), so a consumer on any stream reads finished data.
  std::optional<Stream> consumer_stream;
  /// No ordering at all (DLPack's Python `stream=-1`): the consumer has ordered its reads itself.
  bool no_sync = false;
};

/// A zero-copy DLPack 1.x view of `a` (DLPACK_MAJOR_VERSION.DLPACK_MINOR_VERSION): data points at the first
/// element, byte_offset is 0, strides are in elements (never null), the dtype is kDLBool/kDLInt/kDLUInt/
/// kDLFloat/kDLBfloat; the device is kDLCPU, kDLCUDAHost for pinned host memory, or kDLCUDA with the GPU's
/// index. flags are 0: kiln arrays are writable. The tensor keeps a's storage alive until the consumer calls its
/// deleter (exactly once). Orders pending GPU work as `options` says (see DLPackExportOptions); the default
/// blocks the host until kiln's current stream of a's GPU is done. Throws ValueError for an undefined array.
DLManagedTensorVersioned* to_dlpack_versioned(const Array& a, const DLPackExportOptions& options = {});
/// As to_dlpack_versioned, in the legacy unversioned struct (DLPack < 1.0 consumers; it has no flags).
DLManagedTensor* to_dlpack(const Array& a, const DLPackExportOptions& options = {});

/// An Array viewing a DLPack tensor's memory (zero-copy). kiln takes ownership in every case: the producer's
/// deleter is called when the last kiln array over that memory is destroyed, or at once when the import fails.
/// Any strides (negative and 0 too; null means C-contiguous), byte_offset honoured. kDLCPU and kDLCUDAHost
/// import as CPU arrays (kDLCUDAHost as pinned), kDLCUDA and kDLCUDAManaged as GPU arrays with the tensor's
/// device index. A DLPACK_FLAG_BITMASK_READ_ONLY tensor is accepted, as the Array API standard recommends for a
/// consumer without read-only arrays, but kiln cannot enforce it: do not write into such an array. No stream
/// ordering happens here: the producer orders its work before the consumer's stream when it exports.
/// Throws ValueError for a null pointer or tensor data, or a major version other than DLPACK_MAJOR_VERSION;
/// DTypeError for a dtype kiln lacks (complex, uint16/32/64, float8, lanes != 1); DeviceError for a device
/// other than the CPU and CUDA (ROCm, Metal, Vulkan...), or a CUDA tensor in a build without CUDA support.
Array from_dlpack(DLManagedTensorVersioned* tensor);
/// As from_dlpack(DLManagedTensorVersioned*), for the legacy unversioned struct.
Array from_dlpack(DLManagedTensor* tensor);

/// The DLPack dtype of a kiln dtype (lanes 1).
DLDataType to_dlpack_dtype(DType dtype);
/// The kiln dtype of a DLPack dtype; throws DTypeError naming the dtype and what kiln holds instead.
DType from_dlpack_dtype(DLDataType dtype);

}  // namespace kiln
