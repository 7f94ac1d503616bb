// CPU executor of kiln::fuse (CpuBackend::fused): one pass over the arrays.
//
// The iteration is cut into blocks of at most kBlock elements along its innermost
// axis. For each block the graph's live nodes run in topological order, each into a
// small per-thread buffer of its own dtype, with the elementwise engine's kernels
// (cpu_kernel: same kernels, same libmvec SIMD rows, same conversions as the unfused
// ops), so every intermediate is stored, and float16/bfloat16 ones rounded, exactly
// as the unfused ops store them; no temporary is the size of the array. Arguments are
// read in place (strided, broadcast or transposed: the kernels take steps), weak
// scalars are step-0 operands. Outputs are written when the block is done, so an
// output that is the very view of an input is read before it is written, element by
// element.
//
// - Elementwise graphs: the core's plan (plan_elementwise, output 0 first: the unfused
//   op's order) split over the thread team by flat range; cpu_fused_range runs one range.
//   Outputs of kStreamBytes and more are computed into the buffers and streamed out with
//   non-temporal stores. On a CPU running the AVX-512 libmvec rows, runs of float32 nodes
//   that each read the one before (Segment) are evaluated in registers, eight vectors at a
//   time, each lane rounded as the node's kernel rounds it; a run's last value is stored
//   into its buffer or straight into its output.
// - Final reductions: each block's value goes into the CPU reduce's own loops
//   (select_kernels: double accumulators for float sums, 64-bit wrapping integer sums),
//   one accumulator per output or a row of them; split over a kept axis, or over a
//   reduced one with private accumulators combined afterwards, as reduce.cpp does.
// - Staged graphs (softmax, norms): rows (the reduced axes) split over threads; per row,
//   one pass per reduction (its input's nodes, reduced into a per-row scalar), then a pass
//   evaluating the tail and writing the outputs; a reduced-shape output once per row.
// Sums accumulate in the reduce kernels' partial order within each block, so they may
// differ from the unfused reduction in the last bits of the double accumulator (not
// bit-exact for rows longer than a block; see tests/core/test_fuse_cpu.cpp).
#include "cpu/fused.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <iterator>
#include <limits>
#include <vector>

#if defined(__SSE2__)
#include <immintrin.h>
#endif

#include "core/iteration.hpp"
#include "cpu/convert.hpp"
#include "cpu/elementwise.hpp"
#include "cpu/parallel.hpp"
#include "cpu/reduce_kernels.hpp"
#include "cpu/vector_math.hpp"

namespace kiln::cpu_impl {

namespace {

using detail::FusionCall;
using detail::FusionGraph;
using detail::FusionNode;
using detail::FusionNodeKind;
using detail::ReduceOp;

constexpr int64_t kBlock = 1024;
constexpr int kMaxOperands = 16;
constexpr int64_t kBufferBytes = kBlock * 8;  // one block of the widest dtype
// Outputs of an elementwise graph totalling this many bytes are written with non-temporal stores (stream_bytes):
// more than a core's share of a server's last-level cache, so the next op would not find them cached anyway,
// and a normal store first reads the line it writes (a pass over memory then moves 3 bytes per byte written,
// not 2, which puts it at 1.5x the copy floor before any arithmetic).
constexpr int64_t kStreamBytes = int64_t{32} << 20;
constexpr int kTemps = 4;  // conversion buffers: three inputs and an output
// Buffers sit 64 bytes past a multiple of 4 KiB from each other: at 4 KiB apart every buffer would map to
// the same L1 sets and loads would wait on stores to other buffers (4K aliasing), costing several times the
// chain's arithmetic.
constexpr int64_t kBufferStride = kBufferBytes + 64;

/// A node's value over the current block: elements `step` apart (in its dtype), 0 for one value.
struct Value {
  char* ptr = nullptr;
  int64_t step = 0;
};

/// How one live node runs.
struct Step {
  int node = -1;
  FusionNodeKind kind = FusionNodeKind::Op;
  DType dtype = DType::Bool;  ///< the value's storage dtype
  int operand = -1;           ///< Argument: its operand (outputs first, then array arguments)
  bool materialize = false;   ///< Argument copied to its buffer (an out= aliasing an input writes before it is read)
  int output = -1;            ///< Op/Cast: the output operand it writes straight into, else -1
  ElementwiseKernel fn = nullptr;
  int num_inputs = 0;
  int inputs[3] = {-1, -1, -1};
  int slots[3] = {-1, -1, -1};
  DType kernel_in[3] = {DType::Bool, DType::Bool, DType::Bool};
  DType kernel_out = DType::Bool;
  int64_t buffer = -1;  ///< byte offset of the node's buffer in the scratch
};

/// How a float32 node of a register segment computes one lane: as its kernel's scalar expression rounds (one IEEE
/// operation), or through its libmvec row (the contiguous float32 kernels' own routine).
enum class LaneOp : unsigned char { Add, Subtract, Multiply, Divide, Negative, Routine };

constexpr int kMaxSegment = 8;

/// A run of float32 steps, consecutive in p.all, evaluated on vectors of 16 lanes in registers: each step after
/// the first reads the value of the one before it (its only reader, not an output) as one or both inputs; the
/// other inputs are slots or values read in place. Only the last step's value is stored, into its buffer or
/// straight into an output.
struct Segment {
  int first = 0;  ///< position in p.all of its first step
  int count = 0;
  int output = -1;  ///< the float32 output operand the last value may be stored into, else -1
  LaneOp ops[kMaxSegment] = {};
  bool chain[kMaxSegment][2] = {};  ///< per step and input: the previous step's value
  alignas(64) float slots[kMaxSegment][2][16] = {};  ///< slot inputs, one value in every lane
#ifdef KILN_VECTOR_MATH
  __m512 (*routines[kMaxSegment])(__m512) = {};  ///< LaneOp::Routine: the op's AVX-512 libmvec routine
#endif
};

/// A reduction node's kernels: of the CPU reduce, over the input's dtype.
struct Reducer {
  int node = -1;
  ReduceKernels kernels{};
  bool mean = false;
  std::vector<int> steps;  ///< staged: the steps that compute its input (earlier reductions are values)
};

struct Program {
  const FusionCall* call = nullptr;
  const FusionGraph* g = nullptr;
  int num_outputs = 0;
  int num_operands = 0;
  const Array* arrays[kMaxOperands] = {};
  std::vector<Step> steps;   ///< every live node but weak ones, in topological order
  std::vector<int> step_of;  ///< per node: its index in steps, or -1
  std::vector<int> all;      ///< elementwise and classic: the steps of every non-reduce node
  std::vector<int> tail;     ///< staged: the steps the outputs need (reductions are values)
  std::vector<Reducer> reducers;
  std::vector<std::array<unsigned char, 16>> slots;  ///< each slot's value in its kernel dtype
  std::vector<DType> slot_dtypes;
  int64_t scratch_bytes = 0;
  bool stream = false;  ///< outputs leave the buffers with non-temporal stores (stream_bytes)
  std::vector<Segment> segments;  ///< elementwise graphs on a CPU with the AVX-512 rows: runs of p.all in registers
  std::vector<int> segment_at;    ///< per position in p.all: the segment starting there, or -1
};

template <class T>
void store(unsigned char* dst, const Scalar& s) {
  const T v = s.to<T>();
  std::memcpy(dst, &v, sizeof(T));
}

/// dst[0, bytes) = src[0, bytes) with non-temporal stores where dst is 16-byte aligned.
void stream_bytes(char* dst, const char* src, int64_t bytes) {
#if defined(__SSE2__)
  int64_t i = std::min<int64_t>(bytes, static_cast<int64_t>(-reinterpret_cast<uintptr_t>(dst) & 15));
  std::memcpy(dst, src, static_cast<size_t>(i));
  for (; i + 16 <= bytes; i += 16)
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i), _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i)));
  std::memcpy(dst + i, src + i, static_cast<size_t>(bytes - i));
