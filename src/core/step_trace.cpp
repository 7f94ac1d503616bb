// The step tracer: a Backend that runs each call on the real backend and records it (core/step_trace.hpp).
#include "core/step_trace.hpp"

#include <atomic>
#include <charconv>
#include <map>
#include <mutex>
#include <tuple>
#include <utility>

#include "core/backend.hpp"
#include "core/device_runtime.hpp"
#include "core/fusion.hpp"
#include "core/multi_tensor.hpp"
#include "core/user_kernel.hpp"
#include "kiln/error.hpp"
#include "kiln/stream.hpp"

namespace kiln::detail {

const std::shared_ptr<Storage>* alias_for(const StepTrace& trace, const Storage* real) {
  const auto it = trace.alias_of.find(real);
  if (it == trace.alias_of.end()) return nullptr;
  // The entry is for the step's storage at that address only while it lives: a storage made since at the address
  // of one that died (not by make_array) is not the step's.
  const auto made = trace.made.find(it->second.get());
  if (made == trace.made.end() || made->second.lock().get() != real) return nullptr;
  return &it->second;
}

namespace {

class RecordingBackend;

/// Threads tracing a step now: while none does (always, outside kiln::compile's traces), the per-op checks below
/// read this one global and no thread-local state.
std::atomic<int> g_tracing{0};

struct ThreadState {  // trivial, so reading it costs no thread-local initialisation guard
  StepTrace* trace = nullptr;
  bool in_call = false;  ///< inside a recorded call: its inner work belongs to it
};
thread_local ThreadState t_state;

/// Marks the thread as inside a recorded call while alive.
class InCall {
 public:
  InCall() { t_state.in_call = true; }
  ~InCall() { t_state.in_call = false; }
  InCall(const InCall&) = delete;
  InCall& operator=(const InCall&) = delete;
};

[[noreturn]] void refuse(const std::string& what) {
  throw ValueError("compile: " + what +
                   " while the step is traced: a replay could not repeat it. Run this step eagerly (without "
                   "kiln::compile), or move that work out of the step function");
}

/// Builds one TracedCall's description: every array's storage (kept alive by the trace) and layout, and the
/// call's scalar parameters, which two traces of the same step must repeat.
class Entry {
 public:
  /// The shortest decimal form that reads back as v (std::to_string's six decimals would equate 1e-7 and 2e-7).
  static std::string exact(double v) {
    char buf[32];
    const auto r = std::to_chars(buf, buf + sizeof buf, v);
    return std::string(buf, r.ptr);
  }
  Entry(StepTrace& trace, std::string name) : trace_(trace) { call_.name = std::move(name); }
  Entry& array(const Array& a) {
    if (!a.defined()) {
      call_.detail += " -";
      return *this;
    }
    const std::shared_ptr<Storage>& held = held_storage(a);
    call_.storages.push_back(held.get());
    trace_.keep.push_back(held);
    call_.detail += " " + std::string(dtype_name(a.dtype())) + shape_str(a.shape()) + "/" + shape_str(a.strides()) +
                    "+" + std::to_string(a.offset());
    return *this;
  }
  Entry& array(const Array* a) { return a ? array(*a) : text("null"); }
  /// An array the call writes (a call that names its outputs this way writes nothing else).
  Entry& output(const Array& a) {
    call_.writes_known = true;
    if (a.defined()) call_.written.push_back(held_storage(a).get());
    return array(a);
  }
  /// A scalar parameter exactly (two traces must repeat it bit for bit), without iostreams.
  Entry& value(const Scalar& s) {
    switch (s.kind()) {
      case Scalar::Kind::Bool: return text(s.to_bool() ? "True" : "False");
      case Scalar::Kind::Int: return text(std::to_string(s.to_int64()));
      case Scalar::Kind::Complex: return text("(" + exact(s.to_double()) + "," + exact(s.imag()) + "j)");
      default: return text(exact(s.to_double()));
    }
  }
  Entry& number(double v) { return text(exact(v)); }
  Entry& text(const std::string& t) {
    call_.detail += " " + t;
    return *this;
  }
  /// The call's structured form, for the fusion pass.
  void structured(std::shared_ptr<RecordedElementwise> e, std::shared_ptr<RecordedFused> f, Backend& backend) {
    call_.elementwise = std::move(e);
    call_.fused = std::move(f);
    call_.backend = &backend;
  }
  void structured(std::shared_ptr<RecordedMatmul> m, Backend& backend) {
    call_.matmul = std::move(m);
    call_.backend = &backend;
  }
  void done(std::function<void()> replay) {
    call_.replay = std::move(replay);
    trace_.calls.push_back(std::move(call_));
  }

