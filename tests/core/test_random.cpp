// Tests for kiln::random: the Philox4x32-10 core against Random123's published
// known answers, the per-element mappings against hand-computed values, whole
// streams against NumPy golden data (tests/golden/random_golden.py, an independent
// implementation), statistics, generator state, thread independence and errors.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <exception>
#include <functional>
#include <limits>
#include <numeric>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "core/backend.hpp"
#include "core/philox.hpp"
#include "kiln/kiln.hpp"
#include "test_util.hpp"

namespace kiln {
namespace {

namespace philox = detail::philox;

using kiln_test::epsilon;
using kiln_test::expect_error;

uint64_t bits_of(double d) {
  uint64_t u;
  std::memcpy(&u, &d, 8);
  return u;
}

philox::Words words(uint32_t a, uint32_t b, uint32_t c, uint32_t d) { return philox::Words{{a, b, c, d}}; }
void expect_words(const philox::Words& got, uint32_t a, uint32_t b, uint32_t c, uint32_t d) {
  EXPECT_EQ(got.w[0], a);
  EXPECT_EQ(got.w[1], b);
  EXPECT_EQ(got.w[2], c);
  EXPECT_EQ(got.w[3], d);
}

// ---- the Philox core and the mappings

TEST(RandomPhilox, matches_random123_known_answer_vectors) {
  // Random123 kat_vectors, philox4x32_10: counter, key -> output.
  expect_words(philox::philox4x32_10(words(0, 0, 0, 0), 0, 0), 0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8);
  expect_words(philox::philox4x32_10(words(0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff), 0xffffffff, 0xffffffff),
               0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd);
  expect_words(philox::philox4x32_10(words(0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344), 0xa4093822, 0x299f31d0),
               0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1);
}

TEST(RandomPhilox, block_counter_is_block_then_offset_and_key_is_seed_low_word_first) {
  // The third known answer, reached through random_block's (seed, offset, block) layout.
  expect_words(philox::random_block(0x299f31d0a4093822ull, 0x0370734413198a2eull, 0x85a308d3243f6a88ull), 0xd16cfe09,
               0x94fdcceb, 0x5001e420, 0x24126ea1);
  expect_words(philox::random_block(0, 0, 0), 0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8);
}

TEST(RandomMapping, unit_intervals_take_the_top_bits) {
  EXPECT_EQ(philox::unit_float(0), 0.0f);
  EXPECT_EQ(philox::unit_float(0xff), 0.0f);  // the low 8 bits are dropped
  EXPECT_EQ(philox::unit_float(0x100), 5.9604644775390625e-08f);
  EXPECT_EQ(philox::unit_float(0xffffffff), 0.999999940395355224609375f);  // 1 - 2^-24
  EXPECT_EQ(philox::unit_float_open_low(0), 5.9604644775390625e-08f);
  EXPECT_EQ(philox::unit_float_open_low(0xffffffff), 1.0f);
  EXPECT_EQ(philox::unit_double(0, 0), 0.0);
  EXPECT_EQ(philox::unit_double(0x7ff, 0), 0.0);
  EXPECT_EQ(philox::unit_double(0x800, 0), 1.1102230246251565404236316680908203125e-16);  // 2^-53
  EXPECT_EQ(philox::unit_double(0, 1), 2.3283064365386962890625e-10);                     // hi is the top: 2^-32
  EXPECT_EQ(philox::unit_double(0xffffffff, 0xffffffff), 0.99999999999999988897769753748434595763683319091796875);
  EXPECT_EQ(philox::unit_double_open_low(0xffffffff, 0xffffffff), 1.0);
}

TEST(RandomMapping, uniform_clamps_values_that_round_up_to_high) {
  // 1 + (1 - 2^-24) is a float32 tie that rounds to 2.0: the clamp turns it into 2 - 2^-23.
  EXPECT_EQ(philox::fma_f(philox::unit_float(0xffffffff), 1.0f, 1.0f), 2.0f);
  float limit2 = static_cast<float>(philox::uniform_limit(float32, 2.0));
  EXPECT_EQ(limit2, 1.99999988079071044921875f);
  EXPECT_EQ(philox::uniform_float32(0xffffffff, 1.0f, 1.0f, limit2), 1.99999988079071044921875f);
  EXPECT_EQ(philox::uniform_float32(0, 1.0f, 1.0f, limit2), 1.0f);
  // float16 / bfloat16 in [0, 1): 1 - 2^-24 rounds to 1.0; clamped to 1 - 2^-11 and 1 - 2^-8.
  float limit_half = static_cast<float>(philox::uniform_limit(float16, 1.0));
  float limit_bf16 = static_cast<float>(philox::uniform_limit(bfloat16, 1.0));
  EXPECT_EQ(philox::uniform_half(0xffffffff, 0.0f, 1.0f, limit_half), 0x3bff);
  EXPECT_EQ(philox::uniform_bfloat16(0xffffffff, 0.0f, 1.0f, limit_bf16), 0x3f7f);
  EXPECT_EQ(philox::uniform_half(0x80000000, 0.0f, 1.0f, limit_half), 0x3800);  // 0.5
  double limit64 = philox::uniform_limit(float64, 2.0);
  EXPECT_EQ(philox::uniform_float64(0xffffffff, 0xffffffff, 1.0, 1.0, limit64),
            1.9999999999999997779553950749686919152736663818359375);
}

TEST(RandomMapping, uniform_limit_is_the_largest_dtype_value_below_high) {
  EXPECT_EQ(philox::uniform_limit(float16, 1.0), 0.99951171875);
  EXPECT_EQ(philox::uniform_limit(bfloat16, 1.0), 0.99609375);
  EXPECT_EQ(philox::uniform_limit(float32, 1.0), 0.999999940395355224609375);
  EXPECT_EQ(philox::uniform_limit(float64, 1.0), 0.99999999999999988897769753748434595763683319091796875);
  EXPECT_EQ(philox::uniform_limit(float16, 1e6), 65504.0);
  EXPECT_EQ(philox::uniform_limit(bfloat16, 1e300), 3.38953138925153547590470800371487866880e38);
  EXPECT_EQ(philox::uniform_limit(float16, -1.0), -1.0009765625);
  EXPECT_EQ(philox::uniform_limit(float16, 0.0), -5.9604644775390625e-08);  // the smallest negative subnormal
  EXPECT_EQ(philox::uniform_limit(bfloat16, 0.1), 0.099609375);
  EXPECT_EQ(philox::uniform_limit(float32, 0.1), 0.0999999940395355224609375);  // 0.1f itself is above 0.1
  EXPECT_EQ(philox::uniform_limit(float16, 65504.0), 65472.0);
}

TEST(RandomMapping, uniform_params_round_low_and_the_double_difference_once) {
  philox::UniformParams f = philox::uniform_params(float32, 0.1, 0.3);
  EXPECT_EQ(f.low, 0.100000001490116119384765625);   // (float)0.1
  EXPECT_EQ(f.scale, 0.20000000298023223876953125);  // (float)(0.3 - 0.1), not 0.3f - 0.1f = 0.2000000179
  EXPECT_EQ(f.limit, 0.2999999821186065673828125);   // the float below 0.3 (0.3f is above it)
  philox::UniformParams d = philox::uniform_params(float64, 0.1, 0.3);
  EXPECT_EQ(d.low, 0.1);
  EXPECT_EQ(d.scale, 0.3 - 0.1);
  EXPECT_EQ(d.limit, 0.29999999999999993338661852249060757458209991455078125);
}

TEST(RandomMapping, half_rounding_matches_the_compilers_float16) {
#ifdef __FLT16_MAX__
  for (uint32_t code = 0; code < 0x7c00; ++code) {  // every finite non-negative half and the midpoint above it
    _Float16 h;
    uint16_t b = static_cast<uint16_t>(code);
    std::memcpy(&h, &b, 2);
    float value = static_cast<float>(h);
    float next = code + 1 < 0x7c00 ? philox::half_bits_to_float(static_cast<uint16_t>(code + 1)) : 65520.0f;
    float mid = (value + next) / 2;  // exact in float
    for (float f : {value, mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e9f), -value, -mid}) {
      _Float16 reference = static_cast<_Float16>(f);
      uint16_t want;
      std::memcpy(&want, &reference, 2);
      ASSERT_EQ(philox::float_to_half_bits(f), want) << "f = " << f;  // F16C where the target has it
      ASSERT_EQ(philox::float_to_half_bits_software(f), want) << "f = " << f;
    }
    ASSERT_EQ(philox::half_bits_to_float(b), value);
    ASSERT_EQ(philox::half_bits_to_float_software(b), value);
  }
  EXPECT_EQ(philox::float_to_half_bits(std::numeric_limits<float>::infinity()), 0x7c00);
  EXPECT_EQ(philox::float_to_half_bits_software(std::numeric_limits<float>::infinity()), 0x7c00);
  EXPECT_EQ(philox::float_to_half_bits(-1e10f), 0xfc00);
  EXPECT_EQ(philox::float_to_half_bits_software(-1e10f), 0xfc00);
  EXPECT_EQ(philox::float_to_half_bits_software(std::nanf("")) & 0x7e00, 0x7e00);
  EXPECT_EQ(philox::half_bits_to_float_software(0x0001), 5.9604644775390625e-08f);
  EXPECT_EQ(philox::half_bits_to_float_software(0x8400), -6.103515625e-05f);
#else
  GTEST_SKIP() << "the compiler has no _Float16 to compare with";
#endif
}

TEST(RandomMapping, bfloat16_rounding_is_to_nearest_even) {
  EXPECT_EQ(philox::float_to_bfloat16_bits(1.0f), 0x3f80);
  EXPECT_EQ(philox::float_to_bfloat16_bits(1.00390625f), 0x3f80);                        // 1 + 2^-8: a tie, to even
  EXPECT_EQ(philox::float_to_bfloat16_bits(1.01171875f), 0x3f82);                        // 1 + 3 * 2^-8: a tie, to even
  EXPECT_EQ(philox::float_to_bfloat16_bits(std::nextafter(1.00390625f, 2.0f)), 0x3f81);  // just above the tie
  EXPECT_EQ(philox::float_to_bfloat16_bits(-2.0f), 0xc000);
  EXPECT_EQ(philox::bfloat16_bits_to_float(0x3f81), 1.0078125f);
}

TEST(RandomMapping, randint_multiplies_and_keeps_the_high_part) {
  EXPECT_EQ(philox::randint_from_word(0x80000000u, 0, 10), 5);
  EXPECT_EQ(philox::randint_from_word(0xffffffffu, -5, 22), 16);
  EXPECT_EQ(philox::randint_from_word(0, -5, 22), -5);
  EXPECT_EQ(philox::randint_from_word(0x12345678u, 0, 1ull << 32), 0x12345678);
  EXPECT_EQ(philox::mulhi64(1ull << 63, 6), 3u);
  EXPECT_EQ(philox::mulhi64(~0ull, ~0ull), ~0ull - 1);
  // Full int64 range: x = 2^64 - 1, span = 2^64 - 1 -> INT64_MIN + 2^64 - 2 = INT64_MAX - 1.
  EXPECT_EQ(philox::randint_from_words(0xffffffffu, 0xffffffffu, INT64_MIN, ~0ull), INT64_MAX - 1);
  EXPECT_EQ(philox::randint_from_words(0, 0x80000000u, -(1ll << 62), 1ull << 63), 0);  // x = 2^63: the middle
}

TEST(RandomMapping, block_counts_follow_the_layout) {
  using detail::RandomDistribution;
  EXPECT_EQ(philox::block_count(RandomDistribution::Uniform, float32, 10, 0), 3u);
  EXPECT_EQ(philox::block_count(RandomDistribution::Uniform, float16, 8, 0), 2u);
  EXPECT_EQ(philox::block_count(RandomDistribution::Uniform, float64, 10, 0), 5u);
  EXPECT_EQ(philox::block_count(RandomDistribution::Normal, float32, 9, 0), 3u);
  EXPECT_EQ(philox::block_count(RandomDistribution::Normal, float64, 9, 0), 5u);
  EXPECT_EQ(philox::block_count(RandomDistribution::RandInt, int64, 10, 1ull << 32), 3u);
  EXPECT_EQ(philox::block_count(RandomDistribution::RandInt, int64, 10, (1ull << 32) + 1), 5u);
  EXPECT_EQ(philox::block_count(RandomDistribution::Uniform, float32, 0, 0), 0u);
}

TEST(RandomPhilox, cuda_source_holds_the_shared_text_and_the_prelude) {
  std::string source = philox::cuda_source();
  EXPECT_NE(source.find("#define KILN_HOST_DEVICE __device__"), std::string::npos);
  EXPECT_NE(source.find("namespace kiln_philox"), std::string::npos);
  EXPECT_NE(source.find("philox4x32_10"), std::string::npos);
  EXPECT_NE(source.find("randint64_block"), std::string::npos);
  EXPECT_EQ(source.find("#include"), std::string::npos);
}

// ---- whole streams against NumPy (keep in sync with CASES in tests/golden/random_golden.py)

enum class Draw { Uniform, Normal, RandInt };
struct GoldenCase {
  const char* name;
  Draw draw;
  DType dtype;
  uint64_t seed, offset;
  double a, b;        // uniform low/high, normal mean/stddev
  int64_t low, high;  // randint
  int64_t n;
  uint64_t blocks;  // the offset advance, by hand: ceil(n / 4) or ceil(n / 2)
};
constexpr int64_t kMin64 = std::numeric_limits<int64_t>::min();
const GoldenCase kCases[] = {
    {"uniform_f32_a", Draw::Uniform, float32, 0, 0, 0.0, 1.0, 0, 0, 1001, 251},
    {"uniform_f32_b", Draw::Uniform, float32, 42, 7, -2.5, 3.25, 0, 0, 998, 250},
    {"uniform_f32_c", Draw::Uniform, float32, 0xDEADBEEFCAFEBABEull, (1ull << 32) + 3, 1.0, 2.0, 0, 0, 4096, 1024},
    {"uniform_f64_a", Draw::Uniform, float64, 0, 0, 0.0, 1.0, 0, 0, 999, 500},
    {"uniform_f64_b", Draw::Uniform, float64, 12345678901234567ull, 5, -1000.5, 0.001, 0, 0, 1000, 500},
    {"uniform_f16_a", Draw::Uniform, float16, 7, 0, 0.0, 1.0, 0, 0, 1000, 250},
    {"uniform_f16_b", Draw::Uniform, float16, 8, 1, -3.0, 5.5, 0, 0, 1003, 251},
    {"uniform_bf16_a", Draw::Uniform, bfloat16, 9, 0, 0.0, 1.0, 0, 0, 1000, 250},
    {"uniform_bf16_b", Draw::Uniform, bfloat16, 10, 3, -100.0, 100.0, 0, 0, 1002, 251},
    {"normal_f32_a", Draw::Normal, float32, 0, 0, 0.0, 1.0, 0, 0, 1001, 251},
    {"normal_f32_b", Draw::Normal, float32, (1ull << 40) + 5, 1ull << 33, 1.5, 2.0, 0, 0, 1000, 250},
    {"normal_f64_a", Draw::Normal, float64, 0, 0, 0.0, 1.0, 0, 0, 999, 500},
    {"normal_f64_b", Draw::Normal, float64, 77, 11, -3.0, 0.5, 0, 0, 1000, 500},
    {"normal_f16", Draw::Normal, float16, 3, 0, 0.0, 1.0, 0, 0, 1000, 250},
    {"normal_bf16", Draw::Normal, bfloat16, 4, 2, 10.0, 3.0, 0, 0, 1001, 251},
    {"randint_i64_small", Draw::RandInt, int64, 0, 0, 0, 0, -5, 17, 1001, 251},
    {"randint_i32", Draw::RandInt, int32, 1, 2, 0, 0, 0, 1000, 1000, 250},
    {"randint_i64_big", Draw::RandInt, int64, 2, 0, 0, 0, -(1ll << 62), 1ll << 62, 999, 500},
    {"randint_i64_full", Draw::RandInt, int64, 3, 9, 0, 0, kMin64, std::numeric_limits<int64_t>::max(), 1000, 500},
    {"randint_u8", Draw::RandInt, uint8, 4, 0, 0, 0, 0, 256, 1000, 250},
    {"randint_i8", Draw::RandInt, int8, 5, 0, 0, 0, -128, 128, 1000, 250},
    {"randint_i16", Draw::RandInt, int16, 6, 4, 0, 0, -1000, 30000, 1000, 250},
    {"randint_i64_span2p32", Draw::RandInt, int64, 7, 0, 0, 0, 0, 1ll << 32, 1000, 250},
    {"randint_i64_span2p32p1", Draw::RandInt, int64, 8, 0, 0, 0, 0, (1ll << 32) + 1, 1000, 500},
};

Array draw_case(const GoldenCase& c, const Shape& shape) {
  random::set_state({c.seed, c.offset});
  switch (c.draw) {
    case Draw::Uniform:
      return random::uniform(shape, c.a, c.b, c.dtype, cpu());
    case Draw::Normal:
      return random::normal(shape, c.a, c.b, c.dtype, cpu());
    case Draw::RandInt:
      break;
  }
  return random::randint(c.low, c.high, shape, c.dtype, cpu());
}

const GoldenCase& find_case(const std::string& name) {
  for (const GoldenCase& c : kCases)
    if (name == c.name) return c;
  throw std::logic_error("no golden case " + name);
}

Array load_golden(const char* name) { return load(std::string(KILN_GOLDEN_DIR) + "/random/" + name + ".npy"); }

TEST(RandomGolden, streams_match_numpy_reference) {
  for (const GoldenCase& c : kCases) {
    SCOPED_TRACE(c.name);
    Array got = draw_case(c, Shape{c.n});
    EXPECT_EQ(random::get_state().offset, c.offset + c.blocks);
    EXPECT_EQ(random::get_state().seed, c.seed);
    Array want = load_golden(c.name);
    ASSERT_EQ(got.size(), c.n);
    ASSERT_EQ(want.size(), c.n);
    EXPECT_EQ(got.dtype(), c.dtype);
    if (c.draw == Draw::RandInt) {
      EXPECT_EQ(got.to_vector<int64_t>(), want.to_vector<int64_t>());
      continue;
    }
    std::vector<double> g = got.to_vector<double>(), w = want.to_vector<double>();
    if (c.draw == Draw::Uniform) {  // bit-exact (float16/bfloat16/float32 values are exact in double)
      int mismatches = 0;
      for (int64_t i = 0; i < c.n; ++i)
        if (bits_of(g[i]) != bits_of(w[i]) && ++mismatches <= 5)
          ADD_FAILURE() << "element " << i << ": " << g[i] << " != " << w[i];
      EXPECT_EQ(mismatches, 0);
    } else {  // normal: log/sin/cos differ between libraries by an ulp or two
      double eps = epsilon(c.dtype);
      for (int64_t i = 0; i < c.n; ++i)
        ASSERT_LE(std::fabs(g[i] - w[i]), 4 * eps * (std::fabs(w[i]) + c.b)) << "element " << i;
    }
  }
}

TEST(RandomGolden, prefix_of_a_large_parallel_draw_matches_the_small_draw) {
  const GoldenCase uniform_case = find_case("uniform_f32_a");  // copies: g++ 13 warns of a dangling reference
  const GoldenCase randint_case = find_case("randint_i32");    // through find_case's temporary string
  std::vector<float> big = draw_case(uniform_case, Shape{1 << 20}).to_vector<float>();
  std::vector<float> small = load_golden(uniform_case.name).to_vector<float>();
  EXPECT_TRUE(std::equal(small.begin(), small.end(), big.begin()));
  std::vector<int64_t> big_int = draw_case(randint_case, Shape{1 << 20}).to_vector<int64_t>();
  std::vector<int64_t> small_int = load_golden(randint_case.name).to_vector<int64_t>();
  EXPECT_TRUE(std::equal(small_int.begin(), small_int.end(), big_int.begin()));
}

// ---- results do not depend on the thread count

TEST(RandomCpu, results_do_not_depend_on_the_thread_count) {
  int saved = omp_get_max_threads();
  auto draw_all = [](int threads) {
    omp_set_num_threads(threads);
    random::set_state({99, 5});
    std::vector<Array> out = {random::uniform({300001}, 0.0, 1.0, float32), random::uniform({300001}, float64),
                              random::normal({300001}, float32), random::normal({300001}, bfloat16),
                              random::randint(-7, 1000, {300001}, int16)};
    return out;
  };
  std::vector<Array> one = draw_all(1), four = draw_all(4);
  omp_set_num_threads(saved);
  for (size_t k = 0; k < one.size(); ++k) {
    ASSERT_EQ(one[k].nbytes(), four[k].nbytes());
    EXPECT_EQ(std::memcmp(one[k].data_ptr(), four[k].data_ptr(), static_cast<size_t>(one[k].nbytes())), 0) << k;
  }
}

// ---- statistics (bounds are about 5 standard errors wide)

struct Moments {
  double mean, stddev;
};
Moments moments(const std::vector<double>& v) {
  double sum = 0, sum_sq = 0;
  for (double x : v) sum += x;
  double mean = sum / static_cast<double>(v.size());
  for (double x : v) sum_sq += (x - mean) * (x - mean);
  return {mean, std::sqrt(sum_sq / static_cast<double>(v.size()))};
}

TEST(RandomStats, normal_has_the_requested_mean_and_stddev) {
  random::seed(2024);
  for (DType t : {float32, float64}) {
    SCOPED_TRACE(std::string(dtype_name(t)));
    std::vector<double> v = random::normal({1000000}, t).to_vector<double>();
    Moments m = moments(v);
    EXPECT_NEAR(m.mean, 0.0, 0.005);
    EXPECT_NEAR(m.stddev, 1.0, 0.0035);
    double within_one = 0;
    for (double x : v) within_one += std::fabs(x) < 1.0;
    EXPECT_NEAR(within_one / 1e6, 0.682689, 0.0025);
    std::vector<double> shifted = random::normal({1000000}, -2.0, 3.0, t).to_vector<double>();
    Moments s = moments(shifted);
    EXPECT_NEAR(s.mean, -2.0, 0.015);
    EXPECT_NEAR(s.stddev, 3.0, 0.011);
  }
}

TEST(RandomStats, uniform_has_the_right_mean_and_variance) {
  random::seed(7);
  for (DType t : {float32, float64}) {
    std::vector<double> v = random::uniform({1000000}, -1.0, 3.0, t).to_vector<double>();
    Moments m = moments(v);
    EXPECT_NEAR(m.mean, 1.0, 0.006);  // stddev 4/sqrt(12) = 1.155; 5 / 1000 of it
    EXPECT_NEAR(m.stddev, 4.0 / std::sqrt(12.0), 0.003);
    EXPECT_GE(*std::min_element(v.begin(), v.end()), -1.0);
    EXPECT_LT(*std::max_element(v.begin(), v.end()), 3.0);
  }
}

TEST(RandomStats, half_and_bfloat16_uniform_stay_below_high_after_rounding) {
  random::seed(11);
  for (DType t : {float16, bfloat16}) {
    SCOPED_TRACE(std::string(dtype_name(t)));
    // Without the clamp, about 2^-12 (float16) or 2^-9 (bfloat16) of these would round to 1.0.
    std::vector<float> v = random::uniform({1000000}, t).to_vector<float>();
    float limit = t == float16 ? 0.99951171875f : 0.99609375f;
    EXPECT_EQ(*std::max_element(v.begin(), v.end()), limit);
    EXPECT_GE(*std::min_element(v.begin(), v.end()), 0.0f);
    EXPECT_GT(std::count(v.begin(), v.end(), limit), 10);
    std::vector<float> w = random::uniform({100000}, 1.0, 2.0, t).to_vector<float>();
    EXPECT_LT(*std::max_element(w.begin(), w.end()), 2.0f);
  }
}

TEST(RandomStats, randint_covers_the_range_evenly) {
  random::seed(5);
  std::vector<int64_t> small = random::randint(-3, 4, {70000}, int8).to_vector<int64_t>();
  std::vector<int64_t> counts(7, 0);
  for (int64_t x : small) {
    ASSERT_GE(x, -3);
    ASSERT_LE(x, 3);
    ++counts[static_cast<size_t>(x + 3)];
  }
  for (int64_t c : counts) EXPECT_NEAR(static_cast<double>(c), 10000.0, 5 * 92.6);  // binomial stddev
  std::vector<int64_t> bytes = random::randint(0, 256, {100000}, uint8).to_vector<int64_t>();
  EXPECT_EQ(std::set<int64_t>(bytes.begin(), bytes.end()).size(), 256u);
  std::vector<int64_t> wide =
      random::randint(kMin64, std::numeric_limits<int64_t>::max(), {10000}).to_vector<int64_t>();
  int64_t negatives = std::count_if(wide.begin(), wide.end(), [](int64_t x) { return x < 0; });
  EXPECT_NEAR(static_cast<double>(negatives), 5000.0, 250.0);
  EXPECT_EQ(random::randint(0, 1, {100}, int32).to_vector<int64_t>(), std::vector<int64_t>(100, 0));
}

// ---- generator state

TEST(RandomState, a_seed_reproduces_and_another_seed_differs) {
  random::seed(123);
  std::vector<float> a = random::uniform({1000}).to_vector<float>();
  std::vector<double> an = random::normal({1000}, float64).to_vector<double>();
  random::seed(123);
  EXPECT_EQ(random::get_state().offset, 0u);
  EXPECT_EQ(random::uniform({1000}).to_vector<float>(), a);
  EXPECT_EQ(random::normal({1000}, float64).to_vector<double>(), an);
  random::seed(124);
  std::vector<float> b = random::uniform({1000}).to_vector<float>();
  EXPECT_LT(std::inner_product(a.begin(), a.end(), b.begin(), 0, std::plus<>(), std::equal_to<>()), 5);
}

TEST(RandomState, successive_calls_differ_and_advance_the_offset) {
  random::seed(1);
  std::vector<float> a = random::uniform({1000}).to_vector<float>();
  EXPECT_EQ(random::get_state().offset, 250u);
  std::vector<float> b = random::uniform({1000}).to_vector<float>();
  EXPECT_EQ(random::get_state().offset, 500u);
  EXPECT_LT(std::inner_product(a.begin(), a.end(), b.begin(), 0, std::plus<>(), std::equal_to<>()), 5);
  random::randint(0, 10, {6}, int64);
  EXPECT_EQ(random::get_state().offset, 502u);
  random::uniform({0});
  EXPECT_EQ(random::get_state().offset, 502u);
}

TEST(RandomState, restoring_a_saved_state_repeats_the_draws) {
  random::seed(31337);
  random::normal({17});
  random::GeneratorState saved = random::get_state();
  Array a = random::normal({5, 7}, 1.0, 2.0, float32);
  Array r = random::randint(-100, 100, {33}, int32);
  random::GeneratorState after = random::get_state();
  random::set_state(saved);
  EXPECT_EQ(random::normal({5, 7}, 1.0, 2.0, float32).to_vector<float>(), a.to_vector<float>());
  EXPECT_EQ(random::randint(-100, 100, {33}, int32).to_vector<int32_t>(), r.to_vector<int32_t>());
  EXPECT_EQ(random::get_state().offset, after.offset);
  EXPECT_EQ(a.shape(), (Shape{5, 7}));
}

TEST(RandomState, concurrent_draws_reserve_disjoint_blocks) {
  // 4 threads x 50 draws must use exactly the offsets 0, 250, ..., 49750 that 200 sequential draws use.
  constexpr int kThreads = 4, kDraws = 50;
  random::seed(9);
  std::vector<std::vector<float>> firsts(kThreads);
  std::vector<std::exception_ptr> errors(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      try {
        for (int i = 0; i < kDraws; ++i) firsts[t].push_back(random::uniform({1000}).to_vector<float>()[0]);
      } catch (...) {
        errors[t] = std::current_exception();  // an exception escaping a thread would terminate the test binary
      }
    });
  for (std::thread& t : threads) t.join();
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
  EXPECT_EQ(random::get_state().offset, uint64_t{kThreads * kDraws * 250});
  std::vector<float> concurrent, sequential;
  for (const auto& f : firsts) concurrent.insert(concurrent.end(), f.begin(), f.end());
  random::seed(9);
  for (int i = 0; i < kThreads * kDraws; ++i) sequential.push_back(random::uniform({1000}).to_vector<float>()[0]);
  std::sort(concurrent.begin(), concurrent.end());
  std::sort(sequential.begin(), sequential.end());
  EXPECT_EQ(concurrent, sequential);
}

