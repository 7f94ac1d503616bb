// IDX files (zlib for .gz) and the DataLoader: worker threads gather batches into pinned host buffers and
// copy them to the device on side streams; the consumer's stream waits on an event per batch.
#include "kiln/data.hpp"

#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <exception>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "kiln/autograd.hpp"
#include "kiln/ops.hpp"
#include "kiln/stream.hpp"

namespace kiln::data {

namespace {

/// The whole file, inflated when it is gzip-compressed (.gz).
std::string read_file(const std::string& path) {
  if (!std::filesystem::exists(path)) throw ValueError("read_idx: no such file " + path);
  std::string out;
  if (path.size() > 3 && path.compare(path.size() - 3, 3, ".gz") == 0) {
    gzFile f = gzopen(path.c_str(), "rb");
    if (!f) throw ValueError("read_idx: cannot open " + path);
    char buffer[1 << 16];
    int got = 0;
    while ((got = gzread(f, buffer, sizeof buffer)) > 0) out.append(buffer, static_cast<size_t>(got));
    int err = 0;
    const char* message = gzerror(f, &err);
    const bool failed = got < 0 || (err != Z_OK && err != Z_STREAM_END);
    const std::string why = failed ? message : "";
    gzclose(f);
    if (failed) throw ValueError("read_idx: " + path + " is not a valid gzip file (" + why + ")");
    return out;
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ValueError("read_idx: cannot open " + path);
  out.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return out;
}

DType idx_dtype(unsigned code, const std::string& path) {
  switch (code) {
    case 0x08:
      return uint8;
    case 0x09:
      return int8;
    case 0x0B:
      return int16;
    case 0x0C:
      return int32;
    case 0x0D:
      return float32;
    case 0x0E:
      return float64;
    default:
      break;
  }
  char hex[8];
  std::snprintf(hex, sizeof hex, "0x%02X", code);
  throw ValueError("read_idx: " + path + " has data type code " + hex + ", not one of IDX's (0x08, 0x09, 0x0B-0x0E)");
}

unsigned idx_code(DType t) {
  if (t == uint8) return 0x08;
  if (t == int8) return 0x09;
  if (t == int16) return 0x0B;
  if (t == int32) return 0x0C;
  if (t == float32) return 0x0D;
  if (t == float64) return 0x0E;
  throw DTypeError("write_idx: IDX has no " + std::string(dtype_name(t)) + " type; convert to int32 or float32");
}

}  // namespace

Array read_idx(const std::string& path) {
  const std::string bytes = read_file(path);
  auto byte = [&](size_t i) { return static_cast<unsigned char>(bytes[i]); };
  if (bytes.size() < 4 || byte(0) != 0 || byte(1) != 0)
    throw ValueError("read_idx: " + path + " does not start with an IDX magic number (0, 0, type, rank)");
  const DType dtype = idx_dtype(byte(2), path);
  const size_t rank = byte(3);
  if (bytes.size() < 4 + 4 * rank) throw ValueError("read_idx: " + path + " is truncated inside its dimensions");
  const size_t header = 4 + 4 * rank, item = static_cast<size_t>(itemsize(dtype));
  const uint64_t data_bytes = bytes.size() - header;
  Shape shape;
  uint64_t count = 1;
  bool larger_than_file = false;  // the product of the dimensions exceeds the data (and may overflow 64 bits)
  for (size_t d = 0; d < rank; ++d) {
    const uint64_t e = (uint64_t{byte(4 + 4 * d)} << 24) | (uint64_t{byte(5 + 4 * d)} << 16) |
                       (uint64_t{byte(6 + 4 * d)} << 8) | uint64_t{byte(7 + 4 * d)};
    shape.push_back(static_cast<int64_t>(e));
    if (e != 0 && count > data_bytes / item / e) larger_than_file = true;
    count = larger_than_file ? count : count * e;
  }
  if (std::find(shape.begin(), shape.end(), 0) != shape.end()) count = 0, larger_than_file = false;
  if (larger_than_file || data_bytes != count * item)
    throw ValueError("read_idx: " + path + " holds " + std::to_string(data_bytes) + " data bytes but its shape " +
                     shape_str(shape) + " needs " +
                     (larger_than_file ? std::string("more") : std::to_string(count * item)) +
                     "; the file is truncated or corrupt");
  Array out = empty(shape, dtype, cpu());
  auto* dst = static_cast<unsigned char*>(out.data_ptr());
  for (size_t i = 0; i < count; ++i)  // big-endian elements
    for (size_t b = 0; b < item; ++b) dst[i * item + b] = byte(header + i * item + (item - 1 - b));
  return out;
}

void write_idx(const std::string& path, const Array& a) {
  const Array h = a.detach().to(cpu()).contiguous();
  const unsigned code = idx_code(h.dtype());
  std::string bytes = {0, 0, static_cast<char>(code), static_cast<char>(h.ndim())};
  for (int64_t e : h.shape())
    for (int s = 24; s >= 0; s -= 8) bytes += static_cast<char>((e >> s) & 0xFF);
  const size_t item = static_cast<size_t>(itemsize(h.dtype()));
  const auto* src = static_cast<const unsigned char*>(h.data_ptr());
  for (int64_t i = 0; i < h.size(); ++i)
    for (size_t b = 0; b < item; ++b) bytes += static_cast<char>(src[static_cast<size_t>(i) * item + (item - 1 - b)]);
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw ValueError("write_idx: cannot write " + path);
}

Dataset fashion_mnist(bool train, const std::string& dir) {
  const std::string stem = train ? "train" : "t10k";
  auto find = [&](const std::string& name) {
    for (const std::string& candidate : {dir + "/" + name + ".gz", dir + "/" + name})
      if (std::filesystem::exists(candidate)) return candidate;
    throw ValueError(
        "fashion_mnist: " + dir + "/" + name +
        "(.gz) not found; install Debian's dataset-fashion-mnist "
        "(apt-get install dataset-fashion-mnist, as make demo does) or pass the folder holding the IDX files");
  };
  const Array images = read_idx(find(stem + "-images-idx3-ubyte"));
  const Array labels = read_idx(find(stem + "-labels-idx1-ubyte"));
  if (images.ndim() != 3 || labels.ndim() != 1 || images.shape(0) != labels.shape(0))
    throw ValueError("fashion_mnist: images of shape " + shape_str(images.shape()) + " and labels of shape " +
                     shape_str(labels.shape()) + " in " + dir + " do not pair up");
  return {images.reshape({images.shape(0), images.shape(1) * images.shape(2)}).astype(float32) / 255.0f,
          labels.astype(int64)};
}

// ---------------------------------------------------------------- datasets
std::vector<Array> stack_samples(const std::vector<Sample>& samples) {
  if (samples.empty()) return {};
  const size_t fields = samples[0].size();
  std::vector<Array> out;
  out.reserve(fields);
  for (size_t f = 0; f < fields; ++f) {
    std::vector<Array> column;
    column.reserve(samples.size());
    for (size_t i = 0; i < samples.size(); ++i) {
      if (samples[i].size() != fields)
        throw ShapeError("data::stack_samples: sample " + std::to_string(i) + " of the batch has " +
                         std::to_string(samples[i].size()) + " fields, sample 0 has " + std::to_string(fields) +
                         "; a dataset's get() must return the same fields for every index (or pass a collate)");
      if (samples[i][f].shape() != samples[0][f].shape())
        throw ShapeError("data::stack_samples: field " + std::to_string(f) + " of sample " + std::to_string(i) +
                         " has shape " + shape_str(samples[i][f].shape()) + ", sample 0's " +
                         shape_str(samples[0][f].shape()) + "; pad the samples or pass a collate that does");
      column.push_back(samples[i][f]);
    }
    out.push_back(stack(column, 0));
  }
  return out;
}

ArrayDataset::ArrayDataset(std::vector<Array> arrays) {
  if (arrays.empty()) throw ValueError("data::ArrayDataset: pass at least one array");
  for (Array& a : arrays) {
    a = a.detach().to(cpu()).contiguous();
    if (a.ndim() == 0 || a.shape(0) != arrays[0].shape(0))
      throw ShapeError("data::ArrayDataset: an array of shape " + shape_str(a.shape()) + " beside one of shape " +
                       shape_str(arrays[0].shape()) + "; the arrays need the same number of samples on axis 0");
  }
  n_ = arrays[0].shape(0);
  arrays_ = std::move(arrays);
}

Sample ArrayDataset::get(int64_t index) const {
  if (index < 0 || index >= n_)
    throw ValueError("data::ArrayDataset::get: index " + std::to_string(index) + " is outside the " +
                     std::to_string(n_) + " samples");
  Sample s;
  for (const Array& a : arrays_) s.push_back(a.index({index}));
  return s;
}

// ---------------------------------------------------------------- DataLoader
struct DataLoader::Epoch::State {
  struct Item {
    Batch batch;
    std::optional<Event> ready;  // the copy to the device, on the worker's side stream
  };
  struct Worker {
    std::mutex mutex;
    std::condition_variable changed;
    std::deque<Item> items;
    bool finished = false;  // an iterable dataset's stream ended (no more items after those queued)
    std::thread thread;
  };
  // The samples: rows of two arrays (host, contiguous), a map-style dataset or an iterable one.
  Array inputs, targets;
  std::shared_ptr<const MapDataset> map;
  std::shared_ptr<const IterableDataset> iterable;
  DataLoaderOptions options;
  int64_t epoch = 0;
  std::vector<int64_t> order;
  int64_t batches = 0;  // -1 for an iterable dataset: its streams say when the epoch ends
  int64_t first = 0;    // the batch the epoch starts at (a resumed run's)
  int64_t next = 0;
  size_t turn = 0;  // iterable: the worker whose batch is handed out next
  std::atomic<bool> stop{false};
  std::exception_ptr error;
  std::vector<std::unique_ptr<Worker>> workers;

