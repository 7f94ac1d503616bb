// The fused executor's program (internal to src/cpu): kiln::fuse's graph planned for the CPU (fused_plan.cpp)
// and run by the executor (fused.cpp) block by block, with runs of float32 nodes in registers (fused_lanes.cpp).
// Holds the types those files share (a node's value over a block, its step, the register segments, the
// reducers, the program), the prefetch queue of the block loops, and the functions called across files.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "core/fusion.hpp"
#include "cpu/elementwise.hpp"
#include "cpu/reduce_kernels.hpp"
#include "cpu/vector_math.hpp"

namespace kiln::cpu_impl::fused {

using detail::FusionCall;
using detail::FusionGraph;
using detail::FusionNode;
using detail::FusionNodeKind;

constexpr int64_t kBlock = 1024;
constexpr int kMaxOperands = 16;
constexpr int64_t kBufferBytes = kBlock * 8;  // one block of the widest dtype
constexpr int kTemps = 4;                     // conversion buffers: three inputs and an output
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

/// Plans `call`; false when the executor declines it.
bool make_program(const FusionCall& call, Program& p);

#ifdef KILN_VECTOR_MATH
/// Runs segment `seg` over one block in registers; false (nothing done) when an input is neither contiguous
/// nor one value, or its last step writes a strided output itself (then its kernel's strided path decides).
bool evaluate_segment(const Program& p, const Segment& seg, char* const* ptrs, const int64_t* steps, int64_t n,
                      char* scratch, Value* values, PendingPrefetch& queue);
#endif

}  // namespace kiln::cpu_impl::fused
