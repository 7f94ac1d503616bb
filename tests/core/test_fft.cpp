// kiln::fft on the CPU (FFTW) against NumPy golden data (tests/golden/fft_golden.py): every function, sizes 1 to 64,
// 2-d to 5-d shapes, each norm, n / s below and above the axis' length, permuted and repeated axes, strided views,
// float32/float64/int64/complex input; the frequencies and shifts exactly; round trips; the errors' messages.
#include <gtest/gtest.h>

#include <cmath>
#include <complex>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "kiln/fft.hpp"
#include "kiln/kiln.hpp"
#include "test_util.hpp"

namespace kiln {
namespace {

using kiln_test::expect_error;
using c128 = complex128_t;

const std::string kDir = std::string(KILN_GOLDEN_DIR) + "/fft/";

/// The CPU's transforms need FFTW (an optional dependency: make installs it); without it they throw kiln::Error
/// naming the package, which this checks before skipping.
bool cpu_has_fftw() {
  try {
    (void)fft::fft(ones({2}));
    return true;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("apt-get install libfftw3-dev"), std::string::npos) << e.what();
    return false;
  }
}
#define KILN_SKIP_WITHOUT_FFTW() \
  if (!cpu_has_fftw()) GTEST_SKIP() << "built without FFTW (apt-get install libfftw3-dev): no CPU transforms"

struct FftCase {
  std::string name, func, view;
  std::optional<int64_t> n;
  int64_t axis = -1;
  std::optional<Shape> s, axes;
  std::optional<std::string> norm;
};

std::optional<Shape> parse_list(const std::string& field) {
  if (field == "-") return std::nullopt;
  Shape list;
  std::stringstream in(field);
  std::string item;
  while (std::getline(in, item, ',')) list.push_back(std::stoll(item));
  return list;
}

std::vector<FftCase> fft_cases() {
  std::ifstream listing(kDir + "cases.txt");
  std::vector<FftCase> cases;
  std::string line;
  while (std::getline(listing, line)) {
    std::stringstream fields(line);
    FftCase c;
    std::string n, axis, s, axes, norm;
    fields >> c.name >> c.func >> c.view >> n >> axis >> s >> axes >> norm;
    if (n != "-") c.n = std::stoll(n);
    if (axis != "-") c.axis = std::stoll(axis);
    c.s = parse_list(s);
    c.axes = parse_list(axes);
    if (norm != "-" && norm != "None") c.norm = norm;
    cases.push_back(c);
  }
  return cases;
}

Array view_of(const Array& x, const std::string& view) {
  if (view == "T") return x.transpose();
  if (view == "step") return x.slice(-1, std::nullopt, std::nullopt, 2);
  if (view == "flip") return x.slice(-1, std::nullopt, std::nullopt, -1);
  return x;
}

Array call(const FftCase& c, const Array& x) {
  using Fn1 = Array (*)(const Array&, std::optional<int64_t>, int64_t, const std::optional<std::string>&);
  using FnN = Array (*)(const Array&, const std::optional<Shape>&, const std::optional<Shape>&,
                        const std::optional<std::string>&);
  using Fn2 = Array (*)(const Array&, const std::optional<Shape>&, const Shape&, const std::optional<std::string>&);
  static const std::map<std::string, Fn1> one = {{"fft", fft::fft},     {"ifft", fft::ifft}, {"rfft", fft::rfft},
                                                 {"irfft", fft::irfft}, {"hfft", fft::hfft}, {"ihfft", fft::ihfft}};
  static const std::map<std::string, FnN> many = {
      {"fftn", fft::fftn}, {"ifftn", fft::ifftn}, {"rfftn", fft::rfftn}, {"irfftn", fft::irfftn}};
  static const std::map<std::string, Fn2> two = {
      {"fft2", fft::fft2}, {"ifft2", fft::ifft2}, {"rfft2", fft::rfft2}, {"irfft2", fft::irfft2}};
  if (auto f = one.find(c.func); f != one.end()) return f->second(x, c.n, c.axis, c.norm);
  if (auto f = many.find(c.func); f != many.end()) return f->second(x, c.s, c.axes, c.norm);
  if (auto f = two.find(c.func); f != two.end()) return f->second(x, c.s, c.axes.value_or(Shape{-2, -1}), c.norm);
  ADD_FAILURE() << "no kiln function for " << c.func;
  return x;
}

/// log2(points) * eps of the result's precision, times a margin for the two libraries' different algorithms.
double tolerance(DType result, double points) {
  const double eps = real_dtype(result) == float32 ? std::ldexp(1.0, -23) : std::ldexp(1.0, -52);
  return 8 * eps * std::max(1.0, std::log2(points));
}

::testing::AssertionResult close_to_numpy(const Array& got, const Array& want, double points) {
  if (got.dtype() != want.dtype())
    return ::testing::AssertionFailure() << "dtype " << got.dtype() << ", NumPy " << want.dtype();
  if (got.shape() != want.shape())
    return ::testing::AssertionFailure() << "shape " << shape_str(got.shape()) << ", NumPy " << shape_str(want.shape());
  const std::vector<c128> g = got.to_vector<c128>(), w = want.to_vector<c128>();
  double largest = 1;
  for (const c128& v : w) largest = std::max(largest, std::abs(v));
  const double tol = tolerance(want.dtype(), points) * largest;
  for (size_t i = 0; i < w.size(); ++i)
    if (!(std::abs(g[i] - w[i]) <= tol))
      return ::testing::AssertionFailure()
             << "element " << i << ": " << g[i] << ", NumPy " << w[i] << " (tolerance " << tol << ")";
  return ::testing::AssertionSuccess();
}

TEST(FftGolden, EveryTransformMatchesNumPyOnTheCpu) {
  KILN_SKIP_WITHOUT_FFTW();
  const std::vector<FftCase> cases = fft_cases();
  ASSERT_GT(cases.size(), 800u) << "missing " << kDir << "cases.txt";
  int checked = 0;
  for (const FftCase& c : cases) {
    if (c.func == "shift") continue;
    SCOPED_TRACE(c.name);
    const Array x = view_of(load(kDir + c.name + "_in.npy"), c.view);
    const Array want = load(kDir + c.name + "_out.npy");
    double points = 1;
    for (int64_t e : want.shape()) points *= static_cast<double>(e);
    EXPECT_TRUE(close_to_numpy(call(c, x), want, points));
    ++checked;
  }
  EXPECT_GT(checked, 700);
}

TEST(FftGolden, ShiftsMatchNumPyExactly) {
  int checked = 0;
  for (const FftCase& c : fft_cases()) {
    if (c.func != "shift") continue;
    SCOPED_TRACE(c.name);
    const Array x = load(kDir + c.name + "_in.npy");
    const Array shifted = fft::fftshift(x, c.axes), back = fft::ifftshift(x, c.axes);
    EXPECT_TRUE(array_equal(shifted, load(kDir + c.name + "_fftshift.npy")));
    EXPECT_TRUE(array_equal(back, load(kDir + c.name + "_ifftshift.npy")));
    EXPECT_EQ(shifted.dtype(), x.dtype());
    EXPECT_TRUE(array_equal(fft::ifftshift(shifted, c.axes), x));
    ++checked;
  }
  EXPECT_EQ(checked, 15);
}

TEST(FftGolden, FrequenciesMatchNumPyExactly) {
  for (int64_t n : {1, 2, 5, 8, 17, 64, 9, 10}) {
    for (const char* d : {"1.0", "0.25", "3.0"}) {
      SCOPED_TRACE(std::to_string(n) + " " + d);
      const std::string suffix = std::to_string(n) + "_" + d + "_out.npy";
      EXPECT_TRUE(array_equal(fft::fftfreq(n, std::stod(d)), load(kDir + "fftfreq_" + suffix)));
      EXPECT_TRUE(array_equal(fft::rfftfreq(n, std::stod(d)), load(kDir + "rfftfreq_" + suffix)));
    }
  }
}

// ---------------------------------------------------------------- hand-computed values, dtypes, round trips

TEST(Fft, SmallTransformsByHand) {
  KILN_SKIP_WITHOUT_FFTW();
  // The DFT of [1, 2, 3, 4]: [10, -2+2j, -2, -2-2j].
  const Array x = from_data({1.0, 2.0, 3.0, 4.0}, {4});
  const std::vector<c128> want = {{10, 0}, {-2, 2}, {-2, 0}, {-2, -2}};
  EXPECT_EQ(fft::fft(x).to_vector<c128>(), want);
  EXPECT_EQ(fft::rfft(x).to_vector<c128>(), (std::vector<c128>{{10, 0}, {-2, 2}, {-2, 0}}));
  EXPECT_EQ(fft::ifft(fft::fft(x)).to_vector<c128>(), (std::vector<c128>{1, 2, 3, 4}));
  EXPECT_EQ(fft::fftfreq(4, 0.5, float32).to_vector<float>(), (std::vector<float>{0, 0.5f, -1, -0.5f}));
  EXPECT_EQ(fft::rfftfreq(5).to_vector<double>(), (std::vector<double>{0, 0.2, 0.4}));
}

TEST(Fft, DocsExampleComputesWhatItSays) {
  KILN_SKIP_WITHOUT_FFTW();
  // docs/fft.md's first example.
  Array t = arange(0, 64, 1, float64) / 64.0;
  Array x = sin(t * (2 * 3.141592653589793 * 5));
  Array spectrum = fft::rfft(x);
  EXPECT_EQ(spectrum.dtype(), complex128);
  EXPECT_EQ(spectrum.shape(), (Shape{33}));
  EXPECT_NEAR(std::abs(spectrum[5].item<c128>()), 32.0, 1e-12);
  EXPECT_EQ(fft::rfftfreq(64, 1.0 / 64).to_vector<double>()[32], 32.0);
  EXPECT_TRUE(allclose(fft::irfft(spectrum, 64), x, 1e-12, 1e-12));
  Array image = random::normal({32, 32}).to(try_gpu());
  Array image_spectrum = fft::fft2(image, std::nullopt, {-2, -1}, "ortho");
  EXPECT_EQ(image_spectrum.dtype(), complex64);
  EXPECT_EQ(image_spectrum.device(), image.device());
}

TEST(Fft, ResultDtypesFollowNumPy2) {
  KILN_SKIP_WITHOUT_FFTW();
  const Array f32 = ones({4}, float32), f64 = ones({4}, float64), i32 = ones({4}, int32), b = ones({4}, bool_);
  EXPECT_EQ(fft::fft(f32).dtype(), complex64);
  EXPECT_EQ(fft::fft(ones({4}, float16)).dtype(), complex64);
  EXPECT_EQ(fft::fft(f64).dtype(), complex128);
  EXPECT_EQ(fft::fft(i32).dtype(), complex128);
  EXPECT_EQ(fft::fft(b).dtype(), complex128);
  EXPECT_EQ(fft::fft(ones({4}, complex64)).dtype(), complex64);
  EXPECT_EQ(fft::rfft(f32).dtype(), complex64);
  EXPECT_EQ(fft::irfft(ones({4}, complex64)).dtype(), float32);
  EXPECT_EQ(fft::irfft(f64).dtype(), float64);
  EXPECT_EQ(fft::hfft(ones({4}, complex128)).dtype(), float64);
  EXPECT_EQ(fft::ihfft(f32).dtype(), complex64);
  EXPECT_EQ(fft::irfftn(ones({3, 4}, complex64)).dtype(), float32);
}

TEST(Fft, RoundTripsRecoverTheInput) {
  KILN_SKIP_WITHOUT_FFTW();
  random::seed(7);
  for (DType t : {float32, float64}) {
    const double tol = t == float32 ? 1e-5 : 1e-13;
    for (int64_t n : {1, 2, 5, 8, 17, 64}) {
      SCOPED_TRACE(std::to_string(n));
      const Array x = random::normal({3, n}, t);
      const Array z = x.astype(t == float32 ? complex64 : complex128);
      EXPECT_TRUE(allclose(fft::ifft(fft::fft(z)), z, tol, tol));
      EXPECT_TRUE(allclose(fft::irfft(fft::rfft(x), n), x, tol, tol));
      EXPECT_TRUE(allclose(fft::ihfft(fft::hfft(fft::ihfft(x), n)), fft::ihfft(x), tol, tol));
      EXPECT_TRUE(
          allclose(fft::ifftn(fft::fftn(z, std::nullopt, std::nullopt, "ortho"), std::nullopt, std::nullopt, "ortho"),
                   z, tol, tol));
      EXPECT_TRUE(
          allclose(fft::irfft2(fft::rfft2(x, std::nullopt, {-2, -1}, "forward"), Shape{3, n}, {-2, -1}, "forward"), x,
                   tol, tol));
    }
  }
}

TEST(Fft, BroadcastAndStridedInputsEqualTheirContiguousCopies) {
  KILN_SKIP_WITHOUT_FFTW();
  random::seed(8);
  const Array x = random::normal({6, 10}, float64);
  const Array wide = x[0].broadcast_to({4, 10});  // stride 0 along the batch axis
  EXPECT_TRUE(array_equal(fft::fft(wide), fft::fft(wide.contiguous())));
  const Array constant = x.index({Slice(0, 1), Slice(0, 1)}).broadcast_to({3, 17});  // stride 0 along the axis
  EXPECT_TRUE(allclose(fft::fft(constant), fft::fft(constant.contiguous()), 1e-14, 1e-14));
  EXPECT_TRUE(allclose(fft::rfftn(constant), fft::rfftn(constant.contiguous()), 1e-14, 1e-14));
  const Array column = x.index({Slice(), Slice(std::nullopt, std::nullopt, 3)});
  EXPECT_TRUE(
      allclose(fft::rfft(column, std::nullopt, 0), fft::rfft(column.contiguous(), std::nullopt, 0), 1e-14, 1e-14));
  const Array one = x.broadcast_to({2, 6, 10}).index({Slice(), Slice(), Slice(0, 1)});  // size-1 axis, any stride
  EXPECT_TRUE(allclose(fft::fftn(one), fft::fftn(one.contiguous()), 1e-14, 1e-14));
}

// Large complex transforms over several axes, or over one strided axis, run axis by axis over contiguous rows on
// the CPU. A separable input checks the layout handling against 1-d transforms of contiguous vectors:
// fft2(outer(u, v)) = outer(fft(u), fft(v)); along one axis, fft(outer(u, v), axis 0) = outer(fft(u), v).
TEST(Fft, LargeMultiAxisAndStridedTransformsAreSeparable) {
  KILN_SKIP_WITHOUT_FFTW();
  random::seed(9);
  for (DType t : {complex64, complex128}) {
    SCOPED_TRACE(std::string(dtype_name(t)));
    const double tol = t == complex64 ? 2e-4 : 1e-10;
    const Array u = random::normal({256}, float64).astype(t), v = random::normal({384}, float64).astype(t);
    const Array x = outer(u, v);  // 98304 elements: the rows path
    const Array fu = fft::fft(u), fv = fft::fft(v);
    const double scale = max(abs(outer(fu, fv))).item<double>();
    EXPECT_TRUE(allclose(fft::fft2(x), outer(fu, fv), 0, tol * scale)) << "fft2";
    EXPECT_TRUE(allclose(fft::fft(x, std::nullopt, 0), outer(fu, v), 0, tol * scale)) << "axis 0";
    EXPECT_TRUE(allclose(fft::fft(x.T(), std::nullopt, 1), outer(fu, v).T(), 0, tol * scale)) << "transposed";
    EXPECT_TRUE(allclose(fft::ifft2(fft::fft2(x)), x, 0, tol * max(abs(x)).item<double>())) << "round trip";
    // three axes, two transformed, one of them the middle one; a batch axis in front
    const Array w = random::normal({3}, float64).astype(t);
    const Array y = outer(w, x.reshape({-1})).reshape({3, 256, 384});
    const Array want = outer(w, outer(fu, fv).reshape({-1})).reshape({3, 256, 384});
    EXPECT_TRUE(allclose(fft::fftn(y, std::nullopt, Shape{1, 2}), want, 0, 3 * tol * scale)) << "fftn axes (1, 2)";
    // Real transforms along a strided axis: rfft of outer(a, b) along axis 0 is outer(rfft(a), b); irfft back.
    const Array a = random::normal({1024}, float64).astype(t == complex64 ? float32 : float64);
    const Array b = random::normal({200}, float64).astype(a.dtype());
    const Array fa = fft::rfft(a);
    const Array r = fft::rfft(outer(a, b), std::nullopt, 0);
    const double rscale = max(abs(outer(fa, b.astype(t)))).item<double>();
    EXPECT_TRUE(allclose(r, outer(fa, b.astype(t)), 0, tol * rscale)) << "rfft axis 0";
    EXPECT_TRUE(allclose(fft::irfft(r, 1024, 0), outer(a, b), 0, tol * max(abs(outer(a, b))).item<double>()))
        << "irfft axis 0";
    const Array want2 = outer(fft::fft(a.astype(t)), fft::rfft(b));
    EXPECT_TRUE(allclose(fft::rfft2(outer(a, b)), want2, 0, tol * max(abs(want2)).item<double>())) << "rfft2";
  }
}

TEST(Fft, InputIsLeftUntouched) {
  KILN_SKIP_WITHOUT_FFTW();
  // c2r transforms overwrite their input in FFTW and cuFFT: kiln gives them a copy.
  const Array z = from_data<c128>({{1, 0}, {2, 1}, {0, -1}}, {3});
  const std::vector<c128> before = z.to_vector<c128>();
  (void)fft::irfft(z);
  (void)fft::hfft(z);
  (void)fft::irfftn(z.reshape({1, 3}));
  EXPECT_EQ(z.to_vector<c128>(), before);
}

TEST(Fft, EmptyBatchesGiveEmptyResults) {
  KILN_SKIP_WITHOUT_FFTW();
  EXPECT_EQ(fft::fft(zeros({0, 4})).shape(), (Shape{0, 4}));
  EXPECT_EQ(fft::rfft(zeros({0, 4}), 6).shape(), (Shape{0, 4}));
  EXPECT_EQ(fft::irfftn(zeros({2, 0, 3}, complex64), std::nullopt, Shape{0, 2}).shape(), (Shape{2, 0, 4}));
}

TEST(Fft, PlansAreReusedAcrossCallsAndThreads) {
  KILN_SKIP_WITHOUT_FFTW();
  // The same shape from several threads: one cached plan, FFTW's execute being thread-safe; each result is exact
  // for an impulse (all ones).
  std::vector<std::thread> threads;
  std::vector<int> ok(4, 0);
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&ok, t] {
      const Array impulse = zeros({8, 16}).index_put({Slice(), 0}, 1.0);
      for (int k = 0; k < 20; ++k)
        ok[static_cast<size_t>(t)] += array_equal(fft::fft(impulse), ones({8, 16}, complex64));
    });
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(ok, (std::vector<int>(4, 20)));
}