  int64_t rows_of(int64_t k) const {
    return std::min(options.batch_size, static_cast<int64_t>(order.size()) - k * options.batch_size);
  }

  /// The rows of batch k gathered into (pinned, for a GPU) host memory.
  Array gather(const Array& source, int64_t k, bool pinned) const {
    const int64_t rows = rows_of(k);
    Shape shape = source.shape();
    shape[0] = rows;
    Array out = empty(shape, source.dtype(), cpu(), ArrayOptions{.pinned = pinned});
    const size_t row_bytes = static_cast<size_t>(source.nbytes() / std::max<int64_t>(source.shape(0), 1));
    const auto* src = static_cast<const char*>(source.data_ptr());
    auto* dst = static_cast<char*>(out.data_ptr());
    for (int64_t r = 0; r < rows; ++r)
      std::memcpy(dst + static_cast<size_t>(r) * row_bytes,
                  src + static_cast<size_t>(order[static_cast<size_t>(k * options.batch_size + r)]) * row_bytes,
                  row_bytes);
    return out;
  }

  std::vector<Array> collate(const std::vector<Sample>& samples) const {
    return options.collate ? options.collate(samples) : stack_samples(samples);
  }

  /// Waits for room in the worker's queue; false when the epoch is being stopped.
  bool wait_for_room(Worker& me) {
    std::unique_lock lock(me.mutex);
    me.changed.wait(lock, [&] { return stop || static_cast<int>(me.items.size()) < options.prefetch; });
    return !stop;
  }

