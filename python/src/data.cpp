// kiln.data: the datasets (Fashion-MNIST, IDX files) and the DataLoader, which assembles shuffled batches on
// worker threads and puts them on a device; iterating it runs one epoch of (x, y) pairs. It also takes a Python
// dataset (datasets.cpp), whose code the workers run holding the GIL: so the loader releases the GIL whenever it
// waits for them (starting, advancing and dropping an epoch).
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>

#include <memory>
#include <string>

#include "bindings.hpp"
#include "convert.hpp"
#include "datasets.hpp"
#include "typed.hpp"

namespace kiln::python {
namespace {

// The garbage collector's view of the loader: the dataset it holds (a cycle when the dataset's code refers to the
// loader, through a module's globals for instance).
int loader_traverse(PyObject* self, visitproc visit, void* arg) {
  Py_VISIT(Py_TYPE(self));
  if (!nb::inst_ready(self)) return 0;
  Py_VISIT(nb::inst_ptr<PyDataLoader>(self)->dataset.ptr());
  Py_VISIT(nb::inst_ptr<PyDataLoader>(self)->collate_fn.ptr());
  return 0;
}
int loader_clear(PyObject* self) {
  if (nb::inst_ready(self)) {
    nb::inst_ptr<PyDataLoader>(self)->dataset.reset();
    nb::inst_ptr<PyDataLoader>(self)->collate_fn.reset();
  }
  return 0;
}
PyType_Slot loader_slots[] = {{Py_tp_traverse, reinterpret_cast<void*>(loader_traverse)},
                              {Py_tp_clear, reinterpret_cast<void*>(loader_clear)},
                              {0, nullptr}};

// One epoch of a DataLoader as a Python iterator (the loader is kept alive by nanobind's keep_alive).
struct PyEpoch {
  PyEpoch(PyDataLoader* l, data::DataLoader::Iterator i) : loader(l), it(std::move(i)) {}
  PyEpoch(PyEpoch&&) = default;
  PyEpoch(const PyEpoch&) = delete;
  // Ending an epoch joins its workers, which may be waiting for the GIL inside a Python dataset.
  ~PyEpoch() {
    if (PyGILState_Check()) {
      nb::gil_scoped_release release;
      it = data::DataLoader::Iterator();
    }
  }
  PyDataLoader* loader;
  data::DataLoader::Iterator it;
  bool started = false;
};

nb::object batch_to_python(const data::Batch& b, const SampleKind* kind) {
  if (!kind) return nb::make_tuple(b.x, b.y.defined() ? nb::cast(b.y) : nb::none());
  if (kind->kind.load() == SampleKind::Single) return nb::cast(b.fields.at(0));
  nb::list fields;
  for (const Array& f : b.fields) fields.append(f);
  return nb::tuple(fields);
}

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
        {
          nb::gil_scoped_release release;
          if (e.started) ++e.it;
        }
        e.started = true;
        if (e.it == data::DataLoader::Iterator()) throw nb::stop_iteration();
        return batch_to_python(*e.it, e.loader->kind.get());
      });
  nb::class_<PyDataLoader>(
      data, "DataLoader",
      "Batches of (inputs, targets) along their first axis (of one array's rows without targets), or of a Python "
      "dataset's samples (an object with __len__ and __getitem__, or with __iter__), assembled by worker threads, "
      "shuffled per epoch when asked, on `device`; `for x, y in loader:` runs an epoch.",
      nb::type_slots(loader_slots))
      .def("__init__", [](PyDataLoader* self, nb::handle inputs, nb::handle targets, int64_t batch_size,
                          bool shuffle, bool drop_last, uint64_t seed, int workers, DeviceLike device,
                          nb::handle collate_fn) {
        data::DataLoaderOptions o;
        o.batch_size = batch_size;
        o.shuffle = shuffle;
        o.drop_last = drop_last;
        o.seed = seed;
        o.workers = workers;
        o.device = to_optional_device(device);
        if (targets.is_none() && is_python_dataset(inputs)) {
          auto samples = std::make_shared<SampleKind>();
          std::shared_ptr<SampleKind> batches = samples;
          if (!collate_fn.is_none()) {
            if (!PyCallable_Check(collate_fn.ptr()))
              throw nb::type_error("kiln.data.DataLoader: collate_fn is a callable of the list of a batch's samples");
            batches = std::make_shared<SampleKind>();  // the batches look as collate_fn's results
            o.collate = python_collate(collate_fn, samples, batches);
          }
          if (nb::hasattr(inputs, "__getitem__") && nb::hasattr(inputs, "__len__")) {
            new (self) PyDataLoader(map_dataset(inputs, samples), o);
          } else {
            new (self) PyDataLoader(iterable_dataset(inputs, samples), o);
          }
          self->dataset = nb::borrow(inputs);
          if (!collate_fn.is_none()) self->collate_fn = nb::borrow(collate_fn);
          self->kind = std::move(batches);
          return;
        }
        if (!collate_fn.is_none())
          throw nb::type_error("kiln.data.DataLoader: collate_fn applies to a dataset's samples; arrays' batches "
                               "are their rows (wrap the arrays in a dataset to collate them)");
        if (targets.is_none()) {  // one array: batches of its rows, as torch's DataLoader(tensor)
          new (self) PyDataLoader(std::make_shared<data::ArrayDataset>(std::vector<Array>{to_array(inputs)}), o);
          self->kind = std::make_shared<SampleKind>();
          self->kind->kind = SampleKind::Single;
          return;
        }
        new (self) PyDataLoader(to_array(inputs), to_array(targets), o);
      }, "dataset"_a, "targets"_a = nb::none(), "batch_size"_a = 64, "shuffle"_a = false, "drop_last"_a = false,
         "seed"_a = 0, "workers"_a = 2, "device"_a = nb::none(), "collate_fn"_a = nb::none())
      .def("__iter__", [](PyDataLoader& loader) {
        data::DataLoader::Iterator it;
        {
          nb::gil_scoped_release release;
          it = loader.begin();
        }
        return PyEpoch(&loader, std::move(it));
      }, nb::keep_alive<0, 1>(), "Starts the next epoch (reshuffled when shuffle).")
      .def("__len__", [](const PyDataLoader& loader) {
        if (loader.num_batches() < 0)
          throw nb::type_error("kiln.data.DataLoader: an iterable dataset's loader has no len()");
        return loader.num_batches();
      })
      .def("set_epoch", [](PyDataLoader& loader, int64_t epoch, int64_t batch) { loader.set_epoch(epoch, batch); },
           "epoch"_a, "batch"_a = 0,
           "Makes the next epoch `epoch` (its shuffle), starting at its batch `batch` (a resumed run).")
      .def_prop_ro("num_samples", [](const PyDataLoader& loader) { return loader.num_samples(); });
  bind_datasets(data);
}

}  // namespace kiln::python
