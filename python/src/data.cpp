// kiln.data: the datasets (Fashion-MNIST, IDX files) and the DataLoader, which assembles shuffled batches on
// worker threads and puts them on a device; iterating it runs one epoch of (x, y) pairs.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>

#include <memory>
#include <string>

#include "bindings.hpp"
#include "convert.hpp"
#include "typed.hpp"

namespace kiln::python {
namespace {

// One epoch of a DataLoader as a Python iterator (the loader is kept alive by nanobind's keep_alive).
struct PyEpoch {
  data::DataLoader* loader;
  data::DataLoader::Iterator it;
  bool started = false;
};

}  // namespace

void bind_data(nb::module_& m) {
  nb::module_ data = m.def_submodule("data", "Datasets and the DataLoader (kiln::data).");
  data.def("read_idx", &data::read_idx, "path"_a, "An IDX file (MNIST's format, .gz or not) as an array.");
  data.def("fashion_mnist", [](bool train, const std::string& dir) {
    data::Dataset d = data::fashion_mnist(train, dir);
    return std::make_pair(d.images, d.labels);
  }, "train"_a = true, "dir"_a = data::kFashionMnistDir,
     "(images, labels) of Fashion-MNIST's train or test split: (N, 784) float32 in [0, 1] and (N,) int64. "
     "Raises when the files are missing (Debian's dataset-fashion-mnist installs them).");

  nb::class_<PyEpoch>(data, "Epoch", "The batches of one epoch: an iterator of (x, y).")
      .def("__iter__", [](nb::handle self) { return nb::borrow(self); })
      .def("__next__", [](PyEpoch& e) {
        if (e.started) ++e.it;
        e.started = true;
        if (e.it == data::DataLoader::Iterator()) throw nb::stop_iteration();
        const data::Batch& b = *e.it;
        return nb::make_tuple(b.x, b.y.defined() ? nb::cast(b.y) : nb::none());
      });
  nb::class_<data::DataLoader>(data, "DataLoader",
                               "Batches of (inputs, targets) along their first axis, assembled by worker threads, "
                               "shuffled per epoch when asked, on `device`; `for x, y in loader:` runs an epoch.")
      .def("__init__", [](data::DataLoader* self, ArrayLike inputs, ArrayLike targets, int64_t batch_size,
                          bool shuffle, bool drop_last, uint64_t seed, int workers, DeviceLike device) {
        data::DataLoaderOptions o;
        o.batch_size = batch_size;
        o.shuffle = shuffle;
        o.drop_last = drop_last;
        o.seed = seed;
        o.workers = workers;
        o.device = to_optional_device(device);
        new (self) data::DataLoader(to_array(inputs), to_array(targets), o);
      }, "inputs"_a, "targets"_a, "batch_size"_a = 64, "shuffle"_a = false, "drop_last"_a = false, "seed"_a = 0,
         "workers"_a = 2, "device"_a = nb::none())
      .def("__iter__", [](data::DataLoader& loader) { return PyEpoch{&loader, loader.begin()}; },
           nb::keep_alive<0, 1>(), "Starts the next epoch (reshuffled when shuffle).")
      .def("__len__", &data::DataLoader::num_batches)
      .def_prop_ro("num_samples", &data::DataLoader::num_samples);
}

}  // namespace kiln::python
