// kiln/rnn.hpp's engine primitives on the CPU: no engine there (the layers run their reference), so they decline
// and say why; their operand checks name the operand and the expected shape. (tests/cuda/test_rnn_gpu.cpp checks
// cuDNN's results against PyTorch's equations.)
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kiln/kiln.hpp"
#include "test_util.hpp"

namespace kiln {
namespace {

TEST(RnnPrimitive, DeclinesOnTheCpuAndChecksItsOperands) {
  const RnnParams p{RnnMode::Lstm, 4, 1, false, true};
  const Array x = ones({3, 2, 5}, float32, cpu()), hx = zeros({1, 2, 4}, float32, cpu());
  std::vector<Array> w{ones({16, 5}, float32, cpu()), ones({16, 4}, float32, cpu()), ones({16}, float32, cpu()),
                       ones({16}, float32, cpu())};
  const int64_t declined = rnn_stats().declined;
  EXPECT_FALSE(rnn_forward(x, hx, hx, w, p, true).has_value());
  EXPECT_EQ(rnn_stats().declined, declined + 1);
  EXPECT_NE(rnn_stats().refusal.find("no recurrent-network engine on cpu"), std::string::npos) << rnn_stats().refusal;
  EXPECT_EQ(rnn_gates(RnnMode::Lstm), 4);
  EXPECT_EQ(rnn_gates(RnnMode::Gru), 3);
  EXPECT_EQ(rnn_gates(RnnMode::RnnTanh), 1);
  using kiln_test::expect_error;
  expect_error<ShapeError>([&] { (void)rnn_forward(x, hx, {}, w, p, false); }, {"rnn_forward", "cx must have shape (1, 2, 4)"});
  expect_error<ShapeError>([&] { (void)rnn_forward(x.reshape({6, 5}), hx, hx, w, p, false); }, {"x must be 3-d"});
  expect_error<ShapeError>([&] { (void)rnn_forward(x, hx, hx, {w[0], w[1]}, p, false); },
                           {"expected 4 weights", "bias_ih, bias_hh"});
  std::vector<Array> w64 = w;
  w64[2] = w64[2].astype(float64);
  expect_error<DTypeError>([&] { (void)rnn_forward(x, hx, hx, w64, p, false); }, {"layer 0 weight 2 is float64"});
  Array xg = x.copy().set_requires_grad();
  expect_error<DTypeError>([&] { (void)rnn_forward(xg, hx, hx, w, p, false); }, {"nn::RNN / nn::LSTM / nn::GRU"});
  expect_error<ShapeError>([&] { (void)rnn_backward(x, hx, hx, w, zeros({3, 2, 4}, float32, cpu()), zeros({3, 2, 3}, float32, cpu()), {}, {}, zeros({1}, uint8, cpu()), p); },
                           {"rnn_backward", "y and dy must have shape (3, 2, 4)"});
}

}  // namespace
}  // namespace kiln
