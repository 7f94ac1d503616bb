// Random numbers from the counter-based Philox4x32-10 generator (Random123).
//
// A draw is a pure function of (seed, offset, element index), so every backend
// produces the same values from the same generator state. Stream layout, for an
// array of n elements (C order) drawn at generator state (seed, offset):
//   block b = Philox4x32-10(counter, key) -> 32-bit words w0..w3, with
//     key     = (lo32(seed), hi32(seed))
//     counter = (lo32(b), hi32(b), lo32(offset), hi32(offset)),  b = 0, 1, ...
//   u24(w)  = (w >> 8) * 2^-24 in [0, 1);  u24+(w) = ((w >> 8) + 1) * 2^-24 in (0, 1]
//   u53(lo, hi) = ((hi << 21) | (lo >> 11)) * 2^-53 in [0, 1)  (the top 53 bits of hi:lo);
//   u53+(lo, hi) = (((hi << 21) | (lo >> 11)) + 1) * 2^-53 in (0, 1]
// uniform(low, high), computed in float for float16/bfloat16/float32 and in double for float64:
//   float32/float16/bfloat16: element i uses word i%4 of block i/4;
//     v = fma(u24(w), S, L) with L = (float)low, S = (float)(high - low) (difference taken in double);
//   float64: element i uses block i/2, words lo = w[2(i%2)], hi = w[2(i%2)+1];
//     v = fma(u53(lo, hi), high - low, low) in double;
//   v is rounded (nearest even) to the output dtype, and a result above M, the largest value of
//   the output dtype below high, is replaced by M: rounding may reach high (e.g. 2 - 2^-24 rounds to
//   2.0f), and the clamp keeps every value in [low rounded to the dtype, high).
// normal(mean, stddev): Box-Muller in the compute type (2 pi rounded to it),
//   r = sqrt(-2 log u1), t = 2 pi u2, z0 = r cos t, z1 = r sin t,
//   value = fma(z, stddev, mean) rounded to the output dtype;
//   float32/float16/bfloat16 (computed in float, mean and stddev rounded to float): block i/4 gives
//     elements 4b, 4b+1 from (u1, u2) = (u24+(w0), u24(w1)) and 4b+2, 4b+3 from (u24+(w2), u24(w3));
//     the even element of a pair is z0, the odd one z1;
//   float64: block i/2 gives elements 2b (z0) and 2b+1 (z1) from u1 = u53+(w0, w1), u2 = u53(w2, w3).
//   (log, sin and cos come from each backend's math library: backends agree within a few ulp.)
// randint(low, high): span = high - low (exact, as uint64);
//   span <= 2^32: element i uses word w = w[i%4] of block i/4: value = low + ((w * span) >> 32);
//   span >  2^32: element i uses block i/2, x = hi:lo with lo = w[2(i%2)], hi = w[2(i%2)+1]:
//     value = low + ((x * span) >> 64) (128-bit product);
//   (multiply-shift: the bias is below span / 2^32, resp. span / 2^64, and zero when span is a power of 2).
// A call advances the generator's offset by the blocks it used: ceil(n / 4), or ceil(n / 2) for
// float64 and for randint with span > 2^32. Since the offset is the counter's high half, later
// calls never reuse a counter, and a seed (or a saved state) reproduces a whole run.
// The same state gives the same values on the CPU and on a GPU (one generator for all devices).
// Draws captured in a CUDA graph (kiln/cuda.hpp) take their blocks at each replay, not at capture: replay k
// draws what the k-th eager run would have, and advances the generator as that run would.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include "kiln/array.hpp"

namespace kiln::random {

/// Generator state: the seed and the offset (in Philox blocks) of the next draw.
struct GeneratorState {
  uint64_t seed = 0;
  uint64_t offset = 0;
};
/// Seeds the default generator and rewinds its offset to 0. Thread-safe.
/// The default generator is the process's one random state (seed 0, offset 0 at start),
/// owned by src/core/random.cpp behind a mutex; concurrent draws get disjoint blocks.
void seed(uint64_t s);
/// The default generator's current state. Thread-safe.
GeneratorState get_state();
/// Restores a state from get_state(): the following draws repeat those made after it was saved. Thread-safe.
void set_state(const GeneratorState& state);

/// Uniform values in [low, high); floating dtypes only (DTypeError otherwise); ValueError when
/// high <= low or a bound is not finite (or not within float range for the 16/32-bit dtypes).
Array uniform(const Shape& shape, double low = 0.0, double high = 1.0, DType dtype = float32,
              std::optional<Device> device = {});
Array uniform(const Shape& shape, DType dtype, std::optional<Device> device = {});
/// Normal values with the given mean and standard deviation; floating dtypes only (DTypeError);
/// ValueError when stddev < 0 or mean/stddev is not finite (not within float range for the 16/32-bit dtypes).
Array normal(const Shape& shape, double mean = 0.0, double stddev = 1.0, DType dtype = float32,
             std::optional<Device> device = {});
Array normal(const Shape& shape, DType dtype, std::optional<Device> device = {});
/// Integers in [low, high); integer dtypes only (DTypeError); ValueError when high <= low or
/// [low, high - 1] does not fit the dtype.
Array randint(int64_t low, int64_t high, const Shape& shape, DType dtype = int64, std::optional<Device> device = {});

/// An independent random stream beside the default generator, as numpy.random.Generator / torch.Generator: its
/// own (seed, offset) state, the same Philox stream layout (so Generator(s) draws what the default generator
/// draws after seed(s)), and draws that neither advance nor depend on the default generator or another
/// Generator. A copy is a handle to the same stream (as an Array is to its storage). Thread-safe: concurrent
/// draws get disjoint blocks. Draws from a Generator cannot be captured in a CUDA graph (ValueError; captured
/// draws come from the default generator, whose state each replay advances).
class Generator {
 public:
  explicit Generator(uint64_t seed = 0);
  /// Reseeds this stream and rewinds its offset to 0.
  void seed(uint64_t s);
  GeneratorState get_state() const;
  /// Restores a state from get_state(): the following draws repeat those made after it was saved.
  void set_state(const GeneratorState& state);
  /// As kiln::random::uniform / normal / randint, drawn from this stream; same checks and errors.
  Array uniform(const Shape& shape, double low = 0.0, double high = 1.0, DType dtype = float32,
                std::optional<Device> device = {});
  Array normal(const Shape& shape, double mean = 0.0, double stddev = 1.0, DType dtype = float32,
               std::optional<Device> device = {});
  Array randint(int64_t low, int64_t high, const Shape& shape, DType dtype = int64, std::optional<Device> device = {});

  struct State;  ///< the shared, locked state (src/core/random.cpp)

 private:
  std::shared_ptr<State> state_;
};

}  // namespace kiln::random
