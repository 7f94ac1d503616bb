// The device runtime beyond devices: streams (a context manager makes one current, as CuPy's `with stream:`),
// events and their timings, pinned host memory, device properties, and user kernels from source strings
// (ElementwiseKernel, ReductionKernel, RawModule / RawKernel, as CuPy's). On the CPU streams are no-op queues and
// events read the host clock, so code written for a GPU runs there; user kernels need a GPU (DeviceError).
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "bindings.hpp"
#include "convert.hpp"
#include "typed.hpp"

namespace kiln::python {
namespace {

Device device_or_current(DeviceLike device) {
  std::optional<Device> d = to_optional_device(device);
  return d ? *d : current_device();
}

// A Stream with the guards of the `with` blocks it is current in (nested blocks stack).
struct PyStream {
  Stream stream;
  std::vector<std::shared_ptr<StreamGuard>> guards;  // shared: a PyStream is copied when returned by value
};

Stream to_stream(nb::handle obj, Device fallback) {
  if (obj.is_none()) return Stream::current(fallback);
  return nb::cast<const PyStream&>(obj).stream;
}

std::vector<KernelArg> kernel_args(const nb::args& args, std::optional<Device> device) {
  std::vector<KernelArg> out;
  for (nb::handle h : args) {
    if (nb::isinstance<Array>(h)) {
      out.emplace_back(nb::cast<const Array&>(h));
    } else if (is_python_scalar(h)) {
      out.emplace_back(to_scalar(h));
    } else {
      out.emplace_back(to_array(h, std::nullopt, device));
    }
  }
  return out;
}

nb::object outputs(std::vector<Array> arrays) {
  if (arrays.size() == 1) return nb::cast(arrays[0]);
  nb::list out;
  for (Array& a : arrays) out.append(std::move(a));
  return nb::tuple(out);
}

Dim3 to_dim3(nb::handle obj) {
  if (PyLong_Check(obj.ptr())) return Dim3(nb::cast<int64_t>(obj));
  std::vector<int64_t> v;
  for (nb::handle h : obj) v.push_back(to_index(h));
  if (v.empty() || v.size() > 3) throw nb::value_error("RawKernel: grid and block are an int or 1 to 3 ints");
  return Dim3(v[0], v.size() > 1 ? v[1] : 1, v.size() > 2 ? v[2] : 1);
}

// One RawKernel argument and the bytes it passes: an Array (its device pointer), a NumPy scalar (its exact
// width: np.int32(n) for an `int` parameter), a Python int (64 bits, as CuPy), float (double) or bool.
struct RawArg {
  Array array;
  alignas(8) unsigned char bytes[8] = {};
  detail::RawLaunchArg arg;
};

void pack_raw_arg(nb::handle h, RawArg& out) {
  auto value = [&](const void* src, size_t size, const char* type) {
    std::memcpy(out.bytes, src, size);
    out.arg = {detail::RawLaunchArg::Kind::Value, out.bytes, nullptr, size, size, type};
  };
  if (nb::isinstance<Array>(h)) {
    out.array = nb::cast<const Array&>(h);
    out.arg = {detail::RawLaunchArg::Kind::Array, nullptr, &out.array, sizeof(void*), alignof(void*), "array"};
  } else if (PyBool_Check(h.ptr())) {
    const bool v = nb::cast<bool>(h);
    value(&v, sizeof v, "bool");
  } else if (PyLong_Check(h.ptr())) {
    const int64_t v = nb::cast<int64_t>(h);
    value(&v, sizeof v, "int64");
  } else if (PyFloat_Check(h.ptr())) {
    const double v = nb::cast<double>(h);
    value(&v, sizeof v, "float64");
  } else if (nb::hasattr(h, "dtype") && nb::hasattr(h, "tobytes") && nb::cast<int64_t>(h.attr("ndim")) == 0) {
    nb::bytes raw = nb::cast<nb::bytes>(h.attr("tobytes")());
    if (raw.size() > sizeof out.bytes) throw nb::type_error("RawKernel: a scalar argument is at most 8 bytes");
    std::memcpy(out.bytes, raw.c_str(), raw.size());
    out.arg = {detail::RawLaunchArg::Kind::Value, out.bytes, nullptr, raw.size(), raw.size(), "numpy scalar"};
  } else {
    throw nb::type_error(("RawKernel: an argument is a kiln.Array, a NumPy scalar (np.int32(n)) or a Python "
                          "int/float/bool, not '" + std::string(nb::type_name(h.type()).c_str()) + "'").c_str());
  }
}

void launch_raw(const RawKernel& kernel, nb::handle grid, nb::handle block, nb::handle args, size_t shared_mem,
                nb::handle stream) {
  std::vector<RawArg> packed(nb::len(args));
  size_t i = 0;
  for (nb::handle h : args) pack_raw_arg(h, packed[i++]);
  std::vector<detail::RawLaunchArg> raw;
  for (const RawArg& p : packed) raw.push_back(p.arg);
  LaunchOptions options{shared_mem, std::nullopt};
  if (!stream.is_none()) options.stream = nb::cast<const PyStream&>(stream).stream;
  kernel.launch_args(to_dim3(grid), to_dim3(block), raw.data(), raw.size(), options);
}

}  // namespace

void bind_gpu(nb::module_& m) {
  // ---------------------------------------------------------------- streams and events
  nb::class_<PyStream>(m, "Stream", "A queue of work on one device (cupy.cuda.Stream, torch.cuda.Stream); "
                                    "`with stream:` makes it current for this thread.")
      .def("__init__", [](PyStream* self, DeviceLike device, bool non_blocking, int priority) {
        new (self) PyStream{Stream::create(device_or_current(device), {non_blocking, priority}), {}};
      }, "device"_a = nb::none(), "non_blocking"_a = false, "priority"_a = 0)
      .def_static("null", [](DeviceLike device) {
        return PyStream{Stream::default_stream(device_or_current(device)), {}};
      }, "device"_a = nb::none(), "The device's default (legacy NULL) stream.")
      .def_prop_ro("device", [](const PyStream& s) { return s.stream.device(); })
      .def_prop_ro("ptr", [](const PyStream& s) { return reinterpret_cast<uintptr_t>(s.stream.handle()); },
                   "The cudaStream_t as an int (0 for the default stream and on the CPU).")
      .def("synchronize", [](const PyStream& s) { s.stream.synchronize(); }, "Waits for the stream's work.")
      .def("query", [](const PyStream& s) { return s.stream.query(); }, "True when all its work is done.")
      .def("record", [](const PyStream& s, bool timing) {
        Event e = Event::create(s.stream.device(), timing);
        e.record(s.stream);
        return e;
      }, "timing"_a = true, "A new event recorded at the stream's current end.")
      .def("wait_event", [](const PyStream& s, const Event& e) { e.wait(s.stream); }, "event"_a,
           "Makes the stream's later work wait for `event` (the host does not block).")
      .def("__enter__", [](nb::handle self) {
        PyStream& s = nb::cast<PyStream&>(self);
        s.guards.push_back(std::make_shared<StreamGuard>(s.stream));
        return nb::borrow(self);
      })
      .def("__exit__", [](PyStream& s, nb::args) { if (!s.guards.empty()) s.guards.pop_back(); })
      .def("__eq__", [](const PyStream& s, nb::handle o) {
        return nb::isinstance<PyStream>(o) && nb::cast<const PyStream&>(o).stream == s.stream;
      }, "other"_a.none())
      .def("__repr__", [](const PyStream& s) { return "kiln." + s.stream.str(); });
  m.def("current_stream", [](DeviceLike device) { return PyStream{Stream::current(device_or_current(device)), {}}; },
        "device"_a = nb::none(), "This thread's current stream on `device` (default: the current device).");

  nb::class_<Event>(m, "Event", "A marker in a stream, for ordering and timing (cupy.cuda.Event, torch.cuda.Event).")
      .def("__init__", [](Event* self, DeviceLike device, bool timing) {
        new (self) Event(Event::create(device_or_current(device), timing));
      }, "device"_a = nb::none(), "timing"_a = true)
      .def("record", [](Event& e, nb::handle stream) {
        e.record(to_stream(stream, e.device()));
      }, "stream"_a = nb::none(), "Records the event at the end of `stream` (default: the current one).")
      .def("wait", [](const Event& e, nb::handle stream) { e.wait(to_stream(stream, e.device())); },
           "stream"_a = nb::none(), "Makes `stream`'s later work wait for this event.")
      .def("synchronize", &Event::synchronize, "Blocks the host until the event has completed.")
      .def("query", &Event::query, "True when the event has completed.")
      .def("elapsed_time", &Event::elapsed_ms, "end"_a,
           "Milliseconds from this event to `end` (synchronises on `end`; ValueError when one was not recorded).")
      .def_prop_ro("device", &Event::device);
  m.def("get_elapsed_time", [](const Event& start, const Event& end) { return start.elapsed_ms(end); },
        "start"_a, "end"_a, "Milliseconds between two recorded events (cupy.cuda.get_elapsed_time).");

  // ---------------------------------------------------------------- devices and pinned memory
  m.def("try_all_gpus", &kiln::try_all_gpus, "Every GPU, or [cpu()] when there is none (d2l's try_all_gpus).");
  m.def("device_properties", [](DeviceLike device) {
    DeviceProperties p = kiln::device_properties(device_or_current(device));
    nb::dict d;
    d["name"] = p.name;
    d["major"] = p.major;
    d["minor"] = p.minor;
    d["total_memory"] = p.total_memory;
    d["free_memory"] = p.free_memory;
    d["multiprocessors"] = p.multiprocessors;
    d["l2_cache_bytes"] = p.l2_cache_bytes;
    d["warp_size"] = p.warp_size;
    d["memory_bandwidth_gbs"] = p.memory_bandwidth_gbs;
    return d;
  }, "device"_a = nb::none(), "The device's properties as a dict (a CPU: its name and hardware threads).");
  m.def("empty_pinned", [](ShapeLike shape, DTypeLike dtype) {
    auto t = to_optional_dtype(dtype);
    ArrayOptions options;
    options.pinned = true;
    return kiln::empty(to_shape(shape), t ? *t : kDefaultFloat, cpu(), options);
  }, "shape"_a, "dtype"_a = nb::none(),
     "A CPU array in page-locked memory (cupyx.empty_pinned): copies to and from a GPU can be asynchronous. "
     "Needs a CUDA build (DeviceError otherwise).");

  // ---------------------------------------------------------------- user kernels
  nb::class_<ElementwiseKernel>(m, "ElementwiseKernel",
                                "An elementwise GPU kernel from source (cupy.ElementwiseKernel); see kiln/kernels.hpp.")
      .def("__init__", [](ElementwiseKernel* self, const std::string& in_params, const std::string& out_params,
                          const std::string& operation, const std::string& name, std::vector<std::string> options,
                          const std::string& preamble) {
        new (self) ElementwiseKernel(in_params, out_params, operation, name, {std::move(options), preamble});
      }, "in_params"_a, "out_params"_a, "operation"_a, "name"_a = "kernel", "options"_a = std::vector<std::string>{},
         "preamble"_a = "")
      .def("__call__", [](const ElementwiseKernel& k, nb::args args, std::optional<int64_t> size) {
        return outputs(k.call(kernel_args(args, std::nullopt), size));
      }, "args"_a, "size"_a = nb::none(), "Runs on the arguments' GPU: the inputs, then optionally the outputs.")
      .def_prop_ro("name", &ElementwiseKernel::name)
      .def_prop_ro("nin", &ElementwiseKernel::nin)
      .def_prop_ro("nout", &ElementwiseKernel::nout);
  nb::class_<ReductionKernel>(m, "ReductionKernel", "A reduction GPU kernel from source (cupy.ReductionKernel).")
      .def("__init__", [](ReductionKernel* self, const std::string& in_params, const std::string& out_params,
                          const std::string& map_expr, const std::string& reduce_expr, const std::string& post_map_expr,
                          const std::string& identity, const std::string& name, const std::string& reduce_type,
                          std::vector<std::string> options, const std::string& preamble) {
        new (self) ReductionKernel(in_params, out_params, map_expr, reduce_expr, post_map_expr, identity, name,
                                   {std::move(options), preamble, reduce_type});
      }, "in_params"_a, "out_params"_a, "map_expr"_a, "reduce_expr"_a, "post_map_expr"_a, "identity"_a,
         "name"_a = "reduce_kernel", "reduce_type"_a = "", "options"_a = std::vector<std::string>{}, "preamble"_a = "")
      .def("__call__", [](const ReductionKernel& k, nb::args args, AxisLike axis, bool keepdims) {
        return outputs(k.call(kernel_args(args, std::nullopt), to_axes(axis), keepdims));
      }, "args"_a, "axis"_a = nb::none(), "keepdims"_a = false)
      .def_prop_ro("name", &ReductionKernel::name);

  nb::class_<RawKernel>(m, "RawKernel", "One __global__ function of a RawModule (cupy.RawKernel): "
                                        "kernel(grid, block, args, shared_mem=0, stream=None).")
      .def("__init__", [](RawKernel* self, const std::string& code, const std::string& name,
                          std::vector<std::string> options) {
        RawModuleOptions o;
        o.options = std::move(options);
        new (self) RawKernel(RawModule(code, o).function(name));
      }, "code"_a, "name"_a, "options"_a = std::vector<std::string>{},
         "Compiles `code` with NVRTC and takes its kernel `name` (an extern \"C\" function).")
      .def("__call__", &launch_raw, "grid"_a, "block"_a, "args"_a, "shared_mem"_a = 0, "stream"_a = nb::none())
      .def_prop_ro("name", &RawKernel::name)
      .def_prop_ro("device", &RawKernel::device);
  nb::class_<RawModule>(m, "RawModule", "A CUDA C++ module compiled with NVRTC on one GPU (cupy.RawModule).")
      .def("__init__", [](RawModule* self, const std::string& code, std::vector<std::string> options,
                          std::vector<std::string> name_expressions, DeviceLike device) {
        RawModuleOptions o;
        o.options = std::move(options);
        o.name_expressions = std::move(name_expressions);
        o.device = to_optional_device(device);
        new (self) RawModule(code, o);
      }, "code"_a, "options"_a = std::vector<std::string>{}, "name_expressions"_a = std::vector<std::string>{},
         "device"_a = nb::none())
      .def("get_function", &RawModule::function, "name"_a)
      .def_prop_ro("kernel_names", &RawModule::kernel_names)
      .def_prop_ro("device", &RawModule::device);
}

void bind_pinned_methods(nb::class_<Array>& cls) {
  cls.def("pin_memory", &Array::pin_memory, "A copy in page-locked host memory (the array itself when pinned).")
      .def_prop_ro("is_pinned", &Array::is_pinned)
      .def("copy_", [](nb::handle self, const Array& src, bool non_blocking) {
        nb::cast<Array&>(self).copy_from(src, TransferOptions{non_blocking});
        return nb::borrow(self);
      }, "src"_a, "non_blocking"_a = false,
         "Copies `src` (same shape and dtype, any device) into this array, as torch's copy_; asynchronous with "
         "non_blocking between pinned host memory and a GPU, or between GPUs.")
      .def("record_stream", [](const Array& a, const PyStream& s) { a.record_stream(s.stream); }, "stream"_a,
           "Marks the array as used by `stream`: its memory is not reused until that stream's work is done.");
}

}  // namespace kiln::python
