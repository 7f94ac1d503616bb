// The CPU executor of kiln::fuse (src/cpu/fused.cpp): every op of the op list fused equals the op unfused bit for
// bit in every dtype (contiguous, transposed, broadcast, after an intermediate, with weak scalars); float16 and
// bfloat16 intermediates rounded as the unfused ops round them; out= aliasing an input; several outputs; arrays
// large enough to be split over threads; outputs large enough to be streamed past the caches; final reductions
// (full, axes, keepdims, mean) and staged rows (softmax, log_softmax, norms) against float64 references; empty
// arrays; cpu_fused_range over sub-ranges; runs of float32 nodes evaluated in registers.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <iterator>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "core/elementwise.hpp"
#include "core/fuse_steps.hpp"
#include "core/fuse_test_util.hpp"
#include "core/fusion.hpp"
#include "core/op_table.hpp"
#include "cpu/fused.hpp"
#include "kiln/kiln.hpp"
#include "test_util.hpp"

using namespace kiln;
using namespace kiln_test;
using detail::OpCode;

namespace {

const std::vector<DType> kAll = {bool_, int8, int16, int32, int64, uint8, float16, bfloat16, float32, float64};

/// Expects the same dtype, shape and bytes (element by element in C order: NaN payloads and signed zeros too).
void expect_bits(const Array& fused, const Array& eager, const std::string& what) {
  ASSERT_EQ(fused.dtype(), eager.dtype()) << what;
  ASSERT_EQ(fused.shape(), eager.shape()) << what;
  const Array f = fused.contiguous(), e = eager.contiguous();
  const size_t size = static_cast<size_t>(itemsize(f.dtype()));
  const char* fp = static_cast<const char*>(f.data_ptr());
  const char* ep = static_cast<const char*>(e.data_ptr());
  for (int64_t i = 0; i < f.size(); ++i)
    if (std::memcmp(fp + i * static_cast<int64_t>(size), ep + i * static_cast<int64_t>(size), size) != 0) {
      ADD_FAILURE() << what << ": element " << i << " differs: fused " << f.reshape({-1})[i].item<double>()
                    << ", unfused " << e.reshape({-1})[i].item<double>();
      return;
    }
}

/// Values of `dtype` with zeros, negatives, fractions and (floats) NaN and infinities; `seed` varies them.
Array values_of(DType dtype, const Shape& shape, uint32_t seed) {
  const size_t n = static_cast<size_t>(shape_numel(shape));
  std::vector<double> v = test_values(n, seed, 6.0);
  for (size_t i = 0; i < n; ++i) {
    if (dtype == bool_)
      v[i] = v[i] > 0;
    else if (!is_floating(dtype))
      v[i] = std::round(dtype == uint8 ? std::abs(v[i]) * 3 : v[i] * 3);
    else if (i % 17 == 3)
      v[i] = 0;
  }
  if (is_floating(dtype) && n > 20) {
    v[5] = std::nan("");
    v[11] = std::numeric_limits<double>::infinity();
    v[13] = -std::numeric_limits<double>::infinity();
  }
  return from_data(v).reshape(shape).astype(dtype);
}

/// The op on operands as kiln's unfused elementwise front-end runs it.
Array unfused(OpCode op, const std::vector<Operand>& in) {
  switch (in.size()) {
    case 1:
      return detail::elementwise(op, {&in[0]});
    case 2:
      return detail::elementwise(op, {&in[0], &in[1]});
    default:
      return detail::elementwise(op, {&in[0], &in[1], &in[2]});
  }
}

/// The op traced in a fused function.
FusionValue traced(const char* name, std::initializer_list<detail::FusionOperand> in) {
  return detail::fusion_apply(name, in);
}

/// Whether the unfused op accepts these operands (an unsupported dtype throws DTypeError).
bool supported(OpCode op, const std::vector<Operand>& in) {
  try {
    unfused(op, in);
    return true;
  } catch (const DTypeError&) {
    return false;
  }
}

}  // namespace

