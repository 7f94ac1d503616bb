// Helpers shared by the test files.
#pragma once

#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "kiln/kiln.hpp"

/// Skips the current test when no GPU is usable (needs only kiln::num_gpus(): it compiles in the cpu preset too).
#ifndef KILN_REQUIRE_GPU
#define KILN_REQUIRE_GPU() \
  if (kiln::num_gpus() == 0) GTEST_SKIP() << "no usable GPU (num_gpus() == 0): GPU test skipped"
#endif

namespace kiln_test {

/// Expects `f` to throw E (not another type) with a message containing every fragment.
template <class E, class F>
void expect_error(F&& f, const std::vector<std::string>& fragments) {
  try {
    f();
    ADD_FAILURE() << "no exception thrown";
  } catch (const E& e) {
    const std::string message = e.what();
    for (const std::string& fragment : fragments)
      EXPECT_NE(message.find(fragment), std::string::npos) << "'" << fragment << "' missing from: " << message;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type: " << e.what();
  }
}

/// Machine epsilon of a floating dtype (float64's for the others).
inline double epsilon(kiln::DType t) {
  switch (t) {
    case kiln::DType::Float16: return std::ldexp(1.0, -10);
    case kiln::DType::BFloat16: return std::ldexp(1.0, -7);
    case kiln::DType::Float32: return std::ldexp(1.0, -23);
    default: return std::ldexp(1.0, -52);
  }
}

/// The view tests/golden/reduce_golden.py's matmul_view takes of a golden matmul operand.
inline kiln::Array golden_matmul_view(const kiln::Array& x, const std::string& view) {
  if (view == "t") return kiln::swapaxes(x, -1, -2);
  if (view == "s2") return x.slice(x.ndim() - 1, {}, {}, 2);
  if (view == "neg") return x.slice(0, {}, {}, -1);
  return x;
}

/// Relative tolerance of the golden matmul cases per result dtype (float accumulation order differs).
inline double golden_matmul_tolerance(kiln::DType t) {
  switch (t) {
    case kiln::DType::Float16: return 4e-3;
    case kiln::DType::BFloat16: return 3e-2;
    case kiln::DType::Float32: return 2e-5;
    default: return 1e-12;
  }
}

/// The message of the kiln::ValueError `fn` throws, or "no error" (for checks that an error names the fix).
template <class F>
std::string value_error_message(F&& fn) {
  try {
    fn();
  } catch (const kiln::ValueError& e) {
    return e.what();
  }
  return "no error";
}

/// A fresh folder under the system temp folder, removed with its contents at scope exit.
class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    path_ = std::filesystem::temp_directory_path() /
            ("kiln_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter.fetch_add(1)));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code error;
    std::filesystem::remove_all(path_, error);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string str() const { return path_.string(); }
  const std::filesystem::path& path() const { return path_; }
  /// Regular files anywhere below the folder.
  size_t file_count() const {
    size_t n = 0;
    for (const auto& entry : std::filesystem::recursive_directory_iterator(path_))
      if (entry.is_regular_file()) ++n;
    return n;
  }

 private:
  std::filesystem::path path_;
};

/// Sets (or unsets, with nullptr) an environment variable for the scope, then restores it.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value)
      ::setenv(name, value, 1);
    else
      ::unsetenv(name);
  }
  ~ScopedEnv() {
    if (old_)
      ::setenv(name_.c_str(), old_->c_str(), 1);
    else
      ::unsetenv(name_.c_str());
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
  std::optional<std::string> old_;
};

/// max |got - want| <= tol * max(floor, max |want|) over every element: the error measure for results of reduced
/// precision (half types, TF32, cuDNN's kernels), where an element's own magnitude is no scale for its error.
inline void expect_close_scaled(const kiln::Array& got, const kiln::Array& want, double tol, const std::string& what,
                                double floor = 1.0) {
  ASSERT_TRUE(got.defined()) << what;
  ASSERT_EQ(got.shape(), want.shape()) << what;
  const std::vector<double> g = got.to(kiln::cpu()).astype(kiln::float64).to_vector<double>(),
                            w = want.to(kiln::cpu()).astype(kiln::float64).to_vector<double>();
  double scale = floor, worst = 0;
  for (double x : w) scale = std::max(scale, std::abs(x));
  for (size_t i = 0; i < g.size(); ++i) worst = std::max(worst, std::abs(g[i] - w[i]));
  EXPECT_LE(worst, tol * scale) << what << " (largest reference magnitude " << scale << ")";
}

}  // namespace kiln_test
