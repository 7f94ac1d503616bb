// Shared by the fused-kernel codegen tests (test_fuse_gpu.cpp, test_multi_tensor_gpu.cpp): they run without a GPU,
// NVRTC compiling the generated source to PTX.
#pragma once
#ifdef KILN_WITH_CUDA

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/fusion.hpp"
#include "cuda/compiler.hpp"
#include "cuda/device_functions.hpp"
#include "cuda/fusion.hpp"

namespace kiln_test {

/// Compiles the kernels of `specs` for `graph` in one program to PTX (sm_90) and checks every entry is there.
inline void expect_compiles(const kiln::detail::FusionGraph& graph,
                            const std::vector<kiln::cuda_impl::FusionKernelSpec>& specs) {
  using namespace kiln::cuda_impl;
  std::string source = device_prelude();
  for (const FusionKernelSpec& spec : specs) source += fusion_kernel_code(graph, spec);
  CompileOptions options;
  options.options = builtin_kernel_options();
  std::string ptx;
  ASSERT_NO_THROW(ptx = compile_ptx(source, "fuse_test", 90, options)) << source;
  for (const FusionKernelSpec& spec : specs)
    EXPECT_NE(ptx.find(".entry " + fusion_kernel_name(graph, spec) + "("), std::string::npos)
        << fusion_kernel_name(graph, spec);
}

}  // namespace kiln_test

#endif  // KILN_WITH_CUDA
