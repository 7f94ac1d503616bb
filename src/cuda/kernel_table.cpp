// The process-wide table of built-in kernels and their NVRTC options.
#include <string>
#include <vector>

#include "cuda/codegen.hpp"

namespace kiln::cuda_impl {

KernelTable& kernel_table() {
  // Never destroyed: unloading modules while the CUDA runtime shuts down at exit is not safe.
  static KernelTable* table = new KernelTable;
  return *table;
}

const std::vector<std::string>& builtin_kernel_options() {
  static const std::vector<std::string> options = {"--fmad=false"};
  return options;
}

}  // namespace kiln::cuda_impl
