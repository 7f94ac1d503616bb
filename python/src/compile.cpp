// kiln.compile: a Python step function traced by kiln::compile (kiln/compile.hpp, docs/compile.md) and replayed
// without calling Python again.
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <memory>
#include <string>
#include <vector>

#include "bindings.hpp"
#include "convert.hpp"

namespace kiln::python {
namespace {

struct PyCompiled {
  nb::object fn;
  std::unique_ptr<CompiledStep> step;
  bool single = true;  ///< the function returned one Array (not a tuple or list of them)
};

int compiled_traverse(PyObject* self, visitproc visit, void* arg) {
  Py_VISIT(Py_TYPE(self));
  if (!nb::inst_ready(self)) return 0;
  Py_VISIT(nb::inst_ptr<PyCompiled>(self)->fn.ptr());
  return 0;
}
int compiled_clear(PyObject* self) {
  if (nb::inst_ready(self)) nb::inst_ptr<PyCompiled>(self)->fn.reset();
  return 0;
}
PyType_Slot compiled_slots[] = {{Py_tp_traverse, reinterpret_cast<void*>(compiled_traverse)},
                                {Py_tp_clear, reinterpret_cast<void*>(compiled_clear)},
                                {0, nullptr}};

/// The function's result as arrays: one Array, or a tuple or list of them.
std::vector<Array> results(nb::handle r, bool& single) {
  if (nb::isinstance<Array>(r)) {
    single = true;
    return {nb::cast<Array>(r)};
  }
  if (nb::isinstance<nb::tuple>(r) || nb::isinstance<nb::list>(r)) {
    single = false;
    std::vector<Array> out;
    for (nb::handle item : r) {
      if (!nb::isinstance<Array>(item))
        throw nb::type_error("kiln.compile: the step returned a sequence holding a non-Array; return a kiln.Array "
                             "or a tuple of them");
      out.push_back(nb::cast<Array>(item));
    }
    return out;
  }
  throw nb::type_error(("kiln.compile: the step returned " + nb::cast<std::string>(nb::repr(nb::type_name(r.type()))) +
                        "; return a kiln.Array or a tuple of them (the loss, say)")
                           .c_str());
}

}  // namespace

void bind_compile(nb::module_& m) {
  nb::class_<PyCompiled>(m, "CompiledStep",
                         "A step function traced by kiln.compile: call it like the function (arrays in, arrays out).",
                         nb::type_slots(compiled_slots))
      .def("__call__",
           [](PyCompiled& self, nb::args args) {
             std::vector<Array> in;
             for (nb::handle a : args) in.push_back(to_array(a));
             std::vector<Array> out;
             {
               nb::gil_scoped_release release;
               out = (*self.step)(in);
             }
             if (self.single && out.size() == 1) return nb::cast(out[0]);
             return nb::cast(nb::tuple(nb::cast(out)));
           })
      .def_prop_ro("compiled", [](const PyCompiled& s) { return s.step->compiled(); },
                   "True once two traces agreed: later calls replay.")
      .def_prop_ro("recorded_ops", [](const PyCompiled& s) { return s.step->recorded_ops(); })
      .def_prop_ro("fused_ops", [](const PyCompiled& s) { return s.step->fused_ops(); },
                   "Recorded calls the fusion pass merged into others.")
      .def_prop_ro("memory_bytes", [](const PyCompiled& s) { return s.step->memory_bytes(); },
                   "Bytes the replays' arrays use: the most the traced step's arrays held at once.")
      .def_prop_ro("eager_calls", [](const PyCompiled& s) { return s.step->eager_calls(); })
      .def_prop_ro("traced_calls", [](const PyCompiled& s) { return s.step->traced_calls(); })
      .def_prop_ro("replays", [](const PyCompiled& s) { return s.step->replays(); })
      .def("summary", [](const PyCompiled& s) { return s.step->summary(); },
           "The replayed ops counted by kind, one 'kind: count' per line.");
  m.def(
      "compile",
      [](nb::object fn, int warmup, bool fuse, bool epilogues) {
        if (!PyCallable_Check(fn.ptr()))
          throw nb::type_error("kiln.compile: pass the step function (a callable of arrays)");
        auto c = std::make_unique<PyCompiled>();
        PyCompiled* self = c.get();
        c->fn = fn;
        c->step = std::make_unique<CompiledStep>(compile(
            [self](const std::vector<Array>& in) {
              nb::gil_scoped_acquire gil;
              nb::list args;
              for (const Array& a : in) args.append(nb::cast(a));
              const nb::object r = self->fn(*args);
              return results(r, self->single);
            },
            {.warmup = warmup, .fuse = fuse, .epilogues = epilogues}));
        return c.release();
      },
      "fn"_a, nb::kw_only(), "warmup"_a = 1, "fuse"_a = true, "epilogues"_a = true, nb::rv_policy::take_ownership,
      "kiln::compile of a Python step function fn(*arrays) -> Array (or a tuple of them): `warmup` calls run it, the "
      "next two trace it (Python runs), then each call copies its arrays in and replays the recorded kernels "
      "without calling Python; the results are those of eager steps, bit for bit (docs/compile.md). fuse: merge "
      "elementwise work into the call whose result it reads (StepCompileOptions::fuse). epilogues: with fuse, "
      "GELU's gradient computed in the epilogue of the product that makes it, on a GPU in 16-bit dtypes (not bit "
      "for bit: StepCompileOptions::epilogues).");
  m.def("tracing_step", &tracing_step, "True while this thread traces a step for kiln.compile.");
}

}  // namespace kiln::python
