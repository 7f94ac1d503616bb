// Convolutions through cuDNN's backend API (cudnn_plans.cpp), as cudnn.cpp calls them before falling back to the
// descriptor API.
#pragma once

#include <cudnn.h>

#include "cuda/cudnn_common.hpp"

namespace kiln::cuda_impl {

/// Whether every convolution goes through the descriptor API (cudnn_force_descriptor_api, for the tests).
bool legacy_only();
/// Runs the call through the backend API's plan for `key` (built on first use, outside graph captures); false
/// when there is none (the descriptor API runs it).
bool run_backend(CudnnState& state, const ConvKey& key, cudnnDataType_t type, cudaStream_t stream,
                 const ConvPointers& pointers);

}  // namespace kiln::cuda_impl