#else
  std::memcpy(dst, src, static_cast<size_t>(bytes));
#endif
}

/// Orders this thread's non-temporal stores before what follows (the end of its part of a parallel loop).
void stream_fence() {
#if defined(__SSE2__)
  _mm_sfence();
#endif
}

/// The steps that the `roots` need, in order, stopping at reductions (values by then) and weak nodes.
std::vector<int> steps_for(const Program& p, const std::vector<int>& roots) {
  std::vector<bool> need(p.g->nodes.size(), false);
  for (int r : roots) need[static_cast<size_t>(r)] = true;
  std::vector<int> list;
  for (size_t i = p.g->nodes.size(); i-- > 0;) {
    if (!need[i]) continue;
    const FusionNode& n = p.g->nodes[i];
    if (n.weak || n.kind == FusionNodeKind::Reduce) continue;
    for (int k = 0; k < n.num_inputs; ++k) need[static_cast<size_t>(n.inputs[k])] = true;
  }
  for (size_t i = 0; i < p.g->nodes.size(); ++i)
    if (need[i] && p.step_of[i] >= 0 && p.g->nodes[i].kind != FusionNodeKind::Reduce) list.push_back(p.step_of[i]);
  return list;
}

/// Gives the steps of p.all (one pass per block) buffers that are reused once their value's last reader has run,
/// so a block's working set is the live values' buffers, not one per node (a chain of ten float32 nodes would
/// touch 40 KiB a block, more than most cores' L1 data cache, and every node would read and write L2).
/// The roots keep theirs to the end of the block. Returns the bytes of buffers used.
int64_t share_buffers(Program& p, const std::vector<int>& roots) {
  constexpr int kKept = std::numeric_limits<int>::max();
  std::vector<int> last(p.steps.size(), -1);  // per step: the position in p.all of its value's last reader
  for (size_t pos = 0; pos < p.all.size(); ++pos) {
    const Step& s = p.steps[static_cast<size_t>(p.all[pos])];
    for (int k = 0; k < s.num_inputs; ++k) {
      if (s.slots[k] >= 0 || s.inputs[k] < 0) continue;
      const int in = p.step_of[static_cast<size_t>(s.inputs[k])];
      if (in >= 0) last[static_cast<size_t>(in)] = std::max(last[static_cast<size_t>(in)], static_cast<int>(pos));
    }
  }
  for (int root : roots) {
    const int r = p.step_of[static_cast<size_t>(root)];
    if (r >= 0) last[static_cast<size_t>(r)] = kKept;
  }
  std::vector<int64_t> free_buffers;
  int64_t used = 0;
  for (size_t pos = 0; pos < p.all.size(); ++pos) {
    Step& s = p.steps[static_cast<size_t>(p.all[pos])];
    if (s.kind == FusionNodeKind::Argument && !s.materialize) {
      s.buffer = -1;  // read in place
    } else if (free_buffers.empty()) {
      s.buffer = used;
      used += kBufferStride;
    } else {
      s.buffer = free_buffers.back();
      free_buffers.pop_back();
    }
    // Inputs whose last reader this step is give their buffers back after it (a kernel never writes the buffer
    // it reads: conversions and broadcast reads go through other buffers).
    for (int k = 0; k < s.num_inputs; ++k) {
      if (s.slots[k] >= 0 || s.inputs[k] < 0) continue;
      const int in = p.step_of[static_cast<size_t>(s.inputs[k])];
      if (in < 0 || last[static_cast<size_t>(in)] != static_cast<int>(pos)) continue;
      Step& source = p.steps[static_cast<size_t>(in)];
      if (source.buffer >= 0) free_buffers.push_back(source.buffer);
      last[static_cast<size_t>(in)] = -1;  // an op reading one value twice gives its buffer back once
    }
  }
  return used;
}

#ifdef KILN_VECTOR_MATH
/// How step `s` runs lane by lane, or false when it cannot: a float32 op on float32 inputs whose kernel is one
/// IEEE operation per element, or a unary op with a libmvec row.
bool lane_op(const Program& p, const Step& s, LaneOp& op) {
  if (s.kind != FusionNodeKind::Op || s.dtype != DType::Float32 || s.kernel_out != DType::Float32) return false;
  for (int k = 0; k < s.num_inputs; ++k) {
    const DType in = s.slots[k] >= 0 ? p.slot_dtypes[static_cast<size_t>(s.slots[k])]
                                     : p.g->nodes[static_cast<size_t>(s.inputs[k])].dtype;
    if (in != DType::Float32 || s.kernel_in[k] != DType::Float32) return false;
  }
  const OpCode code = p.g->nodes[static_cast<size_t>(s.node)].op;
  switch (code) {
    case OpCode::Add: op = LaneOp::Add; break;
    case OpCode::Subtract: op = LaneOp::Subtract; break;
    case OpCode::Multiply: op = LaneOp::Multiply; break;
    case OpCode::Divide: op = LaneOp::Divide; break;
    case OpCode::Negative: op = LaneOp::Negative; break;
    default:
      if (detail::op_info(code).arity != 1 || vector_math_f32(code).avx512 == nullptr) return false;
      op = LaneOp::Routine;
      break;
  }
  return s.num_inputs == (op == LaneOp::Negative || op == LaneOp::Routine ? 1 : 2);
}