// Every op of ops.def (where and clip included) in every dtype, fused alone, after an intermediate value
// (where(m, x, y): an array of the promoted dtype that lives only in the executor's buffers), over transposed
// and broadcast arguments, with a weak scalar, and large enough to cross blocks (37 * 41 > 512 elements).
TEST(FuseCpu, EveryOpFusedEqualsTheUnfusedOpBitForBit) {
  const Shape shape{37, 41};
  int checked = 0;
  for (int code = 0; code < static_cast<int>(OpCode::Count); ++code) {
    const OpCode op = static_cast<OpCode>(code);
    const detail::OpInfo& info = detail::op_info(op);
    if (info.api == detail::OpApi::None || info.arity < 1) continue;
    const char* name = info.name;
    for (DType dtype : kAll) {
      const std::string what = std::string(name) + " " + std::string(dtype_name(dtype));
      const Array x = values_of(dtype, shape, 1), y = values_of(dtype, shape, 2);
      const Array mask = values_of(bool_, shape, 3);
      const Array xt = values_of(dtype, {shape[1], shape[0]}, 4).transpose();  // a transposed view
      const Array row = values_of(dtype, {shape[1]}, 5);                       // broadcast along axis 0
      if (info.arity == 1) {
        if (!supported(op, {Operand(x)})) continue;
        auto f = fuse([name](auto a) { return traced(name, {a}); });
        expect_bits(f(x), unfused(op, {Operand(x)}), what);
        expect_bits(f(xt), unfused(op, {Operand(xt)}), what + " transposed");
        auto g = fuse([name](auto a, auto b, auto m) { return traced(name, {where(m, a, b)}); });
        expect_bits(g(x, y, mask), unfused(op, {Operand(where(mask, x, y))}), what + " of an intermediate");
      } else if (info.arity == 2) {
        if (!supported(op, {Operand(x), Operand(y)})) continue;
        auto f = fuse([name](auto a, auto b) { return traced(name, {a, b}); });
        expect_bits(f(x, y), unfused(op, {Operand(x), Operand(y)}), what);
        expect_bits(f(xt, row), unfused(op, {Operand(xt), Operand(row)}), what + " transposed, broadcast");
        auto g = fuse([name](auto a, auto b, auto m) { return traced(name, {where(m, a, b), b}); });
        expect_bits(g(x, y, mask), unfused(op, {Operand(where(mask, x, y)), Operand(y)}), what + " intermediate");
        const Scalar s = dtype == bool_ ? Scalar(true) : is_floating(dtype) ? Scalar(2.5) : Scalar(int64_t{2});
        if (supported(op, {Operand(x), Operand(s)})) {
          auto h = fuse([name](auto a, auto c) { return traced(name, {a, c}); });
          expect_bits(h(x, s), unfused(op, {Operand(x), Operand(s)}), what + " with a weak scalar");
          auto k = fuse([name](auto a, auto c) { return traced(name, {c, a}); });
          expect_bits(k(x, s), unfused(op, {Operand(s), Operand(x)}), what + " with a weak scalar first");
        }
      } else {
        const Array first = op == OpCode::Where ? mask : x;
        if (!supported(op, {Operand(first), Operand(y), Operand(x)})) continue;
        auto f = fuse([name](auto a, auto b, auto c) { return traced(name, {a, b, c}); });
        expect_bits(f(first, y, x), unfused(op, {Operand(first), Operand(y), Operand(x)}), what);
        expect_bits(f(first, row, xt), unfused(op, {Operand(first), Operand(row), Operand(xt)}), what + " strided");
      }
      ++checked;
    }
  }
  EXPECT_GT(checked, 200);
}

