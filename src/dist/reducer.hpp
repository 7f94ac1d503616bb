// The gradient reducer of DistributedDataParallel and DataParallel: the parameters' gradients in buckets (in
// reverse registration order, one dtype and device per bucket, about bucket_cap_mb each). Each parameter's
// post-accumulate hook marks its gradient ready; a bucket whose gradients are all ready is copied into one flat
// buffer (one launch on a GPU) and its averaging all-reduce starts at once (on the communication stream), while backward goes on.
// A callback queued on the backward then starts the buckets that are left, orders the current stream after
// every all-reduce and makes each gradient a view of its bucket's averages (a channels-last gradient is
// copied back instead, keeping its layout). The first bucket may be smaller, to start its all-reduce
// earlier. The next backward writes into the buckets again: gradients kept from an earlier step (instead of
// zero_grad()) are read before they are overwritten, as accumulation needs.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "kiln/dist.hpp"

namespace kiln::dist::detail {

class Reducer {
 public:
  /// all_reduce(flat) starts averaging `flat` over the replicas and returns its Work.
  using AllReduce = std::function<Work(Array& flat)>;
  Reducer(std::vector<Array> params, double bucket_cap_mb, double first_bucket_mb, AllReduce all_reduce);
  /// Registers the hooks (holding `self` weakly: a destroyed reducer leaves harmless hooks behind).
  void attach(const std::shared_ptr<Reducer>& self);
  bool sync() const { return sync_; }
  void set_sync(bool on) { sync_ = on; }
  std::vector<std::vector<size_t>> buckets() const;

 private:
  struct Bucket {
    std::vector<size_t> members;   // parameter indices
    std::vector<int64_t> offsets;  // element offset of each member in `flat`
    int64_t numel = 0, bytes = 0;
    DType dtype = float32;
    Device device = cpu();
    Array flat;
    std::vector<Array> slots;  // member j's place in flat, shaped as its parameter
    size_t ready = 0;
    bool launched = false;
    Work work;
  };
  void gradient_ready(size_t k);
  void launch(Bucket& b);
  void finish();

  std::vector<Array> params_;
  AllReduce all_reduce_;
  std::vector<Bucket> buckets_;
  std::vector<size_t> bucket_of_;
  std::vector<bool> ready_;
  bool sync_ = true, armed_ = false;
  std::weak_ptr<Reducer> self_;
};

}  // namespace kiln::dist::detail
