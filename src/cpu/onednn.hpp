// oneDNN glue of the CPU backend (onednn.cpp).
#pragma once

#include "core/backend.hpp"

namespace kiln::cpu_impl {

/// Runs a float32 forward convolution with oneDNN; false (nothing done) for other steps and dtypes, for problems
/// oneDNN rejects, and in builds without oneDNN.
bool onednn_convolution(const detail::ConvCall& call);

}  // namespace kiln::cpu_impl