  /// Queues a batch's host arrays, copied to the device on the side stream for a GPU.
  void deliver(Worker& me, std::vector<Array> fields, int64_t k, const Device& device, std::optional<Stream>& side) {
    Item item;
    item.batch.index = k;
    if (side) {
      StreamGuard on_side(*side);
      for (Array& f : fields) {
        if (!f.storage()->pinned()) {  // a dataset's arrays: staged through pinned memory for an async copy
          Array staged = empty(f.shape(), f.dtype(), cpu(), ArrayOptions{.pinned = true});
          staged.copy_from(f);
          f = staged;
        }
        f = f.to(device, *side, {.non_blocking = true});
      }
      item.ready = Event::create(device, false);
      item.ready->record(*side);
    }
    item.batch.fields = std::move(fields);
    if (!item.batch.fields.empty()) item.batch.x = item.batch.fields[0];
    if (item.batch.fields.size() > 1) item.batch.y = item.batch.fields[1];
    std::lock_guard lock(me.mutex);
    me.items.push_back(std::move(item));
    me.changed.notify_all();
  }

  void run(size_t w) {
    Worker& me = *workers[w];
    try {
      const Device device = options.device.value_or(cpu());
      const bool gpu = device.is_cuda();
      std::optional<Stream> side;
      std::optional<DeviceGuard> guard;
      if (gpu) {
        guard.emplace(device);
        // Non-blocking: a stream that synchronised with the legacy default stream (the training loop's unless it
        // chose another) would wait for the compute queued there, and the prefetch would overlap nothing.
        side = Stream::create(device, {.non_blocking = true});
      }
      if (iterable) {
        run_stream(me, w, device, side);
        return;
      }
      for (int64_t k = first + static_cast<int64_t>(w); k < batches; k += static_cast<int64_t>(workers.size())) {
        if (!wait_for_room(me)) return;
        std::vector<Array> fields;
        if (map) {
          std::vector<Sample> samples;
          for (int64_t r = 0; r < rows_of(k); ++r)
            samples.push_back(map->get(order[static_cast<size_t>(k * options.batch_size + r)]));
          fields = collate(samples);
        } else {
          fields = {gather(inputs, k, gpu), gather(targets, k, gpu)};
        }
        deliver(me, std::move(fields), k, device, side);
      }
    } catch (...) {
      std::lock_guard lock(me.mutex);
      error = std::current_exception();
      me.changed.notify_all();
    }
  }

