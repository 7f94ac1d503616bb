// The step tracer (internal): while a thread traces a step for kiln::CompiledStep (kiln/compile.hpp), every op
// that thread hands a backend is run and recorded with its operands (the arrays by handle, so their storages
// live as long as the trace), and the host work of the core's CPU paths (indexing, sorting, range checks) is
// recorded as host steps. A replay runs the recorded calls again, in order, on the same storages.
//
// What cannot be replayed is refused while tracing, with a ValueError naming the op: reading an array's values
// on the host (item, tolist, a copy to the host), a draw from a user's own Generator, a raw kernel, and the
// backend calls whose results the host inspects (factorisations, recurrent layers).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/backend.hpp"
#include "core/fusion.hpp"
#include "kiln/array.hpp"
#include "kiln/random.hpp"

namespace kiln::detail {

class DeviceRuntime;

/// A recorded elementwise call with the arrays its pointers refer to (held without autograd metadata).
struct RecordedElementwise {
  ElementwiseCall call;
  std::array<Array, 3> in;
};

/// A recorded fused call (kiln::fuse's kernels, rows kernels) with its arrays and graph.
struct RecordedFused {
  FusionCall call;
  std::vector<Array> arrays;
  std::shared_ptr<const FusionGraph> graph;
};

/// A recorded product (backend matmul) with its arrays.
struct RecordedMatmul {
  MatmulCall call;
  Array a, b, bias, pre_gelu, gelu_grad_of;
};

/// One recorded op: what it was (for the comparison of two traces) and how to run it again.
struct TracedCall {
  std::string name;                  ///< "elementwise multiply", "matmul", "host: take", ...
  std::string detail;                ///< shapes, dtypes and scalar values, compared between traces
  std::vector<const Storage*> storages;  ///< every storage it reads or writes, in operand order
  /// The storages it writes, where the recorder names them (writes_known); otherwise any of `storages` may be.
  std::vector<const Storage*> written;
  bool writes_known = false;
  std::function<void()> replay;
  /// The structured form of an elementwise or fused call (else both null), which the step's fusion pass
  /// (fuse_step_trace) rewrites, and the backend that runs it.
  std::shared_ptr<RecordedElementwise> elementwise;
  std::shared_ptr<RecordedFused> fused;
  /// The structured form of a product (else null), which the fusion pass may give an epilogue.
  std::shared_ptr<RecordedMatmul> matmul;
  Backend* backend = nullptr;
};

class TracePool;

/// The record of one traced call of a step function.
///
/// Memory: the arrays a traced step makes come from the trace's own pool (TracePool), and the record refers to
/// each by an *alias* (a Storage over the same memory that frees nothing), not by the step's Storage. When the
/// step drops an array, as an eager step does, its memory goes back to the pool and later arrays of the same
/// step reuse it: a replay on the recorded memory needs about what one eager step needs at its peak, and the
/// pool keeps that memory for the replays. Memory that an array alive after the step (an output, an array the
/// user keeps) uses is never reused.
struct StepTrace {
  std::vector<TracedCall> calls;
  /// Storages allocated while tracing, by their aliases (the step's own intermediates and results).
  std::unordered_set<const Storage*> created;
  /// For each alias in `created`: the step's own storage, which expires when nothing outside the record holds
  /// it (the fusion pass may then leave its memory unwritten).
  std::unordered_map<const Storage*, std::weak_ptr<Storage>> made;
  /// While tracing: the alias of each storage the step made, keyed by the step's storage (live ones only).
  std::unordered_map<const Storage*, std::shared_ptr<Storage>> alias_of;
  /// Where the step's arrays were allocated while tracing (kept for the replays).
  std::shared_ptr<TracePool> pool;
  /// Keeps every recorded storage alive: the aliases of the step's arrays, and the arrays from before the step
  /// (parameters, optimizer state, the inputs) themselves.
  std::vector<std::shared_ptr<Storage>> keep;
  /// The default generator when the trace began and ended. A draw's blocks are recorded relative to `start`
  /// (every draw of a step must come from the default generator's stream past that point, directly or through a
  /// Generator set to its state, as attention's dropout does); a replay draws them relative to `replay_start`,
  /// which the replaying code sets to the generator's state first, and leaves the generator as far past it.
  random::GeneratorState start, end;
  std::shared_ptr<random::GeneratorState> replay_start = std::make_shared<random::GeneratorState>();
  /// While tracing: the recording wrapper of each real backend the step reached.
  std::map<Backend*, std::shared_ptr<Backend>> wrappers;
};

/// RAII: records the ops this thread runs into `trace` while alive. Nested tracing throws ValueError.
class StepTraceScope {
 public:
  explicit StepTraceScope(StepTrace& trace);
  ~StepTraceScope();
  StepTraceScope(const StepTraceScope&) = delete;
  StepTraceScope& operator=(const StepTraceScope&) = delete;
};

/// The trace this thread records into, outside a recorded call (nullptr: none).
StepTrace* active_step_trace();
/// The recording wrapper of `real` when this thread traces a step (outside a recorded call), else `real`.
Backend& traced_backend(Backend& real);
/// Runs `now` and, while a step is traced, records `replay` to run at each replay: for the core's own host loops
/// over CPU arrays (a gather, a sort, a range check) and the transfers, which no backend runs. `op` names it,
/// `arrays` are what it reads and writes. `replay` must not refer to anything of the caller's frame. Two traces
/// of one step must name their host steps alike (`op` may carry a digest of host data the step copied in).
void host_step(const std::string& op, std::vector<Array> arrays, const std::function<void()>& now,
               std::function<void()> replay);
/// Throws ValueError when a step is traced: `op` reads array values on the host, which a replay cannot repeat.
void refuse_host_read_while_tracing(const char* op);
/// The storage make_array gets while this thread traces a step: from the trace's pool (null when not tracing,
/// for pinned memory and for empty arrays: then the device's allocator).
std::shared_ptr<Storage> traced_allocate(DeviceRuntime& owner, int64_t nbytes, Device device,
                                         const ArrayOptions& options);
/// Notes a storage allocated now (make_array), for the trace's `created` set and its alias.
void note_allocation(const std::shared_ptr<Storage>& storage);
/// The alias of `real` when it is a storage the traced step made and still holds (else null).
const std::shared_ptr<Storage>* alias_for(const StepTrace& trace, const Storage* real);
/// `a` as the record holds it: over the alias of its storage when the traced step made it, else itself; either
/// way without autograd metadata.
Array recorded_array(const StepTrace& trace, const Array& a);
/// The most bytes the traced step's arrays held at once (its pool's high-water mark; 0 when it made none).
int64_t trace_memory_peak(const StepTrace& trace);
/// Whether the bytes of storages `a` and `b` overlap (two aliases of reused memory do).
bool same_memory(const Storage* a, const Storage* b);

/// The compiler's fusion pass over a finished trace (core/step_fusion.cpp): an elementwise call that reads the
/// whole result of the elementwise or fused call before it, where nothing else reads that result and nothing
/// outside the trace holds it, becomes part of that call: one kernel, the intermediate never written. Repeated
/// until no pair is left (chains collapse into one kernel). With `epilogues`, first a product whose result only
/// gelu_tanh's gradient reads takes that gradient as its epilogue where the backend folds it
/// (Backend::folds_gelu_grad). Returns the number of calls merged away.
int64_t fuse_step_trace(StepTrace& trace, bool epilogues = true);

}  // namespace kiln::detail
