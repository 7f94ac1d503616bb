// Internal entries of Array::index/index_put (see kiln/indexing.hpp for the public functions).
#pragma once

#include <optional>

#include "kiln/array.hpp"

namespace kiln::detail {
/// Array::index over the entries [first, last): a view for basic entries, else advanced_index.
Array basic_index(const Array& a, const Index* first, const Index* last);
/// Array::index with an Array entry (a bool mask or an integer index array): a gathered copy.
Array advanced_index(const Array& a, const Index* first, const Index* last);
/// Array::index_put: writes `values` (broadcast, cast) where index() reads.
void advanced_index_put(const Array& a, const Index* first, const Index* last, const Array& values);
/// The storage element offsets that take(a, indices, axis) reads (int64, on a's device; bounds checked).
Array take_offsets(const Array& a, const Array& indices, std::optional<int64_t> axis);
/// storage element offsets[i] of `dst` += values[i] (float32 or float64 dst; values of dst's dtype and
/// offsets' shape). Repeated offsets add up (atomically on a GPU: the order of the additions is not fixed; take's
/// gradient along an axis avoids this on a GPU, summing rows in the CPU's order: indexing.cpp).
void scatter_add_flat(const Array& dst, const Array& offsets, const Array& values);
}  // namespace kiln::detail

namespace kiln::detail {
/// The generated GPU kernels behind gathers and scatters (kiln ElementwiseKernels over a raw 1-d view of the
/// array's storage; `j` holds storage element offsets). Exposed for the PTX code generation tests.
inline constexpr const char* kGatherIn = "raw T src, int64 j";
inline constexpr const char* kGatherOut = "T y";
inline constexpr const char* kGatherOp = "y = src[j]";
inline constexpr const char* kScatterIn = "T v, int64 j";
inline constexpr const char* kScatterOut = "raw T dst";
inline constexpr const char* kScatterOp = "dst[j] = v";
inline constexpr const char* kScatterAddOp = "atomicAdd(&dst[j], v)";
/// take's gradient along an axis on a GPU (indexing.cpp, index_add_rows_gpu): `rows` the sorted indices, `order`
/// their stable argsort; over the elements (o, q, c) of the values, viewed as (outer, k, inner), the first q of
/// each run of equal rows sums the run in ascending order into dst (outer, nrows, inner).
inline constexpr const char* kTakeRowsIn =
    "raw int64 rows, raw int64 order, raw T v, int64 k, int64 inner, int64 nrows";
inline constexpr const char* kTakeRowsOut = "raw T dst";
inline constexpr const char* kTakeRowsOp = R"(const long long c = i % inner, t = i / inner, q0 = t % k, o = t / k;
const long long row = rows[q0];
if (q0 == 0 || rows[q0 - 1] != row) {
  const long long at = (o * nrows + row) * inner + c;
  T sum = dst[at];
  for (long long q = q0; q < k && rows[q] == row; ++q) sum += v[(o * k + order[q]) * inner + c];
  dst[at] = sum;
})";
}  // namespace kiln::detail