  /// An iterable dataset's worker: consecutive samples of its own stream, batch_size at a time.
  void run_stream(Worker& me, size_t w, const Device& device, std::optional<Stream>& side) {
    auto next_sample = iterable->stream({.id = static_cast<int>(w),
                                         .num_workers = static_cast<int>(workers.size()),
                                         .epoch = epoch,
                                         .seed = options.seed});
    for (bool more = true; more;) {
      if (!wait_for_room(me)) return;
      std::vector<Sample> samples;
      while (static_cast<int64_t>(samples.size()) < options.batch_size) {
        std::optional<Sample> s = next_sample();
        if (!s) {
          more = false;
          break;
        }
        samples.push_back(std::move(*s));
      }
      if (samples.empty() || (!more && options.drop_last && static_cast<int64_t>(samples.size()) < options.batch_size))
        break;
      deliver(me, collate(samples), -1, device, side);
    }
    std::lock_guard lock(me.mutex);
    me.finished = true;
    me.changed.notify_all();
  }
};

namespace {

void check_options(const DataLoaderOptions& options) {
  if (options.batch_size <= 0) throw ValueError("DataLoader: batch_size must be positive");
  if (options.workers <= 0 || options.prefetch <= 0)
    throw ValueError("DataLoader: workers and prefetch must be positive");
  if (options.sampler && options.shuffle)
    throw ValueError("DataLoader: shuffle and sampler are exclusive; shuffle with DistributedSampler::shuffle");
}

}  // namespace

DataLoader::DataLoader(Array inputs, Array targets, DataLoaderOptions options)
    : inputs_(inputs.detach().to(cpu()).contiguous()),
      targets_(targets.detach().to(cpu()).contiguous()),
      options_(options) {
  if (inputs_.ndim() == 0 || targets_.ndim() == 0 || inputs_.shape(0) != targets_.shape(0))
    throw ShapeError("DataLoader: inputs of shape " + shape_str(inputs_.shape()) + " and targets of shape " +
                     shape_str(targets_.shape()) + " need the same number of samples on axis 0");
  check_options(options_);
  n_ = inputs_.shape(0);
  if (options_.sampler) (void)options_.sampler->num_samples(n_);  // checks rank and num_replicas
}

DataLoader::DataLoader(std::shared_ptr<const MapDataset> dataset, DataLoaderOptions options)
    : map_(std::move(dataset)), options_(std::move(options)) {
  if (!map_) throw ValueError("DataLoader: the dataset is null");
  check_options(options_);
  n_ = map_->size();
  if (n_ < 0) throw ValueError("DataLoader: the dataset's size() is " + std::to_string(n_) + "; it must be >= 0");
  if (options_.sampler) (void)options_.sampler->num_samples(n_);
}

DataLoader::DataLoader(std::shared_ptr<const IterableDataset> dataset, DataLoaderOptions options)
    : iterable_(std::move(dataset)), options_(std::move(options)) {
  if (!iterable_) throw ValueError("DataLoader: the dataset is null");
  check_options(options_);
  if (options_.shuffle || options_.sampler)
    throw ValueError(
        "DataLoader: an IterableDataset orders its own samples: shuffle and sampler apply to "
        "map-style datasets only (shuffle inside the stream, from WorkerInfo::seed and epoch)");
  n_ = -1;
}

int64_t DistributedSampler::num_samples(int64_t n) const {
  if (num_replicas < 1 || rank < 0 || rank >= num_replicas)
    throw ValueError("DistributedSampler: rank " + std::to_string(rank) + " is out of range for " +
                     std::to_string(num_replicas) + " replicas; use dist::rank() and dist::world_size()");
  return drop_last ? n / num_replicas : (n + num_replicas - 1) / num_replicas;
}

std::vector<int64_t> DistributedSampler::indices(int64_t n, int64_t epoch) const {
  const int64_t per_rank = num_samples(n);
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), int64_t{0});
  if (shuffle) {
    std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ULL + static_cast<uint64_t>(epoch));
    std::shuffle(order.begin(), order.end(), rng);
  }
  const int64_t total = per_rank * num_replicas;
  for (int64_t i = n; i < total; ++i) order.push_back(order[static_cast<size_t>(n > 0 ? (i - n) % n : 0)]);
  std::vector<int64_t> mine;
  mine.reserve(static_cast<size_t>(per_rank));
  for (int64_t i = rank; i < total; i += num_replicas) mine.push_back(order[static_cast<size_t>(i)]);
  return mine;
}

