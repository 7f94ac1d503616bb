// CPU reductions (internal): sum, prod, max, min, argmax, argmin, all, any over
// any set of axes of an arbitrarily strided array.
#pragma once

#include "core/backend.hpp"

namespace kiln::cpu_impl {

/// Runs call.op over call.axes of *call.in into call.out (keepdims form, C-contiguous, dtype chosen by the core).
/// Float sums/products accumulate in double, integer ones in 64 bits (wrapping like NumPy) unless out is floating
/// (then double, as NumPy's mean); max/min compare in the element's type; all/any in bool. The core handles empty
/// reductions; max/min/argmax/argmin must not be asked to reduce zero elements.
void cpu_reduce(const detail::ReduceCall& call);
/// argmax/argmin (reduce_arg.cpp): call.out holds int64 indices; ties and NaNs take the first index, as NumPy.
void cpu_arg_reduce(const detail::ReduceCall& call);
/// cumsum/cumprod along axis 1 of call.in (scan.cpp): each (outer, inner) line in order, in double or
/// wrapping int64, every element rounded once to out's dtype.
void cpu_scan(const detail::ScanCall& call);

}  // namespace kiln::cpu_impl
