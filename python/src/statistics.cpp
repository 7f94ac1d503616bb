// NumPy's padding and order statistics over kiln/numpy_extra.hpp: pad, quantile, percentile, median, histogram,
// bincount, with NumPy's argument names.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <string>
#include <utility>
#include <vector>

#include "bindings.hpp"
#include "convert.hpp"
#include "typed.hpp"

namespace kiln::python {
namespace {

/// np.pad's pad_width: an int, (before, after), ((before, after),) or one pair per axis.
PadWidth to_pad_width(nb::handle obj) {
  if (nb::isinstance<nb::int_>(obj) || nb::hasattr(obj, "__index__")) return PadWidth(to_index(obj));
  std::vector<nb::handle> items;
  for (nb::handle item : obj) items.push_back(item);
  const bool flat = !items.empty() && (nb::isinstance<nb::int_>(items[0]) || nb::hasattr(items[0], "__index__"));
  if (flat) {
    if (items.size() == 1) return PadWidth(to_index(items[0]));
    if (items.size() == 2) return PadWidth(to_index(items[0]), to_index(items[1]));
    throw nb::value_error("pad: pad_width must be an int, (before, after) or one (before, after) pair per axis");
  }
  std::vector<std::pair<int64_t, int64_t>> widths;
  for (nb::handle pair : items) {
    std::vector<int64_t> w;
    for (nb::handle v : pair) w.push_back(to_index(v));
    if (w.size() == 1) w.push_back(w[0]);
    if (w.size() != 2) throw nb::value_error("pad: each pad_width entry must be (before, after) or (width,)");
    widths.emplace_back(w[0], w[1]);
  }
  return PadWidth(std::move(widths));
}

bool is_sequence_of_q(nb::handle q) {
  return !(nb::isinstance<nb::float_>(q) || nb::isinstance<nb::int_>(q) || nb::hasattr(q, "__float__"));
}

std::vector<double> to_q_list(nb::handle q) {
  std::vector<double> out;
  for (nb::handle v : q) out.push_back(nb::cast<double>(v));
  return out;
}

std::optional<Array> optional_array(nb::handle obj) {
  if (obj.is_none()) return std::nullopt;
  return to_array(obj);
}

}  // namespace

void bind_statistics(nb::module_& m) {
  m.def("pad", [](ArrayLike a, nb::handle pad_width, const std::string& mode, nb::handle constant_values) {
    return kiln::pad(to_array(a), to_pad_width(pad_width), mode, to_scalar(constant_values));
  }, "array"_a, "pad_width"_a, "mode"_a = "constant", "constant_values"_a = 0,
     "np.pad: mode 'constant' (constant_values), 'edge', 'reflect', 'symmetric' or 'wrap'.");
  m.def("quantile", [](ArrayLike a, nb::handle q, AxisLike axis, bool keepdims, const std::string& method) {
    if (method != "linear")
      throw nb::value_error(("quantile: method='" + method + "' is not offered; kiln interpolates linearly "
                             "(NumPy's default, method='linear')").c_str());
    if (is_sequence_of_q(q)) return kiln::quantile(to_array(a), to_q_list(q), to_axes(axis), keepdims);
    return kiln::quantile(to_array(a), nb::cast<double>(q), to_axes(axis), keepdims);
  }, "a"_a, "q"_a, "axis"_a = nb::none(), "keepdims"_a = false, "method"_a = "linear",
     "np.quantile with linear interpolation; several q give a leading axis of len(q).");
  m.def("percentile", [](ArrayLike a, nb::handle q, AxisLike axis, bool keepdims, const std::string& method) {
    if (method != "linear")
      throw nb::value_error(("percentile: method='" + method + "' is not offered; kiln interpolates linearly "
                             "(NumPy's default, method='linear')").c_str());
    if (is_sequence_of_q(q)) return kiln::percentile(to_array(a), to_q_list(q), to_axes(axis), keepdims);
    return kiln::percentile(to_array(a), nb::cast<double>(q), to_axes(axis), keepdims);
  }, "a"_a, "q"_a, "axis"_a = nb::none(), "keepdims"_a = false, "method"_a = "linear",
     "np.percentile: quantile at q / 100.");
  m.def("median", [](ArrayLike a, AxisLike axis, bool keepdims) {
    return kiln::median(to_array(a), to_axes(axis), keepdims);
  }, "a"_a, "axis"_a = nb::none(), "keepdims"_a = false, "np.median.");
  m.def("histogram", [](ArrayLike a, nb::handle bins, std::optional<std::pair<double, double>> range,
                        nb::handle weights) {
    HistogramResult r = (nb::isinstance<nb::int_>(bins) || nb::hasattr(bins, "__index__")) &&
                                !nb::isinstance<Array>(bins)
                            ? kiln::histogram(to_array(a), to_index(bins), range, optional_array(weights))
                            : kiln::histogram(to_array(a), to_array(bins), optional_array(weights));
    return nb::make_tuple(r.hist, r.bin_edges);
  }, "a"_a, "bins"_a = 10, "range"_a = nb::none(), "weights"_a = nb::none(),
     "np.histogram: (hist, bin_edges); bins is a count or the edges.");
  m.def("bincount", [](ArrayLike x, nb::handle weights, int64_t minlength) {
    return kiln::bincount(to_array(x), optional_array(weights), minlength);
  }, "x"_a, "weights"_a = nb::none(), "minlength"_a = 0, "np.bincount.");
}

}  // namespace kiln::python