// ---------------------------------------------------------------- errors

TEST(FftErrors, MessagesNameTheFunctionTheArgumentAndTheFix) {
  const Array x = ones({4});
  expect_error<ValueError>([&] { fft::fft(x, 0); }, {"fft::fft: n gives 0 points to transform; it must be at least 1"});
  expect_error<ValueError>([&] { fft::irfft(ones({1})); },
                           {"fft::irfft: n = 2 * (m - 1) from the input's length m = 1 along axis -1 (pass n) gives 0 "
                            "points to transform; it must be at least 1"});
  expect_error<ValueError>([&] { fft::fft(zeros({0})); },
                           {"fft::fft: the input's length along axis -1 gives 0 points"});
  expect_error<ValueError>([&] { fft::ifft(x, std::nullopt, -1, "bad"); },
                           {"fft::ifft: norm \"bad\" is not one of \"backward\", \"ortho\" or \"forward\""});
  expect_error<ShapeError>([&] { fft::fft(x, std::nullopt, 1); },
                           {"fft::fft: axis 1 is out of bounds for an array of shape (4,); pick one in [-1, 1)"});
  expect_error<ShapeError>([&] { fft::fft(ones(Shape{})); }, {"a 0-d array has no axis to transform"});
  expect_error<DTypeError>([&] { fft::rfft(ones({4}, complex64)); },
                           {"fft::rfft: the input must be real, got complex64; use fft for complex input"});
  expect_error<DTypeError>([&] { fft::ihfft(ones({4}, complex128)); }, {"fft::ihfft: the input must be real"});
  expect_error<DTypeError>([&] { fft::rfftn(ones({2, 2}, complex64)); }, {"use fftn for complex input"});
  expect_error<ValueError>(
      [&] {
        fft::fftn(ones({2, 3}), Shape{2}, Shape{0, 1});
      },
      {"fft::fftn: s has 1 entries and axes 2; give one size per axis"});
  expect_error<ValueError>(
      [&] {
        fft::fftn(ones({2, 3}), Shape{2, 2, 2});
      },
      {"fft::fftn: s has 3 entries, more than the 2 axes of the array"});
  expect_error<ValueError>(
      [&] {
        fft::fft2(ones({2, 3}), Shape{2, 0});
      },
      {"fft::fft2: s[1] gives 0 points to transform"});
  expect_error<ShapeError>([&] { fft::ifft2(ones({3})); }, {"fft::ifft2: axis -2 is out of bounds"});
  expect_error<ValueError>(
      [&] {
        fft::rfftn(ones({2, 3}), std::nullopt, Shape{});
      },
      {"fft::rfftn: no axis to transform"});
  expect_error<ValueError>([&] { fft::fft(Array()); }, {"fft::fft: the array is undefined"});
  expect_error<ValueError>([&] { fft::fftfreq(0); }, {"fft::fftfreq: n must be at least 1, got 0"});
  expect_error<ValueError>([&] { fft::rfftfreq(4, 0.0); }, {"fft::rfftfreq: the sample spacing d is 0"});
  expect_error<DTypeError>([&] { fft::fftfreq(4, 1.0, int64); }, {"fft::fftfreq: dtype must be a real floating type"});
  expect_error<ShapeError>([&] { fft::fftshift(ones({2, 2}), Shape{2}); }, {"fft::fftshift: axis 2 is out of bounds"});
}