 private:
  /// The storage the record holds for `a`: the alias of one the step made, else a's own.
  const std::shared_ptr<Storage>& held_storage(const Array& a) const {
    const std::shared_ptr<Storage>* alias = alias_for(trace_, a.storage().get());
    return alias ? *alias : a.storage();
  }

  StepTrace& trace_;
  TracedCall call_;
};

/// Runs every call on `real_` and records it; the calls whose results the host inspects are refused.
class RecordingBackend final : public Backend {
 public:
  explicit RecordingBackend(Backend& real) : real_(real) {}

  void elementwise(const ElementwiseCall& call) override {
    run([&] { real_.elementwise(call); });
    auto o = std::make_shared<RecordedElementwise>(RecordedElementwise{call, {}});
    o->call.out = rec(call.out);
    Entry e(trace(), std::string("elementwise ") + op_info(call.op).name);
    e.text(std::string(dtype_name(call.compute)));
    for (const Scalar& p : call.params) e.value(p);
    for (int i = 0; i < call.num_inputs; ++i) {
      const ElementwiseArg& a = call.inputs[static_cast<size_t>(i)];
      if (a.is_scalar()) {
        e.value(a.scalar);
      } else {
        o->in[static_cast<size_t>(i)] = rec(*a.array);
        o->call.inputs[static_cast<size_t>(i)].array = &o->in[static_cast<size_t>(i)];
        e.array(*a.array);
      }
    }
    e.output(call.out);
    e.structured(o, nullptr, real_);
    e.done([o, &b = real_] { b.elementwise(o->call); });
  }

  void reduce(const ReduceCall& call) override {
    run([&] { real_.reduce(call); });
    struct Owned {
      ReduceCall call;
      Array in;
    };
    auto o = std::make_shared<Owned>(Owned{call, rec(*call.in)});
    o->call.in = &o->in;
    remap(o->call);
    Entry(trace(), std::string("reduce ") + reduce_op_name(call.op))
        .text(shape_str(call.axes))
        .array(*call.in)
        .output(call.out)
        .done([o, &b = real_] { b.reduce(o->call); });
  }

  void scan(const ScanCall& call) override {
    run([&] { real_.scan(call); });
    struct Owned {
      ScanCall call;
      Array in;
    };
    auto o = std::make_shared<Owned>(Owned{call, rec(*call.in)});
    o->call.in = &o->in;
    remap(o->call);
    Entry(trace(), std::string("scan ") + reduce_op_name(call.op))
        .array(*call.in)
        .output(call.out)
        .done([o, &b = real_] { b.scan(o->call); });
  }

  void matmul(const MatmulCall& call) override {
    if (call.gelu_grad_of) refuse("a product with gelu_tanh's gradient folded in (the fusion pass makes those)");
    run([&] { real_.matmul(call); });
    auto o = std::make_shared<RecordedMatmul>(RecordedMatmul{call, rec(*call.a), rec(*call.b), {}, {}, {}});
    o->call.out = rec(call.out);
    o->call.a = &o->a;
    o->call.b = &o->b;
    Entry e(trace(), "matmul");
    e.array(*call.a).array(*call.b).output(call.out);
    if (call.bias) {
      o->bias = rec(*call.bias);
      o->call.bias = &o->bias;
      e.text("bias").array(*call.bias).text(call.bias_added ? "folded" : "not folded");
    }
    if (call.pre_gelu) {
      o->pre_gelu = rec(*call.pre_gelu);
      o->call.pre_gelu = &o->pre_gelu;
      e.text("gelu").output(*call.pre_gelu).text(call.gelu_applied ? "applied" : "not applied");
    }
    e.structured(o, real_);
    // A backend that declined the bias or the GELU left them to the core, which ran them as later calls.
    e.done([o, &b = real_] {
      o->call.bias_added = o->call.gelu_applied = false;
      b.matmul(o->call);
    });
  }

