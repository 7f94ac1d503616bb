// kiln::compile: two traces of a step compared op for op, then replays of the second (kiln/compile.hpp).
#include "kiln/compile.hpp"

#include <algorithm>
#include <map>
#include <string>
#include <utility>

#include "core/step_trace.hpp"
#include "kiln/error.hpp"
#include "kiln/random.hpp"

namespace kiln {

struct CompiledStep::State {
  Function fn;
  StepCompileOptions options;
  std::vector<Array> inputs;   ///< the traced inputs (copies the calls' inputs are written into)
  std::vector<Array> outputs;  ///< the second trace's outputs, which its replays overwrite
  std::unique_ptr<detail::StepTrace> first, program;
  int64_t warmed = 0, eager = 0, traced = 0, replayed = 0, fused = 0;
};

namespace {

const char* kWhy =
    "; a compiled step must run the same ops on the same arrays at every call. Host values that change from step "
    "to step (a learning-rate schedule, Adam without AdamOptions::capturable, a Python/C++ branch on the step "
    "count) are read once by a trace: keep them in arrays, raise StepCompileOptions::warmup when state is made late, "
    "or run the step eagerly";

std::string describe(const detail::TracedCall& c) { return c.name + ":" + c.detail; }

/// Throws ValueError at the first op where the two traces differ: another op or operand layout, a storage made
/// by the step in one and not the other, or another parameter or state array.
void require_same(const detail::StepTrace& a, const detail::StepTrace& b) {
  const size_t n = std::min(a.calls.size(), b.calls.size());
  std::map<const Storage*, const Storage*> forward, backward;
  for (size_t i = 0; i < n; ++i) {
    const detail::TracedCall& x = a.calls[i];
    const detail::TracedCall& y = b.calls[i];
    const std::string at = "compile: the step's two traces differ at op " + std::to_string(i) + " of " +
                           std::to_string(a.calls.size()) + " (";
    if (x.name != y.name || x.detail != y.detail || x.storages.size() != y.storages.size())
      throw ValueError(at + "first trace " + describe(x) + ", second " + describe(y) + ")" + kWhy);
    for (size_t k = 0; k < x.storages.size(); ++k) {
      const Storage* s = x.storages[k];
      const Storage* t = y.storages[k];
      const bool made_s = a.created.count(s) > 0, made_t = b.created.count(t) > 0;
      const std::string which = describe(x) + ", operand " + std::to_string(k) + ")";
      if (made_s != made_t)
        throw ValueError(at + which + ": the array is made by the step in " + (made_s ? "the first" : "the second") +
                         " trace and existed before the other (state made during a traced step, such as gradients "
                         "kept from the step before or an optimizer's first moments)" + kWhy);
      if (!made_s && s != t)
        throw ValueError(at + which + ": the two traces use different arrays that existed before the step" + kWhy);
      if (made_s) {
        const auto [f, fresh_f] = forward.emplace(s, t);
        const auto [g, fresh_g] = backward.emplace(t, s);
        if (f->second != t || g->second != s)
          throw ValueError(at + which + ": the arrays the step makes are used in another pattern" + kWhy);
      }
    }
  }
  if (a.calls.size() != b.calls.size())
    throw ValueError("compile: the step ran " + std::to_string(a.calls.size()) + " ops in its first trace and " +
                     std::to_string(b.calls.size()) + " in its second" + kWhy);
  if (a.end.offset - a.start.offset != b.end.offset - b.start.offset)
    throw ValueError("compile: the step moved the default random generator by " +
                     std::to_string(a.end.offset - a.start.offset) + " blocks in its first trace and " +
                     std::to_string(b.end.offset - b.start.offset) + " in its second" + kWhy);
}

bool same_signature(const Array& a, const Array& b) {
  return a.defined() && a.shape() == b.shape() && a.dtype() == b.dtype() && a.device() == b.device();
}

std::vector<Array> run_traced(CompiledStep::Function& fn, const std::vector<Array>& inputs, detail::StepTrace& t) {
  std::vector<Array> out;
  {
    detail::StepTraceScope scope(t);
    out = fn(inputs);
  }
  for (size_t i = 0; i < out.size(); ++i)
    if (!out[i].defined())
      throw ValueError("compile: output " + std::to_string(i) + " of the step is an undefined Array; return arrays "
                       "the step computed");
  for (Array& o : out) o = o.detach();
  if (t.end.seed != t.start.seed)
    throw ValueError("compile: the step seeded the default random generator (random::seed) while traced; a replay "
                     "continues its stream instead: seed it before calling the step");
  return out;
}

}  // namespace

CompiledStep::CompiledStep(Function fn, StepCompileOptions options) : state_(std::make_unique<State>()) {
  if (!fn) throw ValueError("compile: the step function is empty; pass a callable");
  if (options.warmup < 0)
    throw ValueError("compile: warmup must be >= 0, got " + std::to_string(options.warmup));
  state_->fn = std::move(fn);
  state_->options = options;
}
CompiledStep::~CompiledStep() = default;
CompiledStep::CompiledStep(CompiledStep&&) noexcept = default;
CompiledStep& CompiledStep::operator=(CompiledStep&&) noexcept = default;

std::vector<Array> CompiledStep::operator()(const std::vector<Array>& inputs) {
  State& s = *state_;
  if (detail::active_step_trace())
    throw ValueError("compile: a compiled step called inside a step that is being traced; a replay runs its calls "
                     "without the tracer seeing them: call the inner function itself, not its compiled form");
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined())
      throw ValueError("compile: input " + std::to_string(i) + " is an undefined Array; pass the step's data");
    if (inputs[i].requires_grad())
      throw ValueError("compile: input " + std::to_string(i) + " requires grad; a compiled step's inputs are its "
                       "data (the batch), copied in at each call: pass parameters by capture, or detach() it");
  }
  if (s.warmed < s.options.warmup) {
    ++s.warmed;
    ++s.eager;
    return s.fn(inputs);
  }
  bool same = s.inputs.empty() || s.inputs.size() == inputs.size();
  for (size_t i = 0; same && i < s.inputs.size(); ++i) same = same_signature(inputs[i], s.inputs[i]);
  if (!same) {  // another shape (a last partial batch): as it is
    ++s.eager;
    return s.fn(inputs);
  }
  if (s.inputs.empty()) {
    for (const Array& x : inputs) s.inputs.push_back(x.copy());
  } else {
    for (size_t i = 0; i < inputs.size(); ++i)
      if (inputs[i].device() == s.inputs[i].device())
        s.inputs[i].assign(inputs[i]);
      else
        s.inputs[i].copy_from(inputs[i]);
  }
  if (s.program) {
    // The draws at their traced places past the generator's state now; the generator then as far past it.
    const random::GeneratorState start = random::get_state();
    *s.program->replay_start = start;
    for (const detail::TracedCall& c : s.program->calls) c.replay();
    random::set_state({start.seed, start.offset + (s.program->end.offset - s.program->start.offset)});
    ++s.replayed;
    return s.outputs;
  }
  auto trace = std::make_unique<detail::StepTrace>();
  std::vector<Array> out = run_traced(s.fn, s.inputs, *trace);
  ++s.traced;
  if (!s.first) {
    s.first = std::move(trace);
    return out;
  }
  std::unique_ptr<detail::StepTrace> first = std::move(s.first);
  require_same(*first, *trace);
  s.program = std::move(trace);
  s.outputs = out;
  first.reset();
  if (s.options.fuse) s.fused = detail::fuse_step_trace(*s.program, s.options.epilogues);
  return out;
}