// ---------------------------------------------------------------- gradients

/// Random float64 (real) or complex128 values of `shape`.
Array grad_input(const Shape& shape, bool complex, uint64_t seed) {
  random::seed(seed);
  const Array re = random::normal(shape, float64, cpu());
  return complex ? make_complex(re, random::normal(shape, float64, cpu())) : re;
}

void expect_fft_gradcheck(const std::function<Array(const Array&)>& f, const Array& x, const std::string& what) {
  const GradcheckResult r = gradcheck([&](const std::vector<Array>& in) { return f(in[0]); }, {x});
  EXPECT_TRUE(r.passed) << what << ": " << r.report;
}

TEST(FftGrad, OneDimensionalTransformsPassGradcheckForEveryNormAndLength) {
  KILN_SKIP_WITHOUT_FFTW();
  const std::optional<std::string> norms[] = {std::nullopt, "ortho", "forward"};
  uint64_t seed = 1;
  for (const auto& norm : norms)
    for (int64_t m : {5, 6})
      for (std::optional<int64_t> n : {std::optional<int64_t>{}, std::optional<int64_t>{4}, std::optional<int64_t>{9}}) {
        const std::string tag = "m " + std::to_string(m) + ", n " + (n ? std::to_string(*n) : "-") + ", norm " +
                                norm.value_or("backward");
        for (bool complex : {false, true}) {
          const Array x = grad_input({3, m}, complex, ++seed);
          const std::string t = tag + (complex ? ", complex" : ", real");
          expect_fft_gradcheck([&](const Array& a) { return fft::fft(a, n, -1, norm); }, x, "fft " + t);
          expect_fft_gradcheck([&](const Array& a) { return fft::ifft(a, n, -1, norm); }, x, "ifft " + t);
          expect_fft_gradcheck([&](const Array& a) { return fft::irfft(a, n, -1, norm); }, x, "irfft " + t);
          expect_fft_gradcheck([&](const Array& a) { return fft::hfft(a, n, -1, norm); }, x, "hfft " + t);
        }
        const Array r = grad_input({m, 3}, false, ++seed);  // along axis 0: a strided axis
        expect_fft_gradcheck([&](const Array& a) { return fft::rfft(a, n, 0, norm); }, r, "rfft " + tag);
        expect_fft_gradcheck([&](const Array& a) { return fft::ihfft(a, n, 0, norm); }, r, "ihfft " + tag);
      }
}

