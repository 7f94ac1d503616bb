// TEMPORARY weak placeholders so the library links while reduce/matmul/random land.
#include "core/backend.hpp"
namespace kiln::cpu_impl {
__attribute__((weak)) void cpu_reduce(const detail::ReduceCall&) { throw Error("cpu_reduce: pending"); }
__attribute__((weak)) void cpu_matmul(const detail::MatmulCall&) { throw Error("cpu_matmul: pending"); }
__attribute__((weak)) void cpu_random(const detail::RandomCall&) { throw Error("cpu_random: pending"); }
}  // namespace kiln::cpu_impl
