// The op table's out-of-line parts (the elementwise rows are constexpr data in op_table.hpp).
#include "core/op_table.hpp"

#include <cstring>
#include <iterator>

namespace kiln::detail {

DType reduce_result_dtype(ReduceOp op, DType in) {
  switch (reduce_info(op).result) {
    case ReduceResult::Sum: return is_inexact(in) ? in : DType::Int64;
    case ReduceResult::Mean: return is_inexact(in) ? in : DType::Float64;
    case ReduceResult::Same: return in;
    case ReduceResult::Index: return DType::Int64;
    case ReduceResult::Bool: return DType::Bool;
    case ReduceResult::Float: return float_result_type(in);
  }
  return in;
}

std::optional<ReduceOp> reduce_op_by_name(const char* name) {
  for (int i = 0; i < kNumReduceOps; ++i)
    if (std::strcmp(kReduceInfo[static_cast<size_t>(i)].name, name) == 0) return static_cast<ReduceOp>(i);
  return std::nullopt;
}

}  // namespace kiln::detail
