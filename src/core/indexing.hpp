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
/// offsets' shape). Repeated offsets add up (atomically on a GPU: the order of the additions is not fixed).
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
}  // namespace kiln::detail