  void random(const RandomCall& call) override {
    if (call.graph_state) refuse("a random draw inside a CUDA graph capture");
    const uint64_t rel = stream_position(call.seed, call.offset, "a random draw");
    run([&] { real_.random(call); });
    auto o = std::make_shared<RandomCall>(call);
    o->out = rec(call.out);
    Entry(trace(), "random")
        .number(static_cast<double>(static_cast<int>(call.distribution)))
        .number(call.a)
        .number(call.b)
        .text(std::to_string(call.low) + ".." + std::to_string(call.high) + " blocks " + std::to_string(call.blocks) +
              " at +" + std::to_string(rel))
        .output(call.out)
        .done([o, rel, start = trace().replay_start, &b = real_] {
          o->seed = start->seed;
          o->offset = start->offset + rel;
          b.random(*o);
        });
  }

  int linalg_solve(const SolveCall&) override { refuse("linalg: a solver (its result is checked on the host)"); }
  int linalg_svd(const SvdCall&) override { refuse("linalg: an SVD (its result is checked on the host)"); }
  bool linalg_factor(FactorCall&) override { refuse("linalg: a factorisation (its result is checked on the host)"); }

  bool sort(const SortCall& call) override {
    bool ran = false;
    run([&] { ran = real_.sort(call); });
    if (!ran) return false;
    struct Owned {
      SortCall call;
      Array in;
    };
    auto o = std::make_shared<Owned>(Owned{call, rec(*call.in)});
    o->call.in = &o->in;
    remap(o->call);
    Entry(trace(), "sort").array(*call.in).array(call.indices).array(call.values).done([o, &b = real_] {
      b.sort(o->call);
    });
    return true;
  }

  bool fft(const FftCall& call) override {
    bool ran = false;
    run([&] { ran = real_.fft(call); });
    if (!ran) return false;
    struct Owned {
      FftCall call;
      Array in;
    };
    auto o = std::make_shared<Owned>(Owned{call, rec(*call.in)});
    o->call.in = &o->in;
    remap(o->call);
    Entry(trace(), "fft")
        .number(static_cast<double>(static_cast<int>(call.kind)))
        .text(call.forward ? "forward" : "inverse")
        .text(shape_str(Shape(call.axes.begin(), call.axes.end())))
        .array(*call.in)
        .array(call.out)
        .done([o, &b = real_] { b.fft(o->call); });
    return true;
  }

  GraphRandom* graph_random(Device device) override { return real_.graph_random(device); }

  bool fused(const FusionCall& call) override {
    bool ran = false;
    run([&] { ran = real_.fused(call); });
    if (!ran) return false;
    auto o = std::make_shared<RecordedFused>(RecordedFused{call, {}, call.graph->weak_from_this().lock()});
    for (Array& out : o->call.outs) out = rec(out);
    Entry e(trace(), "fused " + call.graph->name);
    e.text(std::to_string(call.graph->hash)).text(shape_str(call.shape)).text(shape_str(call.axes));
    for (const Scalar& s : call.slot_values) e.value(s);
    o->arrays.reserve(call.arrays.size());
    for (const Array* a : call.arrays) o->arrays.push_back(a ? rec(*a) : Array());
    for (size_t i = 0; i < call.arrays.size(); ++i) {
      o->call.arrays[i] = call.arrays[i] ? &o->arrays[i] : nullptr;
      e.array(call.arrays[i]);
    }
    for (const Array& out : call.outs) e.output(out);
    e.structured(nullptr, o, real_);
    e.done([o, &b = real_] { b.fused(o->call); });
    return true;
  }

