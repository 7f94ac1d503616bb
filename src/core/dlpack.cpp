// DLPack export and import (kiln/dlpack.hpp): the C structs of <dlpack/dlpack.h> over kiln's Storage, with
// the stream ordering done through the public Stream/Event API (so core needs no backend).
#include "kiln/dlpack.hpp"

#include <memory>
#include <string>
#include <vector>

#include "kiln/device.hpp"
#include "kiln/error.hpp"

namespace kiln {

namespace {

std::string dtype_text(DLDataType d) {
  return "(code " + std::to_string(d.code) + ", " + std::to_string(d.bits) + " bits, " + std::to_string(d.lanes) +
         " lanes)";
}

// The DLPack name of a device type kiln refuses, for the error message.
std::string device_type_text(int32_t type) {
  switch (type) {
    case kDLOpenCL:
      return "kDLOpenCL";
    case kDLVulkan:
      return "kDLVulkan";
    case kDLMetal:
      return "kDLMetal";
    case kDLVPI:
      return "kDLVPI";
    case kDLROCM:
      return "kDLROCM";
    case kDLROCMHost:
      return "kDLROCMHost";
    case kDLExtDev:
      return "kDLExtDev";
    case kDLOneAPI:
      return "kDLOneAPI";
    case kDLWebGPU:
      return "kDLWebGPU";
    case kDLHexagon:
      return "kDLHexagon";
    default:
      return "device type " + std::to_string(type);
  }
}

DLDevice export_device(const Array& a) {
  const Device d = a.device();
  if (d.is_cuda()) return DLDevice{kDLCUDA, d.index};
  return DLDevice{a.is_pinned() ? kDLCUDAHost : kDLCPU, 0};
}

// Orders kiln's pending work on a GPU array before the consumer's reads (kiln/dlpack.hpp).
void order_for_consumer(const Array& a, const DLPackExportOptions& options) {
  const Device d = a.device();
  if (!d.is_cuda() || options.no_sync) return;
  const Stream producer = Stream::current(d);
  if (!options.consumer_stream) {
    producer.synchronize();
    return;
  }
  const Stream& consumer = *options.consumer_stream;
  if (consumer.device() != d)
    throw DeviceError("to_dlpack: the consumer stream is on " + consumer.device().str() + " but the array is on " +
                      d.str() + "; pass a stream of " + d.str());
  if (consumer == producer) return;  // one queue: already in order
  Event ready = Event::create(d, /*timing=*/false);
  ready.record(producer);
  ready.wait(consumer);
}

// What an exported tensor owns: the array (its storage stays alive) and the shape/strides the tensor points at.
template <class Managed>
struct Export {
  Array array;
  std::vector<int64_t> shape, strides;
  Managed managed{};
};

template <class Managed>
Managed* export_tensor(const Array& a, const DLPackExportOptions& options, const char* op) {
  if (!a.defined())
    throw ValueError(std::string(op) + ": the array is undefined (a default-constructed Array); pass an array");
  order_for_consumer(a, options);
  auto owned = std::make_unique<Export<Managed>>();
  owned->array = a;
  owned->shape.assign(a.shape().begin(), a.shape().end());
  owned->strides.assign(a.strides().begin(), a.strides().end());
  DLTensor& t = owned->managed.dl_tensor;
  t.data = a.data_ptr();
  t.device = export_device(a);
  t.ndim = static_cast<int32_t>(a.ndim());
  t.dtype = to_dlpack_dtype(a.dtype());
  t.shape = owned->shape.data();
  t.strides = owned->strides.data();
  t.byte_offset = 0;
  owned->managed.manager_ctx = owned.get();
  owned->managed.deleter = [](Managed* self) {
    if (self) delete static_cast<Export<Managed>*>(self->manager_ctx);
  };
  return &owned.release()->managed;
}

// Storage deleters: the context is the producer's managed tensor.
template <class Managed>
void release_managed(void* context, void*) {
  auto* managed = static_cast<Managed*>(context);
  if (managed->deleter) managed->deleter(managed);
}

// Calls the producer's deleter unless disarmed: an import that throws still hands the tensor back.
template <class Managed>
struct ReleaseOnFailure {
  Managed* managed;
  ~ReleaseOnFailure() {
    if (managed) release_managed<Managed>(managed, nullptr);
  }
};

template <class Managed>
Array import_tensor(Managed* managed) {
  ReleaseOnFailure<Managed> guard{managed};
  const DLTensor& t = managed->dl_tensor;
  const DType dtype = from_dlpack_dtype(t.dtype);
  Device device = cpu();
  bool pinned = false;
  switch (t.device.device_type) {
    case kDLCPU:
      break;
    case kDLCUDAHost:
      pinned = true;
      break;
    case kDLCUDA:
    case kDLCUDAManaged:
      if (t.device.device_id < 0 || t.device.device_id >= num_gpus())
        throw DeviceError("from_dlpack: the tensor is on CUDA device " + std::to_string(t.device.device_id) +
                          " but this process sees " + std::to_string(num_gpus()) +
                          " kiln GPU(s) (a build without CUDA sees none); import it where kiln runs on that GPU");
      device = Device{DeviceType::CUDA, t.device.device_id};
      break;
    default:
      throw DeviceError("from_dlpack: DLPack device " + device_type_text(t.device.device_type) +
                        " is neither the CPU (kDLCPU, kDLCUDAHost) nor a CUDA GPU (kDLCUDA, kDLCUDAManaged); copy "
                        "the tensor to one of them first");
  }
  if (t.ndim < 0 || (t.ndim > 0 && t.shape == nullptr))
    throw ValueError("from_dlpack: the tensor has ndim " + std::to_string(t.ndim) +
                     (t.ndim < 0 ? "" : " but a null shape") +
                     "; a producer bug: ndim >= 0 with a shape of ndim extents");
  Shape shape(t.shape, t.shape + t.ndim), strides(static_cast<size_t>(t.ndim), 0);
  int64_t size = 1;
  for (int32_t i = t.ndim - 1; i >= 0; --i) {
    if (shape[i] < 0)
      throw ValueError("from_dlpack: extent " + std::to_string(shape[i]) + " of axis " + std::to_string(i) +
                       " is negative; a producer bug");
    strides[i] = t.strides ? t.strides[i] : size;  // null strides: C-contiguous
    size *= shape[i];
  }
  // The element offsets reached from the first element, to size the storage that covers every element.
  int64_t low = 0, high = 0;
  for (int32_t i = 0; i < t.ndim; ++i)
    if (shape[i] > 1) (strides[i] < 0 ? low : high) += (shape[i] - 1) * strides[i];
  const int64_t item = itemsize(dtype);
  if (size > 0 && t.data == nullptr)
    throw ValueError("from_dlpack: the tensor has " + std::to_string(size) + " elements but a null data pointer");
  char* first = static_cast<char*>(t.data) + t.byte_offset;
  if (reinterpret_cast<uintptr_t>(first) % static_cast<uintptr_t>(item) != 0)
    throw ValueError("from_dlpack: data + byte_offset is not aligned to the " + std::to_string(item) +
                     "-byte elements of " + std::string(dtype_name(dtype)) + "; copy the tensor first");
  const size_t nbytes = size == 0 ? 0 : static_cast<size_t>((high - low + 1) * item);
  auto storage =
      std::make_shared<Storage>(first + low * item, nbytes, device, &release_managed<Managed>, managed, pinned);
  guard.managed = nullptr;  // the storage calls the deleter from now on
  return Array(std::move(storage), std::move(shape), std::move(strides), -low, dtype);
}

}  // namespace

DLDataType to_dlpack_dtype(DType dtype) {
  auto make = [](DLDataTypeCode code, int bits) {
    return DLDataType{static_cast<uint8_t>(code), static_cast<uint8_t>(bits), 1};
  };
  switch (dtype) {
    case DType::Bool:
      return make(kDLBool, 8);
    case DType::Int8:
      return make(kDLInt, 8);
    case DType::Int16:
      return make(kDLInt, 16);
    case DType::Int32:
      return make(kDLInt, 32);
    case DType::Int64:
      return make(kDLInt, 64);
    case DType::UInt8:
      return make(kDLUInt, 8);
    case DType::Float16:
      return make(kDLFloat, 16);
    case DType::BFloat16:
      return make(kDLBfloat, 16);
    case DType::Float32:
      return make(kDLFloat, 32);
    case DType::Complex64:
      return make(kDLComplex, 64);
    case DType::Complex128:
      return make(kDLComplex, 128);
    case DType::Float64:
      break;
  }
  return make(kDLFloat, 64);
}

DType from_dlpack_dtype(DLDataType d) {
  if (d.lanes == 1) {
    if (d.code == kDLBool && d.bits == 8) return DType::Bool;
    if (d.code == kDLInt && d.bits == 8) return DType::Int8;
    if (d.code == kDLInt && d.bits == 16) return DType::Int16;
    if (d.code == kDLInt && d.bits == 32) return DType::Int32;
    if (d.code == kDLInt && d.bits == 64) return DType::Int64;
    if (d.code == kDLUInt && d.bits == 8) return DType::UInt8;
    if (d.code == kDLFloat && d.bits == 16) return DType::Float16;
    if (d.code == kDLBfloat && d.bits == 16) return DType::BFloat16;
    if (d.code == kDLFloat && d.bits == 32) return DType::Float32;
    if (d.code == kDLFloat && d.bits == 64) return DType::Float64;
    if (d.code == kDLComplex && d.bits == 64) return DType::Complex64;
    if (d.code == kDLComplex && d.bits == 128) return DType::Complex128;
  }
  const std::string what = d.lanes != 1           ? " is a vector type (lanes != 1)"
                           : d.code == kDLUInt    ? " is an unsigned integer wider than 8 bits"
                                                  : " is not one kiln holds";
  throw DTypeError("from_dlpack: DLPack dtype " + dtype_text(d) + what +
                   "; kiln holds bool, int8-64, uint8, float16, bfloat16, float32, float64, complex64 and "
                   "complex128: convert the tensor first (e.g. to int64 or float32)");
}

DLManagedTensorVersioned* to_dlpack_versioned(const Array& a, const DLPackExportOptions& options) {
  DLManagedTensorVersioned* managed = export_tensor<DLManagedTensorVersioned>(a, options, "to_dlpack_versioned");
  managed->version = DLPackVersion{DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION};
  managed->flags = 0;
  return managed;
}

DLManagedTensor* to_dlpack(const Array& a, const DLPackExportOptions& options) {
  return export_tensor<DLManagedTensor>(a, options, "to_dlpack");
}

Array from_dlpack(DLManagedTensorVersioned* tensor) {
  if (!tensor) throw ValueError("from_dlpack: the DLManagedTensorVersioned pointer is null; pass a producer's tensor");
  if (tensor->version.major != DLPACK_MAJOR_VERSION) {
    const std::string version = std::to_string(tensor->version.major) + "." + std::to_string(tensor->version.minor);
    if (tensor->deleter) tensor->deleter(tensor);  // the spec: an unknown major version is released and refused
    throw ValueError("from_dlpack: the tensor is DLPack " + version + " but kiln reads major version " +
                     std::to_string(DLPACK_MAJOR_VERSION) + "; ask the producer for a version-" +
                     std::to_string(DLPACK_MAJOR_VERSION) + " tensor (max_version)");
  }
  return import_tensor(tensor);
}

Array from_dlpack(DLManagedTensor* tensor) {
  if (!tensor) throw ValueError("from_dlpack: the DLManagedTensor pointer is null; pass a producer's tensor");
  return import_tensor(tensor);
}

}  // namespace kiln
