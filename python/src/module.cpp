// The extension module kiln._kiln: kiln's exceptions as Python exception types, dtypes and devices, and the
// parts bound by the other files. python/kiln/__init__.py re-exports it as `kiln`.
#include <nanobind/stl/string.h>

#include <string>

#include "bindings.hpp"
#include "convert.hpp"

namespace kiln::python {
namespace {

// kiln's exceptions, each also a subclass of the built-in exception Python code catches for that kind of
// mistake (a ShapeError is a ValueError, a DTypeError a TypeError, OutOfMemoryError a MemoryError).
struct Exceptions {
  PyObject *error, *shape, *dtype, *device, *oom, *compile, *cuda, *value, *dist, *linalg;
};
Exceptions exceptions;

PyObject* new_exception(nb::module_& m, const char* name, PyObject* kiln_base, PyObject* builtin, const char* doc) {
  const std::string qualified = std::string("kiln.") + name;
  PyObject* bases = kiln_base ? PyTuple_Pack(2, kiln_base, builtin) : PyTuple_Pack(1, builtin);
  PyObject* type = PyErr_NewExceptionWithDoc(qualified.c_str(), doc, bases, nullptr);
  Py_DECREF(bases);
  if (!type) throw nb::python_error();
  m.attr(name) = nb::handle(type);
  return type;
}

void register_exceptions(nb::module_& m) {
  auto& e = exceptions;
  e.error = new_exception(m, "Error", nullptr, PyExc_Exception, "Base of every kiln exception.");
  e.shape = new_exception(m, "ShapeError", e.error, PyExc_ValueError,
                          "Shapes that do not broadcast, a bad axis, a reshape to the wrong size.");
  e.dtype = new_exception(m, "DTypeError", e.error, PyExc_TypeError,
                          "A dtype an op does not support, or a cast that would lose the value's kind.");
  e.device = new_exception(m, "DeviceError", e.error, PyExc_RuntimeError,
                           "Operands on different devices, a device that does not exist.");
  e.oom = new_exception(m, "OutOfMemoryError", e.error, PyExc_MemoryError, "An allocation failed.");
  e.compile = new_exception(m, "CompileError", e.error, PyExc_RuntimeError, "A run-time kernel failed to compile.");
  e.cuda = new_exception(m, "CudaError", e.error, PyExc_RuntimeError, "A CUDA, NVRTC or cuBLAS call failed.");
  e.value = new_exception(m, "ValueError", e.error, PyExc_ValueError, "A value out of the range an op accepts.");
  e.dist = new_exception(m, "DistError", e.error, PyExc_RuntimeError, "A collective operation failed.");
  e.linalg = new_exception(m, "LinAlgError", e.value, PyExc_ValueError,
                           "A linear-algebra routine failed on its input (a singular matrix).");
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const LinAlgError& x) {
      PyErr_SetString(exceptions.linalg, x.what());
    } catch (const ShapeError& x) {
      PyErr_SetString(exceptions.shape, x.what());
    } catch (const DTypeError& x) {
      PyErr_SetString(exceptions.dtype, x.what());
    } catch (const DeviceError& x) {
      PyErr_SetString(exceptions.device, x.what());
    } catch (const OutOfMemoryError& x) {
      PyErr_SetString(exceptions.oom, x.what());
    } catch (const CompileError& x) {
      PyErr_SetString(exceptions.compile, x.what());
    } catch (const CudaError& x) {
      PyErr_SetString(exceptions.cuda, x.what());
    } catch (const kiln::ValueError& x) {
      PyErr_SetString(exceptions.value, x.what());
    } catch (const DistError& x) {
      PyErr_SetString(exceptions.dist, x.what());
    } catch (const Error& x) {
      PyErr_SetString(exceptions.error, x.what());
    }
  });
}