  void multi_tensor(const MultiTensorCall& call) override {
    run([&] { real_.multi_tensor(call); });
    struct Owned {
      MultiTensorCall call;
      std::vector<std::vector<Array>> arrays;
      std::shared_ptr<const FusionGraph> graph;
    };
    auto o = std::make_shared<Owned>(Owned{call, {}, call.graph->weak_from_this().lock()});
    Entry e(trace(), "multi_tensor " + call.graph->name);
    e.text(std::to_string(call.graph->hash));
    for (const Scalar& s : call.slot_values) e.value(s);
    for (const Scalar& s : call.scalars) e.value(s);
    o->arrays.resize(call.groups.size());
    for (size_t g = 0; g < call.groups.size(); ++g) {
      const MultiTensorGroup& group = call.groups[g];
      e.text("|" + std::to_string(group.size));
      o->arrays[g].reserve(group.arrays.size());
      for (const Array* a : group.arrays) o->arrays[g].push_back(a ? rec(*a) : Array());
      for (Array& out : o->call.groups[g].outs) out = rec(out);
      for (size_t i = 0; i < group.arrays.size(); ++i) {
        o->call.groups[g].arrays[i] = group.arrays[i] ? &o->arrays[g][i] : nullptr;
        e.array(group.arrays[i]);
      }
      for (const Array& out : group.outs) e.array(out);
    }
    e.done([o, &b = real_] { b.multi_tensor(o->call); });
  }

  void user_elementwise(const UserElementwiseCall& call) override {
    run([&] { real_.user_elementwise(call); });
    auto o = std::make_shared<UserElementwiseCall>(call);
    for (BoundArg& a : o->args)
      if (!a.is_scalar) a.array = rec(a.array);
    Entry e(trace(), "user kernel " + std::to_string(reinterpret_cast<uintptr_t>(call.kernel)));
    for (const BoundArg& a : call.args) a.is_scalar ? e.value(a.scalar) : e.array(a.array);
    e.done([o, &b = real_] { b.user_elementwise(*o); });
  }

  void user_reduction(const UserReductionCall& call) override {
    run([&] { real_.user_reduction(call); });
    auto o = std::make_shared<UserReductionCall>(call);
    for (BoundArg& a : o->args)
      if (!a.is_scalar) a.array = rec(a.array);
    Entry e(trace(), "user reduction " + std::to_string(reinterpret_cast<uintptr_t>(call.kernel)));
    e.text(shape_str(call.axes));
    for (const BoundArg& a : call.args) a.is_scalar ? e.value(a.scalar) : e.array(a.array);
    e.done([o, &b = real_] { b.user_reduction(*o); });
  }

  bool convolution(const ConvCall& call) override {
    bool ran = false;
    run([&] { ran = real_.convolution(call); });
    if (!ran) return false;
    struct Owned {
      ConvCall call;
      Array x, w, dy;
    };
    auto o = std::make_shared<Owned>(Owned{call, own(call.x), own(call.w), own(call.dy)});
    o->call.out = rec(call.out);
    o->call.x = call.x ? &o->x : nullptr;
    o->call.w = call.w ? &o->w : nullptr;
    o->call.dy = call.dy ? &o->dy : nullptr;
    Entry(trace(), "convolution")
        .number(static_cast<double>(static_cast<int>(call.kind)))
        .text(std::to_string(call.stride[0]) + "," + std::to_string(call.stride[1]) + " " +
              std::to_string(call.padding[0]) + "," + std::to_string(call.padding[1]) + " " +
              std::to_string(call.dilation[0]) + "," + std::to_string(call.dilation[1]) + " " +
              std::to_string(call.groups))
        .array(call.x)
        .array(call.w)
        .array(call.dy)
        .array(call.out)
        .done([o, &b = real_] { b.convolution(o->call); });
    return true;
  }

