// The op table's out-of-line parts (the elementwise rows are constexpr data in op_table.hpp).
#include "core/op_table.hpp"

#include <iterator>

namespace kiln::detail {

const char* reduce_op_name(ReduceOp op) {
  constexpr const char* names[] = {"sum", "prod", "max", "min", "argmax", "argmin", "all", "any", "norm"};
  static_assert(std::size(names) == kNumReduceOps, "one name per ReduceOp");
  return names[static_cast<int>(op)];
}

}  // namespace kiln::detail
