// Fused scaled dot-product attention primitives (FlashAttention's algorithm: the T x T scores never exist in
// memory), the engine under nn::scaled_dot_product_attention on a GPU: cuDNN's fused attention (its graph API,
// through NVIDIA's cudnn-frontend headers) for float16 and bfloat16. Like kiln/conv.hpp's primitives they record
// no gradient (nn::scaled_dot_product_attention does): an input that requires grad while grad mode is on is
// refused. Where no engine runs a problem (the CPU, float32, a head size cuDNN does not take, a GPU older than
// Ampere, a build without cudnn-frontend) they return nullopt and flash_attention_stats() says why, so the caller
// falls back to the blocked attention.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "kiln/array.hpp"

namespace kiln {

/// The forward's results: out (q's shape and dtype) and lse (B, H, Sq) float32, each query row's log-sum-exp of
/// its scaled, masked scores before dropout (what the backward needs); with dropout, rng: int64 (2,) on the
/// device, the (seed, offset) from which the engine drew its mask (the backward regenerates it from them).
struct FlashAttentionOutput {
  Array out, lse, rng;
};

/// softmax(q k^T * scale [+ causal mask]) v for q (B, H, Sq, D), k and v (B, Hk, Skv, D), H a multiple of Hk
/// (each k/v head serves H / Hk query heads, as grouped-query attention), all of one dtype and device. causal:
/// query i sees keys j <= i (PyTorch's is_causal, top-left). Operands may be views (strides as they come) with
/// a contiguous last axis; out is laid out (B, Sq, H, D) in memory, so out.transpose(1, 2) is contiguous.
/// dropout_p in [0, 1) drops attention weights (the kept ones scaled by 1 / (1 - dropout_p)) with the engine's
/// mask (cuDNN's Philox, not kiln's stream: it differs from the CPU's dropout), seeded from the default
/// generator, whose offset advances by B * H * Sq * Skv blocks (one per weight); a captured CUDA graph takes
/// its seed at each replay. Nothing is drawn when no engine runs the problem.
/// Throws ShapeError / DTypeError / DeviceError for operands that do not fit, ValueError for dropout_p outside
/// [0, 1); nullopt when no engine runs it.
std::optional<FlashAttentionOutput> flash_attention_forward(const Array& q, const Array& k, const Array& v,
                                                            double scale, bool causal, double dropout_p = 0.0);

struct FlashAttentionGrads {
  Array dq, dk, dv;
};
/// The gradients of flash_attention_forward's q, k, v from the gradient `dout` of its output, given the forward's
/// out and lse, and with dropout its dropout_p and rng (the same mask); nullopt when no engine runs it (the
/// caller recomputes from lse; with dropout it cannot, since the mask exists only in the engine).
/// Throws ShapeError for operands that do not fit, ValueError for a dropout without the forward's rng.
std::optional<FlashAttentionGrads> flash_attention_backward(const Array& q, const Array& k, const Array& v,
                                                            const Array& out, const Array& dout, const Array& lse,
                                                            double scale, bool causal, double dropout_p = 0.0,
                                                            const Array& rng = {});

/// Counts of this process's fused attention calls, and why the last problem without an engine had none.
struct FlashAttentionStats {
  int64_t forward = 0, backward = 0;  ///< calls an engine ran
  int64_t declined = 0;               ///< calls no engine ran
  std::string refusal;                ///< the last decline's reason
};
FlashAttentionStats flash_attention_stats();

}  // namespace kiln
