// Data: IDX files (MNIST, Fashion-MNIST), and a DataLoader that feeds a training loop on any device.
//
//   auto train = data::fashion_mnist(true);             // images (60000, 784) float32 in [0, 1], labels int64
//   data::DataLoader loader(train.images, train.labels, {.batch_size = 100, .shuffle = true, .device = gpu()});
//   for (int epoch = 0; epoch < 20; ++epoch)
//     for (const data::Batch& b : loader) { ... b.x, b.y are on the GPU ... }
//
// Worker threads gather each batch's rows into pinned host buffers and copy them to the GPU on their own
// side stream, `prefetch` batches ahead; handing a batch out makes the current stream wait for its copy (an
// event, no host synchronisation), so the training loop does not wait for copies.
//
// Samples made on the fly or read lazily come from a dataset, as torch.utils.data's: a MapDataset (size(),
// get(i)) or an IterableDataset (a stream per worker), with the same workers, prefetch and copies:
//
//   struct Squares : data::MapDataset {
//     int64_t size() const override { return 1000; }
//     data::Sample get(int64_t i) const override { return {full({1}, double(i)), full({1}, double(i * i))}; }
//   };
//   data::DataLoader loader(std::make_shared<Squares>(), {.batch_size = 32, .shuffle = true});
//   for (const data::Batch& b : loader) { ... b.x (32, 1), b.y (32, 1): each field stacked ... }
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kiln/array.hpp"
#include "kiln/stream.hpp"

namespace kiln::data {

/// Reads an IDX file (the MNIST format: magic, dimensions, big-endian data), gzip-compressed when the name ends
/// in .gz. uint8/int8/int16/int32/float32/float64 data keep their dtype (as host arrays). Throws ValueError for
/// a missing, truncated or malformed file.
Array read_idx(const std::string& path);

/// Where Debian's dataset-fashion-mnist package puts the files.
inline constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";

struct Dataset {
  Array images;  ///< (N, 784) float32 in [0, 1] (the pixels / 255), host memory
  Array labels;  ///< (N,) int64 in [0, 10)
};
/// The training (60000) or test (10000) split of Fashion-MNIST (or MNIST: same file names) from `dir`. A
/// missing file is a ValueError that names the package providing it.
Dataset fashion_mnist(bool train, const std::string& dir = kFashionMnistDir);

/// Writes an IDX file (uncompressed) of a host array: for tests and small data sets.
void write_idx(const std::string& path, const Array& a);

/// One rank's share of the samples in data-parallel training (torch.utils.data.distributed.DistributedSampler).
/// Each epoch's order (shuffled from (seed, epoch) when shuffle, the same on every rank) is padded by repeating
/// its first indices up to a multiple of num_replicas (or cut to one when drop_last); rank r takes the indices
/// r, r + num_replicas, r + 2 num_replicas, ... so the ranks' shares are disjoint and equally long.
struct DistributedSampler {
  int num_replicas = 1;  ///< dist::world_size()
  int rank = 0;          ///< dist::rank()
  bool shuffle = true;
  uint64_t seed = 0;
  bool drop_last = false;
  /// The sample indices of this rank in epoch `epoch` of a data set of n samples (ValueError for a bad rank).
  std::vector<int64_t> indices(int64_t n, int64_t epoch) const;
  /// How many indices each rank gets per epoch.
  int64_t num_samples(int64_t n) const;
};

/// One sample: its fields (an image and its label, a token window and its targets, ...), host arrays.
using Sample = std::vector<Array>;

/// A map-style dataset (torch.utils.data.Dataset): samples 0 .. size() - 1, read in any order. get() runs on the
/// loader's worker threads, several at once: it must be safe to call concurrently (const and no shared state,
/// or its own lock).
class MapDataset {
 public:
  virtual ~MapDataset() = default;
  virtual int64_t size() const = 0;
  /// Sample `index`; the same number of fields, each of one shape and dtype, for every index (for the stack).
  virtual Sample get(int64_t index) const = 0;
};

/// Which of the loader's workers runs a stream of an IterableDataset (torch's get_worker_info()).
struct WorkerInfo {
  int id = 0;           ///< this worker, in [0, num_workers)
  int num_workers = 1;  ///< DataLoaderOptions::workers
  int64_t epoch = 0;    ///< the epoch the stream is for
  uint64_t seed = 0;    ///< DataLoaderOptions::seed
};

/// An iterable dataset (torch.utils.data.IterableDataset): samples as a stream, for data read in order (a file,
/// a generator). Each worker runs its own stream; as in PyTorch, a stream that does not shard by info.id gives
/// every worker the same samples. The loader hands batches out round-robin over the workers (worker 0's first,
/// worker 1's first, ...), skipping workers that ended.
class IterableDataset {
 public:
  virtual ~IterableDataset() = default;
  /// A function returning the next sample of this worker's stream, or nullopt at its end.
  virtual std::function<std::optional<Sample>()> stream(const WorkerInfo& info) const = 0;
};

/// Turns a batch's samples into its arrays (torch's collate_fn); runs on the worker threads.
using Collate = std::function<std::vector<Array>(const std::vector<Sample>& samples)>;
/// The default collate (torch's default_collate for arrays): field f of the batch is the samples' field f
/// stacked along a new axis 0. ShapeError for samples whose field counts or shapes differ.
std::vector<Array> stack_samples(const std::vector<Sample>& samples);

/// A MapDataset over arrays that share their first axis: sample i is (arrays[0][i], arrays[1][i], ...), as
/// torch's TensorDataset. ShapeError for arrays of different lengths.
class ArrayDataset : public MapDataset {
 public:
  explicit ArrayDataset(std::vector<Array> arrays);
  int64_t size() const override { return n_; }
  Sample get(int64_t index) const override;

