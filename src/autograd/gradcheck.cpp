// gradcheck: the analytic gradient of a function against central finite differences, in float64 (complex128
// for complex inputs and outputs, as torch.autograd.gradcheck: the real and imaginary parts of each complex
// element are perturbed separately, and compared with the real and imaginary parts of its gradient).
#include <cmath>
#include <complex>
#include <sstream>
#include <string>
#include <vector>

#include "kiln/autograd.hpp"
#include "kiln/complex.hpp"
#include "kiln/ops.hpp"
#include "kiln/random.hpp"

namespace kiln {

namespace {

/// The real loss gradcheck differentiates: sum(re(f(x)) * re(v) + im(f(x)) * im(v)) (sum(f(x) * v) for a
/// real result), as a double, unrecorded; its gradient is backward(v)'s.
double projected(const std::function<Array(const std::vector<Array>&)>& f, const std::vector<Array>& inputs,
                 const Array& v) {
  NoGradGuard no_grad;
  const Array y = f(inputs);
  if (!is_complex(y.dtype())) return sum(y.astype(float64) * v).item<double>();
  const Array y128 = y.astype(complex128);
  return sum(real(y128) * real(v) + imag(y128) * imag(v)).item<double>();
}

/// One input's analytic and numeric partial derivatives, compared element by element (and part by part).
struct Checker {
  const GradcheckOptions& options;
  GradcheckResult& result;
  std::ostringstream& report;
  double worst = -1;

  void compare(size_t input, const Array& x, size_t element, const char* part, double numeric, double analytic) {
    const double error = std::abs(numeric - analytic);
    const bool ok =
        error <= options.atol + options.rtol * std::abs(numeric) && std::isfinite(numeric) && std::isfinite(analytic);
    if (!ok) result.passed = false;
    if (error > worst || !ok) {
      if (error > worst) worst = error;
      if (!ok || report.tellp() == 0) {
        report.str("");
        report << "input " << input << " (shape " << shape_str(x.shape()) << "), element " << element << part
               << ": numeric " << numeric << ", analytic " << analytic << ", |difference| " << error;
      }
    }
  }
};

}  // namespace

GradcheckResult gradcheck(const std::function<Array(const std::vector<Array>&)>& f, const std::vector<Array>& inputs,
                          GradcheckOptions options) {
  std::vector<Array> x;
  std::vector<bool> checked;
  for (const Array& in : inputs) {
    if (in.defined() && is_inexact(in.dtype())) {
      Array copy = in.detach().astype(is_complex(in.dtype()) ? complex128 : float64).copy();
      copy.set_requires_grad();
      x.push_back(copy);
      checked.push_back(true);
    } else {
      x.push_back(in);
      checked.push_back(false);
    }
  }
  const Array y = f(x);
  if (!y.defined() || !is_inexact(y.dtype()))
    throw ValueError("gradcheck: the function must return a floating or complex array, got " +
                     (y.defined() ? std::string(dtype_name(y.dtype())) : std::string("an undefined Array")));
  GradcheckResult result;
  if (!y.requires_grad()) {
    result.report = "the result does not require grad: the function does not use its floating or complex inputs";
    return result;
  }
  // A fixed random projection of the output, drawn on the CPU (the same numbers on every device).
  const bool complex_out = is_complex(y.dtype());
  const random::GeneratorState saved = random::get_state();
  random::seed(options.seed);
  Array v = random::normal(y.shape(), 0.0, 1.0, float64, cpu());
  if (complex_out) v = make_complex(v, random::normal(y.shape(), 0.0, 1.0, float64, cpu()));
  v = v.to(y.device());
  random::set_state(saved);
  y.astype(complex_out ? complex128 : float64).backward(v);

  result.passed = true;
  std::ostringstream report;
  Checker checker{options, result, report};
  auto numeric = [&](size_t i, const Array& probe_input) {
    std::vector<Array> probe = x;
    probe[i] = probe_input;
    return projected(f, probe, v);
  };
  for (size_t i = 0; i < x.size(); ++i) {
    if (!checked[i]) continue;
    const Array analytic_array = x[i].grad();
    const size_t count = static_cast<size_t>(x[i].size());
    if (is_complex(x[i].dtype())) {
      const std::vector<complex128_t> analytic = analytic_array.defined()
                                                     ? analytic_array.to_vector<complex128_t>()
                                                     : std::vector<complex128_t>(count, complex128_t(0, 0));
      std::vector<complex128_t> values = x[i].to_vector<complex128_t>();
      for (size_t j = 0; j < count; ++j) {
        const complex128_t original = values[j];
        for (int part = 0; part < 2; ++part) {
          const complex128_t step = part == 0 ? complex128_t(options.eps, 0) : complex128_t(0, options.eps);
          values[j] = original + step;
          const double plus = numeric(i, from_data(values, x[i].shape(), x[i].device()));
          values[j] = original - step;
          const double minus = numeric(i, from_data(values, x[i].shape(), x[i].device()));
          values[j] = original;
          checker.compare(i, x[i], j, part == 0 ? " (real part)" : " (imaginary part)",
                          (plus - minus) / (2 * options.eps), part == 0 ? analytic[j].real() : analytic[j].imag());
        }
      }
      continue;
    }
    const std::vector<double> analytic =
        analytic_array.defined() ? analytic_array.to_vector<double>() : std::vector<double>(count, 0.0);
    std::vector<double> values = x[i].to_vector<double>();
    for (size_t j = 0; j < count; ++j) {
      const double original = values[j];
      values[j] = original + options.eps;
      const double plus = numeric(i, from_data(values, x[i].shape(), x[i].device()));
      values[j] = original - options.eps;
      const double minus = numeric(i, from_data(values, x[i].shape(), x[i].device()));
      values[j] = original;
      checker.compare(i, x[i], j, "", (plus - minus) / (2 * options.eps), analytic[j]);
    }
  }
  result.max_abs_error = checker.worst < 0 ? 0 : checker.worst;
  result.report = report.str();
  return result;
}

}  // namespace kiln
