// A thread-safe map from a backend's key to a compiled kernel, owned by what the kernels were
// made for (a user kernel, a fused graph), so they go away with it. Values are opaque to the core.
#pragma once

#include <memory>
#include <mutex>
#include <unordered_map>
#include <utility>

namespace kiln::detail {

template <class Key>
class KernelCache {
 public:
  /// The kernel stored under `key`, or nullptr.
  std::shared_ptr<void> find(const Key& key) const {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = entries_.find(key);
    return it == entries_.end() ? nullptr : it->second;
  }
  /// Stores `value` under `key` unless another thread did first (the first insert wins); returns the
  /// stored value.
  std::shared_ptr<void> insert(const Key& key, std::shared_ptr<void> value) {
    std::lock_guard<std::mutex> lock(mutex_);
    return entries_.try_emplace(key, std::move(value)).first->second;
  }

 private:
  mutable std::mutex mutex_;
  std::unordered_map<Key, std::shared_ptr<void>> entries_;
};

}  // namespace kiln::detail
