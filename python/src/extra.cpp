// The NumPy functions beyond the core ops (kiln/numpy_extra.hpp, kiln/indexing.hpp, kiln/linalg.hpp): sorting
// and searching, gathers, triangles and diagonals, products, tiling, rolling and flipping, unique values, and
// linalg.solve. The Array API namespace (kiln/array_api.py) builds on these.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <string>
#include <vector>

#include "bindings.hpp"
#include "convert.hpp"
#include "typed.hpp"

namespace kiln::python {
namespace {

std::optional<int64_t> optional_index(nb::handle axis) {
  if (axis.is_none()) return std::nullopt;
  return to_index(axis);
}

// An int or a sequence of ints, as a vector (roll's shifts and axes).
std::vector<int64_t> to_index_list(nb::handle obj) {
  if (nb::isinstance<nb::int_>(obj) || nb::hasattr(obj, "__index__")) return {to_index(obj)};
  std::vector<int64_t> out;
  for (nb::handle item : obj) out.push_back(to_index(item));
  return out;
}

}  // namespace

void bind_extra(nb::module_& m) {
  // ---------------------------------------------------------------- sorting and searching
  m.def("sort", [](ArrayLike a, int64_t axis) { return kiln::sort(to_array(a), axis); }, "a"_a, "axis"_a = -1,
        "A sorted copy along `axis` (stable, NaNs last), as np.sort.");
  m.def("argsort", [](ArrayLike a, int64_t axis) { return kiln::argsort(to_array(a), axis); }, "a"_a,
        "axis"_a = -1, "The indices (int64) that sort `a` along `axis` (stable), as np.argsort.");
  m.def("searchsorted", [](ArrayLike a, ArrayLike v, const std::string& side) {
    Array sorted = to_array(a);
    return kiln::searchsorted(sorted, to_array_near(v, sorted), side);
  }, "a"_a, "v"_a, "side"_a = "left", "Where `v` would be inserted into the sorted 1-d `a`, as np.searchsorted.");
  m.def("unique_values", [](ArrayLike a) { return kiln::unique_values(to_array(a)); }, "x"_a,
        "The sorted unique values of `a`, flattened (syncs once).");
  m.def("unique", [](ArrayLike a, bool return_index, bool return_inverse, bool return_counts) -> nb::object {
    UniqueResult r = kiln::unique(to_array(a), {return_index, return_inverse, return_counts});
    if (!return_index && !return_inverse && !return_counts) return nb::cast(r.values);
    nb::list out;
    out.append(r.values);
    if (return_index) out.append(r.indices);
    if (return_inverse) out.append(r.inverse);
    if (return_counts) out.append(r.counts);
    return nb::tuple(out);
  }, "ar"_a, "return_index"_a = false, "return_inverse"_a = false, "return_counts"_a = false,
     "np.unique (axis=None): the sorted unique values and, on request, first indices, inverse and counts.");

  m.def("flatnonzero", [](ArrayLike a) { return kiln::flatnonzero(to_array(a)); }, "a"_a,
        "The flat indices (int64) of the nonzero elements of `a`, as np.flatnonzero (syncs once).");

  // ---------------------------------------------------------------- gathers
  m.def("take", [](ArrayLike a, ArrayLike indices, nb::handle axis) {
    Array x = to_array(a);
    return kiln::take(x, to_array_near(indices, x), optional_index(axis));
  }, "a"_a, "indices"_a, "axis"_a = nb::none(), "Elements of `a` at `indices` along `axis`, as np.take.");
  m.def("take_along_axis", [](ArrayLike a, ArrayLike indices, int64_t axis) {
    Array x = to_array(a);
    return kiln::take_along_axis(x, to_array_near(indices, x), axis);
  }, "arr"_a, "indices"_a, "axis"_a, "np.take_along_axis: a gather along `axis`.");

  // ---------------------------------------------------------------- triangles, diagonals, products
  m.def("tril", [](ArrayLike a, int64_t k) { return kiln::tril(to_array(a), k); }, "m"_a, "k"_a = 0);
  m.def("triu", [](ArrayLike a, int64_t k) { return kiln::triu(to_array(a), k); }, "m"_a, "k"_a = 0);
  m.def("diag", [](ArrayLike v, int64_t k) { return kiln::diag(to_array(v), k); }, "v"_a, "k"_a = 0);
  m.def("diagonal", [](ArrayLike a, int64_t offset, int64_t axis1, int64_t axis2) {
    return kiln::diagonal(to_array(a), offset, axis1, axis2);
  }, "a"_a, "offset"_a = 0, "axis1"_a = 0, "axis2"_a = 1);
  m.def("trace", [](ArrayLike a, int64_t offset, int64_t axis1, int64_t axis2) {
    return kiln::trace(to_array(a), offset, axis1, axis2);
  }, "a"_a, "offset"_a = 0, "axis1"_a = 0, "axis2"_a = 1);
  m.def("outer", [](ArrayLike a, ArrayLike b) {
    Array x = to_array(a);
    return kiln::outer(x, to_array_near(b, x));
  }, "a"_a, "b"_a);
  m.def("tensordot", [](ArrayLike a, ArrayLike b, nb::handle axes) {
    Array x = to_array(a), y = to_array_near(b, x);
    if (nb::isinstance<nb::int_>(axes)) return kiln::tensordot(x, y, nb::cast<int64_t>(axes));
    if (nb::len(axes) != 2)
      throw nb::type_error("tensordot: axes must be an int or a pair of axis lists ((0, 1), (1, 0))");
    return kiln::tensordot(x, y, to_index_list(axes[0]), to_index_list(axes[1]));
  }, "a"_a, "b"_a, "axes"_a = 2);
  m.def("einsum", [](const std::string& subscripts, nb::args operands) {
    std::vector<Array> arrays;
    for (nb::handle h : operands) arrays.push_back(to_array(h));
    return kiln::einsum(subscripts, arrays);
  }, "subscripts"_a, "operands"_a);

  // ---------------------------------------------------------------- tiling, rolling, flipping, grids
  m.def("tile", [](ArrayLike a, ShapeLike reps) { return kiln::tile(to_array(a), to_shape(reps)); }, "A"_a,
        "reps"_a);
  m.def("repeat", [](ArrayLike a, ArrayLike repeats, nb::handle axis) {
    Array x = to_array(a);
    if (nb::isinstance<nb::int_>(repeats)) return kiln::repeat(x, nb::cast<int64_t>(repeats), optional_index(axis));
    return kiln::repeat(x, to_array_near(repeats, x), optional_index(axis));
  }, "a"_a, "repeats"_a, "axis"_a = nb::none());
  m.def("roll", [](ArrayLike a, nb::handle shift, nb::handle axis) {
    Array x = to_array(a);
    if (axis.is_none()) {
      std::vector<int64_t> shifts = to_index_list(shift);
      if (shifts.size() != 1) throw nb::value_error("roll: several shifts need as many axes (axis=(0, 1))");
      return kiln::roll(x, shifts[0]);
    }
    std::vector<int64_t> shifts = to_index_list(shift), axes = to_index_list(axis);
    if (shifts.size() == 1 && axes.size() > 1) shifts.assign(axes.size(), shifts[0]);
    return kiln::roll(x, shifts, axes);
  }, "a"_a, "shift"_a, "axis"_a = nb::none());
  m.def("flip", [](ArrayLike a, AxisLike axis) { return kiln::flip(to_array(a), to_axes(axis)); }, "m"_a,
        "axis"_a = nb::none());
  m.def("meshgrid", [](nb::args xi, const std::string& indexing) {
    std::vector<Array> arrays;
    for (nb::handle h : xi) arrays.push_back(to_array(h));
    return kiln::meshgrid(arrays, indexing);
  }, "xi"_a, "indexing"_a = "xy");

  // ---------------------------------------------------------------- comparisons of whole arrays
  m.def("isclose", [](ArrayLike a, ArrayLike b, double rtol, double atol, bool equal_nan) {
    Array x = to_array(a);
    return kiln::isclose(x, to_array_near(b, x), rtol, atol, equal_nan);
  }, "a"_a, "b"_a, "rtol"_a = 1e-5, "atol"_a = 1e-8, "equal_nan"_a = false);
  m.def("allclose", [](ArrayLike a, ArrayLike b, double rtol, double atol, bool equal_nan) {
    Array x = to_array(a);
    return kiln::allclose(x, to_array_near(b, x), rtol, atol, equal_nan);
  }, "a"_a, "b"_a, "rtol"_a = 1e-5, "atol"_a = 1e-8, "equal_nan"_a = false);
  m.def("array_equal", [](ArrayLike a, ArrayLike b, bool equal_nan) {
    Array x = to_array(a);
    return kiln::array_equal(x, to_array_near(b, x), equal_nan);
  }, "a1"_a, "a2"_a, "equal_nan"_a = false);

  nb::object linalg = m.attr("linalg");
  nb::cast<nb::module_>(linalg).def("solve", [](ArrayLike a, ArrayLike b) {
    Array x = to_array(a);
    return kiln::linalg::solve(x, to_array_near(b, x));
  }, "a"_a, "b"_a, "x with a @ x = b, as np.linalg.solve (LinAlgError for a singular a; syncs).");
}

}  // namespace kiln::python
