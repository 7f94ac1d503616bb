// kiln.nn (modules, losses) and kiln.optim (SGD, Adam, AdamW) over kiln::nn / kiln::optim. A Python class can
// subclass kiln.nn.Module and define forward; Arrays and Modules assigned to its attributes are registered as
// parameters and children (PyTorch's rule), so parameters(), to() and state_dict() see them.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>
#include <nanobind/trampoline.h>

#include <memory>
#include <string>
#include <vector>

#include "bindings.hpp"
#include "convert.hpp"
#include "typed.hpp"

namespace kiln::python {
namespace {

// A Module subclass defined in Python: forward dispatches to the Python method; name() is the class's name.
struct PyModule : nn::Module {
  NB_TRAMPOLINE(nn::Module, 1);
  Array forward(const Array& x) override {
    nb::gil_scoped_acquire gil;  // train.fit and the DataLoader's workers run with the GIL released
    NB_OVERRIDE(forward, x);
  }
  std::string name() const override {
    nb::gil_scoped_acquire gil;
    return nb::cast<std::string>(nb::type_name(nb_trampoline.base().type()));
  }
};

// Module's registration functions are protected (a C++ module registers in its constructor); a member pointer
// taken through a derived class reaches them for the Python subclass's __setattr__.
struct ModuleAccess : nn::Module {
  using RegisterModule = std::shared_ptr<nn::Module> (nn::Module::*)(std::string, std::shared_ptr<nn::Module>);
  static RegisterModule register_module_fn() { return &ModuleAccess::register_module<nn::Module>; }
  using nn::Module::register_parameter;
  using nn::Module::replace_module;
};

bool has_child(const nn::Module& m, const std::string& name) {
  for (const auto& [key, child] : m.named_children())
    if (key == name) return true;
  return false;
}

void module_setattr(nb::handle self, const std::string& name, nb::handle value) {
  nn::Module& m = nb::cast<nn::Module&>(self);
  if (nb::isinstance<nn::Module>(value)) {
    auto child = nb::cast<std::shared_ptr<nn::Module>>(value);
    if (has_child(m, name)) {
      (m.*(&ModuleAccess::replace_module))(name, child);
    } else {
      (m.*ModuleAccess::register_module_fn())(name, child);
    }
    return;
  }
  if (nb::isinstance<Array>(value)) {
    for (const auto& [key, p] : m.named_parameters(false)) {
      if (key == name) {
        m.parameter(name) = nb::cast<Array>(value);
        return;
      }
    }
    (m.*(&ModuleAccess::register_parameter))(name, nb::cast<Array>(value));
    return;
  }
  nb::handle object_type(reinterpret_cast<PyObject*>(&PyBaseObject_Type));
  object_type.attr("__setattr__")(self, name, value);
}

nb::object module_getattr(nn::Module& m, const std::string& name) {
  for (const auto& [key, p] : m.named_parameters(false))
    if (key == name) return nb::cast(m.parameter(name));
  for (const auto& [key, b] : m.named_buffers(false))
    if (key == name) return nb::cast(m.buffer(name));
  for (const auto& [key, child] : m.named_children())
    if (key == name) return nb::cast(child);
  throw nb::attribute_error((m.name() + " has no attribute, parameter, buffer or child '" + name + "'").c_str());
}

nn::Reduction to_reduction(const std::string& name) {
  if (name == "mean") return nn::Reduction::Mean;
  if (name == "sum") return nn::Reduction::Sum;
  if (name == "none") return nn::Reduction::None;
  throw nb::value_error(("kiln.nn: reduction '" + name + "' is none of 'mean', 'sum', 'none'").c_str());
}

nb::list named(const std::vector<std::pair<std::string, Array>>& items) {
  nb::list out;
  for (const auto& [name, a] : items) out.append(nb::make_tuple(name, a));
  return out;
}

}  // namespace

void bind_nn(nb::module_& m) {
  nb::module_ nn = m.def_submodule("nn", "Modules and losses (kiln::nn); subclass kiln.nn.Module with forward.");
  nb::class_<nn::Module, PyModule>(nn, "Module", nb::dynamic_attr())
      .def(nb::init<>())
      .def("forward", &nn::Module::forward, "x"_a)
      .def("__call__", [](nn::Module& self, const Array& x) { return self(x); }, "x"_a)
      .def("__call__", [](nb::handle self, nb::args args, nb::kwargs kwargs) {  // a Python forward(x, mask, ...)
        return self.attr("forward")(*args, **kwargs);
      })
      .def("__setattr__", &module_setattr)
      .def("__getattr__", &module_getattr)
      .def("parameters", &nn::Module::parameters, "recurse"_a = true)
      .def("named_parameters", [](const nn::Module& self, bool recurse) { return named(self.named_parameters(recurse)); },
           "recurse"_a = true)
      .def("named_buffers", [](const nn::Module& self, bool recurse) { return named(self.named_buffers(recurse)); },
           "recurse"_a = true)
      .def("named_children", &nn::Module::named_children)
      .def("num_parameters", &nn::Module::num_parameters, "trainable_only"_a = false)
      .def("zero_grad", &nn::Module::zero_grad)
      .def("train", [](nn::Module& self, bool mode) -> nn::Module& { return self.train(mode); }, "mode"_a = true,
           nb::rv_policy::reference)
      .def("eval", [](nn::Module& self) -> nn::Module& { return self.eval(); }, nb::rv_policy::reference)
      .def_prop_ro("training", &nn::Module::is_training)
      .def("to", [](nn::Module& self, nb::handle target) -> nn::Module& {
        if (nb::isinstance<Device>(target) || (nb::isinstance<nb::str>(target) && find_dtype(nb::cast<std::string>(target)) == std::nullopt))
          return self.to(*to_optional_device(target));
        return self.to(to_dtype(target));
      }, "device_or_dtype"_a, nb::rv_policy::reference)
      .def("state_dict", [](const nn::Module& self) { return state_to_dict(self.state_dict()); })
      .def("load_state_dict", [](nn::Module& self, nb::dict state, bool strict) {
        self.load_state_dict(dict_to_state(state), strict);
      }, "state_dict"_a, "strict"_a = true)
      .def("__repr__", &nn::Module::repr);

  nb::class_<nn::Linear, nn::Module>(nn, "Linear")
      .def("__init__", [](nn::Linear* self, int64_t in, int64_t out, bool bias, DTypeLike dtype, DeviceLike device) {
        auto t = to_optional_dtype(dtype);
        new (self) nn::Linear(in, out, bias, t ? *t : kDefaultFloat, to_optional_device(device));
      }, "in_features"_a, "out_features"_a, "bias"_a = true, "dtype"_a = nb::none(), "device"_a = nb::none());
  nb::class_<nn::ReLU, nn::Module>(nn, "ReLU").def(nb::init<>());
  nb::class_<nn::GELU, nn::Module>(nn, "GELU").def(nb::init<std::string>(), "approximate"_a = "none");
  nb::class_<nn::Sigmoid, nn::Module>(nn, "Sigmoid").def(nb::init<>());
  nb::class_<nn::Tanh, nn::Module>(nn, "Tanh").def(nb::init<>());
  nb::class_<nn::Dropout, nn::Module>(nn, "Dropout").def(nb::init<double>(), "p"_a = 0.5);
  nb::class_<nn::Flatten, nn::Module>(nn, "Flatten").def(nb::init<int64_t, int64_t>(), "start_dim"_a = 1, "end_dim"_a = -1);
  nb::class_<nn::Embedding, nn::Module>(nn, "Embedding")
      .def("__init__", [](nn::Embedding* self, int64_t n, int64_t dim, DTypeLike dtype, DeviceLike device) {
        auto t = to_optional_dtype(dtype);
        new (self) nn::Embedding(n, dim, t ? *t : kDefaultFloat, to_optional_device(device));
      }, "num_embeddings"_a, "embedding_dim"_a, "dtype"_a = nb::none(), "device"_a = nb::none());
  nb::class_<nn::LayerNorm, nn::Module>(nn, "LayerNorm")
      .def("__init__", [](nn::LayerNorm* self, ShapeLike shape, double eps, bool affine, DTypeLike dtype,
                          DeviceLike device) {
        auto t = to_optional_dtype(dtype);
        new (self) nn::LayerNorm(to_shape(shape), eps, affine, t ? *t : kDefaultFloat, to_optional_device(device));
      }, "normalized_shape"_a, "eps"_a = 1e-5, "elementwise_affine"_a = true, "dtype"_a = nb::none(),
         "device"_a = nb::none());
  nb::class_<nn::Sequential, nn::Module>(nn, "Sequential")
      .def("__init__", [](nn::Sequential* self, nb::args modules) {
        std::vector<std::shared_ptr<nn::Module>> list;
        for (nb::handle module : modules) list.push_back(nb::cast<std::shared_ptr<nn::Module>>(module));
        new (self) nn::Sequential(std::move(list));
      })
      .def("append", &nn::Sequential::push_back, "module"_a)
      .def("__len__", &nn::Sequential::size);

  nn.def("cross_entropy", [](const Array& logits, nb::handle target, const std::string& reduction, double smoothing) {
    return nn::cross_entropy(logits, to_array(target), to_reduction(reduction), smoothing);
  }, "input"_a, "target"_a, "reduction"_a = "mean", "label_smoothing"_a = 0.0);
  nn.def("nll_loss", [](const Array& log_probs, nb::handle target, const std::string& reduction) {
    return nn::nll_loss(log_probs, to_array(target), to_reduction(reduction));
  }, "input"_a, "target"_a, "reduction"_a = "mean");
  nn.def("mse_loss", [](const Array& x, nb::handle y, const std::string& reduction) {
    return nn::mse_loss(x, to_array(y), to_reduction(reduction));
  }, "input"_a, "target"_a, "reduction"_a = "mean");
  nn.def("binary_cross_entropy_with_logits", [](const Array& x, nb::handle y, const std::string& reduction) {
    return nn::binary_cross_entropy_with_logits(x, to_array(y), to_reduction(reduction));
  }, "input"_a, "target"_a, "reduction"_a = "mean");
  nn.def("save_safetensors", [](const std::string& path, nb::dict state, nb::handle metadata) {
    const nn::StateDict sd = dict_to_state(state);
    std::vector<std::pair<std::string, std::string>> meta;
    if (!metadata.is_none())
      for (auto [key, value] : nb::cast<nb::dict>(metadata))
        meta.emplace_back(nb::cast<std::string>(key), nb::cast<std::string>(value));
    nn::save_safetensors(path, sd, meta);
  }, "path"_a, "tensors"_a, "metadata"_a = nb::none(),
     "Writes a dict of str -> Array as a safetensors file (crash-safe; GPU arrays copied to the host).");
  nn.def("load_safetensors", [](const std::string& path, DeviceLike device) {
    nb::dict out;
    for (const auto& [name, value] : nn::load_safetensors(path, to_optional_device(device))) out[name.c_str()] = value;
    return out;
  }, "path"_a, "device"_a = nb::none(),
     "A safetensors file as a dict of str -> Array in the file's order, on device (default: the CPU).");
  nn.def("softmax", &nn::softmax, "x"_a, "axis"_a = -1);
  nn.def("log_softmax", &nn::log_softmax, "x"_a, "axis"_a = -1);
  nn.def("accuracy", [](const Array& logits, nb::handle labels) { return nn::accuracy(logits, to_array(labels)); },
         "logits"_a, "labels"_a);

  nb::module_ optim = m.def_submodule("optim", "Optimizers (kiln::optim): SGD, Adam, AdamW.");
  nb::class_<optim::Optimizer>(optim, "Optimizer")
      .def("step", &optim::Optimizer::step)
      .def("zero_grad", &optim::Optimizer::zero_grad)
      .def_prop_rw("lr", &optim::Optimizer::lr, &optim::Optimizer::set_lr)
      .def_prop_ro("parameters", &optim::Optimizer::parameters);
  nb::class_<optim::SGD, optim::Optimizer>(optim, "SGD")
      .def("__init__", [](optim::SGD* self, std::vector<Array> params, double lr, double momentum, double dampening,
                          double weight_decay, bool nesterov) {
        new (self) optim::SGD(std::move(params), optim::SGDOptions{lr, momentum, dampening, weight_decay, nesterov});
      }, "params"_a, "lr"_a = 0.01, "momentum"_a = 0.0, "dampening"_a = 0.0, "weight_decay"_a = 0.0,
         "nesterov"_a = false);
  nb::class_<optim::Adam, optim::Optimizer>(optim, "Adam")
      .def("__init__", [](optim::Adam* self, std::vector<Array> params, double lr, std::pair<double, double> betas,
                          double eps, double weight_decay, bool capturable) {
        new (self) optim::Adam(std::move(params),
                               optim::AdamOptions{lr, betas.first, betas.second, eps, weight_decay, capturable});
      }, "params"_a, "lr"_a = 1e-3, "betas"_a = std::make_pair(0.9, 0.999), "eps"_a = 1e-8, "weight_decay"_a = 0.0,
         "capturable"_a = false);
  nb::class_<optim::AdamW, optim::Adam>(optim, "AdamW")
      .def("__init__", [](optim::AdamW* self, std::vector<Array> params, double lr, std::pair<double, double> betas,
                          double eps, double weight_decay, bool capturable) {
        new (self) optim::AdamW(std::move(params),
                               optim::AdamOptions{lr, betas.first, betas.second, eps, weight_decay, capturable});
      }, "params"_a, "lr"_a = 1e-3, "betas"_a = std::make_pair(0.9, 0.999), "eps"_a = 1e-8, "weight_decay"_a = 0.01,
         "capturable"_a = false);
  optim.def("clip_grad_norm", &optim::clip_grad_norm, "parameters"_a, "max_norm"_a);
}

}  // namespace kiln::python