TEST(RandomState, defaults_are_float32_int64_and_the_current_device) {
  Array u = random::uniform({2, 3});
  EXPECT_EQ(u.dtype(), float32);
  EXPECT_EQ(u.shape(), (Shape{2, 3}));
  EXPECT_EQ(u.device(), cpu());
  EXPECT_EQ(random::normal({4}, float16).dtype(), float16);
  EXPECT_EQ(random::randint(0, 5, {3}).dtype(), int64);
}

// ---- errors

TEST(RandomErrors, wrong_dtypes_throw_dtype_error_naming_op_and_dtype) {
  random::GeneratorState before = random::get_state();
  expect_error<DTypeError>([] { random::uniform({3}, int32); }, {"random.uniform", "int32", "float32"});
  expect_error<DTypeError>([] { random::normal({3}, bool_); }, {"random.normal", "bool"});
  expect_error<DTypeError>([] { random::randint(0, 5, {3}, float32); }, {"random.randint", "float32", "int64"});
  expect_error<DTypeError>([] { random::randint(0, 2, {3}, bool_); }, {"random.randint", "bool"});
  EXPECT_EQ(random::get_state().offset, before.offset);
}

TEST(RandomErrors, bad_ranges_throw_value_error) {
  random::GeneratorState before = random::get_state();
  expect_error<ValueError>([] { random::randint(5, 3, {3}); }, {"random.randint", "high (3)", "low (5)"});
  expect_error<ValueError>([] { random::randint(4, 4, {3}); }, {"random.randint", "greater"});
  expect_error<ValueError>([] { random::randint(0, 200, {3}, int8); }, {"random.randint", "int8", "200", "127"});
  expect_error<ValueError>([] { random::randint(-1, 10, {3}, uint8); }, {"random.randint", "uint8", "-1"});
  expect_error<ValueError>([] { random::uniform({3}, 2.0, 1.0); }, {"random.uniform", "high (1)", "low (2)"});
  expect_error<ValueError>([] { random::uniform({3}, 1.0, 1.0); }, {"random.uniform", "greater"});
  expect_error<ValueError>([] { random::uniform({3}, -std::numeric_limits<double>::infinity(), 1.0); },
                           {"random.uniform", "low", "finite"});
  expect_error<ValueError>([] { random::uniform({3}, 0.0, 1e39, float32); }, {"random.uniform", "high", "float32"});
  expect_error<ValueError>([] { random::uniform({3}, -1e308, 1e308, float64); }, {"random.uniform", "high - low"});
  expect_error<ValueError>([] { random::normal({3}, 0.0, -1.0); }, {"random.normal", "stddev", "negative"});
  expect_error<ValueError>([] { random::normal({3}, std::nan(""), 1.0); }, {"random.normal", "mean", "finite"});
  EXPECT_EQ(random::get_state().offset, before.offset);
  EXPECT_EQ(random::uniform({2}, 0.0, 1e39, float64).dtype(), float64);  // fine in double
}

