// The CPU backend: 64-byte aligned allocation and the glue from the backend
// interface to the CPU kernels (elementwise, reduce, matmul, random).
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <thread>

#include <sys/mman.h>
#include <unistd.h>

#include "core/backend.hpp"
#include "cpu/elementwise.hpp"
#include "cpu/matmul.hpp"
#include "cpu/random.hpp"
#include "cpu/reduce.hpp"

namespace kiln::cpu_impl {

namespace {

constexpr size_t kAlignment = 64;
constexpr size_t kHugePage = size_t{2} << 20;
constexpr size_t kHugeThreshold = size_t{4} << 20;

void free_host(void*, void* data) { std::free(data); }

class CpuBackend final : public detail::Backend {
 public:
  std::shared_ptr<Storage> allocate(int64_t nbytes, Device device, const ArrayOptions&) override {
    // Round up to the alignment (aligned_alloc requires it) and never ask for 0 bytes. Large
    // blocks are 2 MiB aligned and advised as transparent huge pages, as NumPy does: a fresh
    // 64 MiB array then takes 32 page faults instead of 16384.
    size_t align = static_cast<size_t>(nbytes) >= kHugeThreshold ? kHugePage : kAlignment;
    size_t size = (static_cast<size_t>(nbytes) + align - 1) / align * align;
    if (size == 0) size = kAlignment;
    void* p = std::aligned_alloc(align, size);
    if (p && align == kHugePage) (void)madvise(p, size, MADV_HUGEPAGE);
    if (!p)
      throw OutOfMemoryError("cpu allocator: failed to allocate " + std::to_string(nbytes) +
                             " bytes of host memory; free some arrays or use smaller ones");
    return std::make_shared<Storage>(p, static_cast<size_t>(nbytes), device, &free_host, nullptr);
  }
  void transfer(const Array& src, const Array& dst, void*, bool) override {
    if (src.nbytes() > 0) std::memcpy(dst.data_ptr(), src.data_ptr(), static_cast<size_t>(src.nbytes()));
  }
  void elementwise(const detail::ElementwiseCall& call) override { cpu_elementwise(call); }
  void reduce(const detail::ReduceCall& call) override { cpu_reduce(call); }
  void matmul(const detail::MatmulCall& call) override { cpu_matmul(call); }
  void random(const detail::RandomCall& call) override { cpu_random(call); }
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
