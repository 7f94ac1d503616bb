// Random front-ends: the default generator (the one global random state), Generator objects (independent
// states), and uniform/normal/randint, which check their arguments, reserve Philox blocks
// and hand a RandomCall to the device's backend. The stream itself is defined in
// include/kiln/random.hpp and implemented in core/philox.hpp.
#include "kiln/random.hpp"

#include <fmt/format.h>

#include <cmath>
#include <limits>
#include <mutex>
#include <string>

#include "core/backend.hpp"
#include "core/philox.hpp"

namespace kiln::random {
using detail::RandomDistribution;

/// One generator's locked state: every access holds the mutex; a draw reserves its blocks (advancing the
/// offset) under the lock, so threads drawing at the same time get disjoint counters.
struct Generator::State {
  void set(const GeneratorState& s) {
    std::lock_guard<std::mutex> lock(mutex);
    state = s;
  }
  GeneratorState get() {
    std::lock_guard<std::mutex> lock(mutex);
    return state;
  }
  /// Returns the state to draw `blocks` blocks from and advances the offset past them.
  GeneratorState reserve(uint64_t blocks) {
    std::lock_guard<std::mutex> lock(mutex);
    GeneratorState drawn = state;
    state.offset += blocks;
    return drawn;
  }
  std::mutex mutex;
  GeneratorState state;
};

namespace {

/// The default generator: the single owner of the process's random state.
Generator::State& default_generator() {
  static Generator::State generator;
  return generator;
}

std::string number(double v) { return fmt::format("{}", v); }

void require_floating(const char* op, DType dtype) {
  if (!is_floating(dtype))
    throw DTypeError(std::string(op) + ": dtype " + std::string(dtype_name(dtype)) +
                     " is not supported; it draws floating values, so pass float16, bfloat16, float32 or float64 "
                     "(use random.randint for integers)");
}

/// The bound must be finite, and within float range when the dtype computes in float.
void require_finite(const char* op, const char* what, double value, DType dtype) {
  bool in_float = dtype != DType::Float64;
  double max = in_float ? static_cast<double>(std::numeric_limits<float>::max()) : std::numeric_limits<double>::max();
  if (!(std::fabs(value) <= max))
    throw ValueError(std::string(op) + ": " + what + " = " + number(value) + " is out of range for dtype " +
                     std::string(dtype_name(dtype)) + (in_float ? " (computed in float32)" : "") +
                     "; pass a finite value" + (in_float ? " within float32 range" : ""));
}

/// Runs `call` into a new array, with blocks reserved from `own` (a Generator) or the default generator.
Array draw(detail::RandomCall call, const Shape& shape, DType dtype, std::optional<Device> device, uint64_t span,
           Generator::State* own) {
  Device d = device.value_or(current_device());
  detail::Backend& backend = detail::backend_for(d);
  detail::GraphRandom* graph = backend.graph_random(d);
  // Refused before anything is allocated, so the capture stays as it was.
  if (graph && own)
    throw ValueError("random.Generator: a draw on " + d.str() +
                     " is being captured in a CUDA graph, whose replays advance only the default generator; "
                     "draw with kiln::random::uniform/normal/randint inside the capture");
  call.out = detail::make_array(shape, dtype, d);
  int64_t n = call.out.size();
  uint64_t blocks = detail::philox::block_count(call.distribution, dtype, n, span);
  if (blocks == 0) return call.out;
  call.blocks = blocks;
  if (graph) {
    // Captured: the blocks are relative to the base offset each replay writes to graph->state.
    call.graph_state = graph->state;
    call.offset = graph->blocks;
    graph->blocks += blocks;
  } else {
    GeneratorState state = (own ? *own : default_generator()).reserve(blocks);
    call.seed = state.seed;
    call.offset = state.offset;
  }
  backend.random(call);
  return call.out;
}

detail::RandomCall uniform_call(double low, double high, DType dtype) {
  const char* op = "random.uniform";
  require_floating(op, dtype);
  require_finite(op, "low", low, dtype);
  require_finite(op, "high", high, dtype);
  if (!(high > low))
    throw ValueError(std::string(op) + ": high (" + number(high) + ") must be greater than low (" + number(low) +
                     "); the interval [low, high) is empty otherwise");
  require_finite(op, "high - low", high - low, dtype);
  detail::RandomCall call;
  call.distribution = RandomDistribution::Uniform;
  call.a = low;
  call.b = high;
  return call;
}

detail::RandomCall normal_call(double mean, double stddev, DType dtype) {
  const char* op = "random.normal";
  require_floating(op, dtype);
  require_finite(op, "mean", mean, dtype);
  require_finite(op, "stddev", stddev, dtype);
  if (stddev < 0.0)
    throw ValueError(std::string(op) + ": stddev = " + number(stddev) + " is negative; pass stddev >= 0");
  detail::RandomCall call;
  call.distribution = RandomDistribution::Normal;
  call.a = mean;
  call.b = stddev;
  return call;
}

}  // namespace

void seed(uint64_t s) { default_generator().set(GeneratorState{s, 0}); }
GeneratorState get_state() { return default_generator().get(); }
void set_state(const GeneratorState& state) { default_generator().set(state); }

Array uniform(const Shape& shape, double low, double high, DType dtype, std::optional<Device> device) {
  return draw(uniform_call(low, high, dtype), shape, dtype, device, 0, nullptr);
}

Array uniform(const Shape& shape, DType dtype, std::optional<Device> device) {
  return uniform(shape, 0.0, 1.0, dtype, device);
}

Array normal(const Shape& shape, double mean, double stddev, DType dtype, std::optional<Device> device) {
  return draw(normal_call(mean, stddev, dtype), shape, dtype, device, 0, nullptr);
}

Array normal(const Shape& shape, DType dtype, std::optional<Device> device) {
  return normal(shape, 0.0, 1.0, dtype, device);
}

namespace {
/// The checked randint call; its draw needs the span too (philox::randint_span).
detail::RandomCall randint_call(int64_t low, int64_t high, DType dtype) {
  const char* op = "random.randint";
  if (!is_integral(dtype))
    throw DTypeError(std::string(op) + ": dtype " + std::string(dtype_name(dtype)) +
                     " is not supported; it draws integers, so pass int8, int16, int32, int64 or uint8 "
                     "(use random.uniform for floating values)");
  if (high <= low)
    throw ValueError(std::string(op) + ": high (" + std::to_string(high) + ") must be greater than low (" +
                     std::to_string(low) + "); the range [low, high) is empty otherwise");
  int64_t min = 0, max = 0;
  switch (dtype) {
    case DType::Int8:
      min = INT8_MIN, max = INT8_MAX;
      break;
    case DType::Int16:
      min = INT16_MIN, max = INT16_MAX;
      break;
    case DType::Int32:
      min = INT32_MIN, max = INT32_MAX;
      break;
    case DType::UInt8:
      min = 0, max = UINT8_MAX;
      break;
    default:
      min = INT64_MIN, max = INT64_MAX;
      break;
  }
  if (low < min || high - 1 > max)
    throw ValueError(std::string(op) + ": the range [" + std::to_string(low) + ", " + std::to_string(high) +
                     ") does not fit dtype " + std::string(dtype_name(dtype)) + " (values " + std::to_string(min) +
                     " to " + std::to_string(max) + "); narrow the range or pass a wider dtype");
  detail::RandomCall call;
  call.distribution = RandomDistribution::RandInt;
  call.low = low;
  call.high = high;
  return call;
}
}  // namespace

Array randint(int64_t low, int64_t high, const Shape& shape, DType dtype, std::optional<Device> device) {
  return draw(randint_call(low, high, dtype), shape, dtype, device, detail::philox::randint_span(low, high), nullptr);
}

// ---------------------------------------------------------------- Generator
Generator::Generator(uint64_t seed) : state_(std::make_shared<State>()) { state_->set(GeneratorState{seed, 0}); }
void Generator::seed(uint64_t s) { state_->set(GeneratorState{s, 0}); }
GeneratorState Generator::get_state() const { return state_->get(); }
void Generator::set_state(const GeneratorState& state) { state_->set(state); }

Array Generator::uniform(const Shape& shape, double low, double high, DType dtype, std::optional<Device> device) {
  return draw(uniform_call(low, high, dtype), shape, dtype, device, 0, state_.get());
}
Array Generator::normal(const Shape& shape, double mean, double stddev, DType dtype, std::optional<Device> device) {
  return draw(normal_call(mean, stddev, dtype), shape, dtype, device, 0, state_.get());
}
Array Generator::randint(int64_t low, int64_t high, const Shape& shape, DType dtype, std::optional<Device> device) {
  return draw(randint_call(low, high, dtype), shape, dtype, device, detail::philox::randint_span(low, high),
              state_.get());
}

}  // namespace kiln::random

namespace kiln::detail {
random::GeneratorState reserve_random_blocks(uint64_t blocks) {
  return random::default_generator().reserve(blocks);
}
}  // namespace kiln::detail