bool CompiledStep::compiled() const { return state_->program != nullptr; }
int64_t CompiledStep::recorded_ops() const {
  return state_->program ? static_cast<int64_t>(state_->program->calls.size()) : 0;
}
int64_t CompiledStep::fused_ops() const { return state_->fused; }
int64_t CompiledStep::memory_bytes() const {
  return state_->program ? detail::trace_memory_peak(*state_->program) : 0;
}
int64_t CompiledStep::eager_calls() const { return state_->eager; }
int64_t CompiledStep::traced_calls() const { return state_->traced; }
int64_t CompiledStep::replays() const { return state_->replayed; }

std::string CompiledStep::summary() const {
  if (!state_->program) return "";
  std::map<std::string, int64_t> counts;
  for (const detail::TracedCall& c : state_->program->calls) ++counts[c.name];
  std::vector<std::pair<std::string, int64_t>> sorted(counts.begin(), counts.end());
  std::stable_sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  std::string out;
  for (const auto& [name, n] : sorted) out += name + ": " + std::to_string(n) + "\n";
  return out;
}

CompiledStep compile(CompiledStep::Function fn, StepCompileOptions options) {
  return CompiledStep(std::move(fn), options);
}

bool tracing_step() { return detail::active_step_trace() != nullptr; }

}  // namespace kiln
