// The interface kiln::profiler records GPU activity through (internal). Core knows no backend: the CUDA
// backend implements it over CUPTI (src/cuda/profiler_cupti.cpp) and src/backends.cpp hands it over.
#pragma once

#include <cstdint>
#include <string>

#include "kiln/profiler.hpp"

namespace kiln::detail {

class ActivityTracer {
 public:
  virtual ~ActivityTracer() = default;
  /// Empty when start() can record this machine's GPUs; else why it cannot and how to fix it (this build
  /// has no CUPTI). Only asked when num_gpus() > 0.
  virtual std::string unavailable() = 0;
  /// Enables the activity records. Throws DeviceError naming CUPTI's reason and the fix when it refuses.
  virtual void start() = 0;
  /// Waits for every GPU to finish its queued work, so that stop() finds every record complete.
  virtual void synchronize() = 0;
  /// Flushes the records into `out` and disables them. Never called without start().
  virtual void stop(profiler::Profile& out) = 0;
  /// The records' clock, nanoseconds.
  virtual int64_t timestamp_ns() = 0;
};

/// The tracer of this build (src/backends.cpp): the CUDA backend's, or nullptr in a CPU-only build.
ActivityTracer* builtin_activity_tracer();

}  // namespace kiln::detail
