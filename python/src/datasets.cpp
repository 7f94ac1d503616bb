// Python datasets for the DataLoader (see datasets.hpp). The loader's worker threads call into Python, so every
// call takes the GIL, and the Python objects held here are released with it held (the last reference may drop on
// a worker thread). The Python side of the loader (data.cpp) releases the GIL while it waits for a batch.
#include "datasets.hpp"

#include <nanobind/stl/string.h>

#include <optional>
#include <string>
#include <utility>

#include "convert.hpp"

namespace kiln::python {
namespace {

// A Python reference that may be dropped on any thread: it takes the GIL to decrement (or leaks it once the
// interpreter is gone, when nothing can be freed any more).
struct SharedObject {
  explicit SharedObject(nb::handle h) : object(nb::borrow(h)) {}
  SharedObject(const SharedObject&) = delete;
  SharedObject& operator=(const SharedObject&) = delete;
  ~SharedObject() {
    if (nb::detail::cleanup_guard guard{}) {
      object.reset();
    } else {
      object.release();
    }
  }
  nb::object object;
};

// The worker that is calling into the dataset on this thread, for get_worker_info().
thread_local const data::WorkerInfo* current_worker = nullptr;

struct WorkerScope {
  explicit WorkerScope(const data::WorkerInfo* info) : previous(current_worker) { current_worker = info; }
  ~WorkerScope() { current_worker = previous; }
  const data::WorkerInfo* previous;
};

// A sample: a tuple or list of fields, or one array-like. Fields become host arrays (NumPy arrays are copied).
data::Sample to_sample(nb::handle sample, SampleKind& kind) {
  data::Sample fields;
  const bool tuple = nb::isinstance<nb::tuple>(sample) || nb::isinstance<nb::list>(sample);
  if (tuple) {
    for (nb::handle field : sample) fields.push_back(to_array(field, std::nullopt, cpu()));
  } else {
    fields.push_back(to_array(sample, std::nullopt, cpu()));
  }
  int expected = SampleKind::Unknown;
  kind.kind.compare_exchange_strong(expected, tuple ? SampleKind::Tuple : SampleKind::Single);
  return fields;
}

class PyMapDataset : public data::MapDataset {
 public:
  PyMapDataset(nb::handle dataset, std::shared_ptr<SampleKind> kind)
      : dataset_(dataset), kind_(std::move(kind)), size_(static_cast<int64_t>(nb::len(dataset))) {}
  int64_t size() const override { return size_; }
  data::Sample get(int64_t index) const override {
    nb::gil_scoped_acquire gil;
    return to_sample(dataset_[nb::int_(index)], *kind_);
  }

 private:
  nb::handle dataset_;
  std::shared_ptr<SampleKind> kind_;
  int64_t size_;
};

class PyIterableDataset : public data::IterableDataset {
 public:
  PyIterableDataset(nb::handle dataset, std::shared_ptr<SampleKind> kind) : dataset_(dataset), kind_(std::move(kind)) {}
  std::function<std::optional<data::Sample>()> stream(const data::WorkerInfo& info) const override {
    auto worker = std::make_shared<data::WorkerInfo>(info);
    std::shared_ptr<SharedObject> iterator;
    {
      nb::gil_scoped_acquire gil;
      WorkerScope scope(worker.get());
      iterator = std::make_shared<SharedObject>(nb::iter(dataset_));
    }
    return [iterator, worker, kind = kind_]() -> std::optional<data::Sample> {
      nb::gil_scoped_acquire gil;
      WorkerScope scope(worker.get());  // a generator's body runs at each next(), not at iter()
      PyObject* next = PyIter_Next(iterator->object.ptr());
      if (!next) {
        if (PyErr_Occurred()) throw nb::python_error();
        return std::nullopt;
      }
      return to_sample(nb::steal(next), *kind);
    };
  }

 private:
  nb::handle dataset_;
  std::shared_ptr<SampleKind> kind_;
};

}  // namespace

bool is_python_dataset(nb::handle obj) {
  if (nb::isinstance<Array>(obj) || nb::isinstance<nb::list>(obj) || nb::isinstance<nb::tuple>(obj) ||
      nb::hasattr(obj, "__array__") || nb::hasattr(obj, "__dlpack__"))
    return false;
  return nb::hasattr(obj, "__getitem__") || nb::hasattr(obj, "__iter__");
}

std::shared_ptr<const data::MapDataset> map_dataset(nb::handle dataset, std::shared_ptr<SampleKind> kind) {
  return std::make_shared<PyMapDataset>(dataset, std::move(kind));
}

std::shared_ptr<const data::IterableDataset> iterable_dataset(nb::handle dataset, std::shared_ptr<SampleKind> kind) {
  return std::make_shared<PyIterableDataset>(dataset, std::move(kind));
}

data::Collate python_collate(nb::handle collate_fn, std::shared_ptr<SampleKind> sample_kind,
                             std::shared_ptr<SampleKind> batch_kind) {
  return [fn = collate_fn.ptr(), sample_kind, batch_kind](const std::vector<data::Sample>& samples) {
    nb::gil_scoped_acquire gil;
    const bool single = sample_kind->kind.load() == SampleKind::Single;
    nb::list items;
    for (const data::Sample& sample : samples) {
      if (single) {
        items.append(sample.at(0));
      } else {
        nb::list fields;
        for (const Array& field : sample) fields.append(field);
        items.append(nb::tuple(fields));
      }
    }
    return to_sample(nb::handle(fn)(items), *batch_kind);
  };
}

void bind_datasets(nb::module_& data) {
  nb::class_<data::WorkerInfo>(data, "WorkerInfo", "Which loader worker is running the dataset's code.")
      .def_ro("id", &data::WorkerInfo::id)
      .def_ro("num_workers", &data::WorkerInfo::num_workers)
      .def_ro("epoch", &data::WorkerInfo::epoch)
      .def_ro("seed", &data::WorkerInfo::seed)
      .def("__repr__", [](const data::WorkerInfo& w) {
        return "WorkerInfo(id=" + std::to_string(w.id) + ", num_workers=" + std::to_string(w.num_workers) +
               ", epoch=" + std::to_string(w.epoch) + ", seed=" + std::to_string(w.seed) + ")";
      });
  data.def("get_worker_info", []() -> nb::object {
    if (!current_worker) return nb::none();
    return nb::cast(*current_worker);
  }, "Inside an iterable dataset's iteration run by a DataLoader worker: its WorkerInfo (id, num_workers, epoch, "
     "seed), to shard the stream; None elsewhere (torch.utils.data.get_worker_info).");
}

}  // namespace kiln::python