// float16/bfloat16 values between nodes are rounded to their dtype as the unfused ops round them (the chain in
// float32 without rounding would differ in many elements).
TEST(FuseCpu, HalfIntermediatesAreRoundedAsTheUnfusedOps) {
  for (DType t : {float16, bfloat16}) {
    const Array x = values_of(t, {3, 700}, 7), y = values_of(t, {700}, 8);
    auto f = fuse([](auto a, auto b) { return tanh(a * 1.5f + 0.3f) * b - exp(-a * a) * 0.5f; });
    const Array want =
        subtract(multiply(tanh(add(multiply(x, 1.5f), 0.3f)), y), multiply(exp(negative(multiply(x, x))), 0.5f));
    expect_bits(f(x, y), want, std::string(dtype_name(t)));
    // A cast up and down the way: float64 intermediates rounded once into t.
    auto g = fuse([t](auto a) { return (a.astype(float64) / 3.0).astype(t) * a; });
    expect_bits(g(x), multiply(divide(x.astype(float64), 3.0).astype(t), x), std::string(dtype_name(t)));
  }
}

TEST(FuseCpu, LargeChainSplitOverThreadsMatchesUnfused) {
  const int64_t n = (int64_t{1} << 19) + 77;  // not a multiple of a block or of the thread split
  std::vector<double> v = test_values(static_cast<size_t>(n), 11, 3.0);
  const Array x = from_data(std::vector<float>(v.begin(), v.end()));
  const Array want =
      subtract(multiply(tanh(add(multiply(x, 1.5f), 0.3f)), x), multiply(exp(negative(multiply(x, x))), 0.5f));
  expect_bits(fuse(chain_fn)(x), want, "chain");
  const Array x64 = x.astype(float64);
  expect_bits(
      fuse(chain_fn)(x64),
      subtract(multiply(tanh(add(multiply(x64, 1.5f), 0.3f)), x64), multiply(exp(negative(multiply(x64, x64))), 0.5f)),
      "float64");
  // A strided (every other element) and a channels-last input.
  const Array wide = from_data(std::vector<float>(v.begin(), v.end() - 1)).reshape({2, -1});
  const Array strided = wide.slice(1, 0, wide.shape()[1], 2);
  expect_bits(fuse(chain_fn)(strided),
              subtract(multiply(tanh(add(multiply(strided, 1.5f), 0.3f)), strided),
                       multiply(exp(negative(multiply(strided, strided))), 0.5f)),
              "strided");
  const Array images = to_channels_last(random::normal({4, 16, 32, 32}, 0.0, 1.0, float32));
  const Array y = fuse(chain_fn)(images);
  EXPECT_TRUE(is_channels_last(y));
  expect_bits(y,
              subtract(multiply(tanh(add(multiply(images, 1.5f), 0.3f)), images),
                       multiply(exp(negative(multiply(images, images))), 0.5f)),
              "channels-last");
}

// Outputs of 32 MiB and more are written past the caches (non-temporal stores from the block's buffer): the same
// bits, into a view whose first element is not 16-byte aligned too, and for several outputs of different dtypes.
TEST(FuseCpu, LargeOutputsStreamedPastTheCachesMatchUnfused) {
  const int64_t n = (int64_t{1} << 23) + 77;  // 32 MiB of float32 and a partial block
  std::vector<double> v = test_values(static_cast<size_t>(n), 12, 3.0);
  const Array x = from_data(std::vector<float>(v.begin(), v.end()));
  const Array want =
      subtract(multiply(tanh(add(multiply(x, 1.5f), 0.3f)), x), multiply(exp(negative(multiply(x, x))), 0.5f));
  expect_bits(fuse(chain_fn)(x), want, "chain");
  Array storage = zeros({n + 1}, float32);
  Array shifted = storage.slice(0, 1, n + 1);  // 4 bytes past an aligned start
  fuse(chain_fn).out({shifted}, x);
  expect_bits(shifted, want, "shifted out=");
  EXPECT_EQ(storage[0].item<float>(), 0.0f);
  auto [s, lt] = fuse([](auto a) { return std::tuple{a * a + 1.0f, (a < 0.5f).astype(int8)}; })(x);
  expect_bits(s, add(multiply(x, x), 1.0f), "square plus one");
  expect_bits(lt, less(x, 0.5f).astype(int8), "less");
}

