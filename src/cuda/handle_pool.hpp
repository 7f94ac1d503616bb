// Library handles (cuBLAS, cuDNN) per (device, thread), as PyTorch keeps them: a thread takes a handle of a
// device from that device's idle list the first time it needs one, keeps it for its life, and gives it back
// when it exits, so a pool of threads reuses a few handles. Handles are never destroyed: destroying one while
// the process exits (after the driver has shut down) is unsafe. The per-library state (the handle and what it
// carries, e.g. cuBLAS's workspaces) is a type of the library's own, made by its `create` function.
#pragma once

#include <array>
#include <mutex>
#include <vector>

#include "cuda/runtime.hpp"

namespace kiln::cuda_impl {

/// The idle states of `State` per device; the single owner of them, leaked on purpose (see the top).
template <class State>
class HandlePool {
 public:
  static HandlePool& instance() {
    static HandlePool* pool = new HandlePool;
    return *pool;
  }
  /// An idle state of `device` (the current device), or a new one from `create()`.
  template <class Create>
  State* acquire(int device, Create&& create) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      std::vector<State*>& idle = idle_[static_cast<size_t>(device)];
      if (!idle.empty()) {
        State* state = idle.back();
        idle.pop_back();
        return state;
      }
    }
    RelaxedCaptureMode relaxed;  // a first call during a graph capture: creating a handle allocates
    return create();
  }
  /// Takes back the state of a thread that exits. Never throws (a state that cannot be stored is leaked).
  void release(int device, State* state) noexcept {
    try {
      std::lock_guard<std::mutex> lock(mutex_);
      idle_[static_cast<size_t>(device)].push_back(state);
    } catch (...) {
    }
  }

 private:
  std::mutex mutex_;
  std::array<std::vector<State*>, kMaxDevices> idle_;
};

/// This thread's state of `device` (the current device), taken from the pool (or made by `create()`, which
/// returns a new State*) at the first call and given back when the thread exits.
template <class State, class Create>
State* thread_handle(int device, Create&& create) {
  struct ThreadStates {
    std::array<State*, kMaxDevices> states{};
    ~ThreadStates() {
      for (size_t d = 0; d < states.size(); ++d)
        if (states[d]) HandlePool<State>::instance().release(static_cast<int>(d), states[d]);
    }
  };
  thread_local ThreadStates mine;
  State*& state = mine.states[static_cast<size_t>(device)];
  if (!state) state = HandlePool<State>::instance().acquire(device, create);
  return state;
}

}  // namespace kiln::cuda_impl
