// Pooling and batch-norm evaluation loops of the CPU backend (pooling.cpp).
#pragma once

#include "core/backend.hpp"

namespace kiln::cpu_impl {

/// Max/average pooling forward or backward of NCHW-contiguous float32/float64 operands; false (nothing done)
/// otherwise (the core's reference runs it).
bool cpu_pooling(const detail::PoolCall& call);

/// Batch-norm evaluation of float32/float64 operands (NCHW or channels-last) in one pass, y = x * scale + shift
/// with the core reference's per-channel scale and shift and its roundings (the same bits); false (nothing done)
/// for training, backward and other dtypes (the core's reference runs them).
bool cpu_batch_norm(detail::BatchNormCall& call);

}  // namespace kiln::cpu_impl
