// DLPack's Python protocol over kiln/dlpack.hpp (see dlpack.hpp): capsules named as the spec says, renamed
// "used_..." by the consumer that takes the tensor, and deleted by their destructor only when nobody took it.
#include "dlpack.hpp"

#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>

#include <kiln/dlpack.hpp>
#include <string>

namespace kiln::python {

namespace {

constexpr const char* kVersionedName = "dltensor_versioned";
constexpr const char* kUsedVersionedName = "used_dltensor_versioned";
constexpr const char* kLegacyName = "dltensor";
constexpr const char* kUsedLegacyName = "used_dltensor";

// Capsule destructors: the tensor is still the capsule's when no consumer renamed it.
void delete_unused_versioned(PyObject* capsule) {
  if (!PyCapsule_IsValid(capsule, kVersionedName)) return;
  auto* m = static_cast<DLManagedTensorVersioned*>(PyCapsule_GetPointer(capsule, kVersionedName));
  if (m && m->deleter) m->deleter(m);
}

void delete_unused_legacy(PyObject* capsule) {
  if (!PyCapsule_IsValid(capsule, kLegacyName)) return;
  auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule, kLegacyName));
  if (m && m->deleter) m->deleter(m);
}

// The consumer stream of a GPU export, from the spec's stream integer.
DLPackExportOptions export_options(const Array& a, nb::handle stream) {
  DLPackExportOptions options;
  const Device d = a.device();
  if (!d.is_cuda()) return options;  // nothing to order on the host
  if (stream.is_none()) {
    options.consumer_stream = Stream::default_stream(d);  // the spec's meaning of None for CUDA
    return options;
  }
  if (!PyLong_Check(stream.ptr()))
    throw nb::type_error("__dlpack__: stream must be an int (a cudaStream_t, 1, 2 or -1) or None");
  const auto value = nb::cast<int64_t>(stream);
  if (value == -1) {
    options.no_sync = true;
  } else if (value == 0) {
    throw nb::buffer_error(
        "__dlpack__: stream=0 is ambiguous for CUDA (DLPack spec); pass 1 for the legacy "
        "default stream, 2 for the per-thread default stream, or the stream's handle");
  } else if (value < -1) {
    throw nb::value_error(("__dlpack__: stream=" + std::to_string(value) +
                           " is not a stream; pass a cudaStream_t "
                           "handle, 1, 2 or -1")
                              .c_str());
  } else {
    // 1 is the legacy default stream (kiln's null handle); 2 is cudaStreamPerThread, itself a valid handle.
    void* handle = value == 1 ? nullptr : reinterpret_cast<void*>(static_cast<uintptr_t>(value));
    options.consumer_stream = Stream(d, handle, nullptr);
  }
  return options;
}

// A producer's tensor passed to kiln::from_dlpack with a deleter that holds the GIL: the producer's may touch
// Python objects, and kiln calls it from whichever thread drops the last array.
template <class Managed>
struct WithGil {
  Managed outer;
  Managed* inner;
};

template <class Managed>
Managed* with_gil(Managed* inner) {
  auto* w = new WithGil<Managed>{*inner, inner};
  w->outer.manager_ctx = w;
  w->outer.deleter = [](Managed* self) {
    auto* wrapper = static_cast<WithGil<Managed>*>(self->manager_ctx);
    Managed* producer = wrapper->inner;
    delete wrapper;
    if (!producer->deleter || !Py_IsInitialized()) return;  // the interpreter is gone: nothing left to release
    nb::gil_scoped_acquire gil;
    producer->deleter(producer);
  };
  return &w->outer;
}

Array import_capsule(nb::handle capsule) {
  PyObject* c = capsule.ptr();
  if (PyCapsule_IsValid(c, kVersionedName)) {
    auto* m = static_cast<DLManagedTensorVersioned*>(PyCapsule_GetPointer(c, kVersionedName));
    PyCapsule_SetName(c, kUsedVersionedName);  // kiln owns it now, failure included (kiln::from_dlpack)
    return from_dlpack(with_gil(m));
  }
  if (PyCapsule_IsValid(c, kLegacyName)) {
    auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(c, kLegacyName));
    PyCapsule_SetName(c, kUsedLegacyName);
    return from_dlpack(with_gil(m));
  }
  const char* name = PyCapsule_CheckExact(c) ? PyCapsule_GetName(c) : nullptr;
  PyErr_Clear();
  throw nb::type_error(("kiln.from_dlpack: expected a DLPack capsule (\"dltensor_versioned\" or \"dltensor\"), got " +
                        (name ? "a capsule named \"" + std::string(name) + "\" (one already consumed?)"
                              : nb::cast<std::string>(nb::repr(nb::type_name(capsule.type())))) +
                        "; pass an array with __dlpack__ or a fresh capsule")
                           .c_str());
}

}  // namespace