/// Cuts p.all (an elementwise graph's steps) into register segments (Segment), maximal runs of lane ops each
/// reading the value before it, which has no other reader.
void plan_segments(Program& p) {
  const FusionGraph& g = *p.g;
  std::vector<int> readers(g.nodes.size(), 0);
  for (int index : p.all) {
    const Step& s = p.steps[static_cast<size_t>(index)];
    for (int k = 0; k < s.num_inputs; ++k) {
      const bool again = k == 1 && s.slots[0] < 0 && s.inputs[0] == s.inputs[1];  // x * x reads x once
      if (s.slots[k] < 0 && s.inputs[k] >= 0 && !again) ++readers[static_cast<size_t>(s.inputs[k])];
    }
  }
  for (int node : g.outputs) ++readers[static_cast<size_t>(node)];  // an output is read after the block
  p.segment_at.assign(p.all.size(), -1);
  Segment* open = nullptr;
  for (size_t pos = 0; pos < p.all.size(); ++pos) {
    const Step& s = p.steps[static_cast<size_t>(p.all[pos])];
    LaneOp op{};
    if (!lane_op(p, s, op)) {
      open = nullptr;
      continue;
    }
    bool chain[2] = {false, false};
    if (open && open->count < kMaxSegment) {
      const Step& prev = p.steps[static_cast<size_t>(p.all[pos - 1])];
      for (int k = 0; k < s.num_inputs; ++k) chain[k] = s.slots[k] < 0 && s.inputs[k] == prev.node;
      if (!(chain[0] || chain[1]) || readers[static_cast<size_t>(prev.node)] != 1) open = nullptr;
    } else {
      open = nullptr;
    }
    if (!open) {
      chain[0] = chain[1] = false;
      p.segment_at[pos] = static_cast<int>(p.segments.size());
      open = &p.segments.emplace_back();
      open->first = static_cast<int>(pos);
    }
    const int i = open->count++;
    open->ops[i] = op;
    if (op == LaneOp::Routine) open->routines[i] = vector_math_f32(g.nodes[static_cast<size_t>(s.node)].op).avx512;
    for (int k = 0; k < s.num_inputs; ++k) {
      open->chain[i][k] = chain[k];
      if (s.slots[k] < 0) continue;
      float value;
      std::memcpy(&value, p.slots[static_cast<size_t>(s.slots[k])].data(), sizeof value);
      std::fill(std::begin(open->slots[i][k]), std::end(open->slots[i][k]), value);
    }
  }
  // The last value may go straight into an output of its dtype (not when an out= aliases an input: an output
  // is then written only after the block's inputs are read).
  for (Segment& seg : p.segments) {
    const int node = p.steps[static_cast<size_t>(p.all[static_cast<size_t>(seg.first + seg.count - 1)])].node;
    for (int k = 0; k < p.num_outputs && seg.output < 0 && !p.call->aliased; ++k)
      if (g.outputs[static_cast<size_t>(k)] == node && p.arrays[k]->dtype() == DType::Float32) seg.output = k;
  }
}
#endif

/// Plans `call`; false when the executor declines it.
bool make_program(const FusionCall& call, Program& p) {
  const FusionGraph& g = *call.graph;
  p.call = &call;
  p.g = &g;
  p.num_outputs = static_cast<int>(call.outs.size());
  std::vector<int> operand_of_argument(call.arrays.size(), -1);
  int operands = p.num_outputs;
  for (size_t a = 0; a < call.arrays.size(); ++a)
    if (call.arrays[a]) operand_of_argument[a] = operands++;
  if (operands > kMaxOperands) return false;
  p.num_operands = operands;
  for (int k = 0; k < p.num_outputs; ++k) p.arrays[k] = &call.outs[static_cast<size_t>(k)];
  for (size_t a = 0; a < call.arrays.size(); ++a)
    if (call.arrays[a]) p.arrays[operand_of_argument[a]] = call.arrays[a];

  for (size_t j = 0; j < g.slots.size(); ++j) {
    const DType t = g.slots[j].argument_dtype;
    std::array<unsigned char, 16> bytes{};
    if (g.live[static_cast<size_t>(g.slots[j].user)])
      visit_dtype(t, [&](auto tag) { store<decltype(tag)>(bytes.data(), call.slot_values[j]); });
    p.slots.push_back(bytes);
    p.slot_dtypes.push_back(t);
  }
  const bool elementwise = g.reductions.empty();
  if (elementwise) {
    int64_t bytes = 0;
    for (int k = 0; k < p.num_outputs; ++k) bytes += p.arrays[k]->size() * itemsize(p.arrays[k]->dtype());
    p.stream = bytes >= kStreamBytes;
  }
  p.step_of.assign(g.nodes.size(), -1);
  int64_t buffers = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const FusionNode& n = g.nodes[i];
    if (n.weak || !g.live[i]) continue;
    Step s;
    s.node = static_cast<int>(i);
    s.kind = n.kind;
    s.dtype = n.dtype;
    s.num_inputs = n.num_inputs;
    for (int k = 0; k < n.num_inputs; ++k) {
      s.inputs[k] = n.inputs[k];
      s.slots[k] = n.slots[k];
    }
    const bool is_output = std::find(g.outputs.begin(), g.outputs.end(), s.node) != g.outputs.end();
    switch (n.kind) {
      case FusionNodeKind::Argument:
        s.operand = operand_of_argument[static_cast<size_t>(n.argument)];
        if (s.operand < 0) return false;
        s.materialize = call.aliased && is_output;
        break;
      case FusionNodeKind::Constant:
        return false;  // constants are weak
      case FusionNodeKind::Cast:
        break;
      case FusionNodeKind::Op: {
        s.fn = cpu_kernel(n.op, n.compute);
        if (!s.fn) return false;
        const DType compute = compute_dtype(n.compute);
        for (int k = 0; k < n.num_inputs; ++k)
          s.kernel_in[k] = n.op == detail::OpCode::Where && k == 0 ? DType::Bool : compute;
        s.kernel_out = detail::returns_bool(n.op) ? DType::Bool : compute;
        break;
      }
      case FusionNodeKind::Reduce: {
        Reducer r;
        r.node = s.node;
        r.mean = n.reduction == ReduceOp::Mean;
        switch (n.reduction) {
          case ReduceOp::Sum:
          case ReduceOp::Prod:
          case ReduceOp::Max:
          case ReduceOp::Min:
          case ReduceOp::All:
          case ReduceOp::Any:
          case ReduceOp::Mean:
            break;
          default:
            return false;
        }
        const DType in = g.nodes[static_cast<size_t>(n.inputs[0])].dtype;
        const DType out = r.mean ? DType::Float64 : g.reduce >= 0 ? call.outs[0].dtype() : n.dtype;
        r.kernels = select_kernels(r.mean ? ReduceOp::Sum : n.reduction, in, out);
        p.reducers.push_back(std::move(r));
        break;
      }
    }
    if (elementwise && is_output && !call.aliased && !p.stream && n.kind != FusionNodeKind::Argument)
      for (int k = 0; k < p.num_outputs && s.output < 0; ++k)
        if (g.outputs[static_cast<size_t>(k)] == s.node) s.output = k;
    s.buffer = buffers;
    buffers += kBufferStride;
    p.step_of[i] = static_cast<int>(p.steps.size());
    p.steps.push_back(s);
  }
  if (g.staged) {
    for (Reducer& r : p.reducers) r.steps = steps_for(p, {g.nodes[static_cast<size_t>(r.node)].inputs[0]});
    p.tail = steps_for(p, g.outputs);
  } else {
    const std::vector<int> roots = g.reduce >= 0 ? std::vector<int>{g.elementwise} : g.outputs;
    p.all = steps_for(p, roots);
    buffers = share_buffers(p, roots);
#ifdef KILN_VECTOR_MATH
    if (elementwise && kVectorMathAvx512) plan_segments(p);
#endif
  }
  p.scratch_bytes = buffers + kTemps * kBufferStride;
  return true;
}

