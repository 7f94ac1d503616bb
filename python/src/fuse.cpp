// kiln.fuse: a Python function traced into kiln's fused kernels (kiln::fuse's runtime-arity entry points in
// kiln/fuse.hpp). On the first call of a signature (argument dtypes, ranks, which are scalars) the function is
// called once with kiln.FusionValue arguments, which record the ops; later calls run the recorded graph.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "bindings.hpp"
#include "convert.hpp"

namespace kiln::python {
namespace {

detail::FusionOperand to_fusion_operand(nb::handle obj) {
  if (nb::isinstance<FusionValue>(obj)) return detail::FusionOperand(nb::cast<const FusionValue&>(obj));
  if (is_python_scalar(obj)) return detail::FusionOperand(to_scalar(obj));
  if (nb::isinstance<Array>(obj)) return detail::FusionOperand(nb::cast<const Array&>(obj));  // refused: captured
  throw nb::type_error(("kiln.fuse: an operand of a traced op is a FusionValue or a Python number, not " +
                        nb::cast<std::string>(nb::repr(nb::type_name(obj.type())))).c_str());
}

FusionValue apply1(const char* name, nb::handle a) { return detail::fusion_apply(name, {to_fusion_operand(a)}); }
FusionValue apply2(const char* name, nb::handle a, nb::handle b) {
  return detail::fusion_apply(name, {to_fusion_operand(a), to_fusion_operand(b)});
}

class PyFused {
 public:
  PyFused(nb::object fn, std::string name) : fn_(std::move(fn)), name_(std::move(name)), cache_(detail::make_fusion_cache()) {}

  nb::object call(nb::args args, std::optional<nb::object> out) {
    std::vector<Array> converted;  // array-likes that are not kiln arrays; FusionArgument points into it
    converted.reserve(args.size());
    std::vector<detail::FusionArgument> arguments;
    for (nb::handle a : args) {
      if (nb::isinstance<Array>(a)) {
        arguments.push_back({&nb::cast<const Array&>(a), {}});
      } else if (is_python_scalar(a)) {
        arguments.push_back({nullptr, to_scalar(a)});
      } else {
        converted.push_back(to_array(a));
        arguments.push_back({&converted.back(), {}});
      }
    }
    std::shared_ptr<const detail::FusionGraph> graph = detail::fusion_lookup(*cache_, arguments);
    if (!graph) {
      graph = detail::fusion_trace(*cache_, name_, arguments, &PyFused::trace, this);
      outputs_[graph.get()] = traced_outputs_;
    }
    const size_t count = outputs_.at(graph.get());
    std::vector<Array> results(count);
    if (out) {
      std::vector<Array> given;
      if (nb::isinstance<Array>(*out)) {
        given.push_back(nb::cast<Array>(*out));
      } else {
        for (nb::handle o : *out) given.push_back(o.is_none() ? Array() : nb::cast<Array>(o));
      }
      if (given.size() > count)
        throw nb::value_error(("kiln.fuse(" + name_ + "): " + std::to_string(given.size()) + " out= arrays for " +
                               std::to_string(count) + " outputs; pass one array (or None) per output").c_str());
      for (size_t k = 0; k < given.size(); ++k) results[k] = given[k];
    }
    detail::fusion_run(*graph, arguments, results.data(), count);
    if (count == 1 && !returned_tuple_) return nb::cast(results[0]);
    nb::list tuple;
    for (const Array& r : results) tuple.append(r);
    return nb::tuple(tuple);
  }
  size_t cache_size() const { return detail::fusion_cache_size(*cache_); }
  const std::string& name() const { return name_; }