TEST(FftGrad, MultiDimensionalTransformsPassGradcheck) {
  KILN_SKIP_WITHOUT_FFTW();
  const Array c = grad_input({3, 4, 5}, true, 41), r = grad_input({3, 4, 5}, false, 42);
  for (const std::optional<std::string>& norm : {std::optional<std::string>{}, std::optional<std::string>{"ortho"}}) {
    const std::string tag = ", norm " + norm.value_or("backward");
    expect_fft_gradcheck([&](const Array& a) { return fft::fftn(a, std::nullopt, std::nullopt, norm); }, c,
                         "fftn" + tag);
    expect_fft_gradcheck([&](const Array& a) { return fft::ifftn(a, Shape{2, 6}, Shape{0, 2}, norm); }, c,
                         "ifftn s (2, 6) axes (0, 2)" + tag);
    expect_fft_gradcheck([&](const Array& a) { return fft::fft2(a, Shape{5, 3}, Shape{-2, -1}, norm); }, c,
                         "fft2 s (5, 3)" + tag);
    expect_fft_gradcheck([&](const Array& a) { return fft::ifft2(a, std::nullopt, Shape{-2, -1}, norm); }, r,
                         "ifft2 of real input" + tag);
    expect_fft_gradcheck([&](const Array& a) { return fft::fftn(a, Shape{3, 6}, Shape{1, 1}, norm); }, c,
                         "fftn over a repeated axis" + tag);
    expect_fft_gradcheck([&](const Array& a) { return fft::rfftn(a, std::nullopt, std::nullopt, norm); }, r,
                         "rfftn" + tag);
    expect_fft_gradcheck([&](const Array& a) { return fft::rfft2(a, Shape{3, 7}, Shape{-2, -1}, norm); }, r,
                         "rfft2 s (3, 7)" + tag);
    expect_fft_gradcheck([&](const Array& a) { return fft::irfftn(a, std::nullopt, std::nullopt, norm); }, c,
                         "irfftn" + tag);
    expect_fft_gradcheck([&](const Array& a) { return fft::irfft2(a, Shape{5, 5}, Shape{0, 1}, norm); }, c,
                         "irfft2 s (5, 5) axes (0, 1)" + tag);
  }
}

