// kiln.random (the Philox generator), autograd on arrays and its switches, devices and synchronisation.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>

#include "bindings.hpp"
#include "convert.hpp"
#include "typed.hpp"

namespace kiln::python {
namespace {

// NumPy's `size` argument: None draws one value (a 0-d array).
Shape size_shape(ShapeLike size) { return size.is_none() ? Shape{} : to_shape(size); }

DType float_dtype(DTypeLike dtype) {
  auto t = to_optional_dtype(dtype);
  return t ? *t : kDefaultFloat;
}

}  // namespace

void bind_runtime(nb::module_& m) {
  // ---------------------------------------------------------------- devices
  m.def("cpu", &kiln::cpu, "The host.");
  m.def("cuda", &kiln::gpu, "index"_a = 0, "CUDA GPU `index`; kiln.DeviceError when it does not exist.");
  m.def("gpu", &kiln::gpu, "index"_a = 0, "CUDA GPU `index` (as kiln.cuda).");
  m.def("try_gpu", &kiln::try_gpu, "index"_a = 0, "GPU `index` when it exists, else the CPU (d2l's try_gpu).");
  m.def("num_gpus", &kiln::num_gpus);
  m.def("device", [](nb::handle name) { return *to_optional_device(name); }, "name"_a,
        "A device from its name: 'cpu', 'cuda', 'cuda:1'.");
  m.def("current_device", &kiln::current_device);
  m.def("set_current_device", [](nb::handle d) { kiln::set_current_device(*to_optional_device(d)); }, "device"_a);
  m.def("synchronize", [](DeviceLike device) {
    auto d = to_optional_device(device);
    kiln::synchronize(d ? *d : kiln::current_device());
  }, "device"_a = nb::none(), "Waits for the queued work of the device (the current one by default).");

  // ---------------------------------------------------------------- random
  nb::module_ random = m.def_submodule("random", "Random arrays from kiln's Philox generator (kiln::random).");
  random.def("seed", [](uint64_t s) { kiln::random::seed(s); }, "seed"_a);
  random.def("get_state", [] {
    auto s = kiln::random::get_state();
    return nb::make_tuple(s.seed, s.offset);
  });
  random.def("set_state", [](std::pair<uint64_t, uint64_t> s) { kiln::random::set_state({s.first, s.second}); },
             "state"_a);
  random.def("normal", [](double loc, double scale, ShapeLike size, DTypeLike dtype, DeviceLike device) {
    return kiln::random::normal(size_shape(size), loc, scale, float_dtype(dtype), to_optional_device(device));
  }, "loc"_a = 0.0, "scale"_a = 1.0, "size"_a = nb::none(), "dtype"_a = nb::none(), "device"_a = nb::none());
  random.def("standard_normal", [](ShapeLike size, DTypeLike dtype, DeviceLike device) {
    return kiln::random::normal(size_shape(size), 0.0, 1.0, float_dtype(dtype), to_optional_device(device));
  }, "size"_a = nb::none(), "dtype"_a = nb::none(), "device"_a = nb::none());
  random.def("uniform", [](double low, double high, ShapeLike size, DTypeLike dtype, DeviceLike device) {
    return kiln::random::uniform(size_shape(size), low, high, float_dtype(dtype), to_optional_device(device));
  }, "low"_a = 0.0, "high"_a = 1.0, "size"_a = nb::none(), "dtype"_a = nb::none(), "device"_a = nb::none());
  random.def("random", [](ShapeLike size, DTypeLike dtype, DeviceLike device) {
    return kiln::random::uniform(size_shape(size), 0.0, 1.0, float_dtype(dtype), to_optional_device(device));
  }, "size"_a = nb::none(), "dtype"_a = nb::none(), "device"_a = nb::none());
  random.def("randint", [](int64_t low, std::optional<int64_t> high, ShapeLike size, DTypeLike dtype,
                           DeviceLike device) {
    auto t = to_optional_dtype(dtype);
    const int64_t lo = high ? low : 0, hi = high ? *high : low;  // randint(n) draws from [0, n), as NumPy
    return kiln::random::randint(lo, hi, size_shape(size), t ? *t : DType::Int64, to_optional_device(device));
  }, "low"_a, "high"_a = nb::none(), "size"_a = nb::none(), "dtype"_a = nb::none(), "device"_a = nb::none());
  random.def("permutation", [](nb::handle x, DeviceLike device) {
    if (PyLong_Check(x.ptr())) return kiln::random::permutation(nb::cast<int64_t>(x), to_optional_device(device));
    return kiln::random::permutation(to_array(x));
  }, "x"_a, "device"_a = nb::none());

  // An independent stream beside the global one, as numpy.random.Generator / torch.Generator: its draws depend
  // on its own seed and offset only.
  using kiln::random::Generator;
  nb::class_<Generator>(random, "Generator",
                        "An independent Philox stream (numpy.random.Generator's methods; kiln.random.default_rng "
                        "makes one): draws from it leave the global stream, and other generators, as they were.")
      .def(nb::init<uint64_t>(), "seed"_a = 0)
      .def("seed", &Generator::seed, "seed"_a, "Reseeds the stream and rewinds it.")
      .def("get_state", [](const Generator& g) {
        auto st = g.get_state();
        return std::make_pair(st.seed, st.offset);
      }, "(seed, offset): set_state of it repeats the draws made after it.")
      .def("set_state", [](Generator& g, std::pair<uint64_t, uint64_t> st) { g.set_state({st.first, st.second}); },
           "state"_a)
      .def("normal", [](Generator& g, double loc, double scale, ShapeLike size, DTypeLike dtype, DeviceLike device) {
        return g.normal(size_shape(size), loc, scale, float_dtype(dtype), to_optional_device(device));
      }, "loc"_a = 0.0, "scale"_a = 1.0, "size"_a = nb::none(), "dtype"_a = nb::none(), "device"_a = nb::none())
      .def("standard_normal", [](Generator& g, ShapeLike size, DTypeLike dtype, DeviceLike device) {
        return g.normal(size_shape(size), 0.0, 1.0, float_dtype(dtype), to_optional_device(device));
      }, "size"_a = nb::none(), "dtype"_a = nb::none(), "device"_a = nb::none())
      .def("uniform", [](Generator& g, double low, double high, ShapeLike size, DTypeLike dtype, DeviceLike device) {
        return g.uniform(size_shape(size), low, high, float_dtype(dtype), to_optional_device(device));
      }, "low"_a = 0.0, "high"_a = 1.0, "size"_a = nb::none(), "dtype"_a = nb::none(), "device"_a = nb::none())
      .def("random", [](Generator& g, ShapeLike size, DTypeLike dtype, DeviceLike device) {
        return g.uniform(size_shape(size), 0.0, 1.0, float_dtype(dtype), to_optional_device(device));
      }, "size"_a = nb::none(), "dtype"_a = nb::none(), "device"_a = nb::none())
      .def("integers", [](Generator& g, int64_t low, std::optional<int64_t> high, ShapeLike size, DTypeLike dtype,
                          DeviceLike device) {
        auto t = to_optional_dtype(dtype);
        const int64_t lo = high ? low : 0, hi = high ? *high : low;  // integers(n) draws from [0, n), as NumPy
        return g.randint(lo, hi, size_shape(size), t ? *t : DType::Int64, to_optional_device(device));
      }, "low"_a, "high"_a = nb::none(), "size"_a = nb::none(), "dtype"_a = nb::none(), "device"_a = nb::none(),
         "Integers in [low, high) (NumPy's endpoint=False).");
  random.def("default_rng", [](uint64_t seed) { return Generator(seed); }, "seed"_a = 0,
             "A new Generator (numpy.random.default_rng).");

  // ---------------------------------------------------------------- autograd
  m.def("is_grad_enabled", &kiln::is_grad_enabled);
  m.def("set_grad_enabled", &kiln::set_grad_enabled, "enabled"_a);
}

void bind_autograd_methods(nb::class_<Array>& cls) {
  cls.def_prop_rw("requires_grad", &Array::requires_grad,
                  [](Array& a, bool enabled) { a.set_requires_grad(enabled); })
      .def("requires_grad_", [](Array& a, bool enabled) { return a.set_requires_grad(enabled); }, "requires_grad"_a = true)
      .def_prop_rw("grad", [](const Array& a) -> std::optional<Array> {
        Array g = a.grad();
        return g.defined() ? std::optional<Array>(g) : std::nullopt;
      }, [](Array& a, std::optional<Array> g) { a.set_grad(g ? *g : Array()); }, nb::arg("grad").none())
      .def("backward", [](const Array& a, std::optional<Array> gradient, bool retain_graph) {
        if (!gradient && !retain_graph) return a.backward();
        a.backward(gradient ? *gradient : Array(), retain_graph);
      }, "gradient"_a = nb::none(), "retain_graph"_a = false)
      .def("detach", &Array::detach)
      .def_prop_ro("is_leaf", &Array::is_leaf)
      .def_prop_ro("grad_fn", [](const Array& a) -> std::optional<std::string> {
        std::string name = a.grad_fn_name();
        return name.empty() ? std::nullopt : std::optional<std::string>(name);
      })
      .def("retain_grad", [](Array& a) { a.retain_grad(); });
}

}  // namespace kiln::python