/// Per-thread scratch: the nodes' buffers, then the conversion buffers.
char* scratch(int64_t bytes) {
  thread_local std::vector<uint64_t> memory;
  const size_t words = static_cast<size_t>((bytes + 64 + 7) / 8);
  if (memory.size() < words) memory.resize(words);
  const uintptr_t start = reinterpret_cast<uintptr_t>(memory.data());
  return reinterpret_cast<char*>((start + 63) & ~uintptr_t{63});  // cache-line aligned rows
}

/// The next block's cache lines of each contiguous input operand, asked for a few at a time while the current
/// block is computed (evaluate issues kPrefetchLinesPerStep after each node, the walk the rest after the block).
/// A block is one 4 KiB page of float32 and the hardware prefetcher stops at page boundaries, so without this
/// every block would start with demand misses of its first node. Asked for all at once at the block's start,
/// the 64 lines of a float32 block queue behind the core's few line-fill buffers and hold up the node that asks
/// (a few at a time between nodes measured faster: bench/results/session21-h200-2026-11-28.md).
struct PendingPrefetch {
  const char* next[kMaxOperands + 1];
  int64_t bytes[kMaxOperands + 1];
  int count = 0;  ///< operands with lines to ask for
  int current = 0;
  int64_t offset = 0;
};
constexpr int64_t kPrefetchLinesPerStep = 8;

inline void prefetch_lines(PendingPrefetch& q, int64_t lines) {
  while (lines > 0 && q.current < q.count) {
    if (q.offset >= q.bytes[q.current]) {
      ++q.current;
      q.offset = 0;
      continue;
    }
    __builtin_prefetch(q.next[q.current] + q.offset, 0, 3);
    q.offset += 64;
    --lines;
  }
}

/// Runs step `s` over one block of `n` elements (operand k at ptrs[k], steps[k] elements apart) into `values`.
void evaluate_step(const Program& p, const Step& s, char* const* ptrs, const int64_t* steps, int64_t n,
                   char* scratch, Value* values) {
  const FusionGraph& g = *p.g;
  char* temps = scratch + p.scratch_bytes - kTemps * kBufferStride;
  char* buffer = s.buffer >= 0 ? scratch + s.buffer : nullptr;  // none: an argument read in place
  Value& v = values[s.node];
  if (s.kind == FusionNodeKind::Argument) {
    v = {ptrs[s.operand], steps[s.operand]};
    if (s.materialize) {
      convert(v.ptr, s.dtype, v.step, buffer, s.dtype, 1, n);
      v = {buffer, 1};
    }
    return;
  }
  // Inputs: a step-0 operand (a slot, a broadcast or per-row value) is read as one element.
  const void* in_ptr[3];
  int64_t in_step[3];
  DType in_dtype[3];
  bool uniform = true;
  for (int k = 0; k < s.num_inputs; ++k) {
    if (s.slots[k] >= 0) {
      in_ptr[k] = p.slots[static_cast<size_t>(s.slots[k])].data();
      in_step[k] = 0;
      in_dtype[k] = p.slot_dtypes[static_cast<size_t>(s.slots[k])];
    } else {
      const Value& in = values[s.inputs[k]];
      in_ptr[k] = in.ptr;
      in_step[k] = in.step;
      in_dtype[k] = g.nodes[static_cast<size_t>(s.inputs[k])].dtype;
    }
    uniform = uniform && in_step[k] == 0;
  }
  // One value for the whole block when every input is one (write_output then fills the output row).
  const int64_t count = uniform ? 1 : n;
  const bool to_output = s.output >= 0 && !uniform;
  char* dst = to_output ? ptrs[s.output] : buffer;
  const int64_t dst_step = to_output ? steps[s.output] : 1;
  if (s.kind == FusionNodeKind::Cast) {
    convert(in_ptr[0], in_dtype[0], in_step[0], dst, s.dtype, dst_step, count);
  } else {
    char* kernel_ptrs[4];
    int64_t kernel_steps[4];
    for (int k = 0; k < s.num_inputs; ++k) {
      if (in_dtype[k] == s.kernel_in[k]) {
        kernel_ptrs[k + 1] = const_cast<char*>(static_cast<const char*>(in_ptr[k]));
        kernel_steps[k + 1] = in_step[k];
      } else {
        char* temp = temps + k * kBufferStride;
        const int64_t converted = in_step[k] == 0 ? 1 : count;
        convert(in_ptr[k], in_dtype[k], in_step[k], temp, s.kernel_in[k], 1, converted);
        kernel_ptrs[k + 1] = temp;
        kernel_steps[k + 1] = in_step[k] == 0 ? 0 : 1;
      }
    }
    const bool direct = s.kernel_out == s.dtype;
    kernel_ptrs[0] = direct ? dst : temps + 3 * kBufferStride;
    kernel_steps[0] = direct ? dst_step : 1;
    // A single value goes through the contiguous path (libmvec for float32), as the unfused op's small
    // array would.
    if (count == 1)
      for (int k = 0; k <= s.num_inputs; ++k) kernel_steps[k] = 1;
    s.fn(kernel_ptrs, kernel_steps, count);
    if (!direct) convert(kernel_ptrs[0], s.kernel_out, 1, dst, s.dtype, dst_step, count);
  }
  v = to_output ? Value{ptrs[s.output], steps[s.output]} : Value{buffer, count == 1 && n > 1 ? 0 : 1};
}

#ifdef KILN_VECTOR_MATH
/// One input of a segment's step over the block: contiguous (mask all ones: element i at ptr + i), or 16 copies
/// of one value (mask 0).
struct LaneInput {
  const float* ptr;
  int64_t mask;
};

/// A segment's step over one block.
struct LaneStep {
  LaneOp op;
  bool chain[2];
  LaneInput in[2];
  __m512 (*routine)(__m512);
};