// CUDA graph replays reserve their blocks through reserve_random_blocks (src/cuda/graph.cpp): it hands out
// the current state and moves the offset past the blocks, so the next draw starts after them.
TEST(RandomGenerator, reserving_blocks_returns_the_state_and_later_draws_follow_them) {
  random::set_state({17, 40});
  const random::GeneratorState reserved = detail::reserve_random_blocks(523);
  EXPECT_EQ(reserved.seed, 17u);
  EXPECT_EQ(reserved.offset, 40u);
  EXPECT_EQ(random::get_state().seed, 17u);
  EXPECT_EQ(random::get_state().offset, 563u);
  // A draw after the reservation is the stream at offset 563: block 0 of counter (0, 0, 563, 0), key (17, 0).
  const Array u = random::randint(0, int64_t{1} << 32, {4}, int64, kiln::cpu());
  const detail::philox::Words w = detail::philox::philox4x32_10({{0u, 0u, 563u, 0u}}, 17u, 0u);
  const std::vector<int64_t> v = u.to_vector<int64_t>();
  for (int k = 0; k < 4; ++k) EXPECT_EQ(v[static_cast<size_t>(k)], static_cast<int64_t>(w.w[k])) << "word " << k;
  EXPECT_EQ(random::get_state().offset, 564u);
}

