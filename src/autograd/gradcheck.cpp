// gradcheck: the analytic gradient of a function against central finite differences, in float64.
#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "kiln/autograd.hpp"
#include "kiln/ops.hpp"
#include "kiln/random.hpp"

namespace kiln {

namespace {

/// sum(f(x) * v) as a double, unrecorded.
double projected(const std::function<Array(const std::vector<Array>&)>& f, const std::vector<Array>& inputs,
                 const Array& v) {
  NoGradGuard no_grad;
  return sum(f(inputs).astype(float64) * v).item<double>();
}

}  // namespace

GradcheckResult gradcheck(const std::function<Array(const std::vector<Array>&)>& f, const std::vector<Array>& inputs,
                          GradcheckOptions options) {
  std::vector<Array> x;
  std::vector<bool> checked;
  for (const Array& in : inputs) {
    if (in.defined() && is_floating(in.dtype())) {
      Array copy = in.detach().astype(float64).copy();
      copy.set_requires_grad();
      x.push_back(copy);
      checked.push_back(true);
    } else {
      x.push_back(in);
      checked.push_back(false);
    }
  }
  const Array y = f(x);
  if (!y.defined() || !is_floating(y.dtype()))
    throw ValueError("gradcheck: the function must return a floating array, got " +
                     (y.defined() ? std::string(dtype_name(y.dtype())) : std::string("an undefined Array")));
  GradcheckResult result;
  if (!y.requires_grad()) {
    result.report = "the result does not require grad: the function does not use its floating inputs";
    return result;
  }
  // A fixed random projection of the output, drawn on the CPU (the same numbers on every device).
  const random::GeneratorState saved = random::get_state();
  random::seed(options.seed);
  const Array v = random::normal(y.shape(), 0.0, 1.0, float64, cpu()).to(y.device());
  random::set_state(saved);
  sum(y.astype(float64) * v).backward();

  result.passed = true;
  std::ostringstream report;
  double worst = -1;
  for (size_t i = 0; i < x.size(); ++i) {
    if (!checked[i]) continue;
    const Array analytic_array = x[i].grad();
    const std::vector<double> analytic = analytic_array.defined()
                                             ? analytic_array.to_vector<double>()
                                             : std::vector<double>(static_cast<size_t>(x[i].size()), 0.0);
    std::vector<double> values = x[i].to_vector<double>();
    for (size_t j = 0; j < values.size(); ++j) {
      std::vector<Array> probe = x;
      const double original = values[j];
      values[j] = original + options.eps;
      probe[i] = from_data(values, x[i].shape(), x[i].device());
      const double plus = projected(f, probe, v);
      values[j] = original - options.eps;
      probe[i] = from_data(values, x[i].shape(), x[i].device());
      const double minus = projected(f, probe, v);
      values[j] = original;
      const double numeric = (plus - minus) / (2 * options.eps);
      const double error = std::abs(numeric - analytic[j]);
      const bool ok = error <= options.atol + options.rtol * std::abs(numeric);
      if (!ok) result.passed = false;
      if (!std::isfinite(numeric) || !std::isfinite(analytic[j])) result.passed = false;
      if (error > worst || !ok) {
        if (error > worst) worst = error;
        if (!ok || report.tellp() == 0) {
          report.str("");
          report << "input " << i << " (shape " << shape_str(x[i].shape()) << "), element " << j << ": numeric "
                 << numeric << ", analytic " << analytic[j] << ", |difference| " << error;
        }
      }
    }
  }
  result.max_abs_error = worst < 0 ? 0 : worst;
  result.report = report.str();
  return result;
}

}  // namespace kiln
