// The op table: names, arities and typing rules of every elementwise op.
#include "core/op_table.hpp"

namespace kiln::detail {

namespace {
constexpr OpInfo kOps[] = {
#define KILN_U(e, n, r) {#n, 1, TypeRule::r},
#define KILN_B(e, n, r) {#n, 2, TypeRule::r},
#define KILN_T(e, n, r) {#n, 3, TypeRule::r},
#define KILN_N(e, n, r) {#n, 0, TypeRule::r},
    KILN_UNARY_OPS(KILN_U) KILN_BINARY_OPS(KILN_B) KILN_TERNARY_OPS(KILN_T) KILN_NULLARY_OPS(KILN_N)
#undef KILN_U
#undef KILN_B
#undef KILN_T
#undef KILN_N
};
static_assert(sizeof(kOps) / sizeof(kOps[0]) == static_cast<size_t>(OpCode::Count));
}  // namespace

const OpInfo& op_info(OpCode op) { return kOps[static_cast<int>(op)]; }

const char* reduce_op_name(ReduceOp op) {
  constexpr const char* names[] = {"sum", "prod", "max", "min", "argmax", "argmin", "all", "any"};
  return names[static_cast<int>(op)];
}

}  // namespace kiln::detail
