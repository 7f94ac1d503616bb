// DataParallel: replicas on the GPUs of one process, one host thread each, gradients averaged over an
// ncclCommInitAll clique by the same bucketed reducer as DistributedDataParallel.
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>

#include "dist/comm.hpp"
#include "dist/reducer.hpp"
#include "kiln/autograd.hpp"
#include "kiln/error.hpp"
#include "kiln/ops.hpp"

namespace kiln::dist {

namespace {

/// A host thread that runs one job at a time for its GPU (its current device stays set between jobs).
class Worker {
 public:
  explicit Worker(Device device) : device_(device), thread_([this] { loop(); }) {}
  ~Worker() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void post(std::function<void()> job) {
    std::lock_guard<std::mutex> lock(mutex_);
    job_ = std::move(job);
    done_ = false;
    error_ = nullptr;
    cv_.notify_all();
  }
  /// Waits for the posted job; rethrows its exception.
  void join() {
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait(lock, [this] { return done_; });
    if (error_) std::rethrow_exception(error_);
  }

 private:
  void loop() {
    set_current_device(device_);
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      cv_.wait(lock, [this] { return stop_ || job_; });
      if (stop_) return;
      auto job = std::move(job_);
      job_ = nullptr;
      lock.unlock();
      std::exception_ptr error;
      try {
        job();
      } catch (...) {
        error = std::current_exception();
      }
      lock.lock();
      error_ = error;
      done_ = true;
      cv_.notify_all();
    }
  }
  Device device_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::function<void()> job_;
  bool done_ = true, stop_ = false;
  std::exception_ptr error_;
  std::thread thread_;
};

}  // namespace

struct DataParallel::Impl {
  std::vector<Device> devices;
  std::vector<std::shared_ptr<nn::Module>> replicas;
  std::vector<std::unique_ptr<optim::Optimizer>> optimizers;
  std::vector<std::unique_ptr<detail::CommBackend>> comms;
  std::vector<std::shared_ptr<detail::Reducer>> reducers;
  std::vector<std::unique_ptr<Worker>> workers;

  /// Runs job(i) on every replica's thread at once; rethrows the first failure after all have finished.
  void run_all(const std::function<void(size_t)>& job) {
    for (size_t i = 0; i < workers.size(); ++i) workers[i]->post([&job, i] { job(i); });
    std::exception_ptr first;
    for (auto& w : workers) {
      try {
        w->join();
      } catch (...) {
        if (!first) first = std::current_exception();
      }
    }
    if (first) std::rethrow_exception(first);
  }

  /// [begin, end) of replica i's slice of n samples (numpy.array_split's sizes).
  std::pair<int64_t, int64_t> slice(int64_t n, size_t i) const {
    const auto k = static_cast<int64_t>(devices.size()), ii = static_cast<int64_t>(i);
    const int64_t base = n / k, extra = n % k;
    const int64_t begin = ii * base + std::min(ii, extra);
    return {begin, begin + base + (ii < extra ? 1 : 0)};
  }
};

DataParallel::DataParallel(const ModelFactory& make_model, const OptimizerFactory& make_optimizer,
                           std::vector<Device> devices)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  if (devices.empty()) devices = try_all_gpus();
  if (devices.empty() || !devices.front().is_cuda())
    throw DeviceError("DataParallel: no GPU on this machine; train the model directly on the CPU");
  for (size_t i = 0; i < devices.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      if (devices[i] == devices[j])
        throw ValueError("DataParallel: " + devices[i].str() + " is listed twice; give each replica its own GPU");
  m.devices = devices;
  m.comms = detail::make_nccl_clique(devices, std::chrono::minutes(5));
  nn::StateDict reference;
  for (size_t i = 0; i < devices.size(); ++i) {
    DeviceGuard guard(devices[i]);
    std::shared_ptr<nn::Module> r = make_model();
    if (!r) throw ValueError("DataParallel: make_model returned a null module");
    if (i == 0)
      reference = r->state_dict();
    else
      r->load_state_dict(reference);  // every replica starts from replica 0's values
    r->to(devices[i]);
    m.optimizers.push_back(make_optimizer(*r));
    detail::CommBackend* comm = m.comms[i].get();
    auto reducer = std::make_shared<detail::Reducer>(
        r->parameters(), 25.0, 25.0, [comm](Array& flat) { return comm->all_reduce(flat, ReduceOp::avg); });
    reducer->attach(reducer);
    m.reducers.push_back(reducer);
    m.replicas.push_back(std::move(r));
  }
  for (const Device& d : devices) m.workers.push_back(std::make_unique<Worker>(d));
}

DataParallel::~DataParallel() = default;

const std::vector<Device>& DataParallel::devices() const { return impl_->devices; }
nn::Module& DataParallel::replica(size_t i) { return *impl_->replicas.at(i); }
optim::Optimizer& DataParallel::optimizer(size_t i) { return *impl_->optimizers.at(i); }

Array DataParallel::train_step(const Array& x, const Array& y, const LossFn& loss) {
  Impl& m = *impl_;
  const int64_t n = x.ndim() > 0 ? x.shape(0) : 0;
  const auto k = static_cast<int64_t>(m.devices.size());
  if (y.ndim() == 0 || y.shape(0) != n)
    throw ShapeError("DataParallel::train_step: x has " + std::to_string(n) + " samples but y has shape " +
                     shape_str(y.shape()) + "; pass matching batches");
  if (n < k)
    throw ShapeError("DataParallel::train_step: a batch of " + std::to_string(n) + " samples cannot be split over " +
                     std::to_string(k) + " GPUs; use a batch of at least " + std::to_string(k));
  std::vector<Array> losses(m.devices.size());
  m.run_all([&](size_t i) {
    const Device d = m.devices[i];
    const auto [begin, end] = m.slice(n, i);
    Array xi = x.slice(0, begin, end).to(d), yi = y.slice(0, begin, end).to(d);
    m.optimizers[i]->zero_grad();
    Array li = loss(m.replicas[i]->forward(xi), yi);
    // The reducer averages over the replicas; weighting each replica's mean loss by k * its share makes the
    // average the full batch's mean gradient when the slices differ in size.
    const double share = static_cast<double>(end - begin) / static_cast<double>(n);
    (li * (share * static_cast<double>(k))).backward();
    m.optimizers[i]->step();
    losses[i] = li.detach() * share;
  });
  DeviceGuard guard(m.devices.front());
  Array total = losses.front();
  for (size_t i = 1; i < losses.size(); ++i) total = total + losses[i].to(m.devices.front());
  return total;
}

Array DataParallel::forward(const Array& x) {
  Impl& m = *impl_;
  const int64_t n = x.ndim() > 0 ? x.shape(0) : 0;
  std::vector<Array> outs(m.devices.size());
  const bool grad = is_grad_enabled();
  m.run_all([&](size_t i) {
    set_grad_enabled(grad);
    const auto [begin, end] = m.slice(n, i);
    if (end > begin) outs[i] = m.replicas[i]->forward(x.slice(0, begin, end).to(m.devices[i]));
  });
  DeviceGuard guard(m.devices.front());
  std::vector<Array> parts;
  for (Array& o : outs)
    if (o.defined()) parts.push_back(o.to(m.devices.front()));
  return concatenate(parts, 0);
}

}  // namespace kiln::dist
