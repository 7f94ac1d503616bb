// The CPU backend: 64-byte aligned allocation with a cache of large blocks, and the glue from the backend
// interface to the CPU kernels (elementwise, reduce, matmul, random).
#include "core/backend.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <new>
#include <string>
#include <thread>

#include "cpu/elementwise.hpp"
#include "cpu/matmul.hpp"
#include "cpu/multi_tensor.hpp"
#include "cpu/onednn.hpp"
#include "cpu/pooling.hpp"
#include "cpu/random.hpp"
#include "cpu/reduce.hpp"

namespace kiln::cpu_impl {

namespace {

constexpr size_t kAlignment = 64;
constexpr size_t kHugePage = size_t{2} << 20;
constexpr size_t kHugeThreshold = size_t{4} << 20;
constexpr size_t kCacheMin = size_t{256} << 10;     // blocks below this go straight back to malloc
constexpr size_t kCacheLimit = size_t{4096} << 20;  // most bytes kept for reuse (less on a small machine)

/// Bytes the cache may keep: 4 GiB, or an eighth of the machine's memory when that is less.
size_t cache_limit() {
  static const size_t limit = [] {
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    if (pages <= 0 || page <= 0) return kCacheLimit;
    return std::min(kCacheLimit, static_cast<size_t>(pages) / 8 * static_cast<size_t>(page));
  }();
  return limit;
}

/// Host memory for arrays. Large blocks (>= 256 KiB) freed by arrays are kept, up to cache_limit()
/// in all, and handed out again for a request of the same rounded size: a loop that makes a new
/// 4 MiB temporary each step then pays no page faults after the first (NumPy relies on glibc's
/// heap for this; aligned huge blocks bypass it). A network's forward frees and makes the same
/// activations every call: with 256 MiB kept, a batch-16 ResNet-50 forward faulted in its
/// activations' pages on every call (1.01 s on 2 cores; 0.87 s with them kept). Blocks >= 4 MiB are 2 MiB aligned and
/// advised as transparent huge pages, as NumPy does. Thread-safe; the cache is the only state.
class HostAllocator {
 public:
  static size_t rounded(size_t nbytes) {
    size_t align = nbytes >= kHugeThreshold ? kHugePage : nbytes >= kCacheMin ? size_t{64} << 10 : kAlignment;
    size_t size = (nbytes + align - 1) / align * align;
    return size == 0 ? kAlignment : size;
  }
  void* allocate(size_t size) {
    if (size >= kCacheMin) {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = free_.find(size);
      if (it != free_.end()) {
        void* p = it->second;
        free_.erase(it);
        cached_ -= size;
        return p;
      }
    }
    size_t align = size >= kHugeThreshold ? kHugePage : kAlignment;
    void* p = std::aligned_alloc(align, size);
    if (p && align == kHugePage) (void)madvise(p, size, MADV_HUGEPAGE);
    return p;
  }
  void release(void* p, size_t size) {
    if (size >= kCacheMin) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (cached_ + size <= cache_limit()) {
        free_.emplace(size, p);
        cached_ += size;
        return;
      }
    }
    std::free(p);
  }

 private:
  std::mutex mutex_;
  std::multimap<size_t, void*> free_;
  size_t cached_ = 0;
};

HostAllocator& host_allocator() {
  static HostAllocator* a = new HostAllocator;  // leaked: arrays may outlive static destruction
  return *a;
}

void free_host(void* context, void* data) { host_allocator().release(data, reinterpret_cast<size_t>(context)); }

class CpuBackend final : public detail::Backend {
 public:
  std::shared_ptr<Storage> allocate(int64_t nbytes, Device device, const ArrayOptions&) override {
    size_t size = HostAllocator::rounded(static_cast<size_t>(nbytes));
    void* p = host_allocator().allocate(size);
    if (!p)
      throw OutOfMemoryError("cpu allocator: failed to allocate " + std::to_string(nbytes) +
                             " bytes of host memory; free some arrays or use smaller ones");
    return std::make_shared<Storage>(p, static_cast<size_t>(nbytes), device, &free_host, reinterpret_cast<void*>(size));
  }
  void transfer(const Array& src, const Array& dst, const Stream*, bool) override {
    if (src.nbytes() > 0) std::memcpy(dst.data_ptr(), src.data_ptr(), static_cast<size_t>(src.nbytes()));
  }
  void elementwise(const detail::ElementwiseCall& call) override { cpu_elementwise(call); }
  void reduce(const detail::ReduceCall& call) override { cpu_reduce(call); }
  void scan(const detail::ScanCall& call) override { cpu_scan(call); }
  void matmul(const detail::MatmulCall& call) override { cpu_matmul(call); }
  bool convolution(const detail::ConvCall& call) override { return onednn_convolution(call); }
  bool pooling(const detail::PoolCall& call) override { return cpu_pooling(call); }
  bool batch_norm(detail::BatchNormCall& call) override { return cpu_batch_norm(call); }
  void random(const detail::RandomCall& call) override { cpu_random(call); }
  void multi_tensor(const detail::MultiTensorCall& call) override { cpu_multi_tensor(call); }
  void synchronize(Device) override {}
  int device_count() override { return 1; }
  DeviceProperties properties(Device) override {
    DeviceProperties p;
    p.name = "cpu";
    p.multiprocessors = static_cast<int>(std::thread::hardware_concurrency());
    long pages = sysconf(_SC_PHYS_PAGES), avail = sysconf(_SC_AVPHYS_PAGES), size = sysconf(_SC_PAGE_SIZE);
    p.total_memory = pages > 0 && size > 0 ? static_cast<size_t>(pages) * static_cast<size_t>(size) : 0;
    p.free_memory = avail > 0 && size > 0 ? static_cast<size_t>(avail) * static_cast<size_t>(size) : 0;
    return p;
  }
};

}  // namespace
}  // namespace kiln::cpu_impl

namespace kiln::detail {
Backend& cpu_backend() {
  static cpu_impl::CpuBackend backend;
  return backend;
}
}  // namespace kiln::detail
