// kiln::fft on a GPU (cuFFT) against the CPU's FFTW results (which tests/core/test_fft.cpp holds to NumPy):
// 1-d, 2-d and n-d, real and complex, odd and large sizes, n / s padding and cropping, every norm, strided views
// and axis orders that take the canonical layout, more than cuFFT's three axes, a side stream, the plan cache's
// bound. complex64 within 1e-5 and complex128 within 1e-12 of the result's largest magnitude. Skips without a GPU.
#ifdef KILN_WITH_CUDA

#include <gtest/gtest.h>

#include <algorithm>
#include <complex>
#include <functional>
#include <string>
#include <vector>

#include "cuda/ops.hpp"
#include "kiln/fft.hpp"
#include "kiln/kiln.hpp"
#include "test_util.hpp"

namespace kiln {
namespace {

using c128 = complex128_t;

/// Skips the test unless a GPU is usable and the CPU has its FFT (FFTW), the reference here.
#define KILN_REQUIRE_GPU_AND_CPU_FFT()                            \
  KILN_REQUIRE_GPU();                                             \
  try {                                                           \
    (void)fft::fft(ones({2}));                                    \
  } catch (const Error& e) {                                      \
    GTEST_SKIP() << "the CPU reference needs FFTW: " << e.what(); \
  }

::testing::AssertionResult matches_cpu(const Array& gpu_result, const Array& cpu_result) {
  if (gpu_result.device() != gpu(0)) return ::testing::AssertionFailure() << "result on " << gpu_result.device();
  if (gpu_result.dtype() != cpu_result.dtype())
    return ::testing::AssertionFailure() << "dtype " << gpu_result.dtype() << ", CPU " << cpu_result.dtype();
  if (gpu_result.shape() != cpu_result.shape())
    return ::testing::AssertionFailure() << "shape " << shape_str(gpu_result.shape()) << ", CPU "
                                         << shape_str(cpu_result.shape());
  const std::vector<c128> g = gpu_result.to(cpu()).to_vector<c128>(), c = cpu_result.to_vector<c128>();
  double largest = 1e-300;
  for (const c128& v : c) largest = std::max(largest, std::abs(v));
  const double tol = (real_dtype(cpu_result.dtype()) == float32 ? 1e-5 : 1e-12) * largest;
  for (size_t i = 0; i < c.size(); ++i)
    if (!(std::abs(g[i] - c[i]) <= tol))
      return ::testing::AssertionFailure()
             << "element " << i << ": GPU " << g[i] << ", CPU " << c[i] << " (tolerance " << tol << ")";
  return ::testing::AssertionSuccess();
}

using Transform = std::function<Array(const Array&)>;

/// Runs `f` on `x` (a CPU array) on the CPU and on gpu(0), then compares.
void expect_same(const std::string& what, const Array& x, const Transform& f) {
  SCOPED_TRACE(what);
  const Array on_cpu = f(x);
  EXPECT_TRUE(matches_cpu(f(x.to(gpu(0))), on_cpu));
}

Array signal(const Shape& shape, DType t) {
  if (is_complex(t)) return make_complex(random::normal(shape, float64), random::normal(shape, float64)).astype(t);
  return random::normal(shape, t);
}

TEST(FftGpu, OneDimensionalTransformsMatchTheCpu) {
  KILN_REQUIRE_GPU_AND_CPU_FFT();
  random::seed(11);
  for (DType t : {float32, float64, complex64, complex128}) {
    for (int64_t n : {1, 2, 5, 8, 17, 64, 1000, 4097}) {
      const std::string tag = std::string(dtype_name(t)) + " n=" + std::to_string(n);
      const Array x = signal({3, n}, t);
      expect_same("fft " + tag, x, [](const Array& a) { return fft::fft(a); });
      expect_same("ifft ortho " + tag, x, [](const Array& a) { return fft::ifft(a, {}, -1, "ortho"); });
      expect_same("fft n+3 " + tag, x, [n](const Array& a) { return fft::fft(a, n + 3); });
      expect_same("fft axis 0 forward " + tag, x, [](const Array& a) { return fft::fft(a, 4, 0, "forward"); });
      expect_same("hfft " + tag, x, [n](const Array& a) { return fft::hfft(a, 2 * n - 1); });
      if (!is_complex(t)) {
        expect_same("rfft " + tag, x, [](const Array& a) { return fft::rfft(a); });
        expect_same("rfft n/2 " + tag, x, [n](const Array& a) { return fft::rfft(a, std::max<int64_t>(1, n / 2)); });
        expect_same("ihfft " + tag, x, [](const Array& a) { return fft::ihfft(a, {}, -1, "forward"); });
      }
      if (n > 1) expect_same("irfft " + tag, x, [](const Array& a) { return fft::irfft(a); });
      expect_same("irfft odd n " + tag, x, [n](const Array& a) { return fft::irfft(a, 2 * n + 1, -1, "ortho"); });
    }
  }
}

TEST(FftGpu, MultiDimensionalTransformsMatchTheCpu) {
  KILN_REQUIRE_GPU_AND_CPU_FFT();
  random::seed(12);
  for (DType t : {float32, float64, complex64, complex128}) {
    for (const Shape& shape : {Shape{6, 10}, Shape{5, 7, 9}, Shape{2, 3, 4, 5}, Shape{2, 3, 2, 3, 5}}) {
      const std::string tag = std::string(dtype_name(t)) + " " + shape_str(shape);
      const Array x = signal(shape, t);
      expect_same("fftn " + tag, x, [](const Array& a) { return fft::fftn(a); });
      expect_same("ifftn ortho " + tag, x, [](const Array& a) { return fft::ifftn(a, {}, {}, "ortho"); });
      expect_same("fft2 s " + tag, x, [](const Array& a) { return fft::fft2(a, Shape{3, 12}); });
      expect_same("fftn axes (-1, 0) " + tag, x, [](const Array& a) { return fft::fftn(a, {}, Shape{-1, 0}); });
      expect_same("irfftn " + tag, x, [](const Array& a) { return fft::irfftn(a); });
      expect_same("irfft2 s " + tag, x, [](const Array& a) {
        return fft::irfft2(a, Shape{4, 9}, {-2, -1}, "forward");
      });
      if (!is_complex(t)) {
        expect_same("rfftn " + tag, x, [](const Array& a) { return fft::rfftn(a); });
        expect_same("rfft2 axes (1, 0) " + tag, x, [](const Array& a) { return fft::rfft2(a, Shape{5, 7}, {1, 0}); });
      }
    }
  }
}

TEST(FftGpu, StridedViewsMatchTheCpu) {
  KILN_REQUIRE_GPU_AND_CPU_FFT();
  random::seed(13);
  for (DType t : {float32, complex128}) {
    const Array x = signal({8, 6, 10}, t);
    expect_same("transposed", x, [](const Array& a) { return fft::fftn(a.transpose(), {}, Shape{0, 1}); });
    expect_same("every other", x,
                [](const Array& a) { return fft::fft(a.slice(-1, std::nullopt, std::nullopt, 2), {}, 1); });
    expect_same("reversed", x, [](const Array& a) { return fft::fft2(a.slice(0, std::nullopt, std::nullopt, -1)); });
    expect_same("middle axis", x, [](const Array& a) { return fft::ifft(a, {}, 1); });
    expect_same("outer axes", x, [](const Array& a) { return fft::fftn(a, {}, Shape{0, 2}); });
    expect_same("broadcast", x, [](const Array& a) { return fft::fft(a[0].broadcast_to({4, 6, 10})); });
  }
}

TEST(FftGpu, FrequenciesAndShiftsOnTheDevice) {
  KILN_REQUIRE_GPU();
  const Array f = fft::fftfreq(5, 0.5, float32, gpu(0));
  EXPECT_EQ(f.device(), gpu(0));
  EXPECT_EQ(f.to(cpu()).to_vector<float>(), (std::vector<float>{0, 0.4f, 0.8f, -0.8f, -0.4f}));
  EXPECT_EQ(fft::rfftfreq(4, 1.0, float64, gpu(0)).to(cpu()).to_vector<double>(), (std::vector<double>{0, 0.25, 0.5}));
  const Array z = make_complex(arange(12.0).reshape({3, 4}), -arange(12.0).reshape({3, 4}));
  for (const std::optional<Shape>& axes : {std::optional<Shape>(), std::optional<Shape>(Shape{1})}) {
    const Array shifted = fft::fftshift(z.to(gpu(0)), axes);
    EXPECT_EQ(shifted.device(), gpu(0));
    EXPECT_TRUE(array_equal(shifted.to(cpu()), fft::fftshift(z, axes)));
    EXPECT_TRUE(array_equal(fft::ifftshift(shifted, axes).to(cpu()), z));
  }
}

TEST(FftGpu, RunsOnTheCurrentStream) {
  KILN_REQUIRE_GPU_AND_CPU_FFT();
  random::seed(14);
  const Array x = signal({16, 33}, complex64);
  const Stream side = Stream::create(gpu(0));
  Array on_side;
  {
    StreamGuard guard(side);
    on_side = fft::fft(x.to(gpu(0)));
  }
  side.synchronize();
  EXPECT_TRUE(matches_cpu(on_side, fft::fft(x)));
}

TEST(FftGpu, PlanCacheIsBoundedPerDevice) {
  KILN_REQUIRE_GPU_AND_CPU_FFT();
  for (int64_t n = 1; n <= 40; ++n) (void)fft::fft(ones({2, n}, complex64, gpu(0)));
  synchronize(gpu(0));
  EXPECT_GT(cuda_impl::cuda_fft_cached_plans(0), 0u);
  EXPECT_LE(cuda_impl::cuda_fft_cached_plans(0), 16u);
  // An evicted plan is made again when its shape comes back, with the right result.
  EXPECT_TRUE(matches_cpu(fft::fft(ones({2, 1}, complex64).to(gpu(0))), fft::fft(ones({2, 1}, complex64))));
}

TEST(FftGpu, GradientsMatchTheCpu) {
  KILN_REQUIRE_GPU_AND_CPU_FFT();
  // Each transform's gradient (its adjoint through cuFFT) against the CPU's (FFTW), float64 / complex128, for
  // L = sum(re(f(x)) * w) with fixed weights w, so every bin's gradient is exercised.
  using Transform = std::function<Array(const Array&)>;
  const std::vector<std::pair<std::string, Transform>> cases = {
      {"fft n 9", [](const Array& a) { return fft::fft(a, 9); }},
      {"ifft ortho", [](const Array& a) { return fft::ifft(a, std::nullopt, -1, "ortho"); }},
      {"rfft n 6", [](const Array& a) { return fft::rfft(real(a), 6); }},
      {"irfft n 7", [](const Array& a) { return fft::irfft(a, 7); }},
      {"hfft", [](const Array& a) { return fft::hfft(a); }},
      {"fft2 s (4, 5)", [](const Array& a) { return fft::fft2(a, Shape{4, 5}); }},
      {"rfftn", [](const Array& a) { return fft::rfftn(real(a)); }},
      {"irfft2 forward", [](const Array& a) { return fft::irfft2(a, std::nullopt, Shape{-2, -1}, "forward"); }},
  };
  random::seed(3);
  const Array x = make_complex(random::normal({3, 6}, float64, cpu()), random::normal({3, 6}, float64, cpu()));
  for (const auto& [name, f] : cases) {
    auto grad_on = [&, &f = f](Device d) {
      const Array in = x.to(d).set_requires_grad();
      const Array y = f(in);
      const Array yr = is_complex(y.dtype()) ? real(y) : y;
      const Array w = arange(yr.size(), float64, cpu()).reshape(yr.shape()).to(d);
      sum(yr * w).backward();
      return in.grad().to(cpu());
    };
    const Array want = grad_on(cpu()), got = grad_on(gpu(0));
    EXPECT_TRUE(allclose(got, want, 1e-10, 1e-9)) << name;
  }
}

}  // namespace
}  // namespace kiln

#endif  // KILN_WITH_CUDA
