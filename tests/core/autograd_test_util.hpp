// Shared by the autograd tests (test_autograd.cpp, test_complex_autograd.cpp): deterministic operand values and
// the op table's rows with their public functions.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "core/op_table.hpp"
#include "kiln/kiln.hpp"

namespace kiln::autograd_test {

/// Values in [lo, hi], distinct, deterministic, float64, on `d`.
inline Array values(const Shape& shape, double lo, double hi, uint64_t salt, Device d = cpu()) {
  const int64_t n = shape_numel(shape);
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const double t = std::fmod(0.6180339887 * static_cast<double>(i + 1) + 0.1234 * static_cast<double>(salt), 1.0);
    v[static_cast<size_t>(i)] = lo + (hi - lo) * t;
  }
  return from_data(v, shape, d);
}

/// One elementwise row of the op table (kiln/ops.def) with its public function: unary or binary.
struct OpRow {
  const char* name;
  detail::OpCode code;
  int arity;
  Array (*unary)(const Array&);
  Array (*binary)(const Operand&, const Operand&);
};

#define KILN_ROW_Fn1(Code, name) \
  {#name, detail::OpCode::Code, 1, static_cast<Array (*)(const Array&)>(&kiln::name), nullptr},
#define KILN_ROW_Fn2(Code, name) \
  {#name, detail::OpCode::Code, 2, nullptr, static_cast<Array (*)(const Operand&, const Operand&)>(&kiln::name)},
#define KILN_ROW_Own3(Code, name)
#define KILN_ROW_None0(Code, name)
#define KILN_ROW_None1(Code, name)
#define KILN_ROW(Code, name, arity, api) KILN_ROW_##api##arity(Code, name)
inline const OpRow kRows[] = {
#define KILN_OP(Code, name, arity, api, ...) KILN_ROW(Code, name, arity, api)
#include "kiln/ops.def"
};
#undef KILN_ROW
#undef KILN_ROW_Fn1
#undef KILN_ROW_Fn2
#undef KILN_ROW_Own3
#undef KILN_ROW_None0
#undef KILN_ROW_None1

}  // namespace kiln::autograd_test