// ---- Generator objects: independent streams with the default generator's layout

std::vector<Device> every_device() {
  std::vector<Device> devices{cpu()};
  for (int i = 0; i < num_gpus(); ++i) devices.push_back(gpu(i));
  return devices;
}

TEST(RandomGenerator, streams_match_numpy_reference_on_every_device) {
  for (Device d : every_device()) {
    for (const char* name : {"uniform_f32_b", "uniform_f64_b", "randint_i32", "randint_i64_big"}) {
      SCOPED_TRACE(std::string(name) + " on " + d.str());
      const GoldenCase c = find_case(name);
      random::seed(99);
      random::Generator g(c.seed);
      g.set_state({c.seed, c.offset});
      const Array got = c.draw == Draw::RandInt ? g.randint(c.low, c.high, {c.n}, c.dtype, d)
                                                : g.uniform({c.n}, c.a, c.b, c.dtype, d);
      EXPECT_EQ(g.get_state().offset, c.offset + c.blocks);
      EXPECT_EQ(random::get_state().offset, 0u);  // the default generator did not move
      EXPECT_EQ(got.device(), d);
      if (c.draw == Draw::RandInt) {
        EXPECT_EQ(got.to_vector<int64_t>(), load_golden(name).to_vector<int64_t>());
      } else {
        const std::vector<double> g_values = got.to_vector<double>(), w = load_golden(name).to_vector<double>();
        for (size_t i = 0; i < w.size(); ++i) ASSERT_EQ(bits_of(g_values[i]), bits_of(w[i])) << "element " << i;
      }
    }
  }
}

