// Automatic mixed precision, as torch.autocast: inside an AutocastGuard(bfloat16 | float16) scope, nn's
// matrix products and convolutions (nn::conv2d, nn::Conv2d, nn::Linear) run in the low precision (their
// float32 inputs cast, differentiably, so parameters stay float32 and get float32 gradients), while losses and
// normalisations that need the range (cross_entropy, nll_loss, mse_loss, binary_cross_entropy_with_logits,
// softmax, log_softmax, LayerNorm) compute in float32; batch normalisation keeps its input's dtype and computes
// its statistics in float32. Ops outside those lists run in their inputs' dtypes. The scope is per thread;
// guards nest (the innermost wins; AutocastGuard(std::nullopt) turns autocasting off inside). As torch.autocast,
// without gradients (NoGradGuard) the low-precision copy of a parameter (a leaf that requires grad) is cached for
// the outermost enabled scope:
// made once, reused by later casts in the scope (a loop of inferences casts each weight once), made again when
// the parameter changes (its version moves: an optimizer step), dropped when the scope closes.
//
//   { AutocastGuard amp(bfloat16);
//     loss = nn::cross_entropy((*net)(x), y); }   // convolutions in bfloat16, the loss in float32
//   loss.backward();                              // float32 gradients for the float32 parameters
//
// float16 training needs optim::GradScaler (its gradients underflow otherwise); bfloat16 does not.
#pragma once

#include <optional>
#include <vector>

#include "kiln/array.hpp"

namespace kiln {

class AutocastGuard {
 public:
  /// Autocasts to `dtype` (float16 or bfloat16; ValueError otherwise), or off for std::nullopt.
  explicit AutocastGuard(std::optional<DType> dtype);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  std::optional<DType> previous_;
};

/// This thread's autocast dtype, or nullopt outside any scope.
std::optional<DType> autocast_dtype();
/// x cast to the autocast dtype when a scope is on and x is float32 (a low-precision op's input), else x.
Array autocast_low(const Array& x);
/// Casts the float32 parameters among `arrays` (leaves that require grad, contiguous, on the first one's device)
/// to the scope's dtype at once — one multi-tensor pass, a few launches on a GPU instead of one per parameter —
/// and caches the copies for the outermost enabled scope: autocast_low of those parameters then returns them,
/// also with gradients on (each copy recorded as the cast, so every use's gradient reaches the parameter in
/// float32). A model's forward calls it with its parameters (models::GPT2 does under autocast); a copy is made
/// again when its parameter changes (an optimizer step moves its version). No effect outside a scope.
void autocast_cache(const std::vector<Array>& arrays);
/// x cast to float32 when a scope is on and x is float16/bfloat16 (a float32 op's input), else x.
Array autocast_float32(const Array& x);

}  // namespace kiln
