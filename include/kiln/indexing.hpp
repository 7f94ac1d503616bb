// NumPy's advanced indexing and comparisons of whole arrays: take/put, index
// arrays and boolean masks (Array::index / index_put), flatnonzero, isclose,
// allclose, array_equal, sort/argsort, random permutations.
// Gathers and scatters run on the array's device (a generated NVRTC kernel on
// a GPU); bounds checks and mask counts synchronise, as NumPy's answers need
// the values.
#pragma once

#include <cstdint>
#include <optional>

#include "kiln/array.hpp"
#include "kiln/ops.hpp"

namespace kiln {

/// Elements of `a` at integer `indices` along `axis` (of the flattened array when no axis), as np.take:
/// shape a.shape[:axis] + indices.shape + a.shape[axis+1:]. Negative indices count from the end.
/// Syncs once (bounds check); throws ShapeError for an out-of-range index, DTypeError for non-integer indices.
Array take(const Array& a, const Array& indices, std::optional<int64_t> axis = {});
/// out[i..., j, k...] = a[i..., indices[i..., j, k...], k...] along `axis`, as np.take_along_axis (a gather:
/// picks class scores, an embedding's rows per position): `indices` has a's rank and broadcasts with a on the
/// other axes. Differentiable (the gradient is scattered back with additions). Syncs once (bounds check);
/// ShapeError for a rank mismatch or an out-of-range index, DTypeError for non-integer indices.
Array take_along_axis(const Array& a, const Array& indices, int64_t axis);
/// A copy of `a` with src[i..., j, k...] added at [i..., indices[i..., j, k...], k...] along `axis`, as
/// torch.scatter_add (the adjoint of take_along_axis: repeated indices add up; on a GPU in no fixed order).
/// `indices` and `src` have the same shape: a's, except on `axis`. Floating a (the
/// sums are made in float32, float64 for float64 arrays); differentiable in a and src. Syncs once (bounds
/// check); ShapeError / DTypeError as take_along_axis.
Array scatter_add(const Array& a, int64_t axis, const Array& indices, const Array& src);

/// Checks that every value of integer array `values` lies in [lo, hi) without a host synchronisation
/// (class labels, indices computed on the device). CPU arrays are checked at once. For a GPU array a check
/// kernel is queued and a failure is thrown at the next synchronisation with that GPU (item(), to(cpu()),
/// synchronize(), a stream or event wait), as torch._assert_async but recoverable: the error is cleared once
/// thrown. Throws ValueError with `message`, "{value}" in it replaced by the first offending value;
/// DTypeError for a floating or bool `values`. take, index and the losses check their indices this way.
void check_in_range(const Array& values, int64_t lo, int64_t hi, const std::string& message);
/// Writes `values` (broadcast to indices' shape, cast) into `a` at flat (C-order) `indices`, as np.put.
/// Syncs once (bounds check); throws as take.
void put(const Array& a, const Array& indices, const Array& values);
void put(const Array& a, const Array& indices, const Scalar& value);
/// Flat (C-order) int64 indices of the nonzero elements of `a`. Syncs and copies `a` to the host.
Array flatnonzero(const Array& a);

/// |a - b| <= atol + rtol * |b| elementwise (bool), as np.isclose: infinities equal only themselves;
/// NaN equals NaN only when equal_nan. Broadcasts; same device.
Array isclose(const Array& a, const Array& b, double rtol = 1e-5, double atol = 1e-8, bool equal_nan = false);
/// All of isclose(a, b, ...). Syncs (returns a host bool).
bool allclose(const Array& a, const Array& b, double rtol = 1e-5, double atol = 1e-8, bool equal_nan = false);
/// Same shape and equal elements (values compared after promotion), as np.array_equal. Syncs.
bool array_equal(const Array& a, const Array& b, bool equal_nan = false);

/// Indices (int64) that sort `a` along `axis`, stable (equal values keep their order), NaN last as NumPy.
/// On a GPU it sorts on the device (a bitonic sort per 2048-element chunk, then merge passes), asynchronously.
Array argsort(const Array& a, int64_t axis = -1);
/// `a` sorted along `axis` (a new array; stable, NaN last; -0.0 and 0.0 are equal). On the device on a GPU.
Array sort(const Array& a, int64_t axis = -1);

namespace random {
/// A random permutation of 0..n-1 (int64) on `device`, from the default Philox generator: the same
/// seed gives the same permutation on every device (it is the stable argsort of randint keys drawn on the CPU).
Array permutation(int64_t n, std::optional<Device> device = {});
/// A copy of `a` with its first axis shuffled (np.random.permutation of an array).
Array permutation(const Array& a);
/// Shuffles `a` along its first axis in place (np.random.shuffle).
void shuffle(const Array& a);
}  // namespace random

}  // namespace kiln
