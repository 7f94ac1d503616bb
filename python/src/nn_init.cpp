// kiln.nn.init: torch.nn.init's initialisers over kiln::nn::init (in place, unrecorded), with torch's names,
// arguments and gains; each returns its argument. A kiln.random.Generator, when given, draws instead of the
// global stream. trunc_normal_ (absent from the C++ namespace) is torch's inverse-CDF draw, composed of public ops.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <charconv>
#include <cmath>
#include <numbers>
#include <optional>
#include <string>
#include <system_error>
#include <utility>

#include "bindings.hpp"
#include "convert.hpp"

namespace kiln::python {
namespace {

/// torch.nn.init.calculate_gain: the gain that keeps a nonlinearity's output variance.
double calculate_gain(const std::string& nonlinearity, std::optional<double> param) {
  for (const char* unit : {"linear", "sigmoid", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
                           "conv_transpose3d"})
    if (nonlinearity == unit) return 1.0;
  if (nonlinearity == "tanh") return 5.0 / 3.0;
  if (nonlinearity == "relu") return std::sqrt(2.0);
  if (nonlinearity == "leaky_relu") {
    const double slope = param.value_or(0.01);
    return std::sqrt(2.0 / (1.0 + slope * slope));
  }
  if (nonlinearity == "selu") return 0.75;
  throw ValueError("kiln.nn.init.calculate_gain: unsupported nonlinearity '" + nonlinearity +
                   "'; pass one of linear, conv1d, conv2d, conv3d, conv_transpose1d/2d/3d, sigmoid, tanh, relu, "
                   "leaky_relu, selu");
}

/// fan_in and fan_out as nn::init::fans, with the Python function's name and the fix in the error.
std::pair<int64_t, int64_t> fans(const Array& w, const char* fn) {
  if (w.ndim() < 2)
    throw ShapeError(std::string("kiln.nn.init.") + fn + ": fan in and fan out need a tensor of at least 2 axes, " +
                     "got shape " + shape_str(w.shape()) +
                     "; initialise a 1-d tensor (a bias) with uniform_, normal_ or zeros_");
  return nn::init::fans(w);
}

int64_t kaiming_fan(const Array& w, const std::string& mode, const char* fn) {
  if (mode != "fan_in" && mode != "fan_out")
    throw ValueError(std::string("kiln.nn.init.") + fn + ": mode '" + mode + "' is neither 'fan_in' nor 'fan_out'");
  const auto [in, out] = fans(w, fn);
  return mode == "fan_in" ? in : out;
}

// The shortest text that reads back as v ("1", "-0.04"), through <charconv>: no iostream, whose locale machinery
// crashed in this module on the GPU machine (Python 3.12, g++ 13) when the jaxtyping pytest plugin was loaded.
std::string number(double v) {
  char buf[32];
  const auto [end, error] = std::to_chars(buf, buf + sizeof buf, v);
  return error == std::errc() ? std::string(buf, end) : std::to_string(v);
}

// A drawn array written into w (the C++ initialisers' assign, under no_grad as they are).
void fill_from(Array& w, const Array& drawn) {
  NoGradGuard no_grad;
  w.assign(drawn);
}

void uniform(Array& w, double low, double high, random::Generator* g) {
  if (g) {
    if (w.size() > 0) fill_from(w, g->uniform(w.shape(), low, high, w.dtype(), w.device()));
  } else {
    nn::init::uniform(w, low, high);
  }
}

void normal(Array& w, double mean, double std, random::Generator* g) {
  if (g) {
    if (w.size() > 0) fill_from(w, g->normal(w.shape(), mean, std, w.dtype(), w.device()));
  } else {
    nn::init::normal(w, mean, std);
  }
}

// erfinv(y) for |y| < 1 in float64: Winitzki's closed form (about 2e-3 relative), then three Newton steps on
// erf(x) = y, each squaring the error, to float64's precision.
Array erfinv(const Array& y) {
  constexpr double a = 0.147, two_over_pi_a = 2.0 / (std::numbers::pi * a);
  const Array log_term = log1p(-(y * y));  // ln(1 - y^2), accurate for small y
  const Array first = log_term * 0.5 + two_over_pi_a;
  Array x = sign(y) * sqrt(sqrt(first * first - log_term / a) - first);
  constexpr double two_over_sqrt_pi = 2.0 * std::numbers::inv_sqrtpi;
  for (int step = 0; step < 3; ++step) x = x - (erf(x) - y) / (exp(-(x * x)) * two_over_sqrt_pi);
  return x;
}

// torch's trunc_normal_: u uniform between the CDF's values at a and b, x = mean + std * sqrt(2) erfinv(2u - 1),
// clamped to [a, b] (the last rounding may step outside). 2u - 1 is drawn directly, between erf of the bounds'
// z / sqrt(2) (= 2 CDF - 1 without its cancellation near the mean).
void trunc_normal(Array& w, double mean, double std, double a, double b, random::Generator* g) {
  if (!(a < b))
    throw ValueError("kiln.nn.init.trunc_normal_: the bounds need a < b, got a=" + number(a) + ", b=" + number(b));
  if (!(std > 0.0))
    throw ValueError("kiln.nn.init.trunc_normal_: std must be positive, got " + number(std));
  if (w.size() == 0) return;
  // 2u - 1 stays inside (-1, 1), so erfinv stays finite when a bound is infinite
  const double scale = std * std::numbers::sqrt2;
  const double low = std::max(std::erf((a - mean) / scale), std::nextafter(-1.0, 0.0));
  const double high = std::min(std::erf((b - mean) / scale), std::nextafter(1.0, 0.0));
  NoGradGuard no_grad;
  const Array y = g ? g->uniform(w.shape(), low, high, float64, w.device())
                    : random::uniform(w.shape(), low, high, float64, w.device());
  const Array x = clip(erfinv(y) * scale + mean, a, b);
  w.assign(x.astype(w.dtype()));
}

}  // namespace

void bind_nn_init(nb::module_& m) {
  nb::module_ nn = nb::borrow<nb::module_>(m.attr("nn"));
  nb::module_ init = nn.def_submodule(
      "init", "torch.nn.init's initialisers (kiln::nn::init): each fills its tensor in place without recording "
              "a gradient and returns it; generator= draws from a kiln.random.Generator instead of the global stream.");
  constexpr auto ref = nb::rv_policy::reference;
  init.def("calculate_gain", &calculate_gain, "nonlinearity"_a, "param"_a = nb::none(),
           "The recommended gain of a nonlinearity, as torch: 1 (linear, conv, sigmoid), 5/3 (tanh), sqrt(2) (relu), "
           "sqrt(2 / (1 + slope^2)) (leaky_relu, slope param=0.01), 3/4 (selu).");
  init.def("uniform_", [](Array& tensor, double a, double b, random::Generator* g) -> Array& {
    uniform(tensor, a, b, g);
    return tensor;
  }, "tensor"_a, "a"_a = 0.0, "b"_a = 1.0, "generator"_a.none() = nb::none(), ref, "Fills tensor from U(a, b).");
  init.def("normal_", [](Array& tensor, double mean, double std, random::Generator* g) -> Array& {
    normal(tensor, mean, std, g);
    return tensor;
  }, "tensor"_a, "mean"_a = 0.0, "std"_a = 1.0, "generator"_a.none() = nb::none(), ref,
     "Fills tensor from N(mean, std^2).");
  init.def("trunc_normal_", [](Array& tensor, double mean, double std, double a, double b, random::Generator* g)
                                -> Array& {
    trunc_normal(tensor, mean, std, a, b, g);
    return tensor;
  }, "tensor"_a, "mean"_a = 0.0, "std"_a = 1.0, "a"_a = -2.0, "b"_a = 2.0, "generator"_a.none() = nb::none(), ref,
     "Fills tensor from N(mean, std^2) truncated to [a, b] (a and b are values, not multiples of std, as torch).");
  init.def("constant_", [](Array& tensor, double val) -> Array& {
    nn::init::constant(tensor, val);
    return tensor;
  }, "tensor"_a, "val"_a, ref, "Fills tensor with val.");
  init.def("ones_", [](Array& tensor) -> Array& {
    nn::init::ones(tensor);
    return tensor;
  }, "tensor"_a, ref, "Fills tensor with ones.");
  init.def("zeros_", [](Array& tensor) -> Array& {
    nn::init::zeros(tensor);
    return tensor;
  }, "tensor"_a, ref, "Fills tensor with zeros.");
  init.def("xavier_uniform_", [](Array& tensor, double gain, random::Generator* g) -> Array& {
    const auto [in, out] = fans(tensor, "xavier_uniform_");
    const double bound = gain * std::sqrt(6.0 / static_cast<double>(in + out));
    uniform(tensor, -bound, bound, g);
    return tensor;
  }, "tensor"_a, "gain"_a = 1.0, "generator"_a.none() = nb::none(), ref,
     "Glorot: U(-b, b), b = gain * sqrt(6 / (fan_in + fan_out)). ShapeError (a ValueError) below 2 axes.");
  init.def("xavier_normal_", [](Array& tensor, double gain, random::Generator* g) -> Array& {
    const auto [in, out] = fans(tensor, "xavier_normal_");
    normal(tensor, 0.0, gain * std::sqrt(2.0 / static_cast<double>(in + out)), g);
    return tensor;
  }, "tensor"_a, "gain"_a = 1.0, "generator"_a.none() = nb::none(), ref,
     "Glorot: N(0, std^2), std = gain * sqrt(2 / (fan_in + fan_out)). ShapeError (a ValueError) below 2 axes.");
  init.def("kaiming_uniform_", [](Array& tensor, double a, const std::string& mode, const std::string& nonlinearity,
                                  random::Generator* g) -> Array& {
    const int64_t fan = kaiming_fan(tensor, mode, "kaiming_uniform_");
    const double bound = std::sqrt(3.0) * calculate_gain(nonlinearity, a) / std::sqrt(static_cast<double>(fan));
    uniform(tensor, -bound, bound, g);
    return tensor;
  }, "tensor"_a, "a"_a = 0.0, "mode"_a = "fan_in", "nonlinearity"_a = "leaky_relu",
     "generator"_a.none() = nb::none(), ref,
     "He: U(-b, b), b = gain * sqrt(3 / fan), gain = calculate_gain(nonlinearity, a), fan by mode.");
  init.def("kaiming_normal_", [](Array& tensor, double a, const std::string& mode, const std::string& nonlinearity,
                                 random::Generator* g) -> Array& {
    const int64_t fan = kaiming_fan(tensor, mode, "kaiming_normal_");
    normal(tensor, 0.0, calculate_gain(nonlinearity, a) / std::sqrt(static_cast<double>(fan)), g);
    return tensor;
  }, "tensor"_a, "a"_a = 0.0, "mode"_a = "fan_in", "nonlinearity"_a = "leaky_relu",
     "generator"_a.none() = nb::none(), ref,
     "He: N(0, std^2), std = gain / sqrt(fan), gain = calculate_gain(nonlinearity, a), fan by mode.");
}

}  // namespace kiln::python
