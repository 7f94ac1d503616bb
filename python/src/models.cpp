// kiln.models: the ready-made networks (ResNet in torchvision's layout, random weights) as kiln.nn Modules,
// and kiln.cudnn's setting of the convolutions they run.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>

#include "bindings.hpp"
#include "convert.hpp"
#include "typed.hpp"

namespace kiln::python {

void bind_models(nb::module_& m) {
  nb::module_ models = m.def_submodule("models", "Ready-made networks (kiln::models).");
  nb::class_<models::ResNet, nn::Module>(models, "ResNet",
                                         "ResNet in torchvision's layout: (N, 3, H, W) images to (N, classes) logits.")
      .def("fold_batch_norm", [](nb::handle self) {
        nb::cast<models::ResNet&>(self).fold_batch_norm();
        return nb::borrow(self);
      }, "Folds each BatchNorm into its convolution for inference (eval mode; irreversible).")
      .def_prop_ro("folded", &models::ResNet::folded);
  nb::module_ cudnn = m.def_submodule("cudnn", "cuDNN's settings (kiln::cudnn).");
  cudnn.def("set_benchmark", &cudnn::set_benchmark, "on"_a,
            "Times cuDNN's convolution algorithms once per shape and keeps the fastest, as "
            "torch.backends.cudnn.benchmark (no effect without cuDNN).");
  using Factory = std::shared_ptr<models::ResNet> (*)(int64_t, DType, std::optional<Device>);
  const std::pair<const char*, Factory> factories[] = {{"resnet18", &models::resnet18},
                                                       {"resnet34", &models::resnet34},
                                                       {"resnet50", &models::resnet50},
                                                       {"resnet101", &models::resnet101}};
  for (const auto& [name, factory] : factories) {
    models.def(name, [factory](int64_t num_classes, DTypeLike dtype, DeviceLike device) {
      auto t = to_optional_dtype(dtype);
      return factory(num_classes, t ? *t : kDefaultFloat, to_optional_device(device));
    }, "num_classes"_a = 1000, "dtype"_a = nb::none(), "device"_a = nb::none(),
       "A ResNet with random (He) weights, as torchvision's constructor of that name without weights.");
  }
}

}  // namespace kiln::python