TEST(FuseCpu, OutAliasingAnInputAndSeveralOutputs) {
  const int64_t n = 100003;
  std::vector<double> pv = test_values(static_cast<size_t>(n), 21), gv = test_values(static_cast<size_t>(n), 22);
  Array p = f32_array(pv, {n}), g = f32_array(gv, {n}), buf = zeros({n}, float32);
  const Array p0 = p.copy(), g0 = g.copy();
  auto step = fuse(sgd_fn, "sgd");
  step.out({p, buf}, p, g, buf, 0.1, 0.9, 0.01);  // p and buf updated in place
  const Array b_want = add(multiply(zeros({n}, float32), 0.9), add(g0, multiply(p0, 0.01)));
  expect_bits(buf, b_want, "buf");
  expect_bits(p, subtract(p0, multiply(0.1, b_want)), "p");
  // An output that is an argument, next to an out= that overwrites that argument: read before written.
  Array x = p0.copy();
  auto two = fuse([](auto a) { return std::tuple{a * 2, a}; });
  auto [twice, same] = two.out({x, Array()}, x);
  expect_bits(twice, multiply(p0, 2), "twice");
  expect_bits(same, p0, "the argument's old values");
  // Outputs of different dtypes.
  auto [s, lt] = fuse([](auto a, auto b) { return std::tuple{a + b, (a < b).astype(int8)}; })(p0, g0);
  expect_bits(s, add(p0, g0), "sum");
  expect_bits(lt, less(p0, g0).astype(int8), "less");
}

// The executor gives a node's buffer to a later node once the value's last reader has run: a value read long
// after it was made, one read twice by one op, outputs read by later nodes and a value made from a broadcast
// element alone (one value for the whole block) must each keep theirs while they are live.
TEST(FuseCpu, SharedBuffersKeepEveryLiveValue) {
  const int64_t n = 5000;  // several blocks and a partial one
  std::vector<double> xv = test_values(static_cast<size_t>(n), 31, 2.0),
                      yv = test_values(static_cast<size_t>(n), 32, 2.0);
  const Array x = f32_array(xv, {n}), y = f32_array(yv, {n});
  const Array c = full({1}, 0.75, float32);
  auto f = fuse([](auto a, auto b, auto k) {
    auto early = a * 0.5f + b;
    auto square = early * early;
    auto scale = k * 2.0f + 1.0f;
    auto chain = exp(-(square * 0.25f)) + tanh(b) * scale - sin(a) / (abs(b) + 1.0f);
    auto first = chain * early;
    return std::tuple{first, square, first + square - early * scale};
  });
  const Array early = add(multiply(x, 0.5f), y), square = multiply(early, early);
  const Array scale = add(multiply(c, 2.0f), 1.0f);
  const Array chain = subtract(add(exp(negative(multiply(square, 0.25f))), multiply(tanh(y), scale)),
                               divide(sin(x), add(abs(y), 1.0f)));
  const Array first = multiply(chain, early);
  auto [a, b, d] = f(x, y, c);
  expect_bits(a, first, "first");
  expect_bits(b, square, "square");
  expect_bits(d, subtract(add(first, square), multiply(early, scale)), "third");
  // The same graph over float16 (intermediates rounded in their buffers) and over a transposed input.
  const Array xh = x.astype(float16), yh = y.astype(float16), ch = c.astype(float16);
  const Array eh = add(multiply(xh, 0.5f), yh), sh = multiply(eh, eh), kh = add(multiply(ch, 2.0f), 1.0f);
  const Array fh = multiply(
      subtract(add(exp(negative(multiply(sh, 0.25f))), multiply(tanh(yh), kh)), divide(sin(xh), add(abs(yh), 1.0f))),
      eh);
  expect_bits(std::get<0>(f(xh, yh, ch)), fh, "float16");
  const Array xt = x.reshape({50, 100}).T(), yt = y.reshape({100, 50});
  const Array et = add(multiply(xt, 0.5f), yt), st = multiply(et, et);
  expect_bits(std::get<1>(f(xt, yt, c)), st, "transposed");
}

