// Recurrent-network primitives, as ATen's _cudnn_rnn / _cudnn_rnn_backward: the engine under nn::RNN, nn::LSTM
// and nn::GRU on a GPU — cuDNN's RNN (every layer, direction and time step in one call, its persistent and
// standard kernels) for float32, float64 and float16. Like kiln/conv.hpp's primitives they record no gradient
// (the layers do): an input that requires grad while grad mode is on is refused. Where no engine runs a problem
// (the CPU, bfloat16, a build or GPU cuDNN declines) they return nullopt, and the layers run their reference made
// of kiln's ops.
//
// Weights come as PyTorch's nn.RNN/LSTM/GRU keep them, in their order: for each layer, for each direction,
// weight_ih (G*H, in), weight_hh (G*H, H) and, with bias, bias_ih (G*H,), bias_hh (G*H,); G is the number of gates
// (LSTM 4: i, f, g, o; GRU 3: r, z, n; RNN 1), in = input_size for layer 0 and H * directions after it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kiln/array.hpp"

namespace kiln {

enum class RnnMode { RnnTanh, RnnRelu, Lstm, Gru };

struct RnnParams {
  RnnMode mode = RnnMode::Lstm;
  int64_t hidden_size = 0;
  int64_t num_layers = 1;
  bool bidirectional = false;
  bool bias = true;
};

/// Gates per layer: 4 (LSTM), 3 (GRU), 1 (RNN).
int64_t rnn_gates(RnnMode mode);

/// Where the device's engine wants the weights (PyTorch's order, as above) in one flat weight space: `size`
/// elements, weight i's first element at `offsets[i]` (each weight contiguous there, as PyTorch's
/// flatten_parameters lays them out in cuDNN's weight space). Weights that are views of such a space at these
/// offsets reach the engine without a copy (rnn_forward's `weight_space`).
struct RnnWeightLayout {
  int64_t size = 0;
  std::vector<int64_t> offsets;
};

/// The weight layout of the engine that runs `params` over inputs of `input_size` features in `dtype` on
/// `device`; nullopt where no engine runs it, or its weight space holds a weight in pieces. Builds (and keeps) the
/// engine's plan; no synchronisation after the first call for a problem.
std::optional<RnnWeightLayout> rnn_weight_layout(int64_t input_size, const RnnParams& params, DType dtype,
                                                 Device device);

/// rnn_forward's results: y (T, N, H * directions), the final states hy (and, for LSTM, cy) of shape
/// (layers * directions, N, H), views of the one flat array `packed` (y, hy, then cy), and in training the engine's
/// reserve (what rnn_backward needs; opaque bytes).
struct RnnForwardOutput {
  Array y, hy, cy, reserve, packed;
};

/// The recurrence over x (T, N, input_size) from the initial states hx (and cx for LSTM), each
/// (layers * directions, N, H), with `weights` as above; all of one floating dtype and device, contiguous.
/// training keeps the reserve for rnn_backward. `weight_space` (optional): the flat array of rnn_weight_layout
/// whose views the weights are; the engine then reads it as it is (any weight that is not its view at its offset:
/// the weights are packed into a scratch space, as without). Throws ShapeError/DTypeError/DeviceError for
/// operands that do not fit (naming them); nullopt when no engine runs the problem (rnn_stats().refusal says why).
std::optional<RnnForwardOutput> rnn_forward(const Array& x, const Array& hx, const Array& cx,
                                            const std::vector<Array>& weights, const RnnParams& params, bool training,
                                            const Array& weight_space = Array());

struct RnnGrads {
  Array dx, dhx, dcx;
  std::vector<Array> dweights;  ///< one per weight, in the weights' order (views of one flat array where the
                                ///< engine's layout holds each weight whole)
};
/// The gradients of a training rnn_forward's inputs from those of its outputs (dy; dhy and dcy may be undefined:
/// zero), given its x, states, weights (and weight_space, as rnn_forward), y and reserve. nullopt when no engine
/// runs it.
std::optional<RnnGrads> rnn_backward(const Array& x, const Array& hx, const Array& cx,
                                     const std::vector<Array>& weights, const Array& y, const Array& dy,
                                     const Array& dhy, const Array& dcy, const Array& reserve, const RnnParams& params,
                                     const Array& weight_space = Array());

/// Counts of the engine's calls in this process, and why the last declined problem was declined.
struct RnnStats {
  int64_t forward = 0, backward = 0, declined = 0;
  int64_t packed = 0;  ///< calls that packed the weights (they were not views of the weight space passed)
  std::string refusal;
};
RnnStats rnn_stats();

}  // namespace kiln