nb::tuple dlpack_device(const Array& a) {
  const Device d = a.device();
  if (d.is_cuda()) return nb::make_tuple(static_cast<int>(kDLCUDA), d.index);
  return nb::make_tuple(static_cast<int>(a.is_pinned() ? kDLCUDAHost : kDLCPU), 0);
}

nb::object dlpack_capsule(const Array& a, nb::handle stream, nb::handle max_version, nb::handle dl_device,
                          nb::handle copy) {
  // Pinned host memory is also plain host memory: a consumer asking for kDLCPU reads it as such.
  bool relabel_as_cpu = false;
  if (!dl_device.is_none()) {
    auto [type, index] = nb::cast<std::pair<int, int>>(dl_device);
    auto [own_type, own_index] = nb::cast<std::pair<int, int>>(dlpack_device(a));
    relabel_as_cpu = own_type == kDLCUDAHost && type == kDLCPU && index == 0;
    if ((type != own_type || index != own_index) && !relabel_as_cpu)
      throw nb::buffer_error(("__dlpack__: the array is on DLPack device (" + std::to_string(own_type) + ", " +
                              std::to_string(own_index) + "), not dl_device=(" + std::to_string(type) + ", " +
                              std::to_string(index) + "); move it with x.to(...) first")
                                 .c_str());
  }
  const bool copied = !copy.is_none() && nb::cast<bool>(copy);
  const Array source = copied ? kiln::copy(a) : a;
  const DLPackExportOptions options = export_options(source, stream);
  bool versioned = false;
  if (!max_version.is_none()) versioned = nb::cast<int>(nb::handle(max_version)[0]) >= DLPACK_MAJOR_VERSION;
  PyObject* capsule = nullptr;
  {
    nb::gil_scoped_release unlocked;  // the export may wait for the GPU
    if (versioned) {
      DLManagedTensorVersioned* m = to_dlpack_versioned(source, options);
      if (copied) m->flags |= DLPACK_FLAG_BITMASK_IS_COPIED;
      if (relabel_as_cpu) m->dl_tensor.device = DLDevice{kDLCPU, 0};
      nb::gil_scoped_acquire gil;
      capsule = PyCapsule_New(m, kVersionedName, delete_unused_versioned);
      if (!capsule) m->deleter(m);
    } else {
      DLManagedTensor* m = to_dlpack(source, options);
      if (relabel_as_cpu) m->dl_tensor.device = DLDevice{kDLCPU, 0};
      nb::gil_scoped_acquire gil;
      capsule = PyCapsule_New(m, kLegacyName, delete_unused_legacy);
      if (!capsule) m->deleter(m);
    }
  }
  if (!capsule) throw nb::python_error();
  return nb::steal(capsule);
}

Array array_from_dlpack(nb::handle obj) {
  if (nb::isinstance<Array>(obj)) return nb::cast<Array>(obj);
  if (PyCapsule_CheckExact(obj.ptr())) return import_capsule(obj);
  if (!nb::hasattr(obj, "__dlpack__"))
    throw nb::type_error(("kiln.from_dlpack: " + nb::cast<std::string>(nb::repr(nb::type_name(obj.type()))) +
                          " has no __dlpack__; pass a NumPy, PyTorch, CuPy, JAX... array or a DLPack capsule")
                             .c_str());
  nb::dict kwargs;
  if (nb::hasattr(obj, "__dlpack_device__")) {
    auto [type, index] = nb::cast<std::pair<int, int>>(obj.attr("__dlpack_device__")());
    if (type == kDLCUDA) {
      // The producer orders its pending work before kiln's current stream on that GPU (1: the legacy default
      // stream, kiln's unless a StreamGuard says otherwise).
      void* stream = Stream::current(Device{DeviceType::CUDA, index}).handle();
      kwargs["stream"] = stream ? reinterpret_cast<uintptr_t>(stream) : uintptr_t{1};
    }
  }
  nb::object capsule;
  kwargs["max_version"] = nb::make_tuple(DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION);
  try {
    capsule = obj.attr("__dlpack__")(**kwargs);
  } catch (nb::python_error& e) {
    if (!e.matches(PyExc_TypeError)) throw;
    PyDict_DelItemString(kwargs.ptr(), "max_version");  // a producer older than DLPack 1.0
    capsule = obj.attr("__dlpack__")(**kwargs);
  }
  return import_capsule(capsule);
}

}  // namespace kiln::python