  // The garbage collector's view of the one Python object held: a Fused stored where its function can reach it
  // (a module-level `f = kiln.fuse(lambda ...)`: the lambda's globals hold f) is a cycle only the collector frees.
  static int traverse(PyObject* self, visitproc visit, void* arg) {
    Py_VISIT(Py_TYPE(self));
    if (!nb::inst_ready(self)) return 0;
    Py_VISIT(nb::inst_ptr<PyFused>(self)->fn_.ptr());
    return 0;
  }
  static int clear(PyObject* self) {
    nb::inst_ptr<PyFused>(self)->fn_ = nb::object();
    return 0;
  }

 private:
  static std::vector<FusionValue> trace(void* context, const std::vector<FusionValue>& values) {
    auto* self = static_cast<PyFused*>(context);
    nb::list args;
    for (const FusionValue& v : values) args.append(nb::cast(v));
    nb::object result = self->fn_(*args);
    std::vector<FusionValue> results;
    self->returned_tuple_ = nb::isinstance<nb::tuple>(result) || nb::isinstance<nb::list>(result);
    if (self->returned_tuple_) {
      for (nb::handle r : result) results.push_back(nb::cast<FusionValue>(r));
    } else if (nb::isinstance<FusionValue>(result)) {
      results.push_back(nb::cast<FusionValue>(result));
    } else {
      throw nb::type_error(("kiln.fuse(" + self->name_ +
                            "): the function must return the result of kiln ops on its arguments (one value or a "
                            "tuple of values), not " + nb::cast<std::string>(nb::repr(nb::type_name(result.type()))))
                               .c_str());
    }
    self->traced_outputs_ = results.size();
    return results;
  }