TEST(RandomGenerator, streams_are_independent_and_reproducible) {
  random::Generator a(5), b(5);
  const std::vector<float> first = a.normal({64}).to_vector<float>();
  random::seed(5);
  (void)random::normal({1000});  // the default generator's draws do not touch a or b
  EXPECT_EQ(b.normal({64}).to_vector<float>(), first);
  EXPECT_NE(a.normal({64}).to_vector<float>(), first);  // a moved on
  random::Generator c = a;                              // a copy is a handle to the same stream
  const random::GeneratorState before = a.get_state();
  (void)c.uniform({8});
  EXPECT_EQ(a.get_state().offset, before.offset + 2);
  a.seed(5);
  EXPECT_EQ(a.normal({64}).to_vector<float>(), first);
  const std::vector<float> from_generator = random::Generator(7).uniform({16}).to_vector<float>();
  random::seed(7);
  EXPECT_EQ(from_generator, random::uniform({16}).to_vector<float>());  // the same stream layout
}

TEST(RandomGenerator, bad_arguments_throw_as_the_default_generator_does) {
  random::Generator g(1);
  kiln_test::expect_error<ValueError>([&] { g.uniform({2}, 1.0, 0.0); }, {"random.uniform", "greater than low"});
  kiln_test::expect_error<DTypeError>([&] { g.normal({2}, 0.0, 1.0, int32); }, {"random.normal", "int32"});
  kiln_test::expect_error<ValueError>([&] { g.randint(0, 300, {2}, uint8); }, {"random.randint", "uint8"});
  EXPECT_EQ(g.get_state().offset, 0u);
}

}  // namespace
}  // namespace kiln
