// GPU matrix products (src/cuda/matmul.cpp). Without a GPU: the generated
// fallback kernel compiles to PTX for every dtype and the TF32 switch toggles.
// On cuda:0: NumPy golden cases (every dtype, 1-d, broadcast batches,
// transposed/strided/reversed operands, dot), float dtypes against a float64
// CPU reference with an error bound scaled by |a| |b|, integer products exact
// with wrap-around (hand-computed), the TF32 switch within its tolerance, the
// fallback kernel for layouts cuBLAS cannot read, and work on a second stream.
#ifdef KILN_WITH_CUDA

#include <gtest/gtest.h>

#include "test_util.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <functional>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "core/backend.hpp"
#include "cuda/codegen.hpp"
#include "cuda/compiler.hpp"
#include "cuda/matmul.hpp"
#include "kiln/cuda.hpp"
#include "kiln/io.hpp"
#include "kiln/kiln.hpp"
#include "kiln/profiler.hpp"

using namespace kiln;

namespace {

constexpr DType kAllTypes[] = {DType::Bool,  DType::Int8,    DType::Int16,    DType::Int32,   DType::Int64,
                               DType::UInt8, DType::Float16, DType::BFloat16, DType::Float32, DType::Float64};
constexpr DType kFloatTypes[] = {DType::Float16, DType::BFloat16, DType::Float32, DType::Float64};

/// Unit roundoff of a dtype's storage.
double unit_roundoff(DType t) {
  switch (t) {
    case DType::Float16:
      return std::ldexp(1.0, -11);
    case DType::BFloat16:
      return std::ldexp(1.0, -8);
    case DType::Float32:
      return std::ldexp(1.0, -24);
    default:
      return std::ldexp(1.0, -53);
  }
}

/// Bound on |computed - exact| relative to (|a| |b|)[i][j] for a product of depth k: accumulation in float32
/// (float64 for float64) with a generous k * u, plus the final rounding to the output dtype.
double relative_bound(DType t, int64_t k) {
  const double accumulate = t == DType::Float64 ? unit_roundoff(DType::Float64) : unit_roundoff(DType::Float32);
  return 2.0 * static_cast<double>(k + 2) * accumulate + 2.0 * unit_roundoff(t);
}

/// Random float inputs in [-1, 1) of `dtype` on the CPU (exact in that dtype).
Array random_matrix(const Shape& shape, DType dtype, uint64_t seed) {
  random::set_state({seed, 0});
  return random::uniform(shape, -1.0, 1.0, dtype, kiln::cpu());
}

/// Expects gpu_result (any device) == matmul(a, b) within bound(k) * (|a| |b|), the exact product and the
/// magnitudes computed in float64 on the CPU from the same (host) operands.
void expect_close_to_float64(const Array& a, const Array& b, const Array& gpu_result, double bound,
                             const std::string& what) {
  const Array a64 = a.to(kiln::cpu()).astype(float64), b64 = b.to(kiln::cpu()).astype(float64);
  const Array exact = matmul(a64, b64), magnitude = matmul(abs(a64), abs(b64));
  const Array got = gpu_result.to(kiln::cpu());
  ASSERT_EQ(shape_str(got.shape()), shape_str(exact.shape())) << what;
  const std::vector<double> g = got.to_vector<double>(), e = exact.to_vector<double>(),
                            s = magnitude.to_vector<double>();
  int failures = 0;
  for (size_t i = 0; i < e.size() && failures < 5; ++i) {
    const double allowed = bound * s[i] + 1e-300;
    if (!(std::abs(g[i] - e[i]) <= allowed)) {
      ++failures;
      ADD_FAILURE() << what << " [" << i << "]: got " << g[i] << ", exact " << e[i] << ", allowed error " << allowed;
    }
  }
}

/// Largest |computed - exact| / (|a| |b|) over the product (for comparing precision modes).
double max_relative_error(const Array& a, const Array& b, const Array& gpu_result) {
  const Array a64 = a.to(kiln::cpu()).astype(float64), b64 = b.to(kiln::cpu()).astype(float64);
  const std::vector<double> e = matmul(a64, b64).to_vector<double>(),
                            s = matmul(abs(a64), abs(b64)).to_vector<double>();
  const std::vector<double> g = gpu_result.to(kiln::cpu()).astype(float64).to_vector<double>();
  double worst = 0.0;
  for (size_t i = 0; i < e.size(); ++i) worst = std::max(worst, std::abs(g[i] - e[i]) / std::max(s[i], 1e-300));
  return worst;
}

/// Restores the TF32 switch at scope exit, so a failing test does not leak the setting.
struct Tf32Restore {
  bool saved = kiln::cuda::allow_tf32();
  ~Tf32Restore() { kiln::cuda::set_allow_tf32(saved); }
};

// ---------------------------------------------------------------- without a GPU

TEST(MatmulCodegen, fallback_kernel_compiles_to_ptx_for_every_dtype) {
  cuda_impl::CompileOptions options;
  options.options = cuda_impl::builtin_kernel_options();
  for (DType t : kAllTypes) {
    const std::string name = cuda_impl::matmul_fallback_kernel_name(t);
    EXPECT_EQ(name, std::string("kiln_matmul_tiled_") + cuda_impl::dtype_tag(t));
    try {
      const std::string ptx = cuda_impl::compile_ptx(cuda_impl::matmul_fallback_source(t), name, 90, options);
      EXPECT_NE(ptx.find(".entry " + name + "("), std::string::npos) << "no entry for " << name;
    } catch (const std::exception& e) {
      ADD_FAILURE() << dtype_name(t) << ": " << e.what();
    }
  }
}

/// cuBLAS's documented gemm semantics (column-major, op(X) per operand, ldc = n) run on host float64 data for
/// `plan`, checking the leading-dimension rules cuBLAS enforces; out is (batch, m, n) row-major.
void emulate_cublas(const cuda_impl::GemmPlan& p, const double* first, const double* second, double* out) {
  EXPECT_GE(p.ld_first, std::max<int64_t>(1, p.transpose_first ? p.k : p.n)) << "lda too small for cuBLAS";
  EXPECT_GE(p.ld_second, std::max<int64_t>(1, p.transpose_second ? p.m : p.k)) << "ldb too small for cuBLAS";
  if (!p.per_matrix) {
    EXPECT_GE(p.first_batch_stride, 0);
    EXPECT_GE(p.second_batch_stride, 0);
  }
  for (int64_t i = 0; i < p.batch; ++i) {
    const double* x = first + i * p.first_batch_stride;
    const double* y = second + i * p.second_batch_stride;
    double* c = out + i * p.out_batch_stride;
    for (int64_t row = 0; row < p.n; ++row)      // cuBLAS's m = our n
      for (int64_t col = 0; col < p.m; ++col) {  // cuBLAS's n = our m
        double sum = 0.0;
        for (int64_t q = 0; q < p.k; ++q) {
          const double xv = p.transpose_first ? x[q + row * p.ld_first] : x[row + q * p.ld_first];
          const double yv = p.transpose_second ? y[col + q * p.ld_second] : y[q + col * p.ld_second];
          sum += xv * yv;
        }
        c[row + col * p.n] = sum;
      }
  }
}

/// A (batch, rows, cols) float64 view of `base`'s storage with the given element strides and offset.
Array view3(const Array& base, int64_t batch, int64_t rows, int64_t cols, Shape strides, int64_t offset) {
  return Array(base.storage(), Shape{batch, rows, cols}, std::move(strides), offset, float64);
}

TEST(MatmulPlan, cublas_semantics_of_the_plan_reproduce_the_product_for_every_layout) {
  random::set_state({3, 0});
  const Array base = random::randint(-8, 9, {4096}, int64, kiln::cpu()).astype(float64);  // exact products
  const int64_t m = 5, k = 7, n = 6;
  struct Case {
    const char* name;
    Array a, b;
    bool folds, per_matrix;
  };
  const std::vector<Case> cases = {
      {"contiguous", view3(base, 1, m, k, {0, k, 1}, 0), view3(base, 1, k, n, {0, n, 1}, 100), false, false},
      {"a transposed", view3(base, 1, m, k, {0, 1, m}, 0), view3(base, 1, k, n, {0, n, 1}, 100), false, false},
      {"b transposed", view3(base, 1, m, k, {0, k, 1}, 0), view3(base, 1, k, n, {0, 1, k}, 100), false, false},
      {"both transposed", view3(base, 1, m, k, {0, 1, m}, 0), view3(base, 1, k, n, {0, 1, k}, 100), false, false},
      {"padded rows", view3(base, 1, m, k, {0, k + 3, 1}, 1), view3(base, 1, k, n, {0, 1, k + 2}, 200), false, false},
      {"batched", view3(base, 3, m, k, {m * k, k, 1}, 0), view3(base, 3, k, n, {k * n, n, 1}, 300), false, false},
      {"b broadcast folds", view3(base, 4, m, k, {m * k, k, 1}, 0), view3(base, 4, k, n, {0, n, 1}, 300), true, false},
      {"b broadcast, a transposed", view3(base, 4, m, k, {m * k, 1, m}, 0), view3(base, 4, k, n, {0, n, 1}, 300), false,
       false},
      {"a broadcast", view3(base, 3, m, k, {0, k, 1}, 0), view3(base, 3, k, n, {k * n, 1, k}, 300), false, false},
      {"a reversed batches", view3(base, 3, m, k, {-m * k, k, 1}, 2 * m * k), view3(base, 3, k, n, {k * n, n, 1}, 300),
       false, true},
      {"row vector a", view3(base, 2, 1, k, {k, k, 1}, 0), view3(base, 2, k, n, {0, n, 1}, 300), true, false},
      {"strided row vector a", view3(base, 1, 1, k, {0, 1, 3}, 0), view3(base, 1, k, n, {0, n, 1}, 300), false, false},
      {"column vector b", view3(base, 1, m, k, {0, k, 1}, 0), view3(base, 1, k, 1, {0, 2, 2}, 300), false, false},
  };
  for (const Case& c : cases) {
    const int64_t batch = c.a.shape()[0];
    const int64_t rows = c.a.shape()[1], cols = c.b.shape()[2];
    const Array out = zeros({batch, rows, cols}, float64, kiln::cpu());
    const std::optional<cuda_impl::GemmPlan> plan = cuda_impl::plan_gemm(c.a, c.b, out);
    ASSERT_TRUE(plan.has_value()) << c.name;
    EXPECT_EQ(plan->batch == 1 && batch > 1, c.folds) << c.name;
    EXPECT_EQ(plan->per_matrix, c.per_matrix) << c.name;
    if (plan->per_matrix) {
      cuda_impl::GemmPlan one = *plan;
      one.batch = 1;
      for (int64_t i = 0; i < plan->batch; ++i)
        emulate_cublas(one, c.b.data<double>() + i * plan->first_batch_stride,
                       c.a.data<double>() + i * plan->second_batch_stride,
                       out.data<double>() + i * plan->out_batch_stride);
    } else {
      emulate_cublas(*plan, c.b.data<double>(), c.a.data<double>(), out.data<double>());
    }
    const Array expected = matmul(c.a.contiguous(), c.b.contiguous());
    EXPECT_EQ(out.to_vector<double>(), expected.to_vector<double>()) << c.name;
  }
}

TEST(MatmulPlan, layouts_without_a_unit_stride_have_no_cublas_plan) {
  const Array base = zeros({4096}, float64, kiln::cpu());
  const Array out = zeros({1, 4, 5}, float64, kiln::cpu());
  EXPECT_FALSE(cuda_impl::plan_gemm(view3(base, 1, 4, 3, {0, 6, 2}, 0), view3(base, 1, 3, 5, {0, 5, 1}, 0), out));
  EXPECT_FALSE(cuda_impl::plan_gemm(view3(base, 1, 4, 3, {0, 3, 1}, 0), view3(base, 1, 3, 5, {0, 1, 2}, 0), out));
  EXPECT_FALSE(cuda_impl::plan_gemm(view3(base, 1, 4, 3, {0, 0, 1}, 0), view3(base, 1, 3, 5, {0, 5, 1}, 0), out))
      << "rows broadcast (stride 0) are not a BLAS layout";
}

TEST(MatmulCodegen, cublas_workspace_is_larger_on_hopper) {
  EXPECT_EQ(cuda_impl::cublas_workspace_bytes(90), size_t{32} << 20);
  EXPECT_EQ(cuda_impl::cublas_workspace_bytes(80), size_t{8} << 20);
}

TEST(CudaTf32, switch_is_off_by_default_and_toggles) {
  Tf32Restore restore;
  EXPECT_FALSE(restore.saved) << "TF32 must be opt-in";
  kiln::cuda::set_allow_tf32(true);
  EXPECT_TRUE(kiln::cuda::allow_tf32());
  kiln::cuda::set_allow_tf32(false);
  EXPECT_FALSE(kiln::cuda::allow_tf32());
}

// ---------------------------------------------------------------- NumPy golden data on the GPU

TEST(GpuMatmul, golden_cases_match_numpy_for_every_dtype_shape_and_view) {
  KILN_REQUIRE_GPU();
  const std::string dir = std::string(KILN_GOLDEN_DIR) + "/reduce/";
  std::ifstream f(dir + "matmul_cases.txt");
  ASSERT_TRUE(f.good()) << "missing golden manifest " << dir << "matmul_cases.txt";
  const Device d = gpu(0);
  std::string line;
  int count = 0;
  while (std::getline(f, line)) {
    std::istringstream in(line);
    std::string id, kind, a_name, a_view, b_name, b_view;
    in >> id >> kind >> a_name >> a_view >> b_name >> b_view;
    if (id.empty()) continue;
    ++count;
    try {
      // Views are taken on the GPU copies, so the GPU sees the same strides as the CPU test.
      const Array a = kiln_test::golden_matmul_view(load(dir + a_name + ".npy").to(d), a_view);
      const Array b = kiln_test::golden_matmul_view(load(dir + b_name + ".npy").to(d), b_view);
      const Array got = (kind == "dot" ? dot(a, b) : matmul(a, b));
      ASSERT_EQ(got.device(), d) << id;
      const Array host = got.to(kiln::cpu());
      const Array expected = load(dir + id + ".npy");
      ASSERT_EQ(dtype_name(host.dtype()), dtype_name(expected.dtype())) << id;
      ASSERT_EQ(shape_str(host.shape()), shape_str(expected.shape())) << id;
      if (is_floating(expected.dtype())) {
        const std::vector<double> g = host.to_vector<double>(), e = expected.to_vector<double>();
        double scale = 1.0;
        for (double v : e) scale = std::max(scale, std::abs(v));
        for (size_t i = 0; i < e.size(); ++i)
          EXPECT_NEAR(g[i], e[i], kiln_test::golden_matmul_tolerance(expected.dtype()) * scale) << id << " [" << i << "]";
      } else {
        EXPECT_EQ(host.to_vector<int64_t>(), expected.to_vector<int64_t>()) << id;
      }
    } catch (const std::exception& e) {
      ADD_FAILURE() << id << " threw: " << e.what();
    }
  }
  EXPECT_GT(count, 100);
}

// ---------------------------------------------------------------- floats against float64

TEST(GpuMatmul, float_dtypes_match_a_float64_reference_for_odd_sizes) {
  KILN_REQUIRE_GPU();
  const Device d = gpu(0);
  struct Case {
    int64_t m, k, n;
  };
  for (DType t : kFloatTypes) {
    for (Case c : {Case{33, 47, 65}, Case{1, 200, 31}, Case{64, 1, 64}, Case{128, 257, 96}, Case{7, 5, 1}}) {
      const Array a = random_matrix({c.m, c.k}, t, 1), b = random_matrix({c.k, c.n}, t, 2);
      const Array got = matmul(a.to(d), b.to(d));
      EXPECT_EQ(got.dtype(), t);
      expect_close_to_float64(a, b, got, relative_bound(t, c.k),
                              std::string(dtype_name(t)) + " " + std::to_string(c.m) + "x" + std::to_string(c.k) + "x" +
                                  std::to_string(c.n));
    }
  }
}

TEST(GpuMatmul, transposed_operands_are_read_in_place_and_match) {
  KILN_REQUIRE_GPU();
  const Device d = gpu(0);
  const int64_t m = 37, k = 45, n = 29;
  for (DType t : kFloatTypes) {
    for (int form = 0; form < 4; ++form) {
      const bool ta = form & 1, tb = form & 2;
      // a (m, k) and b (k, n) as transposed views of (k, m) / (n, k) arrays when asked.
      const Array a_host = ta ? random_matrix({k, m}, t, 3).T() : random_matrix({m, k}, t, 3);
      const Array b_host = tb ? random_matrix({n, k}, t, 4).T() : random_matrix({k, n}, t, 4);
      const Array a_dev = ta ? a_host.T().to(d).T() : a_host.to(d);
      const Array b_dev = tb ? b_host.T().to(d).T() : b_host.to(d);
      ASSERT_EQ(a_dev.is_contiguous(), !ta);
      ASSERT_EQ(b_dev.is_contiguous(), !tb);
      expect_close_to_float64(a_host, b_host, matmul(a_dev, b_dev), relative_bound(t, k),
                              std::string(dtype_name(t)) + (ta ? " a^T" : " a") + (tb ? " b^T" : " b"));
    }
  }
}

TEST(GpuMatmul, batched_and_broadcast_operands_match_the_cpu) {
  KILN_REQUIRE_GPU();
  const Device d = gpu(0);
  for (DType t : {DType::Float32, DType::Float16, DType::Float64, DType::BFloat16}) {
    const std::string tag(dtype_name(t));
    {  // both batched, broadcast against each other: (4, 1, m, k) x (3, k, n) -> (4, 3, m, n)
      const Array a = random_matrix({4, 1, 9, 12}, t, 5), b = random_matrix({3, 12, 7}, t, 6);
      const Array got = matmul(a.to(d), b.to(d));
      EXPECT_EQ(shape_str(got.shape()), "(4, 3, 9, 7)");
      expect_close_to_float64(a, b, got, relative_bound(t, 12), tag + " (4,1,9,12) x (3,12,7)");
    }
    {  // b shared by every batch (the batch folds into m): (5, m, k) x (k, n)
      const Array a = random_matrix({5, 11, 16}, t, 7), b = random_matrix({16, 13}, t, 8);
      expect_close_to_float64(a, b, matmul(a.to(d), b.to(d)), relative_bound(t, 16), tag + " (5,11,16) x (16,13)");
    }
    {  // a shared by every batch (batch stride 0 on a): (m, k) x (6, k, n)
      const Array a = random_matrix({10, 8}, t, 9), b = random_matrix({6, 8, 14}, t, 10);
      expect_close_to_float64(a, b, matmul(a.to(d), b.to(d)), relative_bound(t, 8), tag + " (10,8) x (6,8,14)");
    }
    {  // transposed batched b and a reversed batch axis on a (negative batch stride)
      const Array a_store = random_matrix({4, 6, 9}, t, 11), b_store = random_matrix({4, 5, 9}, t, 12);
      const Array a_host = a_store.slice(0, {}, {}, -1), b_host = swapaxes(b_store, -1, -2);
      const Array a_dev = a_store.to(d).slice(0, {}, {}, -1), b_dev = swapaxes(b_store.to(d), -1, -2);
      expect_close_to_float64(a_host, b_host, matmul(a_dev, b_dev), relative_bound(t, 9),
                              tag + " reversed (4,6,9) x transposed (4,9,5)");
    }
  }
}

TEST(GpuMatmul, one_dimensional_operands_follow_numpy_rules) {
  KILN_REQUIRE_GPU();
  const Device d = gpu(0);
  for (DType t : kFloatTypes) {
    const std::string tag(dtype_name(t));
    const Array v = random_matrix({40}, t, 13), w = random_matrix({40}, t, 14);
    const Array m = random_matrix({40, 23}, t, 15), mt = random_matrix({17, 40}, t, 16);
    const Array batch = random_matrix({3, 17, 40}, t, 17);
    const double bound = relative_bound(t, 40);
    const Array vm = matmul(v.to(d), m.to(d));
    EXPECT_EQ(shape_str(vm.shape()), "(23,)");
    expect_close_to_float64(v.reshape({1, 40}), m, vm.reshape({1, 23}), bound, tag + " vector x matrix");
    const Array mv = matmul(mt.to(d), v.to(d));
    EXPECT_EQ(shape_str(mv.shape()), "(17,)");
    expect_close_to_float64(mt, v.reshape({40, 1}), mv.reshape({17, 1}), bound, tag + " matrix x vector");
    const Array vv = matmul(v.to(d), w.to(d));
    EXPECT_EQ(vv.ndim(), 0);
    expect_close_to_float64(v.reshape({1, 40}), w.reshape({40, 1}), vv.reshape({1, 1}), bound,
                            tag + " vector . vector");
    const Array bv = matmul(batch.to(d), v.to(d));
    EXPECT_EQ(shape_str(bv.shape()), "(3, 17)");
    expect_close_to_float64(batch, v.reshape({40, 1}), bv.reshape({3, 17, 1}), bound, tag + " batch x vector");
    const Array dv = dot(v.to(d), w.to(d));
    expect_close_to_float64(v.reshape({1, 40}), w.reshape({40, 1}), dv.reshape({1, 1}), bound, tag + " dot");
  }
}

TEST(GpuMatmul, empty_contraction_gives_zeros) {
  KILN_REQUIRE_GPU();
  const Device d = gpu(0);
  for (DType t : {DType::Float32, DType::Int32}) {
    const Array got = matmul(ones({3, 0}, t, d), ones({0, 4}, t, d)).to(kiln::cpu());
    EXPECT_EQ(shape_str(got.shape()), "(3, 4)");
    for (double v : got.to_vector<double>()) EXPECT_EQ(v, 0.0);
  }
}

// ---------------------------------------------------------------- integers and bool

TEST(GpuMatmul, integer_and_bool_products_equal_the_cpu_exactly) {
  KILN_REQUIRE_GPU();
  const Device d = gpu(0);
  for (DType t : {DType::Int8, DType::Int16, DType::Int32, DType::Int64, DType::UInt8, DType::Bool}) {
    random::set_state({21, 0});
    // Full-range values, so sums of int8/int16/uint8 products wrap.
    const bool is_bool = t == DType::Bool;
    const int64_t low = is_bool ? 0 : t == DType::UInt8 ? 0 : t == DType::Int8 ? -128 : -30000;
    const int64_t high = is_bool ? 2 : t == DType::UInt8 ? 256 : t == DType::Int8 ? 128 : 30000;
    const DType draw = is_bool ? DType::Int8 : t;
    Array a = random::randint(low, high, {2, 19, 70}, draw, kiln::cpu());
    Array b = random::randint(low, high, {70, 33}, draw, kiln::cpu());
    if (is_bool) {
      a = a.astype(DType::Bool);
      b = b.astype(DType::Bool);
    }
    const std::string tag(dtype_name(t));
    const Array expected = matmul(a, b);
    const Array got = matmul(a.to(d), b.to(d)).to(kiln::cpu());
    ASSERT_EQ(got.dtype(), t) << tag;
    EXPECT_EQ(got.to_vector<int64_t>(), expected.to_vector<int64_t>()) << tag;
    // Transposed and strided views go through the same kernel's stride arithmetic.
    const Array at = swapaxes(a, -1, -2).contiguous(), bt = b.T().contiguous();
    const Array got_t = matmul(swapaxes(at.to(d), -1, -2), bt.to(d).T()).to(kiln::cpu());
    EXPECT_EQ(got_t.to_vector<int64_t>(), expected.to_vector<int64_t>()) << tag << " transposed";
  }
}

TEST(GpuMatmul, integer_sums_wrap_around_like_the_cpu) {
  KILN_REQUIRE_GPU();
  const Device d = gpu(0);
  {  // int32: 2^30 * 4 + 2^30 * 4 = 2^33 = 0 (mod 2^32); 2^30 * 2 + 2^30 * 0 = 2^31 -> -2^31
    const Array a = full({1, 2}, int64_t{1} << 30, int32, d);
    Array bvals = full({2, 2}, 4, int32);
    bvals.index({0, 1}).fill(2);
    bvals.index({1, 1}).fill(0);
    const std::vector<int64_t> got = matmul(a, bvals.to(d)).to(kiln::cpu()).to_vector<int64_t>();
    EXPECT_EQ(got, (std::vector<int64_t>{0, INT32_MIN}));
  }
  {  // int64: 2^62 * 4 = 2^64 = 0 (mod 2^64); 2^62 * 1 = 2^62; 2^62 * 3 = 2^63 + 2^62 -> -2^62
    const Array a = full({1, 1}, int64_t{1} << 62, int64, d);
    const Array b = full({1, 3}, 4, int64);
    Array bvals = b.copy();
    bvals.index({0, 1}).fill(1);
    bvals.index({0, 2}).fill(3);
    const std::vector<int64_t> got = matmul(a, bvals.to(d)).to(kiln::cpu()).to_vector<int64_t>();
    EXPECT_EQ(got, (std::vector<int64_t>{0, int64_t{1} << 62, -(int64_t{1} << 62)}));
  }
  {  // int8: 100 * 100 + 100 * 100 = 20000 = 78 * 256 + 32 -> 32; uint8: 200 * 2 = 400 -> 144
    const Array a8 = full({1, 2}, 100, int8, d), b8 = full({2, 1}, 100, int8, d);
    EXPECT_EQ(matmul(a8, b8).to(kiln::cpu()).to_vector<int64_t>(), (std::vector<int64_t>{32}));
    const Array au = full({1, 1}, 200, uint8, d), bu = full({1, 1}, 2, uint8, d);
    EXPECT_EQ(matmul(au, bu).to(kiln::cpu()).to_vector<int64_t>(), (std::vector<int64_t>{144}));
  }
  {  // bool: or of ands
    Array a = zeros({2, 2}, bool_, kiln::cpu());
    a.index({0, 1}).fill(true);  // [[0, 1], [0, 0]]
    Array b = zeros({2, 2}, bool_, kiln::cpu());
    b.index({1, 0}).fill(true);  // [[0, 0], [1, 0]]
    EXPECT_EQ(matmul(a.to(d), b.to(d)).to(kiln::cpu()).to_vector<int64_t>(), (std::vector<int64_t>{1, 0, 0, 0}));
  }
}

// ---------------------------------------------------------------- TF32, fallback layouts, streams

TEST(GpuMatmul, tf32_switch_changes_precision_only_within_tf32_tolerance) {
  KILN_REQUIRE_GPU();
  Tf32Restore restore;
  const Device d = gpu(0);
  const int64_t k = 512;
  const Array a = random_matrix({256, k}, float32, 31), b = random_matrix({k, 384}, float32, 32);
  const Array a_dev = a.to(d), b_dev = b.to(d);
  kiln::cuda::set_allow_tf32(false);
  const double strict = max_relative_error(a, b, matmul(a_dev, b_dev));
  EXPECT_LE(strict, relative_bound(float32, k)) << "float32 without TF32";
  kiln::cuda::set_allow_tf32(true);
  const double fast = max_relative_error(a, b, matmul(a_dev, b_dev));
  // TF32 keeps 10 mantissa bits of each operand (relative error below 2^-10 each, truncated or rounded) and
  // accumulates in float32.
  const double tf32_bound = 2.0 * std::ldexp(1.0, -10) + relative_bound(float32, k);
  EXPECT_LE(fast, tf32_bound) << "float32 with TF32";
  EXPECT_GT(fast, strict) << "TF32 was allowed but the product is as exact as float32: was the switch ignored?";
  kiln::cuda::set_allow_tf32(false);
  EXPECT_LE(max_relative_error(a, b, matmul(a_dev, b_dev)), relative_bound(float32, k)) << "switched back off";
}

TEST(GpuMatmul, layouts_cublas_cannot_read_use_the_fallback_kernel) {
  KILN_REQUIRE_GPU();
  const Device d = gpu(0);
  const int64_t m = 21, k = 18, n = 25;
  for (DType t : kFloatTypes) {
    // Every other column and every other row: neither stride is 1, so cuBLAS cannot take the operand.
    const Array a_store = random_matrix({2 * m, 2 * k}, t, 41), b = random_matrix({k, n}, t, 42);
    const Array a_dev_store = a_store.to(d), b_dev = b.to(d);
    Array out = empty({1, m, n}, t, d);
    const Array a3(a_dev_store.storage(), Shape{1, m, k}, Shape{0, 4 * k, 2}, 0, t);
    const Array b3 = b_dev.reshape({1, k, n});
    detail::MatmulCall call{&a3, &b3, out};
    detail::backend_for(d).matmul(call);
    const Array a_host = a_store.slice(0, {}, {}, 2).slice(1, {}, {}, 2);
    expect_close_to_float64(a_host, b, out.reshape({m, n}), relative_bound(t, k),
                            std::string(dtype_name(t)) + " strided fallback");
  }
}

TEST(GpuMatmul, runs_on_the_current_stream_of_a_stream_guard) {
  KILN_REQUIRE_GPU();
  const Device d = gpu(0);
  const Array a = random_matrix({96, 80}, float32, 51), b = random_matrix({80, 70}, float32, 52);
  const Array ai = random::randint(-50, 50, {30, 40}, int32, kiln::cpu());
  const Array bi = random::randint(-50, 50, {40, 20}, int32, kiln::cpu());
  Stream stream = Stream::create(d, {.non_blocking = true});
  Array got, got_int;
  {
    StreamGuard guard(stream);
    const Array a_dev = a.to(d, stream), b_dev = b.to(d, stream);
    got = matmul(a_dev, b_dev);
    got_int = matmul(ai.to(d, stream), bi.to(d, stream));
    stream.synchronize();
  }
  expect_close_to_float64(a, b, got, relative_bound(float32, 80), "float32 on a non-blocking stream");
  EXPECT_EQ(got_int.to(kiln::cpu()).to_vector<int64_t>(), matmul(ai, bi).to_vector<int64_t>());
  // And again on the default stream with the same thread's handle (a second workspace).
  expect_close_to_float64(a, b, matmul(a.to(d), b.to(d)), relative_bound(float32, 80), "float32 on the default stream");
}

TEST(GpuMatmul, addmm_folds_the_bias_into_the_cublaslt_product_without_an_add_kernel) {
  KILN_REQUIRE_GPU();
  const Device d = gpu(0);
  const int64_t m = 256, k = 192, n = 320;  // Linear(192, 320) over 256 positions
  for (DType t : {DType::BFloat16, DType::Float16, DType::Float32}) {
    const Array x = random_matrix({m, k}, t, 61).to(d), w = random_matrix({n, k}, t, 62).to(d);
    const Array bias = random_matrix({1, n}, t, 63).reshape({n}).to(d);
    (void)addmm(bias, x, w.T());  // the heuristic's lookup and the handle outside the profile
    synchronize(d);
    profiler::start();
    const Array y = addmm(bias, x, w.T());
    synchronize(d);
    const profiler::Profile p = profiler::stop();
    const std::string what = std::string(dtype_name(t));
    if (p.gpu_note.starts_with("GPU activity not recorded")) GTEST_SKIP() << p.gpu_note;
    ASSERT_EQ(p.kernels.size(), 1u) << what << ": one kernel, the product with its epilogue; got "
                                    << p.summary(profiler::default_classifier, 5);
    EXPECT_EQ(p.kernels[0].name.find("kiln_add"), std::string::npos) << p.kernels[0].name;
    // the product plus the bias, rounded once: against float64 from the same operands
    const Array x64 = x.to(kiln::cpu()).astype(float64), w64 = w.to(kiln::cpu()).astype(float64);
    const Array b64 = bias.to(kiln::cpu()).astype(float64);
    const std::vector<double> exact = (matmul(x64, w64.T()) + b64).to_vector<double>();
    const std::vector<double> scale = (matmul(abs(x64), abs(w64.T())) + abs(b64)).to_vector<double>();
    const std::vector<double> got = y.to(kiln::cpu()).astype(float64).to_vector<double>();
    for (size_t i = 0; i < got.size(); ++i)
      ASSERT_LE(std::abs(got[i] - exact[i]), relative_bound(t, k) * scale[i] + 1e-300) << what << " [" << i << "]";
  }
}

/// The names of the kernels `f` launches on GPU 0 (after one warm-up call), or nullopt when the profiler cannot
/// record GPU activity here.
std::optional<std::vector<std::string>> kernels_of(const std::function<void()>& f) {
  f();  // the heuristic's lookup, the handle and any compilation outside the profile
  synchronize(gpu(0));
  profiler::start();
  f();
  synchronize(gpu(0));
  const profiler::Profile p = profiler::stop();
  if (p.gpu_note.starts_with("GPU activity not recorded")) return std::nullopt;
  std::vector<std::string> names;
  for (const auto& k : p.kernels) names.push_back(k.name);
  return names;
}

std::string joined(const std::vector<std::string>& names) {
  std::string s;
  for (const std::string& n : names) s += (s.empty() ? "" : ", ") + n;
  return s;
}

TEST(GpuMatmul, addmm_gelu_of_16_bit_types_is_one_cublaslt_product) {
  KILN_REQUIRE_GPU();
  const Device d = gpu(0);
  const int64_t m = 256, k = 192, n = 320;
  for (DType t : {DType::BFloat16, DType::Float16}) {
    const std::string what = std::string(dtype_name(t));
    const Array x = random_matrix({m, k}, t, 81).to(d), w = random_matrix({n, k}, t, 82).to(d);
    const Array bias = random_matrix({1, n}, t, 83).reshape({n}).to(d);
    const auto forward = kernels_of([&] { (void)addmm_gelu(bias, x, w.T()); });
    if (!forward) GTEST_SKIP() << "the profiler records no GPU activity here";
    ASSERT_EQ(forward->size(), 1u) << what << ": the product with its GELU epilogue; got " << joined(*forward);
    EXPECT_EQ((*forward)[0].find("kiln_"), std::string::npos) << (*forward)[0];
  }
}

TEST(GpuMatmul, addmm_inside_a_captured_graph_replays_with_new_inputs) {
  KILN_REQUIRE_GPU();
  const Device d = gpu(0);
  const int64_t m = 64, k = 96, n = 128;
  Array x = random_matrix({m, k}, DType::BFloat16, 71).to(d);
  const Array w = random_matrix({n, k}, DType::BFloat16, 72).to(d);
  const Array bias = random_matrix({1, n}, DType::BFloat16, 73).to(d);
  Stream stream = Stream::create(d, {.non_blocking = true});
  Array y;
  cuda::Graph graph;
  {
    StreamGuard guard(stream);
    (void)addmm(bias.reshape({n}), x, w.T());  // warm-up on the capturing stream
    stream.synchronize();
    graph.capture_begin(stream);
    y = addmm(bias.reshape({n}), x, w.T());
    graph.capture_end();
  }
  x.assign(random_matrix({m, k}, DType::BFloat16, 74).to(d));
  graph.replay();
  stream.synchronize();
  const Array want = addmm(bias.reshape({n}), x, w.T());
  EXPECT_TRUE(array_equal(y.to(kiln::cpu()), want.to(kiln::cpu())));
}

}  // namespace

#endif  // KILN_WITH_CUDA
