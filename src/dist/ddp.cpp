// DistributedDataParallel and its gradient reducer (shared with DataParallel): buckets of gradients averaged
// while backward runs.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <numeric>
#include <sstream>

#include "dist/comm.hpp"
#include "dist/reducer.hpp"
#include "kiln/autograd.hpp"
#include "kiln/error.hpp"
#include "kiln/fuse.hpp"
#include "kiln/ops.hpp"

namespace kiln::dist {

namespace detail {

namespace {

/// dst[k] = src[k] for every k (pairs of one shape, dtype and device): Fused::each, so a bucket's gradients go
/// in (and back) in a few launches on a GPU (PyTorch's _foreach_copy_) rather than one per parameter.
void copy_each(const std::vector<Array>& dst, const std::vector<Array>& src) {
  static const auto copy = fuse([](auto x) { return x; }, "ddp_bucket_copy");
  if (!dst.empty()) copy.each({dst}, src);
}

}  // namespace

Reducer::Reducer(std::vector<Array> params, double bucket_cap_mb, double first_bucket_mb, AllReduce all_reduce)
    : params_(std::move(params)), all_reduce_(std::move(all_reduce)) {
  const int64_t cap = std::max<int64_t>(1, static_cast<int64_t>(bucket_cap_mb * 1024.0 * 1024.0));
  const int64_t first_cap = std::max<int64_t>(1, static_cast<int64_t>(first_bucket_mb * 1024.0 * 1024.0));
  bucket_of_.assign(params_.size(), 0);
  // Reverse registration order: backward produces the last layers' gradients first.
  for (size_t k = params_.size(); k-- > 0;) {
    const Array& p = params_[k];
    if (!is_floating(p.dtype()))
      throw DTypeError("DistributedDataParallel: parameter " + std::to_string(k) + " is " +
                       std::string(dtype_name(p.dtype())) + "; only floating parameters have gradients to average");
    const int64_t bytes = p.size() * itemsize(p.dtype());
    // The first bucket may be smaller (DdpOptions::first_bucket_mb): its all-reduce starts earlier in backward.
    const int64_t limit = buckets_.size() == 1 ? std::min(cap, first_cap) : cap;
    const bool fits = !buckets_.empty() && buckets_.back().dtype == p.dtype() && buckets_.back().device == p.device() &&
                      buckets_.back().bytes + bytes <= limit;
    if (!fits) {
      buckets_.emplace_back();
      buckets_.back().dtype = p.dtype();
      buckets_.back().device = p.device();
    }
    Bucket& b = buckets_.back();
    b.members.push_back(k);
    b.offsets.push_back(b.numel);
    b.numel += p.size();
    b.bytes += bytes;
    bucket_of_[k] = buckets_.size() - 1;
  }
  for (Bucket& b : buckets_) {
    b.flat = zeros({b.numel}, b.dtype, b.device);
    for (size_t j = 0; j < b.members.size(); ++j) {
      const Array& p = params_[b.members[j]];
      b.slots.push_back(b.flat.slice(0, b.offsets[j], b.offsets[j] + p.size()).reshape(p.shape()));
    }
  }
  ready_.assign(params_.size(), false);
}

void Reducer::attach(const std::shared_ptr<Reducer>& self) {
  self_ = self;
  std::weak_ptr<Reducer> weak = self;
  for (size_t k = 0; k < params_.size(); ++k)
    params_[k].register_post_accumulate_grad_hook([weak, k](const Array&) {
      if (auto r = weak.lock()) r->gradient_ready(k);
    });
}

std::vector<std::vector<size_t>> Reducer::buckets() const {
  std::vector<std::vector<size_t>> out;
  for (const Bucket& b : buckets_) out.push_back(b.members);
  return out;
}

void Reducer::gradient_ready(size_t k) {
  if (!sync_) return;
  if (!armed_) {
    armed_ = true;
    queue_callback([weak = self_] {
      if (auto r = weak.lock()) r->finish();
    });
  }
  if (ready_[k]) return;
  ready_[k] = true;
  Bucket& b = buckets_[bucket_of_[k]];
  if (++b.ready == b.members.size()) launch(b);
}

void Reducer::launch(Bucket& b) {
  // Gradients of the bucket's dtype are copied in together; any other is converted one by one.
  std::vector<Array> dst, src;
  for (size_t j = 0; j < b.members.size(); ++j) {
    Array& slot = b.slots[j];
    const Array g = params_[b.members[j]].grad();
    if (!g.defined()) {
      slot.fill(0);  // a parameter this backward did not reach contributes zeros (its grad becomes the average)
    } else if (g.data_ptr() == slot.data_ptr()) {
      continue;  // accumulated into the bucket already (the gradient is the slot)
    } else if (g.dtype() == b.dtype && g.device() == b.device) {
      dst.push_back(slot);
      src.push_back(g);
    } else {
      slot.assign(g);
    }
  }
  copy_each(dst, src);
  b.work = all_reduce_(b.flat);
  b.launched = true;
}

void Reducer::finish() {
  armed_ = false;
  for (Bucket& b : buckets_)
    if (!b.launched) launch(b);
  for (Bucket& b : buckets_) {
    b.work.wait();
    std::vector<Array> dst, src;
    for (size_t j = 0; j < b.members.size(); ++j) {
      Array& p = params_[b.members[j]];
      const Array& slot = b.slots[j];
      Array g = p.grad();
      if (g.defined() && g.data_ptr() == slot.data_ptr()) continue;  // the gradient is the slot already
      if (p.is_contiguous() && (!g.defined() || g.is_contiguous())) {
        p.set_grad(slot);                 // the averaged gradient is a view of the bucket: no copy back
      } else if (g.dtype() == b.dtype) {  // a channels-last gradient keeps its layout
        dst.push_back(g);
        src.push_back(slot);
      } else {
        g.assign(slot);
      }
    }
    copy_each(dst, src);
    b.launched = false;
    b.ready = 0;
    b.work = Work();
  }
  std::fill(ready_.begin(), ready_.end(), false);
}

}  // namespace detail

namespace {

/// Every rank's parameter signature (count, then ndim, dims and dtype of each) must equal rank 0's.
void check_same_parameters(ProcessGroup& g, const std::vector<std::pair<std::string, Array>>& named, Device d) {
  std::vector<int64_t> sig{static_cast<int64_t>(named.size())};
  for (const auto& [name, p] : named) {
    sig.push_back(p.ndim());
    for (int64_t e : p.shape()) sig.push_back(e);
    sig.push_back(static_cast<int64_t>(p.dtype()));
  }
  Array len = full({1}, static_cast<int64_t>(sig.size()), int64, d);
  Array lens = empty({g.size(), 1}, int64, d);
  g.all_gather(lens, len).wait();
  int64_t longest = 0;
  for (int64_t n : lens.to_vector<int64_t>()) longest = std::max(longest, n);
  std::vector<int64_t> padded(sig);
  padded.resize(static_cast<size_t>(longest), -1);
  Array mine = from_data(padded, Shape{longest}, d);
  Array all = empty({g.size(), longest}, int64, d);
  g.all_gather(all, mine).wait();
  const std::vector<int64_t> host = all.to_vector<int64_t>();
  const int64_t* r0 = host.data();
  for (int other = 1; other < g.size(); ++other) {
    const int64_t* them = host.data() + other * longest;
    if (std::equal(r0, r0 + longest, them)) continue;
    // Describe the first difference between rank 0 and rank `other`, with this rank's parameter names.
    std::ostringstream why;
    why << "DistributedDataParallel: rank " << other << "'s parameters differ from rank 0's: ";
    if (r0[0] != them[0]) {
      why << "rank 0 has " << r0[0] << " parameters, rank " << other << " " << them[0];
    } else {
      size_t at = 1;
      auto describe = [](const int64_t* p) {
        Shape shape(p + 1, p + 1 + p[0]);
        return shape_str(shape) + " " + std::string(dtype_name(static_cast<DType>(p[1 + p[0]])));
      };
      for (const auto& [name, p] : named) {
        const size_t n = static_cast<size_t>(r0[at]) + 2;
        if (!std::equal(r0 + at, r0 + at + n, them + at)) {
          why << "parameter '" << name << "' is " << describe(r0 + at) << " on rank 0 but " << describe(them + at)
              << " on rank " << other;
          break;
        }
        at += n;
      }
    }
    why << "; every rank must build the same model";
    throw ShapeError(why.str());
  }
}

}  // namespace

DistributedDataParallel::DistributedDataParallel(std::shared_ptr<nn::Module> module, DdpOptions options,
                                                 ProcessGroup* group)
    : module_(std::move(module)), group_(group ? group : &default_group()), options_(options) {
  if (!module_) throw ValueError("DistributedDataParallel: the module is null");
  ProcessGroup& g = *group_;
  const auto named = module_->named_parameters();
  std::vector<Array> params;
  for (const auto& [name, p] : named) {
    if (p.device().is_cuda() && p.device() != g.device())
      throw DeviceError("DistributedDataParallel: parameter '" + name + "' is on " + p.device().str() + " but rank " +
                        std::to_string(g.rank()) + "'s GPU is " + g.device().str() + "; call module->to(" +
                        g.device().str() + ") first");
    params.push_back(p);
  }
  const Device d = params.empty() ? g.device() : params.front().device();
  for (const Array& p : params)
    if (p.device() != d)
      throw DeviceError("DistributedDataParallel: the parameters are on " + d.str() + " and " + p.device().str() +
                        "; a replica lives on one device");
  if (g.size() > 1) {
    check_same_parameters(g, named, d);
    NoGradGuard no_grad;
    for (Array& p : params) g.broadcast(p, 0).wait();
    for (auto& [name, b] : module_->named_buffers()) g.broadcast(b, 0).wait();
  }
  ProcessGroup* pg = group_;
  std::vector<Array> trainable;  // frozen parameters (requires_grad false) are broadcast but not reduced
  for (const Array& p : params)
    if (p.requires_grad()) trainable.push_back(p);
  reducer_ = std::make_shared<detail::Reducer>(trainable, options_.bucket_cap_mb,
                                               options_.first_bucket_mb.value_or(options_.bucket_cap_mb),
                                               [pg](Array& flat) { return pg->all_reduce(flat, ReduceOp::avg); });
  reducer_->attach(reducer_);
  register_module("module", module_);
}

DistributedDataParallel::~DistributedDataParallel() = default;

Array DistributedDataParallel::forward(const Array& x) {
  if (options_.broadcast_buffers && group_->size() > 1) {
    NoGradGuard no_grad;
    for (auto& [name, b] : module_->named_buffers()) group_->broadcast(b, 0).wait();
  }
  return module_->forward(x);
}

std::string DistributedDataParallel::name() const {
  return "DistributedDataParallel(rank=" + std::to_string(group_->rank()) +
         ", world_size=" + std::to_string(group_->size()) + ", buckets=" + std::to_string(reducer_->buckets().size()) +
         ")";
}

std::vector<std::vector<size_t>> DistributedDataParallel::buckets() const { return reducer_->buckets(); }

DistributedDataParallel::NoSync::NoSync(DistributedDataParallel& ddp) : ddp_(ddp), previous_(ddp.reducer_->sync()) {
  ddp_.reducer_->set_sync(false);
}
DistributedDataParallel::NoSync::~NoSync() { ddp_.reducer_->set_sync(previous_); }

}  // namespace kiln::dist
