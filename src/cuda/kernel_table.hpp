// The table of compiled built-in kernels (internal): what a generated kernel is once loaded (KernelEntry), and a
// map from a kernel's identity to it. codegen.hpp instantiates it for the built-in kernels (KernelTable, keyed by
// BuiltinKernelKey: the device and the whole spec); kernel_table.cpp owns the process-wide instance.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>

namespace kiln::cuda_impl {

/// A loaded generated kernel, ready for launch_entry.
struct KernelEntry {
  void* function = nullptr;           ///< a cudaKernel_t
  void* context_function = nullptr;   ///< its CUfunction in the device's context (cheaper launches), or null
  std::shared_ptr<void> module;       ///< keeps the module loaded
  std::string name;                   ///< kernel name, for launch messages
  int blocks_per_multiprocessor = 8;  ///< resident kBlockSize-thread blocks (occupancy), for grid sizes
};

/// Compiled kernels by Key: a lookup is one mutex and one hash probe (a hash of a few words, no allocation), and
/// a miss is the caller's to build (generate the source, load it through load_module, insert). Entries keep
/// their address for the table's life.
template <class Key>
class BasicKernelTable {
 public:
  using Entry = KernelEntry;
  /// The entry for `key`, or nullptr on a miss.
  const Entry* find(const Key& key) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = entries_.find(key);
    if (it == entries_.end()) {
      ++misses_;
      return nullptr;
    }
    ++hits_;
    return it->second.get();
  }
  /// Stores `entry` for `key` (the first insert wins) and returns the stored entry.
  const Entry* insert(const Key& key, Entry entry) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto [it, inserted] = entries_.try_emplace(key, nullptr);
    if (inserted) it->second = std::make_unique<Entry>(std::move(entry));
    return it->second.get();
  }
  /// Lookups that found a kernel / that had to build one, since the table was made.
  uint64_t hits() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return hits_;
  }
  uint64_t misses() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return misses_;
  }
  /// Number of stored kernels.
  size_t size() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return entries_.size();
  }

 private:
  mutable std::mutex mutex_;
  std::unordered_map<Key, std::unique_ptr<Entry>> entries_;
  uint64_t hits_ = 0, misses_ = 0;
};

}  // namespace kiln::cuda_impl