  bool batch_norm(BatchNormCall& call) override {
    bool ran = false;
    run([&] { ran = real_.batch_norm(call); });
    if (!ran) return false;
    struct Owned {
      BatchNormCall call;
      Array x, weight, bias, running_mean, running_var, dy;
    };
    auto o = std::make_shared<Owned>(Owned{call, own(call.x), own(call.weight), own(call.bias),
                                           own(call.running_mean), own(call.running_var), own(call.dy)});
    for (Array* a : {&o->call.scale_shift, &o->call.y, &o->call.mean, &o->call.invstd, &o->call.dx, &o->call.dweight,
                     &o->call.dbias})
      *a = rec(*a);
    o->call.x = call.x ? &o->x : nullptr;
    o->call.weight = call.weight ? &o->weight : nullptr;
    o->call.bias = call.bias ? &o->bias : nullptr;
    o->call.running_mean = call.running_mean ? &o->running_mean : nullptr;
    o->call.running_var = call.running_var ? &o->running_var : nullptr;
    o->call.dy = call.dy ? &o->dy : nullptr;
    // A backend that applied the ReLU applies it again; one that did not left it to the core's later calls.
    const bool relu_done = call.relu_done;
    Entry(trace(), "batch_norm")
        .number(static_cast<double>(static_cast<int>(call.kind)))
        .number(call.momentum)
        .number(call.eps)
        .text(call.relu ? (relu_done ? "relu done" : "relu left") : "")
        .array(call.x)
        .array(call.weight)
        .array(call.bias)
        .array(call.running_mean)
        .array(call.running_var)
        .array(call.dy)
        .array(call.scale_shift)
        .array(call.y)
        .array(call.mean)
        .array(call.invstd)
        .array(call.dx)
        .array(call.dweight)
        .array(call.dbias)
        .done([o, &b = real_] {
          o->call.relu_done = false;
          b.batch_norm(o->call);
        });
    return true;
  }

  bool layer_norm_backward(LayerNormBackwardCall& call) override {
    bool ran = false;
    run([&] { ran = real_.layer_norm_backward(call); });
    if (!ran) return false;
    struct Owned {
      LayerNormBackwardCall call;
      Array x, dy, weight, mean, rstd;
    };
    auto o = std::make_shared<Owned>(
        Owned{call, own(call.x), own(call.dy), own(call.weight), own(call.mean), own(call.rstd)});
    for (Array* a : {&o->call.dx, &o->call.dweight, &o->call.dbias}) *a = rec(*a);
    o->call.x = &o->x, o->call.dy = &o->dy, o->call.weight = &o->weight, o->call.mean = &o->mean;
    o->call.rstd = &o->rstd;
    Entry(trace(), "layer_norm_backward")
        .array(call.x)
        .array(call.dy)
        .array(call.weight)
        .array(call.mean)
        .array(call.rstd)
        .output(call.dx)
        .output(call.dweight)
        .output(call.dbias)
        .done([o, &b = real_] { b.layer_norm_backward(o->call); });
    return true;
  }

  bool pooling(const PoolCall& call) override {
    bool ran = false;
    run([&] { ran = real_.pooling(call); });
    if (!ran) return false;
    struct Owned {
      PoolCall call;
      Array x, y, dy;
    };
    auto o = std::make_shared<Owned>(Owned{call, own(call.x), own(call.y), own(call.dy)});
    o->call.out = rec(call.out);
    o->call.x = call.x ? &o->x : nullptr;
    o->call.y = call.y ? &o->y : nullptr;
    o->call.dy = call.dy ? &o->dy : nullptr;
    Entry(trace(), "pooling")
        .number(static_cast<double>(static_cast<int>(call.kind)))
        .text(std::to_string(call.kernel[0]) + "," + std::to_string(call.kernel[1]) + " " +
              std::to_string(call.stride[0]) + "," + std::to_string(call.stride[1]) + " " +
              std::to_string(call.padding[0]) + "," + std::to_string(call.padding[1]) + " " +
              std::to_string(call.dilation[0]) + "," + std::to_string(call.dilation[1]))
        .array(call.x)
        .array(call.y)
        .array(call.dy)
        .array(call.out)
        .done([o, &b = real_] { b.pooling(o->call); });
    return true;
  }