/// Input `k` of step `s` at vector j of the K from element i (masked: the lanes of `mask`, the others zero).
template <bool Masked>
__attribute__((target("avx512f"), always_inline)) inline __m512 lane_load(const LaneStep& s, int k, int64_t i,
                                                                           int j, __mmask16 mask) {
  const float* at = s.in[k].ptr + ((i + 16 * j) & s.in[k].mask);
  return Masked ? _mm512_maskz_loadu_ps(mask, at) : _mm512_loadu_ps(at);
}

// The binary lane ops: one IEEE operation each, as the scalar kernels round.
struct LaneAdd {
  __attribute__((target("avx512f"), always_inline)) __m512 operator()(__m512 a, __m512 b) const {
    return _mm512_add_ps(a, b);
  }
};
struct LaneSubtract {
  __attribute__((target("avx512f"), always_inline)) __m512 operator()(__m512 a, __m512 b) const {
    return _mm512_sub_ps(a, b);
  }
};
struct LaneMultiply {
  __attribute__((target("avx512f"), always_inline)) __m512 operator()(__m512 a, __m512 b) const {
    return _mm512_mul_ps(a, b);
  }
};
struct LaneDivide {
  __attribute__((target("avx512f"), always_inline)) __m512 operator()(__m512 a, __m512 b) const {
    return _mm512_div_ps(a, b);
  }
};

/// v[j] = op(a, b) over the K vectors, a and b the previous values v or loads. Every loop over the K vectors is
/// unrolled in full, so the vectors stay in registers between steps (only a libmvec call spills them).
template <int K, bool Masked, class Op>
__attribute__((target("avx512f"), always_inline)) inline void lane_binary(const LaneStep& s, int64_t i,
                                                                           __mmask16 mask, __m512* v, Op op) {
  if (s.chain[0] && s.chain[1]) {
#pragma GCC unroll 16
    for (int j = 0; j < K; ++j) v[j] = op(v[j], v[j]);
  } else if (s.chain[0]) {
#pragma GCC unroll 16
    for (int j = 0; j < K; ++j) v[j] = op(v[j], lane_load<Masked>(s, 1, i, j, mask));
  } else if (s.chain[1]) {
#pragma GCC unroll 16
    for (int j = 0; j < K; ++j) v[j] = op(lane_load<Masked>(s, 0, i, j, mask), v[j]);
  } else {
#pragma GCC unroll 16
    for (int j = 0; j < K; ++j) v[j] = op(lane_load<Masked>(s, 0, i, j, mask), lane_load<Masked>(s, 1, i, j, mask));
  }
}

/// The segment's last value over K vectors from element i, each step applied to all K before the next (its
/// dispatch paid once per K vectors). Masked: K is 1, the lanes of `mask`, the others computed on zeros.
template <int K, bool Masked>
__attribute__((target("avx512f"), always_inline)) inline void lane_chunk(const LaneStep* steps, int count,
                                                                          int64_t i, __mmask16 mask, __m512* v) {
  for (int k = 0; k < count; ++k) {
    const LaneStep& s = steps[k];
    switch (s.op) {
      case LaneOp::Routine:
        if (!s.chain[0]) {
#pragma GCC unroll 16
          for (int j = 0; j < K; ++j) v[j] = lane_load<Masked>(s, 0, i, j, mask);
        }
#pragma GCC unroll 16
        for (int j = 0; j < K; ++j) v[j] = s.routine(v[j]);
        break;
      case LaneOp::Negative: {
        const __m512i sign = _mm512_set1_epi32(INT32_MIN);
        if (!s.chain[0]) {
#pragma GCC unroll 16
          for (int j = 0; j < K; ++j) v[j] = lane_load<Masked>(s, 0, i, j, mask);
        }
#pragma GCC unroll 16
        for (int j = 0; j < K; ++j) v[j] = _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(v[j]), sign));
        break;
      }
      case LaneOp::Add:
        lane_binary<K, Masked>(s, i, mask, v, LaneAdd{});
        break;
      case LaneOp::Subtract:
        lane_binary<K, Masked>(s, i, mask, v, LaneSubtract{});
        break;
      case LaneOp::Multiply:
        lane_binary<K, Masked>(s, i, mask, v, LaneMultiply{});
        break;
      case LaneOp::Divide:
        lane_binary<K, Masked>(s, i, mask, v, LaneDivide{});
        break;
    }
  }
}

constexpr int kLaneChunk = 8;  ///< vectors a segment's step is applied to at a time

/// dst[0, n) = the segment's last value; non-temporal stores when `stream` (dst 64-byte aligned). The next
/// block's input lines are asked for as the chunks go (PendingPrefetch).
__attribute__((target("avx512f"))) void run_lanes(const LaneStep* steps, int count, float* dst, bool stream,
                                                  int64_t n, PendingPrefetch& q) {
  int64_t i = 0;
  __m512 v[kLaneChunk] = {};
  for (; i + 16 * kLaneChunk <= n; i += 16 * kLaneChunk) {
    lane_chunk<kLaneChunk, false>(steps, count, i, 0xFFFF, v);
    for (int j = 0; j < kLaneChunk; ++j) {
      if (stream)
        _mm512_stream_ps(dst + i + 16 * j, v[j]);
      else
        _mm512_storeu_ps(dst + i + 16 * j, v[j]);
    }
    prefetch_lines(q, kLaneChunk);
  }
  for (; i + 16 <= n; i += 16) {
    lane_chunk<1, false>(steps, count, i, 0xFFFF, v);
    if (stream)
      _mm512_stream_ps(dst + i, v[0]);
    else
      _mm512_storeu_ps(dst + i, v[0]);
  }
  if (i < n) {  // the other lanes compute on zeros, as the libmvec rows' own tails do
    const __mmask16 mask = static_cast<__mmask16>((1u << (n - i)) - 1);
    lane_chunk<1, true>(steps, count, i, mask, v);
    _mm512_mask_storeu_ps(dst + i, mask, v[0]);
  }
}

