// The fused elementwise steps of the recurrent layers (rnn.cpp), forward and backward, one kiln::fuse lambda each:
// internal to src/nn, and read by tests/cuda/test_rnn_kernels.cpp, which compiles their GPU kernels without a GPU.
#pragma once

#include <tuple>

#include "kiln/fuse.hpp"

namespace kiln::nn::rnn_steps {

// Forward: the step's pre-activations are x (this step's rows of the input projection, with b_ih and those parts
// of b_hh that add to the gates as they are) and hh (h W_hh^T), each split per gate. A GPU kernel of kiln::fuse
// takes at most 16 arrays (inputs and outputs): folding the biases into x keeps each step under it.
inline const auto lstm_step = fuse(
    [](auto xi, auto xf, auto xg, auto xo, auto hi, auto hf, auto hg, auto ho, auto c) {
      auto i = sigmoid(xi + hi), f = sigmoid(xf + hf), g = tanh(xg + hg), o = sigmoid(xo + ho);
      auto c2 = f * c + i * g;
      return std::tuple{i, f, g, o, c2, o * tanh(c2)};
    },
    "lstm_step");

// Backward of one LSTM step: gout is the output's gradient at this step, dh and dc the gradients flowing back
// from the next step. Returns the pre-activations' gradients (i, f, g, o) and c_prev's.
inline const auto lstm_step_backward = fuse(
    [](auto gout, auto dh, auto dc, auto i, auto f, auto g, auto o, auto c, auto c_prev) {
      auto tc = tanh(c);
      auto dht = gout + dh;
      auto dct = dc + dht * o * (1.0 - tc * tc);
      return std::tuple{dct * g * i * (1.0 - i), dct * c_prev * f * (1.0 - f), dct * i * (1.0 - g * g),
                        dht * tc * o * (1.0 - o), dct * f};
    },
    "lstm_step_backward");

// GRU: n = tanh(x_n + r * (h W_hn^T + b_hn)), h' = (1 - z) n + z h (PyTorch's formula); ghn = h W_hn^T + b_hn
// is kept for the backward.
inline const auto gru_step = fuse(
    [](auto xr, auto xz, auto xn, auto hr, auto hz, auto hn, auto bn, auto h) {
      auto r = sigmoid(xr + hr), z = sigmoid(xz + hz);
      auto ghn = hn + bn;
      auto n = tanh(xn + r * ghn);
      return std::tuple{r, z, n, ghn, (1.0 - z) * n + z * h};
    },
    "gru_step");

// Backward of one GRU step: the gradients of the input projection's gates (r, z, n), of h W_hh^T + b_hh's (r, z
// as the input side's; n times r) and h_prev's direct part (z * dh).
inline const auto gru_step_backward = fuse(
    [](auto gout, auto dh, auto r, auto z, auto n, auto ghn, auto h_prev) {
      auto dht = gout + dh;
      auto dn = dht * (1.0 - z) * (1.0 - n * n);
      auto dr = dn * ghn * r * (1.0 - r), dz = dht * (h_prev - n) * z * (1.0 - z);
      return std::tuple{dr, dz, dn, dr, dz, dn * r, dht * z};
    },
    "gru_step_backward");

// h's gradient before an LSTM's projection: the output's plus the next step's.
inline const auto sum_of = fuse([](auto a, auto b) { return a + b; }, "rnn_add");

inline const auto rnn_tanh_step = fuse([](auto x, auto hh) { return tanh(x + hh); }, "rnn_tanh_step");
inline const auto rnn_relu_step = fuse([](auto x, auto hh) { return maximum(x + hh, 0.0); }, "rnn_relu_step");
inline const auto rnn_tanh_step_backward =
    fuse([](auto gout, auto dh, auto h) { return (gout + dh) * (1.0 - h * h); }, "rnn_tanh_step_backward");
inline const auto rnn_relu_step_backward =
    fuse([](auto gout, auto dh, auto h) { return where(h > 0.0, gout + dh, 0.0); }, "rnn_relu_step_backward");

}  // namespace kiln::nn::rnn_steps
