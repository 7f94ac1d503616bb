// The GPU caching allocator and the pinned host pool from Python, as torch.cuda's memory functions: statistics
// (memory_stats, memory_allocated, memory_reserved, the peaks), empty_cache, and the reservation limit. They
// exist only in a build with the CUDA backend: in a CPU-only build every one raises kiln.DeviceError.
#include <nanobind/stl/string.h>

#include <cstddef>
#include <string>

#include "bindings.hpp"
#include "convert.hpp"
#include "typed.hpp"

#ifdef KILN_WITH_CUDA
#include <kiln/cuda.hpp>
#endif

namespace kiln::python {
namespace {

#ifndef KILN_WITH_CUDA
[[noreturn]] void no_cuda(const char* op) {
  throw DeviceError(std::string("kiln.") + op +
                    ": this kiln was built without the CUDA backend, which holds the caching allocator and the "
                    "pinned pool; build with the cuda preset (or pip install with KILN_CUDA=ON) on a machine with "
                    "the CUDA toolkit");
}
#endif

#ifdef KILN_WITH_CUDA
// torch.cuda's rule: no device means the current one, here the thread's current device when it is a GPU, else GPU 0.
Device gpu_of(DeviceLike device) {
  if (auto d = to_optional_device(device)) return *d;
  const Device current = current_device();
  return current.is_cuda() ? current : gpu(0);
}

nb::dict stats_dict(const cuda::MemoryStats& s) {
  nb::dict d;
  d["allocated_bytes"] = s.allocated;
  d["requested_bytes"] = s.requested;
  d["reserved_bytes"] = s.reserved;
  d["peak_allocated_bytes"] = s.peak_allocated;
  d["peak_reserved_bytes"] = s.peak_reserved;
  d["active_blocks"] = s.active_blocks;
  d["cached_blocks"] = s.cached_blocks;
  d["pending_blocks"] = s.pending_blocks;
  d["segments"] = s.segments;
  d["graph_pools"] = s.graph_pools;
  d["graph_reserved_bytes"] = s.graph_reserved;
  d["allocations"] = s.allocations;
  d["frees"] = s.frees;
  d["cache_hits"] = s.cache_hits;
  d["device_mallocs"] = s.device_mallocs;
  d["device_frees"] = s.device_frees;
  d["alloc_retries"] = s.alloc_retries;
  d["ooms"] = s.ooms;
  return d;
}
#endif

}  // namespace

void bind_memory(nb::module_& m) {
  m.def("built_with_cuda", &kiln::built_with_cuda,
        "Whether this kiln holds the CUDA backend (torch.backends.cuda.is_built); a GPU may still be missing.");
#ifdef KILN_WITH_CUDA
  m.def("memory_stats", [](DeviceLike device) { return stats_dict(cuda::memory_stats(gpu_of(device))); },
        "device"_a = nb::none(), "The caching allocator's statistics of a GPU as a dict (bytes and counts).");
  m.def("memory_allocated", [](DeviceLike device) { return cuda::memory_stats(gpu_of(device)).allocated; },
        "device"_a = nb::none(), "Bytes in blocks handed out to arrays on the GPU now.");
  m.def("memory_reserved", [](DeviceLike device) { return cuda::memory_stats(gpu_of(device)).reserved; },
        "device"_a = nb::none(), "Bytes the allocator holds from the GPU (allocated + cached).");
  m.def("max_memory_allocated", [](DeviceLike device) { return cuda::memory_stats(gpu_of(device)).peak_allocated; },
        "device"_a = nb::none());
  m.def("max_memory_reserved", [](DeviceLike device) { return cuda::memory_stats(gpu_of(device)).peak_reserved; },
        "device"_a = nb::none());
  m.def("reset_peak_memory_stats", [](DeviceLike device) { cuda::reset_peak_memory_stats(gpu_of(device)); },
        "device"_a = nb::none());
  m.def("empty_cache", [](DeviceLike device) { cuda::empty_cache(gpu_of(device)); }, "device"_a = nb::none(),
        "Gives the GPU's cached, unused memory back to CUDA; arrays in use are untouched.");
  m.def("memory_limit", [](DeviceLike device) { return cuda::memory_limit(gpu_of(device)); }, "device"_a = nb::none(),
        "The most bytes the GPU's allocator may reserve (0: no limit).");
  m.def("set_memory_limit", [](size_t bytes, DeviceLike device) { cuda::set_memory_limit(gpu_of(device), bytes); },
        "bytes"_a, "device"_a = nb::none(),
        "Caps the GPU's reserved bytes (0: none); an allocation past it raises kiln.OutOfMemoryError.");
  m.def("host_memory_stats", [] {
    const cuda::HostMemoryStats s = cuda::host_memory_stats();
    nb::dict d;
    d["allocated_bytes"] = s.allocated;
    d["reserved_bytes"] = s.reserved;
    d["active_buffers"] = s.active_buffers;
    d["cached_buffers"] = s.cached_buffers;
    d["allocations"] = s.allocations;
    d["cache_hits"] = s.cache_hits;
    d["host_allocs"] = s.host_allocs;
    return d;
  }, "The pinned host memory pool's statistics as a dict.");
  m.def("empty_host_cache", &cuda::empty_host_cache, "Frees the cached pinned buffers no copy uses any more.");
#else
  m.def("memory_stats", [](DeviceLike) -> nb::dict { no_cuda("memory_stats"); }, "device"_a = nb::none());
  m.def("memory_allocated", [](DeviceLike) -> size_t { no_cuda("memory_allocated"); }, "device"_a = nb::none());
  m.def("memory_reserved", [](DeviceLike) -> size_t { no_cuda("memory_reserved"); }, "device"_a = nb::none());
  m.def("max_memory_allocated", [](DeviceLike) -> size_t { no_cuda("max_memory_allocated"); }, "device"_a = nb::none());
  m.def("max_memory_reserved", [](DeviceLike) -> size_t { no_cuda("max_memory_reserved"); }, "device"_a = nb::none());
  m.def("reset_peak_memory_stats", [](DeviceLike) { no_cuda("reset_peak_memory_stats"); }, "device"_a = nb::none());
  m.def("empty_cache", [](DeviceLike) { no_cuda("empty_cache"); }, "device"_a = nb::none());
  m.def("memory_limit", [](DeviceLike) -> size_t { no_cuda("memory_limit"); }, "device"_a = nb::none());
  m.def("set_memory_limit", [](size_t, DeviceLike) { no_cuda("set_memory_limit"); }, "bytes"_a,
        "device"_a = nb::none());
  m.def("host_memory_stats", []() -> nb::dict { no_cuda("host_memory_stats"); });
  m.def("empty_host_cache", [] { no_cuda("empty_host_cache"); });
#endif
}

}  // namespace kiln::python