/// float32 values with NaN, -NaN, infinities, signed zeros, subnormals and values that exp and tanh saturate on.
Array special_floats(const Shape& shape, uint32_t seed) {
  const size_t n = static_cast<size_t>(shape_numel(shape));
  const std::vector<double> v = test_values(n, seed, 3.0);
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const float specials[] = {nan, -nan, inf, -inf, 0.0f, -0.0f, 1e-40f, -3e-39f, 95.0f, -120.0f, 1e30f};
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i)
    out[i] = i % 7 == 2 ? specials[(i / 7 + seed) % std::size(specials)] : static_cast<float>(v[i]);
  return from_data(out).reshape(shape);
}

/// expect_bits for float32 results, except that where both are NaN any NaN will do: a NaN made from two NaN
/// operands of add or multiply is one of them, the one the compiler put first in the instruction, and the
/// unfused kernels' own choice changes with the element's position in the row (vector body or epilogue).
void expect_bits_any_nan(const Array& fused, const Array& eager, const std::string& what) {
  ASSERT_EQ(fused.dtype(), float32) << what;
  ASSERT_EQ(fused.shape(), eager.shape()) << what;
  const std::vector<float> f = fused.contiguous().to_vector<float>(), e = eager.contiguous().to_vector<float>();
  for (size_t i = 0; i < f.size(); ++i)
    if (std::memcmp(&f[i], &e[i], sizeof(float)) != 0 && !(std::isnan(f[i]) && std::isnan(e[i]))) {
      ADD_FAILURE() << what << ": element " << i << " differs: fused " << f[i] << ", unfused " << e[i];
      return;
    }
}