  bool cross_entropy(CrossEntropyCall& call) override {
    bool ran = false;
    run([&] { ran = real_.cross_entropy(call); });
    if (!ran) return false;
    struct Owned {
      CrossEntropyCall call;
      Array logits, labels, grad;
    };
    auto o = std::make_shared<Owned>(Owned{call, own(call.logits), own(call.labels), own(call.grad)});
    for (Array* a : {&o->call.loss, &o->call.lse, &o->call.dx}) *a = rec(*a);
    o->call.logits = call.logits ? &o->logits : nullptr;
    o->call.labels = call.labels ? &o->labels : nullptr;
    o->call.grad = call.grad ? &o->grad : nullptr;
    Entry(trace(), "cross_entropy")
        .number(static_cast<double>(static_cast<int>(call.kind)))
        .number(call.ls)
        .array(call.logits)
        .array(call.labels)
        .array(call.grad)
        .array(call.lse)
        .array(call.loss)
        .array(call.dx)
        .done([o, &b = real_] { b.cross_entropy(o->call); });
    return true;
  }

  bool attention(AttentionCall& call) override {
    const random::GeneratorState before = random::get_state();
    bool ran = false;
    run([&] { ran = real_.attention(call); });
    if (!ran) return false;
    struct Owned {
      AttentionCall call;
      Array q, k, v, out, dout;
    };
    auto o = std::make_shared<Owned>(Owned{call, own(call.q), own(call.k), own(call.v), own(call.out),
                                           own(call.dout)});
    for (Array* a : {&o->call.o, &o->call.lse, &o->call.dq, &o->call.dk, &o->call.dv, &o->call.rng}) *a = rec(*a);
    o->call.q = call.q ? &o->q : nullptr;
    o->call.k = call.k ? &o->k : nullptr;
    o->call.v = call.v ? &o->v : nullptr;
    o->call.out = call.out ? &o->out : nullptr;
    o->call.dout = call.dout ? &o->dout : nullptr;
    // A forward with dropout takes its mask's blocks from the default generator itself: a replay sets the
    // generator where the trace found it.
    const bool draws = call.kind == AttentionKind::Forward && call.dropout > 0;
    const uint64_t rel = draws ? stream_position(before.seed, before.offset, "attention's dropout") : 0;
    Entry(trace(), "attention")
        .text(draws ? "draws at +" + std::to_string(rel) : "")
        .number(static_cast<double>(static_cast<int>(call.kind)))
        .number(call.scale)
        .number(call.dropout)
        .text(call.causal ? "causal" : "")
        .array(call.q)
        .array(call.k)
        .array(call.v)
        .array(call.out)
        .array(call.dout)
        .array(call.o)
        .array(call.lse)
        .array(call.dq)
        .array(call.dk)
        .array(call.dv)
        .array(call.rng)
        .done([o, draws, rel, start = trace().replay_start, &b = real_] {
          if (draws) random::set_state({start->seed, start->offset + rel});
          b.attention(o->call);
        });
    return true;
  }

  bool rnn(RnnCall& call) override {
    if (call.kind == RnnKind::Layout) return real_.rnn(call);  // a size query: no device work
    refuse("a recurrent layer (its backend allocates its reserve and weight gradients at each call)");
  }

  RawKernelBackend* raw_kernels() override { refuse("a RawKernel or RawModule launch"); }

  bool check_range(const Array& values, int64_t lo, int64_t hi, int32_t code) override {
    bool ran = false;
    run([&] { ran = real_.check_range(values, lo, hi, code); });
    if (!ran) return false;
    Entry(trace(), "check_range")
        .text(std::to_string(lo) + ".." + std::to_string(hi) + " " + std::to_string(code))
        .array(values)
        .done([v = rec(values), lo, hi, code, &b = real_] { b.check_range(v, lo, hi, code); });
    return true;
  }

