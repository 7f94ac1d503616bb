// User ElementwiseKernels and ReductionKernels on the GPU: the layout of a
// call (the core's iteration plan, src/core/iteration.hpp: coalescing, 32-bit
// indexing when offsets fit, the contiguous fast path), a variant from the kernel object's memo or generated
// (codegen_user.cpp) and loaded through load_module (memory and disk caches
// shared with the built-ins), then a checked launch on the device's current
// stream. The core (src/core/user_kernel.cpp) has already checked, typed,
// broadcast and allocated everything.
#include <algorithm>
#include <climits>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/user_kernel.hpp"
#include "cuda/codegen.hpp"
#include "cuda/codegen_user.hpp"
#include "cuda/elementwise_layout.hpp"
#include "cuda/launch.hpp"
#include "cuda/ops.hpp"
#include "cuda/runtime.hpp"

namespace kiln::cuda_impl {

namespace {

/// Non-raw array parameters one user kernel may have (each adds kMaxRank words of Params at most).
constexpr int kMaxUserOperands = 32;
using UserLayout = StridedLayout<kMaxUserOperands>;

/// The compiled variant for `spec` on `device`, from the kernel object's memo or built by `source()`.
template <class Spec, class SourceFn>
const KernelTable::Entry& variant(const detail::KernelDef& def, int device, const Spec& spec, SourceFn source) {
  using Memo = detail::KernelMemo<UserVariantKey<Spec>>;
  Memo& memo = def.variants.get<Memo>();
  const UserVariantKey<Spec> key{device, spec};
  if (std::shared_ptr<void> hit = memo.find(key)) return *static_cast<const KernelTable::Entry*>(hit.get());
  auto entry = std::make_shared<KernelTable::Entry>(compile_kernel_entry(device, source(), def.name, def.options));
  std::shared_ptr<void> stored = memo.insert(key, std::move(entry));
  return *static_cast<const KernelTable::Entry*>(stored.get());
}

/// The parameter specs of a call (dtypes, kinds, raw layouts), without the parameters' names: the variant memo's
/// key does not need them, and with_code fills them in on a miss.
std::vector<UserParamSpec> param_specs(const std::string& kernel, const std::vector<detail::BoundArg>& args) {
  std::vector<UserParamSpec> specs;
  specs.reserve(args.size());
  for (const detail::BoundArg& b : args) {
    UserParamSpec p;
    p.dtype = b.dtype;
    p.output = b.param->output;
    if (b.is_scalar) {
      p.kind = UserArgKind::Scalar;
      p.storage = b.dtype;
    } else {
      p.kind = b.param->raw ? UserArgKind::Raw : UserArgKind::Array;
      p.storage = b.array.dtype();
      if (p.kind == UserArgKind::Raw) {
        if (b.array.ndim() > kMaxRank)
          throw ShapeError(kernel + ": raw parameter '" + b.param->name + "' has " + std::to_string(b.array.ndim()) +
                           " dimensions; at most " + std::to_string(kMaxRank) + " are supported");
        p.raw_ndim = static_cast<int>(b.array.ndim());
        p.raw_contiguous = b.array.is_contiguous();
      }
    }
    specs.push_back(std::move(p));
  }
  return specs;
}

/// The kernel's own code in a spec: the operation, or the map/reduce/post-map expressions and identity.
void set_code(UserElementwiseSpec& spec, const detail::ElementwiseKernelDef& def) { spec.operation = def.operation; }
void set_code(UserReductionSpec& spec, const detail::ReductionKernelDef& def) {
  spec.map_expr = def.map_expr;
  spec.reduce_expr = def.reduce_expr;
  spec.post_map_expr = def.post_map_expr;
  spec.identity = def.identity;
}

/// `spec` completed with what the source needs beyond the memo key: the kernel's name, code and preamble, the
/// placeholder types and the parameter names (param_specs built spec.params from call.args, one per argument).
/// Only for a memo miss.
template <class Spec, class Call>
Spec with_code(Spec spec, const Call& call) {
  const auto& def = *call.kernel;
  spec.name = def.name;
  spec.preamble = def.preamble;
  spec.types = call.types.bound;
  set_code(spec, def);
  for (size_t i = 0; i < spec.params.size(); ++i) spec.params[i].name = call.args[i].param->name;
  return spec;
}

/// Kernel arguments for the user parameters: pointers, scalar values and raw-array structs.
struct ArgBuffer {
  std::vector<void*> pointers;
  std::vector<uint64_t> scalars;  // 8-byte aligned slots
  std::vector<std::vector<int64_t>> raws;
  std::vector<void*> args;

