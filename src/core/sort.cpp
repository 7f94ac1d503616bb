// sort/argsort (stable, NaN last as NumPy) and random permutations.
// The sorted axis is moved last and the rows made contiguous; a device backend with
// a sort (Backend::sort: the GPU's, asynchronous) sorts them where they are, else
// each row is sorted on the host with std::stable_sort (CPU arrays; a backend
// without a sort gets its result copied back).
// permutation(n) is the stable argsort of n randint keys drawn from the default
// Philox generator on the CPU, so one seed gives one permutation on every device.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "core/autograd.hpp"
#include "core/backend.hpp"
#include "core/step_trace.hpp"
#include "kiln/indexing.hpp"
#include "kiln/random.hpp"

namespace kiln {
namespace {

/// Host argsort of every row of a contiguous host array whose last axis is sorted; writes the
/// row-local indices into `perm` (int64, same shape) and, when `sorted` is defined, the sorted values.
void sort_rows(const Array& h, const Array& perm, const Array& sorted) {
  const int64_t n = h.ndim() == 0 ? 1 : h.shape(-1);
  const int64_t rows = n == 0 ? 0 : h.size() / n;
  int64_t* p = perm.data<int64_t>();
  visit_dtype(h.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* v = h.data<T>();
    for (int64_t r = 0; r < rows; ++r) {
      const T* row = v + r * n;
      int64_t* pr = p + r * n;
      std::iota(pr, pr + n, int64_t{0});
      if constexpr (std::is_integral_v<T>) {
        std::stable_sort(pr, pr + n, [row](int64_t i, int64_t j) { return row[i] < row[j]; });
      } else {
        std::stable_sort(pr, pr + n, [row](int64_t i, int64_t j) {
          const double x = static_cast<double>(row[i]);
          const double y = static_cast<double>(row[j]);
          if (std::isnan(y)) return !std::isnan(x);
          return x < y;
        });
      }
    }
  });
  if (!sorted.defined()) return;
  const auto size = static_cast<size_t>(itemsize(h.dtype()));
  const char* src = static_cast<const char*>(h.data_ptr());
  char* dst = static_cast<char*>(sorted.data_ptr());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < n; ++i)
      std::memcpy(dst + static_cast<size_t>(r * n + i) * size, src + static_cast<size_t>(r * n + p[r * n + i]) * size,
                  size);
}

/// argsort (and the sorted values when `values`) of `a` along `axis`, on a's device.
Array sort_impl(const Array& a, int64_t axis, bool values, const char* op) {
  if (!a.defined()) throw ValueError(std::string(op) + ": the array is undefined; create it first");
  if (a.ndim() == 0)
    throw ShapeError(std::string(op) + ": cannot sort a 0-d array; reshape it to 1-d (reshape(-1)) first");
  const int64_t p = normalize_axis(axis, a.ndim(), op);
  if (!a.device().is_cpu()) {
    const Array rows = moveaxis(a, p, -1).contiguous();
    const int64_t n = rows.shape(-1);
    const Array matrix = rows.reshape({n == 0 ? 0 : rows.size() / n, n});
    detail::SortCall call{&matrix, detail::make_array(matrix.shape(), int64, a.device()),
                          values ? detail::make_array(matrix.shape(), a.dtype(), a.device()) : Array()};
    if (detail::backend_for(a.device()).sort(call))
      return moveaxis((values ? call.values : call.indices).reshape(rows.shape()), -1, p).contiguous();
  }
  const Array h = moveaxis(a, p, -1).to(cpu()).contiguous();
  Array perm = detail::make_array(h.shape(), int64, cpu());
  Array sorted = values ? detail::make_array(h.shape(), h.dtype(), cpu()) : Array();
  auto sort_now = [h, perm, sorted] { sort_rows(h, perm, sorted); };
  detail::host_step("sort", {h, perm, sorted}, sort_now, sort_now);
  const Array& result = values ? sorted : perm;
  return moveaxis(result, -1, p).contiguous().to(a.device());
}

}  // namespace

Array argsort(const Array& a, int64_t axis) { return sort_impl(a.detach(), axis, false, "argsort"); }
Array sort(const Array& a, int64_t axis) {
  detail::reject_grad({&a}, "sort", "sort the indices with argsort and gather the values with take");
  return sort_impl(a, axis, true, "sort");
}

namespace random {

Array permutation(int64_t n, std::optional<Device> device) {
  if (n < 0) throw ValueError("random::permutation: n must be non-negative, got " + std::to_string(n));
  const Array keys = randint(0, int64_t{1} << 32, Shape{n}, int64, cpu());
  return argsort(keys).to(device.value_or(current_device()));
}

Array permutation(const Array& a) {
  if (!a.defined()) throw ValueError("random::permutation: the array is undefined; create it first");
  if (a.ndim() == 0)
    throw ShapeError("random::permutation: a 0-d array has no axis to shuffle; pass a 1-d or larger array");
  return take(a, permutation(a.shape(0), a.device()), 0);
}

void shuffle(const Array& a) {
  Array shuffled = permutation(a);
  Array(a).assign(shuffled);
}

}  // namespace random
}  // namespace kiln
