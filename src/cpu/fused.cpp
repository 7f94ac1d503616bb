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
//
// This file runs a Program (fused_program.hpp: the types the executor's files share), which fused_plan.cpp
// makes from the call (steps, shared buffers, whether to stream, Segment cuts); fused_lanes.cpp evaluates the
// segments in registers.
#include "cpu/fused.hpp"

#include <algorithm>
#include <cstring>
#include <limits>
#include <vector>

#if defined(__SSE2__)
#include <immintrin.h>
#endif

#include "core/iteration.hpp"
#include "cpu/convert.hpp"
#include "cpu/fused_program.hpp"
#include "cpu/parallel.hpp"
#include "cpu/reduce_kernels.hpp"

namespace kiln::cpu_impl::fused {

namespace {

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

/// Per-thread scratch: the nodes' buffers, then the conversion buffers.
char* scratch(int64_t bytes) {
  thread_local std::vector<uint64_t> memory;
  const size_t words = static_cast<size_t>((bytes + 64 + 7) / 8);
  if (memory.size() < words) memory.resize(words);
  const uintptr_t start = reinterpret_cast<uintptr_t>(memory.data());
  return reinterpret_cast<char*>((start + 63) & ~uintptr_t{63});  // cache-line aligned rows
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

}  // namespace kiln::cpu_impl::fused

namespace kiln::cpu_impl {

bool cpu_fused(const detail::FusionCall& call) {
  using namespace fused;
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

bool cpu_fused_range(const detail::FusionCall& call, int64_t begin, int64_t end) {
  using namespace fused;
  if (!call.graph->reductions.empty()) return false;
  Program p;
  if (!make_program(call, p)) return false;
  if (begin >= end) return true;
  run_elementwise(p, elementwise_walk(p), begin, end);
  return true;
}

}  // namespace kiln::cpu_impl