  explicit ArgBuffer(const std::vector<detail::BoundArg>& bound, int device, const std::string& kernel) {
    pointers.reserve(bound.size() + 2);
    scalars.reserve(bound.size());
    raws.reserve(bound.size());
    for (const detail::BoundArg& b : bound) {
      if (b.is_scalar) {
        scalars.push_back(0);
        store_scalar(kernel_compute_dtype(b.dtype), b.scalar, &scalars.back());
        args.push_back(&scalars.back());
        continue;
      }
      if (b.array.device().index != device)
        throw DeviceError(kernel + ": '" + b.param->name + "' is on " + b.array.device().str() +
                          ", not cuda:" + std::to_string(device));
      if (b.param->raw) {
        const Array& a = b.array;
        const size_t nd = std::max<size_t>(1, static_cast<size_t>(a.ndim()));
        std::vector<int64_t> words(2 + 2 * nd, 0);
        void* data = a.data_ptr();
        std::memcpy(&words[0], &data, sizeof data);
        words[1] = a.size();
        if (a.ndim() == 0) {
          words[2] = 1;
          words[3] = 1;
        }
        for (size_t d = 0; d < static_cast<size_t>(a.ndim()); ++d) {
          words[2 + d] = a.shape()[d];
          words[2 + nd + d] = a.strides()[d];
        }
        raws.push_back(std::move(words));
        args.push_back(raws.back().data());
        continue;
      }
      pointers.push_back(b.array.data_ptr());
      args.push_back(&pointers.back());
    }
  }
  void push_pointer(void* p) {
    pointers.push_back(p);
    args.push_back(&pointers.back());
  }
};

}  // namespace

void cuda_user_elementwise(const detail::UserElementwiseCall& call) {
  const detail::ElementwiseKernelDef& def = *call.kernel;
  const int device = call.device.index;
  set_device(device);
  const Array* arrays[kMaxUserOperands];
  int num_arrays = 0;
  for (const detail::BoundArg& b : call.args) {
    if (b.is_scalar || b.param->raw) continue;
    if (num_arrays == kMaxUserOperands)
      throw ValueError(def.name + ": more than " + std::to_string(kMaxUserOperands) +
                       " non-raw array parameters; pass some as raw arrays");
    arrays[num_arrays++] = &b.array;
  }
  UserLayout layout;
  detail::plan_elementwise(layout, call.shape, arrays, num_arrays, def.name);
  const int64_t n = call.size;
  UserElementwiseSpec spec;  // what the memo key needs; with_code adds the rest on a miss
  spec.params = param_specs(def.name, call.args);
  spec.contiguous = num_arrays == 0 || layout.contiguous;
  spec.ndim = layout.ndim;
  spec.index64 = n > INT32_MAX || (!spec.contiguous && !layout.index32);
  const KernelTable::Entry& kernel =
      variant(def, device, spec, [&] { return user_elementwise_source(with_code(spec, call)); });

  ArgBuffer buffer(call.args, device, def.name);
  uint32_t words32[3 * kMaxRank + kMaxUserOperands * kMaxRank];
  uint64_t words64[kMaxRank + kMaxUserOperands * kMaxRank];
  if (!spec.contiguous) buffer.args.push_back(strided_params(layout, spec.index64, words32, words64));
  unsigned int n32 = static_cast<unsigned int>(n);
  unsigned long long n64 = static_cast<unsigned long long>(n);
  buffer.args.push_back(spec.index64 ? static_cast<void*>(&n64) : static_cast<void*>(&n32));
  launch_entry(kernel, dim3(grid_for(device, n, kernel)), dim3(kBlockSize), current_stream(device), buffer.args.data());
}

void cuda_user_reduction(const detail::UserReductionCall& call) {
  const detail::ReductionKernelDef& def = *call.kernel;
  const std::string& kernel_name = def.name;
  const int device = call.device.index;
  set_device(device);
  std::vector<const Array*> inputs, outputs;
  for (const detail::BoundArg& b : call.args) {
    if (b.is_scalar || b.param->raw) continue;
    (b.param->output ? outputs : inputs).push_back(&b.array);
  }
  const size_t num_in = inputs.size(), num_out = outputs.size();
  if (num_in + num_out > static_cast<size_t>(kMaxUserOperands))
    throw ValueError(kernel_name + ": more than " + std::to_string(kMaxUserOperands) +
                     " non-raw array parameters; pass some as raw arrays");

  // The core's plan: kept and reduced axes with every operand's strides (inputs, then outputs), each side
  // sorted by the first operand's |stride| and merged; nothing flipped.
  const Shape& shape = call.in_shape;
  detail::check_rank(shape, kernel_name);
  bool is_reduced[kMaxRank] = {};
  for (int64_t axis : call.axes) is_reduced[axis] = true;
  const Array* operands[kMaxUserOperands];
  for (size_t k = 0; k < num_in; ++k) operands[k] = inputs[k];
  for (size_t m = 0; m < num_out; ++m) operands[num_in + m] = outputs[m];
  detail::ReductionIteration<kMaxUserOperands> it;
  detail::ReductionOrder order;
  order.flip_kept = order.flip_reduced = false;
  detail::plan_reduction_axes(it, shape, is_reduced, operands, static_cast<int>(num_in + num_out),
                              static_cast<int>(num_in), order, kernel_name);
  const detail::StridedAxes<kMaxUserOperands>&kept = it.kept, &reduced = it.reduced;
  const int64_t num_red = it.num_reduced, outputs_count = it.num_out;

  // Plan: a group of threads per output along the reduced axes when they are the inner ones in memory
  // (split over several tasks when outputs are few), else one thread per output with adjacent threads on
  // adjacent outputs (a reduction over an outer axis), split when outputs are too few to fill the GPU.
  const auto mag = [](int64_t s) { return s < 0 ? -s : s; };
  const bool rows = num_in == 0 || kept.ndim == 0 ||
                    mag(reduced.strides[0][reduced.ndim - 1]) < mag(kept.strides[0][kept.ndim - 1]);
  const SplitPlan plan = plan_split(rows, outputs_count, num_red, multiprocessor_count(device));
  const int group = plan.group;
  const int64_t splits = plan.splits, chunk = plan.chunk;

  UserReductionSpec spec;  // what the memo key needs; with_code adds the rest on a miss
  spec.params = param_specs(kernel_name, call.args);
  spec.reduce_type = call.reduce_type;
  spec.kept_ndim = kept.ndim;
  spec.reduced_ndim = reduced.ndim;
  spec.group = group;
  bool index64 = outputs_count * splits > INT32_MAX || num_red > INT32_MAX;
  for (int k = 0; k < static_cast<int>(num_in); ++k)
    index64 = index64 || kept.extent(k) + reduced.extent(k) > INT32_MAX;
  for (int m = 0; m < static_cast<int>(num_out); ++m) index64 = index64 || kept.extent(static_cast<int>(num_in) + m) > INT32_MAX;
  spec.index64 = index64;
  spec.pass = splits > 1 ? UserReducePass::ToPartials : UserReducePass::Single;

  // Params words.
  std::vector<uint64_t> words;
  for (int d = 0; d < kept.ndim; ++d) words.push_back(static_cast<uint64_t>(kept.shape[d]));
  for (size_t k = 0; k < num_in + num_out; ++k)
    for (int d = 0; d < kept.ndim; ++d) words.push_back(static_cast<uint64_t>(kept.strides[k][d]));
  for (int d = 0; d < reduced.ndim; ++d) words.push_back(static_cast<uint64_t>(reduced.shape[d]));
  for (size_t k = 0; k < num_in; ++k)
    for (int d = 0; d < reduced.ndim; ++d) words.push_back(static_cast<uint64_t>(reduced.strides[k][d]));
  const size_t tail = words.size();
  words.resize(tail + 4);
  const auto launch_pass = [&](const UserReductionSpec& pass_spec, int64_t pass_red, int64_t pass_splits,
                               int64_t pass_chunk, void* partials_in, void* partials_out) {
    words[tail] = static_cast<uint64_t>(outputs_count);
    words[tail + 1] = static_cast<uint64_t>(pass_red);
    words[tail + 2] = static_cast<uint64_t>(pass_splits);
    words[tail + 3] = static_cast<uint64_t>(pass_chunk);
    std::vector<uint32_t> narrow(words.begin(), words.end());
    const KernelTable::Entry& kernel =
        variant(def, device, pass_spec, [&] { return user_reduction_source(with_code(pass_spec, call)); });
    ArgBuffer buffer(call.args, device, kernel_name);
    buffer.push_pointer(partials_in);
    buffer.push_pointer(partials_out);
    buffer.args.push_back(pass_spec.index64 ? static_cast<void*>(words.data()) : static_cast<void*>(narrow.data()));
    const int64_t tasks = outputs_count * pass_splits;
    const int64_t per_block = kBlockSize / pass_spec.group;
    const int64_t cap = static_cast<int64_t>(multiprocessor_count(device)) * kernel.blocks_per_multiprocessor;
    const int64_t blocks = std::max<int64_t>(1, std::min(ceil_div(tasks, per_block), cap));
    launch_entry(kernel, dim3(static_cast<unsigned>(blocks)), dim3(kBlockSize), current_stream(device),
                 buffer.args.data());
  };
  if (splits == 1) {
    launch_pass(spec, num_red, 1, chunk, nullptr, nullptr);
    return;
  }
  // Two passes: one partial per (split, output), then each output's partials reduced and post-mapped.
  const size_t value_size = static_cast<size_t>(itemsize(kernel_compute_dtype(call.reduce_type)));
  std::shared_ptr<Storage> partials =
      device_alloc(device, static_cast<size_t>(outputs_count * splits) * value_size, current_stream(device));
  launch_pass(spec, num_red, splits, chunk, nullptr, partials->data());
  UserReductionSpec final_spec = spec;
  final_spec.pass = UserReducePass::FromPartials;
  final_spec.group = outputs_count >= 32 ? 1 : pow2_at_least(splits, kBlockSize);
  launch_pass(final_spec, splits, 1, splits, partials->data(), nullptr);
}

}  // namespace kiln::cuda_impl