/// Runs segment `seg` over one block in registers; false (nothing done) when an input is neither contiguous
/// nor one value, or its last step writes a strided output itself (then its kernel's strided path decides).
bool evaluate_segment(const Program& p, const Segment& seg, char* const* ptrs, const int64_t* steps, int64_t n,
                      char* scratch, Value* values, PendingPrefetch& queue) {
  LaneStep lanes[kMaxSegment];
  alignas(64) float fills[kMaxSegment][2][16];
  for (int i = 0; i < seg.count; ++i) {
    const Step& s = p.steps[static_cast<size_t>(p.all[static_cast<size_t>(seg.first + i)])];
    LaneStep& lane = lanes[i];
    lane.op = seg.ops[i];
    lane.routine = seg.routines[i];
    lane.chain[0] = lane.chain[1] = false;
    for (int k = 0; k < s.num_inputs; ++k) {
      lane.chain[k] = seg.chain[i][k];
      if (lane.chain[k]) continue;
      if (s.slots[k] >= 0) {
        lane.in[k] = {seg.slots[i][k], 0};
        continue;
      }
      const Value& in = values[s.inputs[k]];
      if (in.step == 1) {
        lane.in[k] = {reinterpret_cast<const float*>(in.ptr), -1};
      } else if (in.step == 0) {
        float value;
        std::memcpy(&value, in.ptr, sizeof value);
        std::fill(std::begin(fills[i][k]), std::end(fills[i][k]), value);
        lane.in[k] = {fills[i][k], 0};
      } else {
        return false;
      }
    }
  }
  const Step& last = p.steps[static_cast<size_t>(p.all[static_cast<size_t>(seg.first + seg.count - 1)])];
  if (last.output >= 0 && steps[last.output] != 1) return false;
  float* dst = reinterpret_cast<float*>(scratch + last.buffer);
  bool stream = false;
  if (seg.output >= 0 && steps[seg.output] == 1) {
    char* out = ptrs[seg.output];
    const bool aligned = (reinterpret_cast<uintptr_t>(out) & 63) == 0;
    if (!p.stream || aligned) {
      dst = reinterpret_cast<float*>(out);
      stream = p.stream;
    }
  }
  run_lanes(lanes, seg.count, dst, stream, n, queue);
  values[last.node] = {reinterpret_cast<char*>(dst), 1};
  return true;
}
#endif

/// Runs p.all over one block of an elementwise graph: register segments where it has them, else step by step.
void evaluate_elementwise(const Program& p, char* const* ptrs, const int64_t* steps, int64_t n, char* scratch,
                          Value* values, PendingPrefetch& queue) {
  for (size_t pos = 0; pos < p.all.size(); ++pos) {
#ifdef KILN_VECTOR_MATH
    if (!p.segment_at.empty() && p.segment_at[pos] >= 0) {
      const Segment& seg = p.segments[static_cast<size_t>(p.segment_at[pos])];
      if (evaluate_segment(p, seg, ptrs, steps, n, scratch, values, queue)) {
        pos += static_cast<size_t>(seg.count - 1);
        continue;
      }
    }
#endif
    const Step& s = p.steps[static_cast<size_t>(p.all[pos])];
    evaluate_step(p, s, ptrs, steps, n, scratch, values);
    if (s.kind != FusionNodeKind::Argument) prefetch_lines(queue, kPrefetchLinesPerStep);
  }
}

/// Runs `list` over one block of `n` elements (operand k at ptrs[k], steps[k] elements apart) into `values`.
void evaluate(const Program& p, const std::vector<int>& list, char* const* ptrs, const int64_t* steps, int64_t n,
              char* scratch, Value* values, PendingPrefetch& queue) {
  for (int index : list) {
    const Step& s = p.steps[static_cast<size_t>(index)];
    evaluate_step(p, s, ptrs, steps, n, scratch, values);
    if (s.kind != FusionNodeKind::Argument) prefetch_lines(queue, kPrefetchLinesPerStep);
  }
}

/// Writes output k's value over the block (unless its node wrote it directly), `n` elements.
void write_output(const Program& p, int k, const Value* values, char* ptr, int64_t step, int64_t n) {
  const int node = p.g->outputs[static_cast<size_t>(k)];
  const Value& v = values[node];
  if (v.ptr == ptr && v.step == step) return;  // the node wrote its value into this output row
  const DType dtype = p.arrays[k]->dtype();
  if (p.stream && v.step == 1 && step == 1 && p.g->nodes[static_cast<size_t>(node)].dtype == dtype)
    return stream_bytes(ptr, v.ptr, n * itemsize(dtype));
  convert(v.ptr, p.g->nodes[static_cast<size_t>(node)].dtype, v.step, ptr, p.arrays[k]->dtype(), step, n);
}

// ---------------------------------------------------------------- walking axes

/// Axes to walk, outermost first, with each operand's element strides (and any extra operand: accumulators).
struct Walk {
  int ndim = 0;
  int operands = 0;
  int64_t shape[kMaxRank];
  int64_t strides[kMaxOperands + 1][kMaxRank];
  char* base[kMaxOperands + 1];
  int64_t itemsize[kMaxOperands + 1];
  int first_input = 0;  ///< operands before this one are outputs (not prefetched)
};

/// Sets up the next block's prefetches (PendingPrefetch) of the block of `n` elements at ptrs.
inline void plan_prefetch(PendingPrefetch& q, const Walk& w, char* const* ptrs, const int64_t* steps, int64_t n) {
  q.count = 0;
  q.current = 0;
  q.offset = 0;
  for (int k = w.first_input; k < w.operands; ++k) {
    if (steps[k] != 1) continue;
    q.next[q.count] = ptrs[k] + n * w.itemsize[k];
    q.bytes[q.count] = n * w.itemsize[k];
    ++q.count;
  }
}

/// Calls block(ptrs, steps, n) over flat elements [begin, end) of `w` (C order over its axes), in runs of the
/// innermost axis cut to kBlock.
template <class F>
void walk(const Walk& w, int64_t begin, int64_t end, F&& block) {
  PendingPrefetch queue;
  const int nd = w.ndim;
  const int64_t inner = w.shape[nd - 1];
  int64_t idx[kMaxRank] = {};
  int64_t rest = begin / inner;
  for (int d = nd - 2; d >= 0; --d) {
    idx[d] = rest % w.shape[d];
    rest /= w.shape[d];
  }
  int64_t col = begin % inner;
  char* ptrs[kMaxOperands + 1];
  int64_t steps[kMaxOperands + 1];
  for (int k = 0; k < w.operands; ++k) steps[k] = w.strides[k][nd - 1];
  for (int64_t pos = begin; pos < end;) {
    const int64_t len = std::min(inner - col, end - pos);
    for (int k = 0; k < w.operands; ++k) {
      int64_t offset = col * w.strides[k][nd - 1];
      for (int d = 0; d < nd - 1; ++d) offset += idx[d] * w.strides[k][d];
      ptrs[k] = w.base[k] + offset * w.itemsize[k];
    }
    for (int64_t done = 0; done < len;) {
      const int64_t n = std::min(kBlock, len - done);
      plan_prefetch(queue, w, ptrs, steps, n);
      block(ptrs, steps, n, queue);
      prefetch_lines(queue, std::numeric_limits<int64_t>::max());
      for (int k = 0; k < w.operands; ++k) ptrs[k] += n * steps[k] * w.itemsize[k];
      done += n;
    }
    pos += len;
    col = 0;
    for (int d = nd - 2; d >= 0; --d) {
      if (++idx[d] < w.shape[d]) break;
      idx[d] = 0;
    }
  }
}

int64_t walk_numel(const Walk& w) {
  int64_t n = 1;
  for (int d = 0; d < w.ndim; ++d) n *= w.shape[d];
  return n;
}

