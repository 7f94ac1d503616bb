// The recurrent layers' fused steps (src/nn/rnn_steps.hpp) as GPU kernels, without a GPU: each step's graph fits a
// fused kernel's operand limit, and its generated source (strided and broadcast layouts: the steps read per-gate
// column slices and a bias row) compiles to PTX with NVRTC, in float32, float64 and bfloat16.
#ifdef KILN_WITH_CUDA

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "cuda/compiler.hpp"
#include "cuda/fusion.hpp"
#include "kiln/kiln.hpp"
#include "nn/rnn_steps.hpp"

using namespace kiln;
using namespace kiln::cuda_impl;

namespace {

/// Checks the graph's operand count and compiles it in the layouts a step launches with.
void compile_step(const std::shared_ptr<const detail::FusionGraph>& g, const std::string& what) {
  EXPECT_NO_THROW(check_operand_count(*g)) << what;
  FusionKernelSpec strided;
  strided.layout = FusionLayout::Strided;
  strided.ndim = 2;
  FusionKernelSpec dense;
  dense.layout = FusionLayout::Contiguous;
  CompileOptions options;
  options.options = builtin_kernel_options();
  for (const FusionKernelSpec& spec : {strided, dense}) {
    const std::string name = fusion_kernel_name(*g, spec);
    try {
      const std::string ptx = compile_ptx(fusion_source(*g, spec), name, 90, options);
      EXPECT_NE(ptx.find(".entry " + name + "("), std::string::npos) << what;
    } catch (const std::exception& e) {
      ADD_FAILURE() << what << ": " << e.what();
    }
  }
}

}  // namespace

TEST(RnnKernels, EveryStepFitsOneKernelAndCompilesWithoutAGpu) {
  using namespace nn::rnn_steps;
  for (DType t : {float32, float64, bfloat16}) {
    const Array a = zeros({4, 8}, t, cpu()), row = zeros({8}, t, cpu());
    const std::string d(dtype_name(t));
    compile_step(lstm_step.graph(a, a, a, a, a, a, a, a, a), "lstm_step " + d);
    compile_step(lstm_step_backward.graph(a, a, a, a, a, a, a, a, a), "lstm_step_backward " + d);
    compile_step(gru_step.graph(a, a, a, a, a, a, row, a), "gru_step " + d);
    compile_step(gru_step.graph(a, a, a, a, a, a, 0.0, a), "gru_step without bias " + d);
    compile_step(gru_step_backward.graph(a, a, a, a, a, a, a), "gru_step_backward " + d);
    compile_step(lstm_step_backward.graph(a, 0.0, a, a, a, a, a, a, a), "lstm_step_backward projected " + d);
    compile_step(sum_of.graph(a, a), "sum_of " + d);
    compile_step(rnn_tanh_step.graph(a, a), "rnn_tanh_step " + d);
    compile_step(rnn_relu_step.graph(a, a), "rnn_relu_step " + d);
    compile_step(rnn_tanh_step_backward.graph(a, a, a), "rnn_tanh_step_backward " + d);
    compile_step(rnn_relu_step_backward.graph(a, a, a), "rnn_relu_step_backward " + d);
  }
}

#endif  // KILN_WITH_CUDA
