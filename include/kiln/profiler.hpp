// kiln::profiler — what the GPU ran between start() and stop(): kernels, copies, memsets and the host's
// launch calls (through CUPTI's Activity API in a CUDA build that has CUPTI), plus named host ranges
// (`Range`, on every build). stop() returns a Profile: a per-kernel summary table and a Chrome trace
// (chrome://tracing, ui.perfetto.dev). docs/profiling.md shows a session.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::profiler {

/// One kernel the GPU ran. Times are nanoseconds on the profile's clock (Profile::start_ns is the start).
struct KernelRecord {
  std::string name;  ///< demangled
  int64_t start_ns = 0, end_ns = 0;
  int device = 0;
  uint32_t stream = 0;  ///< CUPTI's stream id (one per CUDA stream of the device)
  int grid[3] = {0, 0, 0};
  int block[3] = {0, 0, 0};
  uint32_t correlation = 0;  ///< matches the ApiRecord of the launch
  int64_t duration_ns() const { return end_ns - start_ns; }
};

/// One copy (kind: "HtoD", "DtoH", "DtoD", "HtoH", "PtoP", ...) or memset (kind "memset") on the GPU.
struct TransferRecord {
  std::string kind;
  int64_t bytes = 0;
  int64_t start_ns = 0, end_ns = 0;
  int device = 0;
  uint32_t stream = 0;
  int64_t duration_ns() const { return end_ns - start_ns; }
};

/// One CUDA runtime or driver call of the host (launches, copies, memsets, synchronisations): host time.
struct ApiRecord {
  std::string name;  ///< e.g. cuLaunchKernel, cudaMemcpyAsync
  int64_t start_ns = 0, end_ns = 0;
  uint32_t thread = 0;  ///< the OS thread id
  uint32_t correlation = 0;
  int64_t duration_ns() const { return end_ns - start_ns; }
};

/// One closed `Range`.
struct RangeRecord {
  std::string name;
  int64_t start_ns = 0, end_ns = 0;
  uint32_t thread = 0;  ///< the OS thread id
  int depth = 0;        ///< how many ranges of the same thread were open around it
  int64_t duration_ns() const { return end_ns - start_ns; }
};

/// Maps a kernel name to a class ("gemm", "attention", "elementwise", ...) for Profile::summary.
using Classifier = std::function<std::string(std::string_view kernel_name)>;

/// The default classes: kiln's generated kernels (kiln_<op>_..., kiln_fused_..., kiln_<reduction>_...),
/// cuBLAS/CUTLASS, cuDNN and flash-attention names -> gemm, convolution, attention, normalization,
/// reduction, elementwise, copy, random, sort, or other. Throws nothing.
std::string default_classifier(std::string_view kernel_name);

/// What stop() recorded.
class Profile {
 public:
  int64_t start_ns = 0, stop_ns = 0;  ///< the session's ends, on the records' clock
  std::vector<KernelRecord> kernels;
  std::vector<TransferRecord> transfers;  ///< copies and memsets
  std::vector<ApiRecord> api_calls;
  std::vector<RangeRecord> ranges;
  /// Why GPU activity is missing, when it is (no CUPTI in this build, CPU-only build); empty otherwise.
  std::string gpu_note;

  /// Wall time between start() and stop(), in nanoseconds.
  int64_t wall_ns() const { return stop_ns - start_ns; }
  /// Nanoseconds in which at least one kernel, copy or memset ran on some GPU (overlaps counted once).
  int64_t gpu_busy_ns() const;
  /// Sum of the copies' bytes (memsets excluded).
  int64_t memcpy_bytes() const;

  /// A text table: kernels grouped by name (calls, total ms, % of kernel time, mean us), longest first;
  /// totals (GPU busy, wall, copies); kernels grouped by `classify` (none: no class table); host ranges
  /// and API calls grouped by name. `max_rows` limits each table (0: no limit). Throws nothing.
  std::string summary(const Classifier& classify = default_classifier, int max_rows = 30) const;
  /// The Chrome trace event format: a JSON array of complete events ("ph": "X", ts and dur in
  /// microseconds from start()), kernels, copies and memsets on the "GPU" process (a thread per device and
  /// stream), ranges and API calls on the "host" process (a thread per OS thread), plus name metadata.
  std::string chrome_trace() const;
  /// Writes chrome_trace() to `path` (atomically); throws ValueError naming the path when it cannot.
  void save_chrome_trace(const std::string& path) const;
};

/// Starts recording. Throws ValueError when a profiler is already active (stop() it first). On a GPU machine
/// where GPU activity cannot be recorded (a kiln built without CUPTI; CUPTI refusing: another profiler holds
/// it, profiling restricted to administrators) it records host ranges only, warns once on stderr, and the
/// Profile's gpu_note says why and how to fix it.
void start();
/// Stops recording and returns the profile. Synchronises every GPU first (kernels still queued at stop()
/// are recorded). Throws ValueError when no profiler is active (call start() first).
Profile stop();
/// True between start() and stop(). Thread-safe.
bool active();
/// The profile's clock in nanoseconds: CUPTI's timestamp while CUPTI records, else std::steady_clock.
int64_t now_ns();

/// A named host range, recorded when it closes if a profiler is active then and was active when it
/// opened (else nothing: costs one atomic read). Ranges nest per thread; any thread may open them.
class Range {
 public:
  explicit Range(std::string name);
  ~Range();
  Range(const Range&) = delete;
  Range& operator=(const Range&) = delete;

 private:
  std::string name_;
  int64_t start_ns_ = 0;
  uint64_t session_ = 0;  ///< 0: not recorded
  int depth_ = 0;
};

}  // namespace kiln::profiler