// Runs of float32 nodes evaluated lane by lane in registers (src/cpu/fused_lanes.cpp, Segment) round every node as its
// kernel does: each graph below against its ops one by one, bit for bit (but for which NaN where two meet), over
// blocks with a partial vector and a partial block, with NaN, infinities, signed zeros and subnormals among the
// inputs. The graphs cover a run
// ending in a binary op that reads an earlier run's stored value, the previous value as the right operand of
// subtract and divide (a scalar on the left), as both operands, a value read by several later nodes or returned
// as an output (it ends its run), broadcast operands (one value over a row, one value for the whole array) and a
// strided operand (the step-by-step path); other dtypes keep the step-by-step path.
TEST(FuseCpu, RegisterSegmentsMatchTheOpsBitForBit) {
  for (int64_t n : {int64_t{5}, int64_t{16}, int64_t{1031}, int64_t{3 * 1024 + 13}}) {
    const std::string size = " n=" + std::to_string(n);
    const Array x = special_floats({n}, 1), y = special_floats({n}, 2);
    expect_bits_any_nan(fuse(chain_fn)(x),
                subtract(multiply(tanh(add(multiply(x, 1.5f), 0.3f)), x),
                         multiply(exp(negative(multiply(x, x))), 0.5f)),
                "chain" + size);
    auto right = fuse([](auto a) { return (0.3f - tanh(a)) / (a * a + 1.0f); });
    expect_bits_any_nan(right(x), divide(subtract(0.3f, tanh(x)), add(multiply(x, x), 1.0f)), "right operands" + size);
    auto quotient = fuse([](auto a, auto b) { return 2.0f / exp(-(a / b)) - b; });
    expect_bits_any_nan(quotient(x, y), subtract(divide(2.0f, exp(negative(divide(x, y)))), y), "quotient" + size);
    auto both = fuse([](auto a, auto b) {
      auto t = tanh(a * b);
      return t * t + a;
    });
    const Array t = tanh(multiply(x, y));
    expect_bits_any_nan(both(x, y), add(multiply(t, t), x), "both operands" + size);
    auto shared = fuse([](auto a) {
      auto u = a * 1.5f;
      return tanh(u) * u - exp(u);
    });
    const Array u = multiply(x, 1.5f);
    expect_bits_any_nan(shared(x), subtract(multiply(tanh(u), u), exp(u)), "a value read three times" + size);
    auto two = fuse([](auto a, auto b) {
      auto w = a * 3.0f - b;
      return std::tuple{w, tanh(w) / 2.0f};
    });
    const Array w = subtract(multiply(x, 3.0f), y);
    auto [w_fused, tw_fused] = two(x, y);
    expect_bits_any_nan(w_fused, w, "an output read by a later node" + size);
    expect_bits_any_nan(tw_fused, divide(tanh(w), 2.0f), "after an output" + size);
    // float64, float16 and int32 graphs keep the step-by-step path.
    const Array x64 = x.astype(float64), xh = x.astype(float16);
    expect_bits(fuse(chain_fn)(x64),
                subtract(multiply(tanh(add(multiply(x64, 1.5f), 0.3f)), x64),
                         multiply(exp(negative(multiply(x64, x64))), 0.5f)),
                "float64" + size);
    expect_bits(fuse(chain_fn)(xh),
                subtract(multiply(tanh(add(multiply(xh, 1.5f), 0.3f)), xh),
                         multiply(exp(negative(multiply(xh, xh))), 0.5f)),
                "float16" + size);
    const Array i = arange(n, int32), j = arange(n, int32) % 7;
    expect_bits(fuse([](auto a, auto b) { return -(a * 3 - b); })(i, j), negative(subtract(multiply(i, 3), j)),
                "int32" + size);
  }
  // Broadcast operands: a column (one value per row of the walk), one element for the whole array (a run of
  // one value), a row (contiguous); and strided operands (every other element, a transposed view).
  const Array m = special_floats({9, 333}, 3), column = special_floats({9, 1}, 4), row = special_floats({333}, 5);
  const Array k = full({1}, 0.75, float32);
  auto broadcast = fuse([](auto a, auto c, auto r, auto s) { return exp(a * c) + (s * 2.0f + 1.0f) * r - c; });
  expect_bits_any_nan(broadcast(m, column, row, k),
              subtract(add(exp(multiply(m, column)), multiply(add(multiply(k, 2.0f), 1.0f), row)), column),
              "broadcast");
  const Array wide = special_floats({9, 666}, 6), strided = wide.slice(1, 0, 666, 2);
  const Array mt = special_floats({333, 9}, 7).T();
  auto mixed = fuse([](auto a, auto b) { return tanh(a * 0.5f) - exp(b) * a; });
  expect_bits_any_nan(mixed(strided, m), subtract(tanh(multiply(strided, 0.5f)), multiply(exp(m), strided)), "strided");
  expect_bits_any_nan(mixed(m, mt), subtract(tanh(multiply(m, 0.5f)), multiply(exp(mt), m)), "transposed");
  expect_bits_any_nan(mixed(mt, m), subtract(tanh(multiply(mt, 0.5f)), multiply(exp(m), mt)), "transposed first");
}