/// The walk of an elementwise graph: the core's plan of the outputs and arguments (output 0 first).
Walk elementwise_walk(const Program& p) {
  detail::ElementwiseIteration<kMaxOperands> plan;
  detail::plan_elementwise(plan, p.call->shape, p.arrays, p.num_operands, [&] { return "fuse(" + p.g->name + ")"; });
  Walk w;
  w.ndim = plan.ndim;
  w.operands = p.num_operands;
  w.first_input = p.num_outputs;
  for (int d = 0; d < plan.ndim; ++d) w.shape[d] = plan.shape[d];
  for (int k = 0; k < p.num_operands; ++k) {
    for (int d = 0; d < plan.ndim; ++d) w.strides[k][d] = plan.strides[k][d];
    w.base[k] = static_cast<char*>(p.arrays[k]->data_ptr());
    w.itemsize[k] = itemsize(p.arrays[k]->dtype());
  }
  return w;
}

void run_elementwise(const Program& p, const Walk& w, int64_t begin, int64_t end) {
  char* memory = scratch(p.scratch_bytes);
  std::vector<Value> values(p.g->nodes.size());
  walk(w, begin, end, [&](char* const* ptrs, const int64_t* steps, int64_t n, PendingPrefetch& queue) {
    evaluate_elementwise(p, ptrs, steps, n, memory, values.data(), queue);
    for (int k = 0; k < p.num_outputs; ++k) write_output(p, k, values.data(), ptrs[k], steps[k], n);
  });
  if (p.stream) stream_fence();
}

/// Grain of a parallel split: heavy graphs (transcendental ops, many nodes) split sooner.
int64_t grain_of(const Program& p) {
  int64_t ops = 0;
  bool heavy = false;
  for (const Step& s : p.steps) {
    if (s.kind != FusionNodeKind::Op) continue;
    ++ops;
    heavy = heavy || detail::op_info(p.g->nodes[static_cast<size_t>(s.node)].op).rule == detail::TypeRule::Float;
  }
  return heavy ? kParallelThreshold / 8 : std::max<int64_t>(kParallelThreshold / std::max<int64_t>(ops, 1), 4096);
}

// ---------------------------------------------------------------- reductions

using AxisPlan = detail::ReductionIteration<kMaxOperands>;

/// A final reduction: the elementwise value's blocks into accumulators (the keepdims-form outs[0]).
void run_classic(const Program& p) {
  const FusionGraph& g = *p.g;
  const Reducer& r = p.reducers.at(0);
  const ReduceKernels& k = r.kernels;
  const Array& out = p.call->outs[0];
  const FusionNode& node = g.nodes[static_cast<size_t>(g.reduce)];
  const int inputs = p.num_operands - 1;
  // Axes: inputs' strides from the kept/reduced split; accumulators (C order over the kept axes of the
  // keepdims-form output) as operand `inputs`, stride 0 on reduced axes. Innermost: smallest input stride.
  struct Dim {
    int64_t size;
    int64_t strides[kMaxOperands + 1];
    bool reduced;
  };
  std::vector<Dim> dims;
  {
    bool reduced[kMaxRank] = {};
    for (int64_t a : node.axes) reduced[a] = true;
    int64_t acc_stride = 1;
    std::vector<Dim> logical(p.call->shape.size());
    for (size_t d = p.call->shape.size(); d-- > 0;) {
      Dim& dim = logical[d];
      dim.size = p.call->shape[d];
      dim.reduced = reduced[d];
      for (int i = 0; i < inputs; ++i) dim.strides[i] = p.arrays[1 + i]->strides()[d];
      dim.strides[inputs] = reduced[d] ? 0 : acc_stride;
      if (!reduced[d]) acc_stride *= dim.size;
    }
    for (const Dim& dim : logical)
      if (dim.size != 1) dims.push_back(dim);
    auto key = [&](const Dim& d) {
      int64_t m = 0;
      for (int i = 0; i < inputs; ++i) m = std::max(m, d.strides[i] < 0 ? -d.strides[i] : d.strides[i]);
      return m == 0 ? INT64_MAX : m;
    };
    std::stable_sort(dims.begin(), dims.end(), [&](const Dim& a, const Dim& b) { return key(a) > key(b); });
    if (dims.empty()) dims.push_back(Dim{1, {}, true});
  }
  const int64_t acc_count = out.size();
  std::vector<uint64_t> acc_memory(static_cast<size_t>((acc_count * k.acc_itemsize + 7) / 8));
  char* acc = reinterpret_cast<char*>(acc_memory.data());
  k.init(acc, acc_count);

  auto make_walk = [&](size_t split, int64_t b, int64_t e, char* target) {
    Walk w;
    w.ndim = static_cast<int>(dims.size());
    w.operands = inputs + 1;
    for (int i = 0; i < inputs; ++i) {
      w.base[i] = static_cast<char*>(p.arrays[1 + i]->data_ptr());
      w.itemsize[i] = itemsize(p.arrays[1 + i]->dtype());
    }
    w.base[inputs] = target;
    w.itemsize[inputs] = k.acc_itemsize;
    for (size_t d = 0; d < dims.size(); ++d) {
      w.shape[d] = dims[d].size;
      for (int i = 0; i <= inputs; ++i) w.strides[i][d] = dims[d].strides[i];
    }
    w.shape[split] = e - b;
    for (int i = 0; i <= inputs; ++i) w.base[i] += b * dims[split].strides[i] * w.itemsize[i];
    return w;
  };
  const bool inner_reduced = dims.back().reduced;
  auto run = [&](const Walk& w) {
    char* memory = scratch(p.scratch_bytes);
    std::vector<Value> values(g.nodes.size());
    // The operands of evaluate are numbered with outputs first: shift by one (outs[0] is not walked).
    walk(w, 0, walk_numel(w), [&](char* const* ptrs, const int64_t* steps, int64_t n, PendingPrefetch& queue) {
      char* shifted[kMaxOperands + 1];
      int64_t shifted_steps[kMaxOperands + 1];
      for (int i = 0; i < inputs; ++i) {
        shifted[1 + i] = ptrs[i];
        shifted_steps[1 + i] = steps[i];
      }
      evaluate(p, p.all, shifted, shifted_steps, n, memory, values.data(), queue);
      const Value& v = values[static_cast<size_t>(g.elementwise)];
      const int64_t step = v.step == 0 && n > 1 ? 0 : v.step;
      if (inner_reduced)
        k.reduce_run(ptrs[inputs], v.ptr, n, step);
      else
        k.accumulate_run(ptrs[inputs], steps[inputs], v.ptr, n, step);
    });
  };
  const int64_t total = shape_numel(p.call->shape);
  const int threads = max_threads();
  const int64_t grain = grain_of(p);
  const ReductionSplit split = choose_reduction_split(dims, threads, acc_count);
  const size_t axis = split.axis;
  const int64_t size = dims[axis].size;
  const int64_t chunks = total < 2 * grain || threads <= 1 ? 1 : std::min<int64_t>({threads, size, total / grain});
  if (chunks <= 1) {
    run(make_walk(axis, 0, size, acc));
  } else if (split.kept) {
    parallel_chunks(chunks, [&](int64_t c) { run(make_walk(axis, size * c / chunks, size * (c + 1) / chunks, acc)); });
  } else {
    reduce_chunks_privately(k, acc, acc_count, chunks, [&](int64_t c, char* target) {
      run(make_walk(axis, size * c / chunks, size * (c + 1) / chunks, target));
    });
  }
  if (k.finalize) k.finalize(acc, acc_count);
  convert(acc, k.acc_dtype, 1, out.data_ptr(), out.dtype(), 1, acc_count);
}

