// The launcher of fused kernels (CudaBackend::fused). Per call, as the built-in
// elementwise engine does: coalesce the operands' axes, pick the layout class
// (contiguous with 16-byte vectors when every operand is contiguous and aligned,
// else strided), the index width and the grid; for a final reduction, split the
// broadcast shape into kept and reduced axes (logical order, coalesced where every
// operand allows) and pick the threads per output. Compiled kernels are cached in
// the graph by (device, spec), so a repeated call generates and compiles nothing;
// the modules themselves live in load_module's memory and disk caches.
#include "cuda/fusion.hpp"

#include <algorithm>
#include <array>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "core/backend.hpp"
#include "cuda/codegen.hpp"
#include "cuda/elementwise_layout.hpp"
#include "cuda/launch.hpp"
#include "cuda/ops.hpp"
#include "cuda/runtime.hpp"

namespace kiln::cuda_impl {

using detail::FusionGraph;

namespace {

const KernelTable::Entry& fused_kernel(const FusionGraph& g, int device, const FusionKernelSpec& spec) {
  FusionKernelMemo& memo = g.kernels.get<FusionKernelMemo>();
  const FusionKernelKey key{device, spec};
  if (std::shared_ptr<void> found = memo.find(key)) return *static_cast<const KernelTable::Entry*>(found.get());
  const std::string name = fusion_kernel_name(g, spec);
  auto entry = std::make_shared<KernelTable::Entry>(compile_kernel_entry(device, fusion_source(g, spec), name));
  return *static_cast<const KernelTable::Entry*>(memo.insert(key, entry).get());
}

/// The broadcast layout's inputs for a plan that is not contiguous: bit k set for input k read per element, or
/// -1 when the layout does not apply (an output, or an input neither dense in the iteration order nor broadcast).
int64_t broadcast_inputs(const Layout& layout, int outputs, int operands) {
  const int nd = layout.ndim;
  int64_t dense[kMaxRank];
  int64_t run = 1;
  for (int d = nd - 1; d >= 0; --d) {
    dense[d] = run;
    run *= layout.shape[d];
  }
  int64_t mask = 0;
  for (int k = 0; k < operands; ++k) {
    bool is_dense = true, is_broadcast = false;
    for (int d = 0; d < nd; ++d) {
      if (layout.shape[d] == 1) continue;
      is_dense = is_dense && layout.strides[k][d] == dense[d];
      is_broadcast = is_broadcast || layout.strides[k][d] == 0;
    }
    if (is_dense) continue;
    if (k < outputs || !is_broadcast) return -1;
    mask |= int64_t{1} << (k - outputs);
  }
  return mask;
}

/// The vector width of the broadcast layout: that of the dense operands (every one but the inputs in `mask`), 1 when
/// the problem is too small for two vectors.
int broadcast_width(const Layout& layout, int64_t mask, int outputs, const Array** arrays, void** pointers) {
  const Array* dense[kMaxLayoutOperands];
  void* dense_pointers[kMaxLayoutOperands];
  int count = 0;
  for (int k = 0; k < layout.operands; ++k)
    if (k < outputs || (mask >> (k - outputs) & 1) == 0) {
      dense[count] = arrays[k];
      dense_pointers[count++] = pointers[k];
    }
  const int vec = aligned_vector_width(dense, dense_pointers, count);
  return layout.numel >= 2 * vec ? vec : 1;
}

void elementwise(const detail::FusionCall& call, int device, int operands, const Array** arrays, void** pointers,
                 std::vector<void*>& args) {
  const FusionGraph& g = *call.graph;
  const int num_inputs = operands - static_cast<int>(call.outs.size());
  Layout layout;
  detail::plan_elementwise(layout, call.shape, arrays, operands, [&] { return "fuse(" + g.name + ")"; });
  const int64_t n = layout.numel;
  const bool contiguous = layout.contiguous;
  FusionKernelSpec spec;
  spec.aliased = call.aliased;
  spec.index64 = !layout.index32;
  unsigned int n32 = static_cast<unsigned int>(n);
  unsigned long long n64 = static_cast<unsigned long long>(n);
  int64_t work_items = n;
  unsigned one_pass_blocks = 0;  // contiguous kernels: every thread's loop runs once
  uint32_t words32[3 * kMaxRank + kMaxLayoutOperands * kMaxRank];
  uint64_t words64[kMaxRank + kMaxLayoutOperands * kMaxRank];
  const int no = operands - num_inputs;
  const int64_t mask = contiguous ? -1 : broadcast_inputs(layout, no, operands);
  const int broadcast_vec = mask >= 0 ? broadcast_width(layout, mask, no, arrays, pointers) : 1;
  if (contiguous) {
    spec.layout = FusionLayout::Contiguous;
    const int vec = aligned_vector_width(arrays, pointers, operands);
    spec.vector_width = n >= 2 * vec ? vec : 1;
    work_items = ceil_div(n, spec.vector_width);
    one_pass_blocks = one_pass_grid(work_items, spec.vector_width > 1 ? contiguous_unroll(num_inputs) : 1);
  } else if (broadcast_vec > 1) {
    // Dense outputs and inputs in vectors, the broadcast inputs per element from their own strides.
    spec.layout = FusionLayout::Broadcast;
    spec.ndim = layout.ndim;
    spec.broadcast_mask = static_cast<uint32_t>(mask);
    spec.vector_width = broadcast_vec;
    detail::StridedAxes<kMaxLayoutOperands> gathered;
    gathered.ndim = layout.ndim;
    std::copy(layout.shape, layout.shape + layout.ndim, gathered.shape);
    for (int k = no; k < operands; ++k)
      if ((mask >> (k - no) & 1) != 0)
        std::copy(layout.strides[k], layout.strides[k] + layout.ndim, gathered.strides[gathered.operands++]);
    args.push_back(strided_params(gathered, spec.index64, words32, words64));
    work_items = ceil_div(n, spec.vector_width);
  } else {
    spec.layout = FusionLayout::Strided;
    const int nd = layout.ndim;
    spec.ndim = nd;
    bool inner_dense = true;  // several elements in flight per thread unless an operand is transposed
    for (int k = 0; k < operands; ++k)
      inner_dense = inner_dense && layout.strides[k][nd - 1] >= 0 && layout.strides[k][nd - 1] <= 1;
    spec.unroll = inner_dense ? 4 : 1;
    args.push_back(strided_params(layout, spec.index64, words32, words64));
  }
  args.push_back(spec.index64 ? static_cast<void*>(&n64) : static_cast<void*>(&n32));
  const KernelTable::Entry& kernel = fused_kernel(g, device, spec);
  const dim3 grid(one_pass_blocks > 0 ? one_pass_blocks : grid_for(device, work_items, kernel));
  launch_entry(kernel, grid, dim3(kBlockSize), current_stream(device), args.data());
}

using AxisPlan = detail::ReductionIteration<kMaxLayoutOperands>;

/// The core's kept/reduced plan of the broadcast `shape` over `axes` for the operands `arrays[k]` (viewed with
/// `shape`), in logical order (a fused kernel's output index is C order over the kept axes: no flipping or
/// sorting); returns the index of the last axis of size > 1 (-1: none). Throws ShapeError past kMaxRank.
int64_t split_axes(const FusionGraph& g, const Shape& shape, const Shape& axes, const Array* const* arrays,
                   int operands, AxisPlan& plan) {
  detail::check_rank(shape, [&] { return "fuse(" + g.name + ")"; });
  bool reduced[kMaxRank] = {};
  for (int64_t a : axes) reduced[a] = true;
  int64_t last_nontrivial = -1;
  for (size_t d = 0; d < shape.size(); ++d)
    if (shape[d] != 1) last_nontrivial = static_cast<int64_t>(d);
  detail::ReductionOrder order;
  order.flip_kept = order.flip_reduced = order.sort_kept = order.sort_reduced = false;
  // Every operand keeps its strides on reduced axes (num_inputs = operands): rows outputs of the full shape
  // are written per element, reduced-shape ones have stride 0 there by broadcasting.
  detail::plan_reduction_axes(plan, shape, reduced, arrays, operands, operands, order,
                              [&] { return "fuse(" + g.name + ")"; });
  return last_nontrivial;
}

/// Params words of a reduce or rows kernel: kept sizes, reduced sizes, per operand kept and reduced strides.
std::vector<uint64_t> axis_words(const AxisPlan& plan, int operands) {
  std::vector<uint64_t> words;
  for (int d = 0; d < plan.kept.ndim; ++d) words.push_back(static_cast<uint64_t>(plan.kept.shape[d]));
  for (int d = 0; d < plan.reduced.ndim; ++d) words.push_back(static_cast<uint64_t>(plan.reduced.shape[d]));
  for (int k = 0; k < operands; ++k) {
    for (int d = 0; d < plan.kept.ndim; ++d) words.push_back(static_cast<uint64_t>(plan.kept.strides[k][d]));
    for (int d = 0; d < plan.reduced.ndim; ++d) words.push_back(static_cast<uint64_t>(plan.reduced.strides[k][d]));
  }
  return words;
}

int64_t max_extent(const AxisPlan& plan, int operands) {
  int64_t extent = 0;
  for (int k = 0; k < operands; ++k) extent = std::max(extent, plan.kept.extent(k) + plan.reduced.extent(k));
  return extent;
}

/// Longest row a rows kernel takes when rows are fewer than a wave of blocks (one group per row, no split: a
/// longer row would leave most of the GPU idle, so the core runs the ops one by one instead).
constexpr int64_t kMaxUnsplitRow = int64_t{1} << 16;

/// The vector width of a rows kernel over `plan` (operands: inputs, then outputs; the last `outputs` of them) and
/// the inputs constant along the row (bit k: input k read per element): V > 1 when the row is one axis on which
/// every input is dense or constant and every full-shape output dense, V divides the row, and every dense
/// operand's rows start V-element aligned. 1 otherwise.
int rows_vector_width(const AxisPlan& plan, const Array* const* ordered, void* const* pointers, int operands,
                      int outputs, uint32_t kept_mask, uint32_t& constant_inputs) {
  constant_inputs = 0;
  if (plan.reduced.ndim != 1 || operands > 32) return 1;
  const int inputs = operands - outputs;
  int64_t widest = 1;
  bool dense[kMaxLayoutOperands] = {};
  for (int k = 0; k < operands; ++k) {
    if (k >= inputs && ((kept_mask >> (k - inputs)) & 1u) != 0) continue;  // written once per row by lane 0
    const int64_t stride = plan.reduced.strides[k][0];
    if (stride == 0 && k < inputs) {
      constant_inputs |= 1u << k;
      continue;
    }
    if (stride != 1) return 1;
    dense[k] = true;
    widest = std::max(widest, itemsize(ordered[k]->dtype()));
  }
  int vec = static_cast<int>(std::min<int64_t>(8, 16 / widest));
  for (; vec > 1; vec /= 2) {
    if (plan.num_reduced % vec != 0) continue;
    bool aligned = true;
    for (int k = 0; k < operands && aligned; ++k) {
      if (!dense[k]) continue;
      aligned = reinterpret_cast<uintptr_t>(pointers[k]) % (vec * itemsize(ordered[k]->dtype())) == 0;
      for (int d = 0; d < plan.kept.ndim && aligned; ++d)
        aligned = plan.kept.shape[d] == 1 || plan.kept.strides[k][d] % vec == 0;
    }
    if (aligned) break;
  }
  return vec;
}

/// A staged graph, or an elementwise one taken a row (the last axis) at a time: one group of threads per row
/// over `axes`, no split (see fusion.hpp). False when rows are too few and long, or, with `vectors_only`, when
/// the rows cannot be read in vectors.
bool rows(const detail::FusionCall& call, int device, int operands, const Array** arrays, void** pointers,
          std::vector<void*>& args, const Shape& axes, bool vectors_only) {
  const FusionGraph& g = *call.graph;
  const int no = static_cast<int>(call.outs.size());
  // The rows kernel's operand order: inputs, then outputs.
  const Array* ordered[kMaxLayoutOperands];
  void* ordered_pointers[kMaxLayoutOperands];
  for (int k = no; k < operands; ++k) {
    ordered[k - no] = arrays[k];
    ordered_pointers[k - no] = pointers[k];
  }
  for (int k = 0; k < no; ++k) {
    ordered[operands - no + k] = arrays[k];
    ordered_pointers[operands - no + k] = pointers[k];
  }
  AxisPlan plan_axes;
  const int64_t last_nontrivial = split_axes(g, call.shape, axes, ordered, operands, plan_axes);
  const int64_t num_out = plan_axes.num_out, num_red = plan_axes.num_reduced;
  const int sms = multiprocessor_count(device);
  if (num_out < int64_t{sms} * 8 && num_red > kMaxUnsplitRow) return false;
  FusionKernelSpec spec;
  spec.layout = FusionLayout::Rows;
  spec.aliased = call.aliased;
  spec.kept_ndim = plan_axes.kept.ndim;
  spec.reduced_ndim = plan_axes.reduced.ndim;
  for (int k = 0; k < no && g.staged; ++k)
    if (!call.full[static_cast<size_t>(k)]) spec.kept_mask |= 1u << k;
  const bool rows_inner = last_nontrivial < 0 || std::binary_search(axes.begin(), axes.end(), last_nontrivial);
  spec.vector_width =
      rows_vector_width(plan_axes, ordered, ordered_pointers, operands, no, spec.kept_mask, spec.broadcast_mask);
  if (spec.vector_width == 1) {
    if (vectors_only) return false;
    spec.broadcast_mask = 0;
  }
  // The group is sized by the vectors a row holds.
  const SplitPlan plan = plan_split(rows_inner, num_out, num_red / spec.vector_width, sms);
  spec.group = plan.group;
  spec.index64 = shape_numel(call.shape) > INT32_MAX || max_extent(plan_axes, operands) > INT32_MAX;
  std::vector<uint64_t> words = axis_words(plan_axes, operands);
  words.push_back(static_cast<uint64_t>(num_out));
  words.push_back(static_cast<uint64_t>(num_red));
  std::vector<uint32_t> narrow(words.begin(), words.end());
  args.push_back(spec.index64 ? static_cast<void*>(words.data()) : static_cast<void*>(narrow.data()));
  const KernelTable::Entry& kernel = fused_kernel(g, device, spec);
  const int64_t blocks = std::clamp<int64_t>(ceil_div(num_out * spec.group, kBlockSize), 1, 4 * plan.wave);
  launch_entry(kernel, dim3(static_cast<unsigned>(blocks)), dim3(kBlockSize), current_stream(device), args.data());
  return true;
}

/// Rows at least this long make an elementwise graph with per-row inputs a rows kernel (below).
constexpr int64_t kMinVectorRow = 1024;

/// True when an elementwise problem of `shape` has long rows (its last axis) and an input constant along them
/// that differs between rows (a per-row value, e.g. (N, 1) against (N, C)): the broadcast layout would compute
/// that input's offset for every element, a rows kernel reads it once per row and the rest of the row in vectors.
bool per_row_inputs(const Shape& shape, const Array* const* inputs, int count) {
  if (shape.size() < 2 || shape.back() < kMinVectorRow) return false;
  for (int k = 0; k < count; ++k) {
    // The core hands inputs over broadcast to the call's shape: a per-row input steps 0 along the row and
    // moves along another axis; one not yet broadcast is (..., 1) with more than one element.
    const Array& in = *inputs[k];
    const Shape& s = in.shape();
    if (s.size() < 2) continue;
    if (s.back() == 1 && shape_numel(s) > 1) return true;
    if (s.back() > 1 && in.strides().back() != 0) continue;
    for (size_t d = 0; d + 1 < s.size(); ++d)
      if (s[d] > 1 && in.strides()[d] != 0) return true;
  }
  return false;
}

void reduction(const detail::FusionCall& call, int device, const std::vector<int>& inputs, const Array** arrays,
               std::vector<void*>& args, void** out_pointer) {
  const FusionGraph& g = *call.graph;
  const detail::FusionNode& node = g.nodes[static_cast<size_t>(g.reduce)];
  const int ni = static_cast<int>(inputs.size());
  const Shape& shape = call.shape;
  AxisPlan plan_axes;
  const int64_t last_nontrivial = split_axes(g, shape, node.axes, arrays + 1, ni, plan_axes);
  const int64_t num_out = call.outs[0].size();
  const int64_t num_red = plan_axes.num_reduced;

  FusionKernelSpec spec;
  spec.layout = FusionLayout::Reduce;
  spec.op = fusion_reduce_op(node.reduction);
  spec.out = call.outs[0].dtype();
  spec.acc = reduce_accumulator_dtype(spec.op, g.nodes[static_cast<size_t>(g.elementwise)].dtype, spec.out);
  spec.kept_ndim = plan_axes.kept.ndim;
  spec.reduced_ndim = plan_axes.reduced.ndim;
  // Rows: the reduced axes are the inner ones (or there is no non-trivial axis).
  const bool rows = last_nontrivial < 0 || std::binary_search(node.axes.begin(), node.axes.end(), last_nontrivial);
  const SplitPlan plan = plan_split(rows, num_out, num_red, multiprocessor_count(device));
  spec.group = plan.group;
  const int64_t splits = plan.splits, chunk = plan.chunk, wave = plan.wave;
  spec.to_partials = splits > 1;
  spec.index64 =
      shape_numel(shape) > INT32_MAX || num_out * splits > INT32_MAX || max_extent(plan_axes, ni) > INT32_MAX;

  std::vector<uint64_t> words = axis_words(plan_axes, ni);
  for (int64_t w : {num_out, num_red, splits, chunk}) words.push_back(static_cast<uint64_t>(w));
  std::vector<uint32_t> narrow(words.size());
  for (size_t i = 0; i < words.size(); ++i) narrow[i] = static_cast<uint32_t>(words[i]);
  args.push_back(spec.index64 ? static_cast<void*>(words.data()) : static_cast<void*>(narrow.data()));

  Array partials;
  if (spec.to_partials) {
    partials = detail::make_array({num_out, splits}, spec.acc, call.outs[0].device());
    *out_pointer = partials.data_ptr();
  }
  const KernelTable::Entry& kernel = fused_kernel(g, device, spec);
  const int64_t blocks = std::clamp<int64_t>(ceil_div(num_out * splits * spec.group, kBlockSize), 1, 4 * wave);
  launch_entry(kernel, dim3(static_cast<unsigned>(blocks)), dim3(kBlockSize), current_stream(device), args.data());
  if (spec.to_partials) {
    // The second pass is the built-in reduction over each output's `splits` accumulators.
    detail::ReduceCall second{spec.op, &partials, call.outs[0].reshape({num_out, 1}), Shape{1}, {}};
    detail::plan_reduce_call(second);
    cuda_reduce(second);
  }
}

}  // namespace

void cuda_multi_tensor(const detail::MultiTensorCall& call) {
  const FusionGraph& g = *call.graph;
  const int device = call.groups.at(0).outs.at(0).device().index;
  set_device(device);
  check_operand_count(g);
  const std::vector<int> inputs = fusion_array_arguments(g);
  const size_t no = g.outputs.size();
  const MultiTensorTable table =
      multi_tensor_table(static_cast<int>(no + inputs.size()), static_cast<int>(g.slots.size()));
  std::vector<std::array<uint64_t, 1>> slots(g.slots.size());
  alignas(8) unsigned char list[4096];
  std::vector<void*> args{list};
  for (size_t j = 0; j < g.slots.size(); ++j) {
    store_scalar(g.slots[j].argument_dtype, call.slot_values[j], slots[j].data());
    args.push_back(slots[j].data());
  }
  // An argument of one element in a tensor of several reads that element at every index (a kernel per mask;
  // a tensor of one element reads index 0 either way).
  auto mask_of = [&](const detail::MultiTensorGroup& group) {
    uint32_t mask = 0;
    for (size_t k = 0; k < inputs.size(); ++k)
      if (group.size > 1 && group.arrays[static_cast<size_t>(inputs[k])]->size() == 1) mask |= 1u << k;
    return mask;
  };
  std::vector<uint32_t> masks;
  for (const detail::MultiTensorGroup& group : call.groups)
    if (std::find(masks.begin(), masks.end(), mask_of(group)) == masks.end()) masks.push_back(mask_of(group));
  const cudaStream_t stream = current_stream(device);
  for (uint32_t mask : masks) {
    FusionKernelSpec spec;
    spec.layout = FusionLayout::MultiTensor;
    spec.broadcast_mask = mask;
    const KernelTable::Entry& kernel = fused_kernel(g, device, spec);
    int count = 0;       // tensors in the table
    int64_t blocks = 0;  // their chunks: the launch's blocks
    auto put = [&](const void* value, size_t size, size_t offset) { std::memcpy(list + offset, value, size); };
    auto flush = [&] {
      if (blocks > 0) {
        const int32_t unused = std::numeric_limits<int32_t>::max();
        for (int t = count; t < table.tensors; ++t) put(&unused, sizeof unused, table.first + t * sizeof unused);
        launch_entry(kernel, dim3(static_cast<unsigned>(blocks)), dim3(kBlockSize), stream, args.data());
      }
      count = 0;
      blocks = 0;
    };
    for (const detail::MultiTensorGroup& group : call.groups) {
      if (mask_of(group) != mask) continue;
      const int64_t chunks = ceil_div(group.size, kMultiTensorChunk);
      if (count == table.tensors || blocks + chunks > std::numeric_limits<int32_t>::max()) flush();
      for (size_t k = 0; k < no + inputs.size(); ++k) {  // the tensor's pointers, size and first block
        const void* p =
            k < no ? group.outs[k].data_ptr() : group.arrays[static_cast<size_t>(inputs[k - no])]->data_ptr();
        put(&p, sizeof p,
            table.pointers + (k * static_cast<size_t>(table.tensors) + static_cast<size_t>(count)) * sizeof p);
      }
      const long long n = group.size;
      put(&n, sizeof n, table.sizes + static_cast<size_t>(count) * sizeof n);
      const int32_t first = static_cast<int32_t>(blocks);
      put(&first, sizeof first, table.first + static_cast<size_t>(count) * sizeof first);
      blocks += chunks;
      ++count;
    }
    flush();
  }
}

bool cuda_fused(const detail::FusionCall& call) {
  const FusionGraph& g = *call.graph;
  const Array& out = call.outs.at(0);
  const int device = out.device().index;
  if (shape_numel(call.shape) == 0) return true;
  set_device(device);
  check_operand_count(g);
  const std::vector<int> inputs = fusion_array_arguments(g);
  const int no = static_cast<int>(call.outs.size()), operands = no + static_cast<int>(inputs.size());
  const Array* arrays[kMaxLayoutOperands] = {};
  void* pointers[kMaxLayoutOperands] = {};
  std::vector<void*> args;
  args.reserve(static_cast<size_t>(operands) + g.slots.size() + 2);
  for (int k = 0; k < no; ++k) {
    arrays[k] = &call.outs[static_cast<size_t>(k)];
    pointers[k] = arrays[k]->data_ptr();
    args.push_back(&pointers[k]);
  }
  for (size_t k = 0; k < inputs.size(); ++k) {
    const Array* a = call.arrays[static_cast<size_t>(inputs[k])];
    if (a->device() != out.device())
      throw DeviceError("fuse(" + g.name + "): an argument is on " + a->device().str() + " and the output on " +
                        out.device().str() + "; move it with .to(" + out.device().str() + ")");
    arrays[no + k] = a;
    pointers[no + k] = a->data_ptr();
    args.push_back(&pointers[no + k]);
  }
  std::vector<std::array<uint64_t, 1>> slots(g.slots.size());
  for (size_t j = 0; j < g.slots.size(); ++j) {
    store_scalar(g.slots[j].argument_dtype, call.slot_values[j], slots[j].data());
    args.push_back(slots[j].data());
  }
  if (g.staged) return rows(call, device, operands, arrays, pointers, args, call.axes, false);
  if (g.reduce >= 0)
    reduction(call, device, inputs, arrays, args, &pointers[0]);
  else if (!(per_row_inputs(call.shape, arrays + no, operands - no) &&
             rows(call, device, operands, arrays, pointers, args, Shape{static_cast<int64_t>(call.shape.size()) - 1},
                  true)))
    elementwise(call, device, operands, arrays, pointers, args);
  return true;
}

}  // namespace kiln::cuda_impl