TEST(FuseCpu, FinalReductionsMatchFloat64References) {
  const Shape shape{64, 300};
  std::vector<double> v = test_values(static_cast<size_t>(shape_numel(shape)), 31, 2.0);
  const Array x = f32_array(v, shape);
  auto square_sum = [&](int axis) {  // float64 sums of x*x rounded to float32 products, as the graph computes
    std::vector<double> out(axis == 0 ? 300 : 64, 0.0);
    for (int64_t i = 0; i < 64; ++i)
      for (int64_t j = 0; j < 300; ++j) {
        const float sq = static_cast<float>(v[static_cast<size_t>(i * 300 + j)]) *
                         static_cast<float>(v[static_cast<size_t>(i * 300 + j)]);
        out[static_cast<size_t>(axis == 0 ? j : i)] += sq;
      }
    return out;
  };
  // Float sums accumulate in double (as src/cpu/reduce.cpp): float32 results within one float32 rounding.
  expect_near(fuse([](auto a) { return sum(a * a, 1); })(x), square_sum(1), 1e-7);
  expect_near(fuse([](auto a) { return sum(a * a, 0, true); })(x), square_sum(0), 1e-7);
  std::vector<double> total = square_sum(1);
  double grand = 0;
  for (double t : total) grand += t;
  expect_near(fuse([](auto a) { return sum(a * a); })(x), {grand}, 1e-7);
  std::vector<double> means = square_sum(0);
  for (double& m : means) m /= 64;
  const Array mean0 = fuse([](auto a) { return mean(a * a, 0); })(x);
  EXPECT_EQ(mean0.dtype(), float32);
  expect_near(mean0, means, 1e-7);
  // Against the unfused reductions: equal to float32 rounding (the double sums' order differs).
  expect_equal(fuse([](auto a) { return sum(a * a, 1); })(x), sum(multiply(x, x), 1), 1e-7);
  expect_equal(fuse([](auto a) { return max(abs(a), 0); })(x.transpose()), max(abs(x.transpose()), 0));
  expect_equal(fuse([](auto a) { return min(a - 1, {0, 1}, true); })(x), min(subtract(x, 1), {0, 1}, true));
  // Integer sums wrap in 64 bits, bool reductions, products.
  const Array ints = arange(1000, int32).reshape({10, 100});
  expect_equal(fuse([](auto a) { return sum(a * a, 1); })(ints), sum(multiply(ints, ints), 1));
  expect_equal(fuse([](auto a) { return any(a > 990, 1); })(ints), any(greater(ints, 990), 1));
  expect_equal(fuse([](auto a) { return all(a >= 0); })(ints), all(greater_equal(ints, 0)));
  expect_equal(fuse([](auto a) { return prod(a % 3 + 1, 0); })(ints), prod(add(remainder(ints, 3), 1), 0));
  // A large full reduction, split over threads with private accumulators.
  std::vector<double> big = test_values(size_t{1} << 20, 32);
  const Array b = f32_array(big, {int64_t{1} << 20});
  double want = 0;
  for (double t : big) want += t;
  expect_near(fuse([](auto a) { return sum(a); })(b), {want}, 1e-6);
  expect_near(fuse([](auto a) { return sum(a.astype(float64)); })(b), {want}, 1e-12);
}

TEST(FuseCpu, StagedRowsMatchFloat64References) {
  // Rows shorter and longer than a block, a row of one, and rows over a middle axis.
  for (const Shape& shape : {Shape{5, 3}, Shape{4, 2000}, Shape{7, 1}, Shape{300, 33}}) {
    const int64_t cols = shape.back(), rows = shape_numel(shape) / cols;
    std::vector<double> x = test_values(static_cast<size_t>(rows * cols), 41, 8.0);
    const Array a = f32_array(x, shape);
    // float32 rounding of each stored intermediate: 1e-6 relative.
    expect_near(fuse(softmax_fn)(a), softmax_reference(x, rows, cols, false), 1e-6);
    expect_near(fuse(log_softmax_fn)(a), softmax_reference(x, rows, cols, true), 1e-6);
    expect_near(fuse(softmax_fn)(a.astype(float64)), softmax_reference(x, rows, cols, false), 1e-14);
    // An L2 normalisation of the rows, and the norms as a second (reduced-shape) output.
    auto normalise = fuse([](auto v) {
      auto norm = sqrt(sum(v * v, -1, true));
      return std::tuple{v / norm, norm};
    });
    auto [unit, norms] = normalise(a.astype(float64));
    std::vector<double> want_unit(x.size()), want_norm(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) {
      double s = 0;
      for (int64_t c = 0; c < cols; ++c)
        s += x[static_cast<size_t>(r * cols + c)] * x[static_cast<size_t>(r * cols + c)];
      want_norm[static_cast<size_t>(r)] = std::sqrt(s);
      for (int64_t c = 0; c < cols; ++c)
        want_unit[static_cast<size_t>(r * cols + c)] = x[static_cast<size_t>(r * cols + c)] / std::sqrt(s);
    }
    EXPECT_EQ(norms.shape().back(), 1);
    // Both sums of squares are float64 in different orders: each within n * 2^-53 (2000 terms: 2.2e-13).
    expect_near(unit, want_unit, 2.5e-13);
    expect_near(norms, want_norm, 2.5e-13);
  }
  // Softmax over axis 0 (strided rows) and over a middle axis of a 3-d array, against the unfused ops.
  const Array m = random::normal({6, 50, 7}, 0.0, 3.0, float64);
  for (int axis : {0, 1}) {
    auto f = fuse([axis](auto v) {
      auto e = exp(v - max(v, axis, true));
      return e / sum(e, axis, true);
    });
    const Array e = exp(subtract(m, max(m, axis, true)));
    expect_equal(f(m), divide(e, sum(e, axis, true)), 1e-15);
  }
  // Centring by the mean: the mean in float64 as kiln::mean computes it.
  const Array c = random::normal({9, 40}, 0.0, 1.0, float32);
  expect_equal(fuse([](auto v) { return v - mean(v, 1, true); })(c), subtract(c, mean(c, 1, true)), 1e-7);
}

