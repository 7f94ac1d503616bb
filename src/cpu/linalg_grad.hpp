// The gradients of the factorisations in linalg_factor.cpp (torch.linalg's formulas, derived in
// linalg_grad.cpp) and the recording of an op with several outputs as one node.
#pragma once

#include <functional>
#include <vector>

#include "kiln/array.hpp"

namespace kiln::linalg::detail_linalg {

/// Gradient of the input from the gradients of every output (zeros for an output the loss does not use),
/// the outputs and the input.
using Backward = Array (*)(const std::vector<Array>& grads, const std::vector<Array>& outputs, const Array& a);

/// forward()'s outputs; when grad mode is on and `a` requires grad, recorded as one node `name` whose result
/// packs them all (ravelled, concatenated), each output a view of it, so their gradients reach `backward`
/// together. Every output must have the same dtype.
std::vector<Array> with_grad(const char* name, const Array& a, const std::function<std::vector<Array>()>& forward,
                             Backward backward);

Array inv_backward(const std::vector<Array>& grads, const std::vector<Array>& outputs, const Array& a);
Array det_backward(const std::vector<Array>& grads, const std::vector<Array>& outputs, const Array& a);
Array slogdet_backward(const std::vector<Array>& grads, const std::vector<Array>& outputs, const Array& a);
Array cholesky_backward(const std::vector<Array>& grads, const std::vector<Array>& outputs, const Array& a);
Array cholesky_upper_backward(const std::vector<Array>& grads, const std::vector<Array>& outputs, const Array& a);
Array qr_backward(const std::vector<Array>& grads, const std::vector<Array>& outputs, const Array& a);
Array svd_backward(const std::vector<Array>& grads, const std::vector<Array>& outputs, const Array& a);
Array eigh_backward(const std::vector<Array>& grads, const std::vector<Array>& outputs, const Array& a);

}  // namespace kiln::linalg::detail_linalg
