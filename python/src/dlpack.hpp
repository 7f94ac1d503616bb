// DLPack's Python protocol (capsules, stream integers, max_version) over kiln's C++ exchange (kiln/dlpack.hpp).
#pragma once

#include "convert.hpp"

namespace kiln::python {

/// Array.__dlpack__: a PyCapsule "dltensor_versioned" (max_version >= (1, 0)) or "dltensor" (max_version None
/// or older) holding a zero-copy view of `a` (a copy when copy=True). The stream integer is the consumer's, as
/// the DLPack Python spec defines it for CUDA: None or 1 the legacy default stream, 2 the per-thread default
/// stream, any other positive value a cudaStream_t, -1 no ordering; 0 is refused (BufferError). dl_device must
/// be the array's own device (the kiln package's wrapper handles the host copy of a GPU array).
nb::object dlpack_capsule(const Array& a, nb::handle stream, nb::handle max_version, nb::handle dl_device,
                          nb::handle copy);
/// Array.__dlpack_device__: (kDLCPU, 0), (kDLCUDAHost, 0) for pinned host memory, or (kDLCUDA, index).
nb::tuple dlpack_device(const Array& a);
/// An Array sharing the memory of a DLPack producer `obj` (an object with __dlpack__, or a capsule it returned):
/// calls obj.__dlpack__(max_version=(1, 0)), with stream= kiln's current stream of the producer's GPU, and
/// without max_version when the producer predates it (TypeError); a kiln Array is returned as it is.
Array array_from_dlpack(nb::handle obj);

}  // namespace kiln::python
