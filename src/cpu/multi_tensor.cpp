// Multi-tensor apply on the CPU: every group (tensor) runs through the fused executor (fused.hpp) in one pass
// over its elements, the tensors cut into pieces of at most kPiece elements that kiln's threads share. A group the executor declines (an op without a CPU kernel
// for its dtype) runs through the core's op-by-op path, which gives the same bits or the op's error.
//
// The groups run with subnormals flushed to zero (x86's FTZ and DAZ, per thread, for the call only): moment
// estimates that decay geometrically (Adam's exp_avg by beta1 each step, a momentum buffer) pass through the
// subnormal range on their way to zero, and on x86 each operation on a subnormal takes a microcode assist, which
// made the CPU Adam step of an MLP several times slower once its moments decayed (bench/results,
// source-comment-figures.md). A flushed float32 value is below 1.2e-38: its contribution to an update is
// below lr * 1e-30. A GPU keeps subnormals; this is the one place the two differ (README, optimizers).
#include "cpu/multi_tensor.hpp"

#include <algorithm>
#include <vector>
#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

#include "cpu/fused.hpp"
#include "cpu/parallel.hpp"

namespace kiln::cpu_impl {

namespace {

/// For its scope, this thread's SSE/AVX arithmetic flushes subnormal results to zero and reads subnormal operands
/// as zero (MXCSR's FTZ and DAZ bits, restored after). No-op elsewhere.
class FlushSubnormals {
 public:
#if defined(__x86_64__) || defined(__i386__)
  FlushSubnormals() : saved_(_mm_getcsr()) { _mm_setcsr(saved_ | kFtz | kDaz); }
  ~FlushSubnormals() { _mm_setcsr(saved_); }

 private:
  static constexpr unsigned kFtz = 0x8000, kDaz = 0x0040;
  unsigned saved_;
#endif
};

/// One group as a FusionCall of the executor: the arguments broadcast to the group's shape (a one-element
/// argument becomes a stride-0 view), the outputs as they are.
struct GroupCall {
  detail::FusionCall call;
  std::vector<Array> views;
};

void make_call(const detail::MultiTensorCall& mt, const detail::MultiTensorGroup& group, GroupCall& out) {
  detail::FusionCall& call = out.call;
  call.graph = mt.graph;
  call.slot_values = mt.slot_values;
  call.outs = group.outs;
  call.full.assign(group.outs.size(), true);
  call.shape = group.outs.at(0).shape();
  out.views.assign(group.arrays.size(), Array());
  call.arrays.assign(group.arrays.size(), nullptr);
  for (size_t a = 0; a < group.arrays.size(); ++a) {
    const Array* x = group.arrays[a];
    if (!x) continue;
    out.views[a] = x->shape() == call.shape ? *x : x->reshape(Shape{}).broadcast_to(call.shape);
    call.arrays[a] = &out.views[a];
    for (const Array& o : group.outs)
      call.aliased = call.aliased || (o.data_ptr() == x->data_ptr() && x->shape() == call.shape);
  }
}

/// Elements per piece of work: a smaller tensor is one piece, a larger one is cut into pieces of this size, and the
/// pieces of all tensors are spread over kiln's threads.
constexpr int64_t kPiece = int64_t{1} << 16;

struct Piece {
  size_t group;
  int64_t begin, end;
};

}  // namespace

void cpu_multi_tensor(const detail::MultiTensorCall& call) {
  std::vector<GroupCall> calls(call.groups.size());
  std::vector<Piece> pieces;
  std::vector<size_t> declined;
  for (size_t i = 0; i < call.groups.size(); ++i) {
    make_call(call, call.groups[i], calls[i]);
    // An empty range runs nothing: it asks whether the executor takes the call (it declines all of it or none).
    if (!cpu_fused_range(calls[i].call, 0, 0)) {
      declined.push_back(i);
      continue;
    }
    const int64_t n = shape_numel(calls[i].call.shape);
    for (int64_t b = 0; b < n; b += kPiece) pieces.push_back({i, b, std::min(n, b + kPiece)});
  }
  const auto run_piece = [&](int64_t c) {
    FlushSubnormals flush;  // on each thread that runs a piece
    const Piece& piece = pieces[static_cast<size_t>(c)];
    (void)cpu_fused_range(calls[piece.group].call, piece.begin, piece.end);  // taken above
  };
  int64_t total = 0;
  for (const Piece& piece : pieces) total += piece.end - piece.begin;
  if (total < 2 * kPiece) {
    // A small model's step: waking the threads would cost more than the update itself.
    for (int64_t c = 0; c < static_cast<int64_t>(pieces.size()); ++c) run_piece(c);
  } else {
    parallel_chunks(static_cast<int64_t>(pieces.size()), run_piece);
  }
  std::vector<detail::FusionArgument> args(call.scalars.size());
  for (size_t a = 0; a < args.size(); ++a) args[a].scalar = call.scalars[a];
  for (size_t i : declined) {
    const detail::MultiTensorGroup& group = call.groups[i];
    for (size_t a = 0; a < args.size(); ++a) args[a].array = group.arrays[a];
    std::vector<Array> results = group.outs;
    detail::fusion_run(*call.graph, args, results.data(), results.size());
  }
}

}  // namespace kiln::cpu_impl