TEST(FuseCpu, EmptyArraysGiveEmptyResults) {
  const Array e = zeros({0, 5}, float32);
  const Array y = fuse(chain_fn)(e);
  EXPECT_EQ(y.shape(), (Shape{0, 5}));
  EXPECT_EQ(fuse([](auto v) { return sum(v * 2, 0); })(e).to_vector<float>(), std::vector<float>(5, 0.0f));
}

// A traced graph says whether it holds a complex value (the GPU's generator has none and runs such graphs op by op).
TEST(FuseCpu, GraphsKnowWhetherTheyHoldComplexValues) {
  auto f = fuse([](auto a, auto b) { return a * b - a; });
  const Array x = full({4}, 1.5, float32), z = x.astype(complex64);
  EXPECT_FALSE(f.graph(x, x)->complex);
  EXPECT_TRUE(f.graph(z, z)->complex);
  EXPECT_TRUE(f.graph(x, z)->complex);  // promoted: the float32 argument's node is real, the product complex
}

// cpu_fused_range: a call run in two ranges, the second first, equals the whole call; a graph with a reduction
// is declined without writing.
TEST(FuseCpu, RangeRunsPartsOfOneCallOnTheCallingThread) {
  auto f = fuse([](auto a, auto b) { return tanh(a) * b - a; });
  const Array x = random::normal({1000, 3}, 0.0, 1.0, float32), y = random::normal({3}, 0.0, 1.0, float32);
  const std::shared_ptr<const detail::FusionGraph> graph = f.graph(x, y);
  const Array yb = y.broadcast_to(x.shape());
  detail::FusionCall call;
  call.graph = graph.get();
  call.arrays = {&x, &yb};
  call.shape = x.shape();
  call.outs = {empty(x.shape(), float32)};
  call.full = {true};
  EXPECT_TRUE(cpu_impl::cpu_fused_range(call, 1234, 3000));
  EXPECT_TRUE(cpu_impl::cpu_fused_range(call, 0, 1234));
  expect_bits(call.outs[0], f(x, y), "two ranges");
  auto s = fuse([](auto a) { return sum(a); });
  const std::shared_ptr<const detail::FusionGraph> reduced = s.graph(x);
  detail::FusionCall declined;
  declined.graph = reduced.get();
  declined.arrays = {&x};
  declined.shape = x.shape();
  declined.outs = {zeros({1, 1}, float32)};
  EXPECT_FALSE(cpu_impl::cpu_fused_range(declined, 0, 3000));
}