void bind_dtypes(nb::module_& m) {
  nb::class_<PyDType>(m, "dtype", "An element type: kiln.float32, kiln.int64, ... (x.dtype).")
      .def("__init__", [](PyDType* self, nb::handle spec) { new (self) PyDType{to_dtype(spec)}; }, "spec"_a)
      .def_prop_ro("name", [](const PyDType& d) { return std::string(dtype_name(d.type)); })
      .def_prop_ro("itemsize", [](const PyDType& d) { return itemsize(d.type); })
      .def_prop_ro("kind", [](const PyDType& d) {  // NumPy's one-letter kinds
        return d.type == DType::Bool ? "b" : d.type == DType::UInt8 ? "u" : is_integral(d.type) ? "i" : "f";
      })
      .def("__repr__", [](const PyDType& d) { return "kiln." + std::string(dtype_name(d.type)); })
      .def("__str__", [](const PyDType& d) { return std::string(dtype_name(d.type)); })
      .def("__hash__", [](const PyDType& d) { return nb::hash(nb::str(dtype_name(d.type).data())); })
      .def("__eq__", [](const PyDType& d, nb::handle other) {
        if (other.is_none()) return false;
        try {
          return to_dtype(other) == d.type;
        } catch (const std::exception&) {
          PyErr_Clear();
          return false;
        }
      }, "other"_a.none())
      .def("__ne__", [](const PyDType& d, nb::handle other) {
        if (other.is_none()) return true;
        try {
          return to_dtype(other) != d.type;
        } catch (const std::exception&) {
          PyErr_Clear();
          return true;
        }
      }, "other"_a.none());
  const DType all[] = {DType::Bool, DType::Int8, DType::Int16, DType::Int32, DType::Int64, DType::UInt8,
                       DType::Float16, DType::BFloat16, DType::Float32, DType::Float64,
                       DType::Complex64, DType::Complex128};
  for (DType t : all) {
    const std::string name(dtype_name(t));
    m.attr(name == "bool" ? "bool_" : name.c_str()) = PyDType{t};
  }
  m.attr("bool") = PyDType{DType::Bool};  // the Array API's name
  m.def("promote_types", [](nb::handle a, nb::handle b) { return PyDType{promote_types(to_dtype(a), to_dtype(b))}; },
        "type1"_a, "type2"_a);
}

void bind_devices(nb::module_& m) {
  nb::class_<Device>(m, "Device", "Where an array lives: kiln.cpu(), kiln.cuda(0).")
      .def("__init__", [](Device* self, const std::string& name) { new (self) Device(parse_device(name)); }, "name"_a)
      .def_prop_ro("type", [](const Device& d) { return d.is_cuda() ? "cuda" : "cpu"; })
      .def_prop_ro("index", [](const Device& d) { return d.index; })
      .def("__str__", &Device::str)
      .def("__repr__", [](const Device& d) {
        return d.is_cuda() ? "kiln.cuda(" + std::to_string(d.index) + ")" : std::string("kiln.cpu()");
      })
      .def("__eq__", [](const Device& d, nb::handle other) {
        if (nb::isinstance<Device>(other)) return nb::cast<Device>(other) == d;
        if (nb::isinstance<nb::str>(other)) return parse_device(nb::cast<std::string>(other)) == d;
        return false;
      }, "other"_a.none())
      .def("__hash__", [](const Device& d) { return nb::hash(nb::str(d.str().c_str())); });
}

}  // namespace

}  // namespace kiln::python

NB_MODULE(_kiln, m) {
  using namespace kiln::python;
  m.doc() = "kiln's C++ core (kiln._kiln); import kiln instead.";
  register_exceptions(m);
  bind_dtypes(m);
  bind_devices(m);
  bind_array(m);
  bind_fuse(m);
  bind_ops(m);
  bind_extra(m);
  bind_statistics(m);
  bind_linalg(m);
  bind_fft(m);
  bind_fusion_overloads(m);
  bind_runtime(m);
  bind_text(m);
  bind_gpu(m);
  bind_data(m);
  bind_nn(m);
  bind_nn_init(m);
  bind_nn_layers(m);
  bind_train(m);
  bind_compile(m);
  bind_memory(m);
  bind_models(m);
  bind_module_gc(m);
}