 private:
  static StepTrace& trace() { return *t_state.trace; }
  /// Blocks past the trace's start of the default generator's stream at which a draw seeded `seed` at `offset`
  /// begins; refuses a draw from another stream (a user's own Generator, or after random::seed inside the step).
  static uint64_t stream_position(uint64_t seed, uint64_t offset, const char* what) {
    const random::GeneratorState& start = trace().start;
    if (seed != start.seed || offset < start.offset)
      refuse(std::string(what) + " from a user's kiln::random::Generator or a generator seeded inside the step (a "
                                 "replay draws from the default generator's stream, past where the step began)");
    return offset - start.offset;
  }
  static Array own(const Array* a) { return a ? rec(*a) : Array(); }
  /// `a` as the record holds it (recorded_array).
  static Array rec(const Array& a) { return a.defined() ? recorded_array(trace(), a) : Array(); }
  /// The arrays a call struct holds by value, as the record holds them.
  static void remap(ReduceCall& c) { c.out = rec(c.out); }
  static void remap(ScanCall& c) { c.out = rec(c.out); }
  static void remap(SortCall& c) {
    c.indices = rec(c.indices);
    c.values = rec(c.values);
  }
  static void remap(FftCall& c) { c.out = rec(c.out); }
  template <class F>
  static void run(F&& f) {
    InCall in;
    f();
  }

  Backend& real_;
};

}  // namespace

StepTraceScope::StepTraceScope(StepTrace& trace) {
  if (t_state.trace) throw ValueError("compile: a step is already being traced on this thread; do not nest them");
  t_state.trace = &trace;
  t_state.in_call = false;
  g_tracing.fetch_add(1, std::memory_order_relaxed);
  trace.start = random::get_state();
}

StepTraceScope::~StepTraceScope() {
  t_state.trace->end = random::get_state();
  t_state.trace->wrappers.clear();
  t_state.trace = nullptr;
  g_tracing.fetch_sub(1, std::memory_order_relaxed);
}

StepTrace* active_step_trace() {
  if (g_tracing.load(std::memory_order_relaxed) == 0) return nullptr;
  return t_state.in_call ? nullptr : t_state.trace;
}

Backend& traced_backend(Backend& real) {
  StepTrace* trace = active_step_trace();
  if (!trace) return real;
  std::shared_ptr<Backend>& w = trace->wrappers[&real];
  if (!w) w = std::make_shared<RecordingBackend>(real);
  return *w;
}

void host_step(const std::string& op, std::vector<Array> arrays, const std::function<void()>& now,
               std::function<void()> replay) {
  StepTrace* trace = active_step_trace();
  if (!trace) {
    now();
    return;
  }
  {
    InCall in;
    now();
  }
  Entry e(*trace, "host: " + op);
  for (const Array& a : arrays) e.array(a);
  e.done([keep = std::move(arrays), replay = std::move(replay)] {
    InCall in;
    replay();
  });
}

void refuse_host_read_while_tracing(const char* op) {
  if (active_step_trace()) refuse(std::string("reading array values on the host (") + op + ")");
}

/// The memory of one traced step's arrays: blocks carved from large chunks of the device's allocator, handed
/// back when the step drops an array and reused by its later arrays of the same device and stream (the stream
/// order then keeps a GPU's reuse safe, as the caching allocator's). Chunks are never returned while the pool
/// lives: the record's aliases and the replays keep using them.
class TracePool : public std::enable_shared_from_this<TracePool> {
 public:
  std::shared_ptr<Storage> allocate(DeviceRuntime& owner, size_t nbytes, Device device, const ArrayOptions& options) {
    const size_t size = (nbytes + kAlign - 1) / kAlign * kAlign;
    const Key key{device.type, device.index, device.is_cuda() ? Stream::current(device).handle() : nullptr};
    std::lock_guard<std::mutex> lock(mutex_);
    Place& place = places_[key];
    char* data = nullptr;
    size_t got = 0;
    auto it = place.free.lower_bound(size);  // the smallest free block that fits
    if (it != place.free.end()) {
      data = it->second;
      got = it->first;
      place.free.erase(it);
      if (got - size >= kSplit) {  // the rest stays free
        place.free.emplace(got - size, data + size);
        got = size;
      }
    } else {
      if (place.left < size) {  // a new chunk, each twice the last up to kMaxChunk (a small step takes little)
        place.chunk = std::min(kMaxChunk, place.chunk ? 2 * place.chunk : kFirstChunk);
        const size_t chunk = std::max(size, place.chunk);
        chunks_.push_back(owner.allocate(static_cast<int64_t>(chunk), device, options));
        place.next = static_cast<char*>(chunks_.back()->data());
        place.left = chunk;
      }
      data = place.next;
      got = size;
      place.next += size;
      place.left -= size;
    }
    in_use_ += got;
    peak_ = std::max(peak_, in_use_);
    auto* freed = new Freed{shared_from_this(), key, got};
    return std::make_shared<Storage>(data, nbytes, device, &release, freed, false);
  }