DataLoader::~DataLoader() = default;

int64_t DataLoader::num_batches() const {
  if (iterable_) return -1;
  const int64_t n = options_.sampler ? options_.sampler->num_samples(n_) : n_;
  return options_.drop_last ? n / options_.batch_size : (n + options_.batch_size - 1) / options_.batch_size;
}

void DataLoader::set_epoch(int64_t epoch, int64_t batch) {
  if (epoch < 0 || batch < 0 || (!iterable_ && batch > num_batches()))
    throw ValueError("DataLoader::set_epoch: epoch " + std::to_string(epoch) + " and batch " + std::to_string(batch) +
                     " must be non-negative, the batch at most the " + std::to_string(num_batches()) +
                     " batches of an epoch; pass the position a checkpoint recorded");
  epoch_ = epoch;
  start_batch_ = batch;
}

std::unique_ptr<DataLoader::Epoch> DataLoader::epoch() {
  auto state = std::make_shared<Epoch::State>();
  state->inputs = inputs_;
  state->targets = targets_;
  state->map = map_;
  state->iterable = iterable_;
  state->options = options_;
  state->epoch = epoch_;
  if (!iterable_) {
    state->order.resize(static_cast<size_t>(n_));
    std::iota(state->order.begin(), state->order.end(), int64_t{0});
    if (options_.sampler) {
      state->order = options_.sampler->indices(n_, epoch_);
    } else if (options_.shuffle) {
      std::mt19937_64 rng(options_.seed * 0x9E3779B97F4A7C15ULL + static_cast<uint64_t>(epoch_));
      std::shuffle(state->order.begin(), state->order.end(), rng);
    }
  }
  ++epoch_;
  state->batches = num_batches();
  const int64_t skip = start_batch_;
  start_batch_ = 0;
  size_t workers = static_cast<size_t>(std::max(1, options_.workers));
  if (!iterable_) {
    state->first = state->next = skip;
    workers = static_cast<size_t>(std::max<int64_t>(1, std::min<int64_t>(options_.workers, state->batches - skip)));
  }
  for (size_t w = 0; w < workers; ++w) state->workers.push_back(std::make_unique<Epoch::State::Worker>());
  for (size_t w = 0; w < workers; ++w) state->workers[w]->thread = std::thread([s = state.get(), w] { s->run(w); });
  auto epoch = std::unique_ptr<Epoch>(new Epoch(std::move(state)));
  // An iterable dataset's resumed epoch: its streams start over; the batches before `skip` are dropped.
  if (iterable_)
    for (int64_t k = 0; k < skip && epoch->next(); ++k) {
    }
  return epoch;
}