/// A staged graph: per row, one pass per reduction, then the tail writing the outputs.
void run_staged(const Program& p) {
  const FusionGraph& g = *p.g;
  const int no = p.num_outputs, ni = p.num_operands - no;
  // Inputs first, so the reduced axes are sorted by the first input's strides.
  const Array* ordered[kMaxOperands];
  for (int i = 0; i < ni; ++i) ordered[i] = p.arrays[no + i];
  for (int k = 0; k < no; ++k) ordered[ni + k] = p.arrays[k];
  AxisPlan plan;
  {
    bool reduced[kMaxRank] = {};
    for (int64_t a : p.call->axes) reduced[a] = true;
    detail::ReductionOrder order;
    order.flip_kept = order.flip_reduced = false;
    detail::plan_reduction_axes(plan, p.call->shape, reduced, ordered, p.num_operands, p.num_operands, order,
                                [&] { return "fuse(" + g.name + ")"; });
  }
  // Program operand k (outputs first) is plan operand position[k].
  int position[kMaxOperands];
  for (int k = 0; k < no; ++k) position[k] = ni + k;
  for (int i = 0; i < ni; ++i) position[no + i] = i;
  Walk row_walk;
  row_walk.ndim = plan.reduced.ndim;
  row_walk.operands = p.num_operands;
  for (int d = 0; d < plan.reduced.ndim; ++d) row_walk.shape[d] = plan.reduced.shape[d];
  for (int k = 0; k < p.num_operands; ++k) {
    for (int d = 0; d < plan.reduced.ndim; ++d) row_walk.strides[k][d] = plan.reduced.strides[position[k]][d];
    row_walk.itemsize[k] = itemsize(p.arrays[k]->dtype());
  }
  const int64_t row_length = plan.num_reduced, rows = plan.num_out;
  auto run_rows = [&](int64_t begin, int64_t end) {
    char* memory = scratch(p.scratch_bytes);
    std::vector<Value> values(g.nodes.size());
    Walk w = row_walk;
    for (int64_t r = begin; r < end; ++r) {
      // The row's bases: r unravelled over the kept axes (C order).
      int64_t rest = r;
      int64_t offsets[kMaxOperands] = {};
      for (int d = plan.kept.ndim - 1; d >= 0; --d) {
        const int64_t i = rest % plan.kept.shape[d];
        rest /= plan.kept.shape[d];
        for (int k = 0; k < p.num_operands; ++k) offsets[k] += i * plan.kept.strides[position[k]][d];
      }
      for (int k = 0; k < p.num_operands; ++k)
        w.base[k] = static_cast<char*>(p.arrays[k]->data_ptr()) + offsets[k] * w.itemsize[k];
      for (const Reducer& red : p.reducers) {
        const ReduceKernels& k = red.kernels;
        alignas(16) unsigned char acc[16];
        k.init(acc, 1);
        const int input = g.nodes[static_cast<size_t>(red.node)].inputs[0];
        walk(w, 0, row_length, [&](char* const* ptrs, const int64_t* steps, int64_t n, PendingPrefetch& queue) {
          evaluate(p, red.steps, ptrs, steps, n, memory, values.data(), queue);
          const Value& v = values[static_cast<size_t>(input)];
          k.reduce_run(acc, v.ptr, n, v.step == 0 && n > 1 ? 0 : v.step);
        });
        if (k.finalize) k.finalize(acc, 1);
        const Step& s = p.steps[static_cast<size_t>(p.step_of[static_cast<size_t>(red.node)])];
        char* buffer = memory + s.buffer;
        if (red.mean) {  // as kiln::mean: the float64 sum divided by the count in float64, then narrowed
          double m;
          std::memcpy(&m, acc, sizeof m);
          m /= static_cast<double>(row_length);
          convert(&m, DType::Float64, 1, buffer, s.dtype, 1, 1);
        } else {
          convert(acc, k.acc_dtype, 1, buffer, s.dtype, 1, 1);
        }
        values[static_cast<size_t>(red.node)] = {buffer, 0};
      }
      bool first = true;
      walk(w, 0, row_length, [&](char* const* ptrs, const int64_t* steps, int64_t n, PendingPrefetch& queue) {
        evaluate(p, p.tail, ptrs, steps, n, memory, values.data(), queue);
        for (int k = 0; k < no; ++k) {
          const bool full = p.call->full[static_cast<size_t>(k)];
          if (full || first) write_output(p, k, values.data(), ptrs[k], steps[k], full ? n : 1);
        }
        first = false;
      });
    }
  };
  const int64_t grain = std::max<int64_t>(1, grain_of(p) / std::max<int64_t>(row_length, 1));
  parallel_for(rows, run_rows, grain);
}

}  // namespace

bool cpu_fused(const FusionCall& call) {
  if (shape_numel(call.shape) == 0) return true;
  Program p;
  if (!make_program(call, p)) return false;
  const FusionGraph& g = *call.graph;
  if (g.staged) {
    run_staged(p);
  } else if (g.reduce >= 0) {
    run_classic(p);
  } else {
    const Walk w = elementwise_walk(p);
    const int64_t total = walk_numel(w), grain = grain_of(p);
    const int threads = max_threads();
    if (total < 2 * grain || threads <= 1) {
      run_elementwise(p, w, 0, total);
    } else {
      // Several pieces a thread, claimed as threads come free: a thread that is slowed (another process on its
      // core, a busier memory channel) leaves the rest of its share to the others.
      const int64_t pieces = std::min<int64_t>(total / grain, int64_t{4} * threads);
      parallel_chunks(pieces, [&](int64_t c) { run_elementwise(p, w, total * c / pieces, total * (c + 1) / pieces); });
    }
  }
  return true;
}

bool cpu_fused_range(const FusionCall& call, int64_t begin, int64_t end) {
  if (!call.graph->reductions.empty()) return false;
  Program p;
  if (!make_program(call, p)) return false;
  if (begin >= end) return true;
  run_elementwise(p, elementwise_walk(p), begin, end);
  return true;
}

}  // namespace kiln::cpu_impl
