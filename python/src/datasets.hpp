// Python datasets for kiln::data::DataLoader (datasets.cpp): an object with __len__ and __getitem__ (map-style) or
// with __iter__ (iterable), as torch.utils.data's, adapted to data::MapDataset / data::IterableDataset.
#pragma once

#include <atomic>
#include <memory>

#include "bindings.hpp"

namespace kiln::python {

/// How a Python dataset's samples look, learnt from the first one: a tuple of fields (batches are tuples) or a
/// single array (batches are arrays), as torch's default_collate keeps them.
struct SampleKind {
  enum : int { Unknown = -1, Single = 0, Tuple = 1 };
  std::atomic<int> kind{Unknown};
};

/// kiln.data.DataLoader: the loader and, over a Python dataset, the dataset (owned here, borrowed by the C++ loader)
/// and how its samples look (batches as tuples or as single arrays). data.cpp binds it; train.cpp takes it.
struct PyDataLoader : data::DataLoader {
  using data::DataLoader::DataLoader;
  nb::object dataset, collate_fn;
  std::shared_ptr<SampleKind> kind;  // of the batches; null over arrays: batches are (x, y)
};

/// True when `obj` is a Python dataset the DataLoader takes (not an array-like).
bool is_python_dataset(nb::handle obj);
/// The adapter of a map-style dataset (__len__ read once here, __getitem__ called by the workers, which take the
/// GIL for it). The adapters borrow `dataset`: the Python loader owns it, so that the garbage collector sees a
/// cycle through it (a dataset whose methods' globals hold the loader), and outlives every epoch.
std::shared_ptr<const data::MapDataset> map_dataset(nb::handle dataset, std::shared_ptr<SampleKind> kind);
/// The adapter of an iterable dataset: each worker iterates its own iter(dataset); get_worker_info() tells it which.
std::shared_ptr<const data::IterableDataset> iterable_dataset(nb::handle dataset, std::shared_ptr<SampleKind> kind);
/// torch's collate_fn: `collate_fn` (borrowed) called by the workers, holding the GIL, with the list of a batch's
/// samples (each a tuple of arrays, or an array, as the dataset gave it); its result (an array-like or a tuple of
/// them) is the batch, whose look `batch_kind` learns.
data::Collate python_collate(nb::handle collate_fn, std::shared_ptr<SampleKind> sample_kind,
                             std::shared_ptr<SampleKind> batch_kind);
/// kiln.data.get_worker_info and the WorkerInfo class (datasets.cpp).
void bind_datasets(nb::module_& data);

}  // namespace kiln::python
