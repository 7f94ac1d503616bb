// Memo tables of compiled kernels (device-neutral): a thread-safe map from a
// backend's key to a compiled kernel (first insert wins), the per-object slot in
// which a backend keeps such a map for a user kernel or a fused graph (so the
// kernels go away with it), and the hash of a key's fields.
//
// A key is the whole spec of a kernel (with the device), compared with a defaulted
// operator==, never a packed integer: two different kernels can share an entry only
// if every field of their specs is equal. The hash only spreads the buckets.
#pragma once

#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

namespace kiln::detail {

/// Thread-safe map from `Key` to a compiled kernel (opaque to the core); the first insert wins.
template <class Key, class Hash = std::hash<Key>>
class KernelMemo {
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
  /// Number of stored kernels.
  size_t size() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return entries_.size();
  }

 private:
  mutable std::mutex mutex_;
  std::unordered_map<Key, std::shared_ptr<void>, Hash> entries_;
};

/// A compiled kernel's identity: the device it is loaded on and the backend's whole spec of it (a struct with a
/// defaulted operator== and a std::hash). Two lookups share an entry only when every field is equal.
template <class Spec>
struct DeviceKernelKey {
  int device = 0;
  Spec spec;

  bool operator==(const DeviceKernelKey&) const = default;
};

/// The kernels one backend compiled for an object (a user kernel, a fused graph): the backend's own memo
/// type, keyed by its full kernel spec, created on first use. Thread-safe; the object owns it.
class BackendKernels {
 public:
  /// The memo of type `Memo` (a KernelMemo of the backend's key), created on the first call; every call
  /// must name the same type (one backend compiles an object's kernels).
  template <class Memo>
  Memo& get() const {
    std::call_once(once_, [this] {
      memo_ = std::make_shared<Memo>();
      type_ = &type_tag<Memo>;
    });
    if (type_ != &type_tag<Memo>) std::terminate();  // internal invariant: one memo type per object
    return *static_cast<Memo*>(memo_.get());
  }

 private:
  template <class T>
  static constexpr char type_tag = 0;
  mutable std::once_flag once_;
  mutable std::shared_ptr<void> memo_;
  mutable const char* type_ = nullptr;
};

namespace kernel_hash {

inline uint64_t mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h;
}

template <class T>
uint64_t add(uint64_t h, const T& v) {
  if constexpr (std::is_enum_v<T> || std::is_integral_v<T>) {
    return mix(h, static_cast<uint64_t>(v));
  } else if constexpr (std::is_array_v<T>) {
    for (const auto& e : v) h = add(h, e);
    return h;
  } else if constexpr (std::is_same_v<T, std::string>) {
    return mix(h, std::hash<std::string_view>()(v));
  } else if constexpr (requires {
                         v.first;
                         v.second;
                       }) {
    return add(add(h, v.first), v.second);
  } else if constexpr (requires {
                         v.begin();
                         v.end();
                         v.size();
                       }) {
    h = mix(h, v.size());
    for (const auto& e : v) h = add(h, e);
    return h;
  } else {
    return mix(h, std::hash<T>()(v));
  }
}

}  // namespace kernel_hash

/// A hash of every value given (integers, enums, C arrays, strings, pairs, ranges, anything with a
/// std::hash): a shift-and-add mix per word and one final multiply, no allocation. Spec hashes use it
/// through KILN_HASH_EVERY_FIELD.
template <class... T>
size_t hash_fields(const T&... values) {
  uint64_t h = 0;
  ((h = kernel_hash::add(h, values)), ...);
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  return static_cast<size_t>(h);
}

}  // namespace kiln::detail

template <class Spec>
struct std::hash<kiln::detail::DeviceKernelKey<Spec>> {
  size_t operator()(const kiln::detail::DeviceKernelKey<Spec>& k) const noexcept {
    return kiln::detail::hash_fields(k.device, k.spec);
  }
};

/// Defines std::hash<Type> (a struct, at global scope) over the fields named, which must be all of Type's fields
/// in order: they are bound with a structured binding, so a field added to Type without being named here does not
/// compile, and every bound name is hashed.
#define KILN_HASH_EVERY_FIELD(Type, ...)                  \
  template <>                                             \
  struct std::hash<Type> {                                \
    size_t operator()(const Type& value) const noexcept { \
      const auto& [__VA_ARGS__] = value;                  \
      return kiln::detail::hash_fields(__VA_ARGS__);      \
    }                                                     \
  }