DataLoader::Epoch::Epoch(std::shared_ptr<State> state) : state_(std::move(state)) {}

DataLoader::Epoch::~Epoch() {
  state_->stop = true;
  for (auto& w : state_->workers) {
    {
      std::lock_guard lock(w->mutex);
      w->changed.notify_all();
    }
    if (w->thread.joinable()) w->thread.join();
  }
}

std::optional<Batch> DataLoader::Epoch::next() {
  State& s = *state_;
  State::Item item;
  if (s.iterable) {
    // Round-robin over the workers, skipping those whose stream ended; done when all have.
    bool found = false;
    for (size_t tried = 0; tried < s.workers.size() && !found; ++tried) {
      State::Worker& w = *s.workers[s.turn];
      s.turn = (s.turn + 1) % s.workers.size();
      std::unique_lock lock(w.mutex);
      w.changed.wait(lock, [&] { return !w.items.empty() || w.finished || s.error; });
      if (w.items.empty() && !w.finished) std::rethrow_exception(s.error);
      if (w.items.empty()) continue;
      item = std::move(w.items.front());
      w.items.pop_front();
      w.changed.notify_all();
      found = true;
    }
    if (!found) return std::nullopt;
    item.batch.index = s.next;
  } else {
    if (s.next >= s.batches) return std::nullopt;
    State::Worker& w = *s.workers[static_cast<size_t>((s.next - s.first) % static_cast<int64_t>(s.workers.size()))];
    std::unique_lock lock(w.mutex);
    w.changed.wait(lock, [&] { return !w.items.empty() || s.error; });
    if (w.items.empty()) std::rethrow_exception(s.error);
    item = std::move(w.items.front());
    w.items.pop_front();
    w.changed.notify_all();
  }
  ++s.next;
  // The consumer's stream waits for the copy; the allocator learns the arrays are used there.
  if (item.ready && !item.batch.fields.empty()) {
    const Stream current = Stream::current(item.batch.fields.front().device());
    item.ready->wait(current);
    for (Array& f : item.batch.fields) f.record_stream(current);
    item.batch.ready = std::move(item.ready);
  }
  return std::move(item.batch);
}

DataLoader::Iterator::Iterator(std::shared_ptr<Epoch> epoch) : epoch_(std::move(epoch)), done_(false) { ++*this; }

DataLoader::Iterator& DataLoader::Iterator::operator++() {
  std::optional<Batch> b = epoch_->next();
  if (!b) {
    done_ = true;
    epoch_.reset();
  } else {
    batch_ = std::move(*b);
  }
  return *this;
}

DataLoader::Iterator DataLoader::begin() { return Iterator(std::shared_ptr<Epoch>(epoch())); }

}  // namespace kiln::data
