// Pooling loops of the CPU backend (pooling.cpp).
#pragma once

#include "core/backend.hpp"

namespace kiln::cpu_impl {

/// Max/average pooling forward or backward of NCHW-contiguous float32/float64 operands; false (nothing done)
/// otherwise (the core's reference runs it).
bool cpu_pooling(const detail::PoolCall& call);

}  // namespace kiln::cpu_impl