TEST(FftGrad, ParsevalsGradientIsTwoNTimesTheInput) {
  KILN_SKIP_WITHOUT_FFTW();
  // sum |fft(x)|^2 = n sum |x|^2, so its gradient is 2 n x, real or complex (PyTorch's convention); rfft of real x
  // and irfft's round trip give the same through the half spectrum.
  const Array z = grad_input({8}, true, 7).set_requires_grad();
  sum(square(abs(fft::fft(z)))).backward();
  EXPECT_TRUE(allclose(z.grad(), z.detach() * 16.0, 1e-12, 1e-12));
  const Array x = grad_input({8}, false, 8).set_requires_grad();
  sum(square(abs(fft::fft(x)))).backward();
  EXPECT_EQ(x.grad().dtype(), float64);
  EXPECT_TRUE(allclose(x.grad(), x.detach() * 16.0, 1e-12, 1e-12));
  const Array y = grad_input({8}, false, 9).set_requires_grad();
  sum(square(fft::irfft(fft::rfft(y)))).backward();  // the round trip is the identity: gradient 2 y
  EXPECT_TRUE(allclose(y.grad(), y.detach() * 2.0, 1e-12, 1e-12));
  // float32 stays float32, complex64 complex64.
  const Array f = ones({6}, float32).set_requires_grad();
  sum(real(fft::fft(f))).backward();  // d/dx_j sum_k re X_k = sum_k cos(2 pi jk / n): n at j = 0, else 0
  EXPECT_EQ(f.grad().dtype(), float32);
  EXPECT_TRUE(allclose(f.grad(), from_data({6.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f}, {6}), 1e-5, 1e-5));
}

TEST(Fft, AxesEmptyReturnsTheInputAsNumPy) {
  const Array x = from_data({1.0f, 2.0f}, {2});
  const Array y = fft::fftn(x, std::nullopt, Shape{});
  EXPECT_EQ(y.dtype(), float32);
  EXPECT_TRUE(array_equal(y, x));
}

}  // namespace
}  // namespace kiln