 private:
  std::vector<Array> arrays_;
  int64_t n_ = 0;
};

struct DataLoaderOptions {
  int64_t batch_size = 64;
  bool shuffle = false;
  bool drop_last = false;          ///< drop a last batch smaller than batch_size
  uint64_t seed = 0;               ///< the shuffle of epoch e is a function of (seed, e)
  int workers = 2;                 ///< threads assembling batches
  int prefetch = 2;                ///< batches each worker prepares ahead
  std::optional<Device> device{};  ///< where batches go (default: the CPU)
  /// Data-parallel training: this rank's share of each epoch (replaces shuffle, which must stay false).
  std::optional<DistributedSampler> sampler{};
  /// Datasets: how a batch's samples become its arrays (default: stack_samples).
  Collate collate{};
};

struct Batch {
  Array x, y;                 ///< fields[0] and fields[1] (y empty when a dataset's batches have one field)
  std::vector<Array> fields;  ///< every array of the batch (the collate's output), on the loader's device
  int64_t index = 0;          ///< the batch's position in its epoch
  /// GPU batches: the event recorded after the batch's copy on the loader's side stream. The consumer's current
  /// stream already waits for it (next() queues the wait); query it to see whether the copy is done.
  std::optional<Event> ready{};
};

/// Mini-batches of (inputs[i], targets[i]) pairs, or of a dataset's samples.
class DataLoader {
 public:
  /// Batches of rows: the first axis of both arrays is the sample axis (ShapeError when they differ).
  DataLoader(Array inputs, Array targets, DataLoaderOptions options = {});
  /// Batches of a map-style dataset's samples (shuffled, sampled, resumed as the arrays' rows), collated.
  DataLoader(std::shared_ptr<const MapDataset> dataset, DataLoaderOptions options = {});
  /// Batches of consecutive samples of each worker's stream, collated. No shuffle or sampler (ValueError: the
  /// dataset orders its own stream); num_samples() and num_batches() are -1 (unknown).
  DataLoader(std::shared_ptr<const IterableDataset> dataset, DataLoaderOptions options = {});
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  int64_t num_samples() const { return n_; }
  int64_t num_batches() const;
  int64_t epochs_started() const { return epoch_; }
  /// Makes the next epoch (epoch() or a range-for) epoch `epoch` (0-based: its order is the one of
  /// (seed, epoch), as in an uninterrupted run), starting at its batch `batch`, whose Batch::index stays its
  /// position in the whole epoch: a run resumed from a checkpoint sees what the stopped run would have seen.
  /// ValueError for a negative epoch or a batch outside [0, num_batches()]. An iterable dataset's epoch
  /// starts from its streams' beginning and skips `batch` batches (its streams must repeat for the same epoch).
  void set_epoch(int64_t epoch, int64_t batch = 0);

  class Epoch;
  /// Starts the next epoch (reshuffled when shuffle): its workers start assembling batches at once.
  std::unique_ptr<Epoch> epoch();

  class Iterator {
   public:
    using value_type = Batch;
    using difference_type = std::ptrdiff_t;
    Iterator() = default;
    explicit Iterator(std::shared_ptr<Epoch> epoch);
    const Batch& operator*() const { return batch_; }
    const Batch* operator->() const { return &batch_; }
    Iterator& operator++();
    bool operator==(const Iterator& o) const { return done_ == o.done_; }

   private:
    std::shared_ptr<Epoch> epoch_;
    Batch batch_;
    bool done_ = true;
  };
  /// begin() starts a new epoch; range-for runs one epoch.
  Iterator begin();
  Iterator end() { return Iterator(); }

 private:
  Array inputs_, targets_;
  std::shared_ptr<const MapDataset> map_;
  std::shared_ptr<const IterableDataset> iterable_;
  DataLoaderOptions options_;
  int64_t n_ = 0;
  int64_t epoch_ = 0;
  int64_t start_batch_ = 0;  ///< where the next epoch starts (set_epoch), then 0 again
};

/// One epoch's batches in order; workers assemble them ahead. next() returns nullopt after the last one.
class DataLoader::Epoch {
 public:
  ~Epoch();
  std::optional<Batch> next();

 private:
  friend class DataLoader;
  struct State;
  explicit Epoch(std::shared_ptr<State> state);
  std::shared_ptr<State> state_;
};

}  // namespace kiln::data