  nb::object fn_;
  std::string name_;
  std::shared_ptr<detail::FusionCache> cache_;
  std::map<const detail::FusionGraph*, size_t> outputs_;  // the number of outputs of each traced graph
  size_t traced_outputs_ = 0;
  bool returned_tuple_ = false;
};

}  // namespace

#define KILN_PY_FUSION_BINARY(cls, dunder, fn)                                                              \
  cls.def("__" dunder "__", [](const FusionValue& a, nb::handle b) { return apply2(#fn, nb::cast(a), b); }, \
          nb::is_operator());                                                                              \
  cls.def("__r" dunder "__", [](const FusionValue& a, nb::handle b) { return apply2(#fn, b, nb::cast(a)); }, \
          nb::is_operator());

void bind_fuse(nb::module_& m) {
  nb::class_<FusionValue> value(m, "FusionValue",
                                "A symbolic value inside a function kiln.fuse traces: use it like an Array.");
  value.def_prop_ro("dtype", [](const FusionValue& v) { return PyDType{v.dtype()}; })
      .def_prop_ro("ndim", &FusionValue::ndim)
      .def("astype", [](const FusionValue& v, nb::handle dtype) { return v.astype(to_dtype(dtype)); }, "dtype"_a)
      .def("__neg__", [](const FusionValue& v) { return detail::fusion_apply("negative", {v}); })
      .def("__abs__", [](const FusionValue& v) { return detail::fusion_apply("abs", {v}); })
      .def("__invert__", [](const FusionValue& v) { return detail::fusion_apply("bitwise_not", {v}); });
#define KILN_PY_FUSION_REDUCTION(name)                                                       \
  value.def(#name, [](const FusionValue& v, nb::handle axis, bool keepdims) {                \
    return detail::fusion_reduce(#name, v, to_axes(axis), keepdims);                          \
  }, "axis"_a = nb::none(), "keepdims"_a = false);
  KILN_PY_FUSION_REDUCTION(sum)
  KILN_PY_FUSION_REDUCTION(mean)
  KILN_PY_FUSION_REDUCTION(max)
  KILN_PY_FUSION_REDUCTION(min)
#undef KILN_PY_FUSION_REDUCTION
  KILN_PY_FUSION_BINARY(value, "add", add)
  KILN_PY_FUSION_BINARY(value, "sub", subtract)
  KILN_PY_FUSION_BINARY(value, "mul", multiply)
  KILN_PY_FUSION_BINARY(value, "truediv", divide)
  KILN_PY_FUSION_BINARY(value, "floordiv", floor_divide)
  KILN_PY_FUSION_BINARY(value, "mod", remainder)
  KILN_PY_FUSION_BINARY(value, "pow", power)
  KILN_PY_FUSION_BINARY(value, "and", bitwise_and)
  KILN_PY_FUSION_BINARY(value, "or", bitwise_or)
  KILN_PY_FUSION_BINARY(value, "xor", bitwise_xor)
  value.def("__lt__", [](const FusionValue& a, nb::handle b) { return apply2("less", nb::cast(a), b); }, nb::is_operator())
      .def("__le__", [](const FusionValue& a, nb::handle b) { return apply2("less_equal", nb::cast(a), b); }, nb::is_operator())
      .def("__gt__", [](const FusionValue& a, nb::handle b) { return apply2("greater", nb::cast(a), b); }, nb::is_operator())
      .def("__ge__", [](const FusionValue& a, nb::handle b) { return apply2("greater_equal", nb::cast(a), b); }, nb::is_operator())
      .def("__eq__", [](const FusionValue& a, nb::handle b) { return apply2("equal", nb::cast(a), b); }, nb::is_operator())
      .def("__ne__", [](const FusionValue& a, nb::handle b) { return apply2("not_equal", nb::cast(a), b); }, nb::is_operator());

  static PyType_Slot fused_slots[] = {{Py_tp_traverse, reinterpret_cast<void*>(&PyFused::traverse)},
                                      {Py_tp_clear, reinterpret_cast<void*>(&PyFused::clear)},
                                      {0, nullptr}};
  nb::class_<PyFused>(m, "Fused", nb::type_slots(fused_slots), "A function traced by kiln.fuse; call it like the function.")
      .def("__call__", &PyFused::call, "args"_a, "out"_a = nb::none())
      .def_prop_ro("cache_size", &PyFused::cache_size)
      .def_prop_ro("name", &PyFused::name);
  m.def("fuse", [](nb::object fn, std::optional<std::string> name) {
    std::string n = name ? *name : nb::hasattr(fn, "__name__") ? nb::cast<std::string>(fn.attr("__name__")) : "fused";
    return PyFused(std::move(fn), n == "<lambda>" ? "fused" : n);
  }, "fn"_a, "name"_a = nb::none(),
     "Traces fn (Python code over kiln ops) into fused kernels: one GPU kernel / one CPU pass in the common cases.");
}

void bind_fusion_overloads(nb::module_& m) {
  // The module's elementwise functions and reductions on FusionValues, so kiln.exp(v) works inside a traced
  // function: registered after their Array forms, which pass a FusionValue on (to_array throws next_overload).
#define KILN_PY_Fn1(name) m.def(#name, [](const FusionValue& x) { return apply1(#name, nb::cast(x)); }, "x"_a);
#define KILN_PY_Fn2(name)                                                                                \
  m.def(#name, [](const FusionValue& a, nb::handle b) { return apply2(#name, nb::cast(a), b); }, "x1"_a, "x2"_a); \
  m.def(#name, [](nb::handle a, const FusionValue& b) { return apply2(#name, a, nb::cast(b)); }, "x1"_a, "x2"_a);
#define KILN_PY_Own3(name)
#define KILN_PY_None0(name)
#define KILN_PY_None1(name)
#define KILN_OP(Code, name, arity, api) KILN_PY_##api##arity(name)
#include <kiln/ops.def>
#undef KILN_PY_Fn1
#undef KILN_PY_Fn2
#undef KILN_PY_Own3
#undef KILN_PY_None0
#undef KILN_PY_None1
  for (const char* name : {"sum", "mean", "max", "min"}) {
    m.def(name, [name](const FusionValue& v, nb::handle axis, bool keepdims) {
      return detail::fusion_reduce(name, v, to_axes(axis), keepdims);
    }, "a"_a, "axis"_a = nb::none(), "keepdims"_a = false);
  }
}

}  // namespace kiln::python
