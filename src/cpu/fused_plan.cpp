// Planning of the CPU fused executor: a FusionCall made into a Program (fused_program.hpp) for fused.cpp to
// run. Each live node becomes a step with its kernel and buffer; the steps of one pass are listed in order, an
// elementwise pass's buffers shared once their values' last readers have run (share_buffers), reductions given
// the CPU reduce's kernels, and on a CPU running the AVX-512 libmvec rows the runs of float32 steps that can be
// evaluated in registers cut into segments (plan_segments; run by fused_lanes.cpp).
#include <algorithm>
#include <array>
#include <cstring>
#include <iterator>
#include <limits>
#include <vector>

#include "cpu/convert.hpp"
#include "cpu/fused_program.hpp"

namespace kiln::cpu_impl::fused {

namespace {

using detail::ReduceOp;

// Outputs of an elementwise graph totalling this many bytes are written with non-temporal stores (stream_bytes):
// more than a core's share of a server's last-level cache, so the next op would not find them cached anyway,
// and a normal store first reads the line it writes (a pass over memory then moves 3 bytes per byte written,
// not 2, which puts it at 1.5x the copy floor before any arithmetic).
constexpr int64_t kStreamBytes = int64_t{32} << 20;

template <class T>
void store(unsigned char* dst, const Scalar& s) {
  const T v = s.to<T>();
  std::memcpy(dst, &v, sizeof(T));
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

}  // namespace

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

}  // namespace kiln::cpu_impl::fused