  /// The most bytes the step's arrays held at once while traced.
  size_t peak() {
    std::lock_guard<std::mutex> lock(mutex_);
    return peak_;
  }

 private:
  static constexpr size_t kAlign = 512, kSplit = 4096, kFirstChunk = size_t{2} << 20, kMaxChunk = size_t{64} << 20;
  struct Key {
    DeviceType type;
    int index;
    void* stream;
    bool operator<(const Key& o) const {
      return std::tie(type, index, stream) < std::tie(o.type, o.index, o.stream);
    }
  };
  struct Place {
    std::multimap<size_t, char*> free;  ///< free blocks by size
    char* next = nullptr;               ///< the current chunk's unused part
    size_t left = 0;
    size_t chunk = 0;  ///< the last chunk's size
  };
  struct Freed {
    std::shared_ptr<TracePool> pool;
    Key key;
    size_t size;
  };
  static void release(void* context, void* data) {
    std::unique_ptr<Freed> f(static_cast<Freed*>(context));
    std::lock_guard<std::mutex> lock(f->pool->mutex_);
    f->pool->places_[f->key].free.emplace(f->size, static_cast<char*>(data));
    f->pool->in_use_ -= f->size;
  }

  std::mutex mutex_;
  size_t in_use_ = 0, peak_ = 0;
  std::vector<std::shared_ptr<Storage>> chunks_;
  std::map<Key, Place> places_;
};

std::shared_ptr<Storage> traced_allocate(DeviceRuntime& owner, int64_t nbytes, Device device,
                                         const ArrayOptions& options) {
  StepTrace* trace = active_step_trace();
  if (!trace || options.pinned || nbytes <= 0) return nullptr;
  if (!trace->pool) trace->pool = std::make_shared<TracePool>();
  return trace->pool->allocate(owner, static_cast<size_t>(nbytes), device, options);
}

void note_allocation(const std::shared_ptr<Storage>& storage) {
  StepTrace* trace = active_step_trace();
  if (!trace) return;
  auto alias = std::make_shared<Storage>(storage->data(), storage->nbytes(), storage->device(), nullptr, nullptr,
                                         storage->pinned());
  trace->created.insert(alias.get());
  trace->made[alias.get()] = storage;
  trace->alias_of[storage.get()] = alias;
  trace->keep.push_back(std::move(alias));
}

int64_t trace_memory_peak(const StepTrace& trace) {
  return trace.pool ? static_cast<int64_t>(trace.pool->peak()) : 0;
}

Array recorded_array(const StepTrace& trace, const Array& a) {
  const std::shared_ptr<Storage>* alias = alias_for(trace, a.storage().get());
  if (!alias) return a.detach();
  return Array(*alias, a.shape(), a.strides(), a.offset(), a.dtype());
}

bool same_memory(const Storage* a, const Storage* b) {
  if (a == b) return true;
  if (!a || !b || a->nbytes() == 0 || b->nbytes() == 0 || !(a->device() == b->device())) return false;
  const auto* x = static_cast<const char*>(a->data());
  const auto* y = static_cast<const char*>(b->data());
  return x < y + b->nbytes() && y < x + a->nbytes();
}

}  // namespace kiln::detail
