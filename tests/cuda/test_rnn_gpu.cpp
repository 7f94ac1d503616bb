// cuDNN's recurrent networks (kiln/rnn.hpp's rnn_forward / rnn_backward on a GPU) against the equations PyTorch
// documents for nn.RNN / nn.LSTM / nn.GRU, written out here step by step with kiln's ops in float64 on the CPU
// (their gradients by autograd): outputs, final states, and the gradients of the input, the initial states and
// every weight, for 2 layers, both directions, with and without bias.
#include <gtest/gtest.h>

#ifdef KILN_WITH_CUDA

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "kiln/cuda.hpp"
#include "kiln/kiln.hpp"
#include "test_util.hpp"

namespace kiln {
namespace {

struct Reference {
  Array y, hy, cy;
};

/// PyTorch's recurrences, one time step at a time: x (T, N, in), hx/cx (L*D, N, H), weights in PyTorch's order.
Reference reference(RnnMode mode, const Array& x, const Array& hx, const Array& cx, const std::vector<Array>& w,
                    const RnnParams& p) {
  const int64_t dirs = p.bidirectional ? 2 : 1, h = p.hidden_size, steps = x.shape(0);
  const size_t per = p.bias ? 4 : 2;
  Array input = x;
  std::vector<Array> hys, cys;
  for (int64_t layer = 0; layer < p.num_layers; ++layer) {
    std::vector<Array> outs_by_dir;
    for (int64_t d = 0; d < dirs; ++d) {
      const int64_t idx = layer * dirs + d;
      const size_t base = per * static_cast<size_t>(idx);
      const Array& wih = w[base];
      const Array& whh = w[base + 1];
      Array hstate = hx.slice(0, idx, idx + 1).reshape({hx.shape(1), h});
      Array cstate = mode == RnnMode::Lstm ? cx.slice(0, idx, idx + 1).reshape({hx.shape(1), h}) : Array();
      std::vector<Array> outs(static_cast<size_t>(steps));
      for (int64_t s = 0; s < steps; ++s) {
        const int64_t t = d == 0 ? s : steps - 1 - s;
        const Array xt = input.slice(0, t, t + 1).reshape({input.shape(1), input.shape(2)});
        Array gi = matmul(xt, wih.T()), gh = matmul(hstate, whh.T());
        if (p.bias) gi = gi + w[base + 2], gh = gh + w[base + 3];
        auto gate = [&](const Array& a, int64_t k) { return a.slice(1, k * h, (k + 1) * h); };
        if (mode == RnnMode::Lstm) {
          const Array g = gi + gh;
          const Array i = sigmoid(gate(g, 0)), f = sigmoid(gate(g, 1)), c = tanh(gate(g, 2)), o = sigmoid(gate(g, 3));
          cstate = f * cstate + i * c;
          hstate = o * tanh(cstate);
        } else if (mode == RnnMode::Gru) {
          const Array r = sigmoid(gate(gi, 0) + gate(gh, 0)), z = sigmoid(gate(gi, 1) + gate(gh, 1));
          const Array n = tanh(gate(gi, 2) + r * gate(gh, 2));
          hstate = (1.0 - z) * n + z * hstate;
        } else {
          const Array a = gi + gh;
          hstate = mode == RnnMode::RnnTanh ? tanh(a) : maximum(a, 0.0);
        }
        outs[static_cast<size_t>(t)] = hstate;
      }
      outs_by_dir.push_back(stack(outs, 0));
      hys.push_back(hstate);
      if (mode == RnnMode::Lstm) cys.push_back(cstate);
    }
    input = dirs == 2 ? concatenate(outs_by_dir, 2) : outs_by_dir[0];
  }
  return {input, stack(hys, 0), mode == RnnMode::Lstm ? stack(cys, 0) : Array()};
}

TEST(RnnGpu, CudnnEqualsPyTorchsEquationsForwardAndBackward) {
  KILN_REQUIRE_GPU();
  const Device d = gpu(0);
  cudnn::set_allow_tf32(false);
  random::seed(11);
  const int64_t steps = 5, batch = 3, in = 6, h = 8;
  for (RnnMode mode : {RnnMode::Lstm, RnnMode::Gru, RnnMode::RnnTanh, RnnMode::RnnRelu}) {
    for (bool bidirectional : {false, true}) {
      for (bool bias : {true, false}) {
        const RnnParams p{mode, h, 2, bidirectional, bias};
        const std::string what = std::string(mode == RnnMode::Lstm ? "lstm" : mode == RnnMode::Gru ? "gru" : "rnn") +
                                 (bidirectional ? " bidirectional" : "") + (bias ? " bias" : "");
        const int64_t dirs = bidirectional ? 2 : 1, g = rnn_gates(mode);
        std::vector<Array> w64;
        for (int64_t layer = 0; layer < 2; ++layer)
          for (int64_t dir = 0; dir < dirs; ++dir) {
            const int64_t lin = layer == 0 ? in : h * dirs;
            w64.push_back(random::uniform({g * h, lin}, -0.4, 0.4, float64, cpu()));
            w64.push_back(random::uniform({g * h, h}, -0.4, 0.4, float64, cpu()));
            if (bias) {
              w64.push_back(random::uniform({g * h}, -0.4, 0.4, float64, cpu()));
              w64.push_back(random::uniform({g * h}, -0.4, 0.4, float64, cpu()));
            }
          }
        const Array x64 = random::normal({steps, batch, in}, float64, cpu());
        const Array h64 = random::normal({2 * dirs, batch, h}, float64, cpu()) * 0.5;
        const Array c64 = mode == RnnMode::Lstm ? random::normal({2 * dirs, batch, h}, float64, cpu()) * 0.5 : Array();
        const Array dy64 = random::normal({steps, batch, h * dirs}, float64, cpu());
        const Array dhy64 = random::normal({2 * dirs, batch, h}, float64, cpu());
        const Array dcy64 = mode == RnnMode::Lstm ? random::normal({2 * dirs, batch, h}, float64, cpu()) : Array();
        // The GPU's float32 run.
        auto to32 = [&](const Array& a) { return a.defined() ? a.astype(float32).to(d) : Array(); };
        std::vector<Array> w32;
        for (const Array& a : w64) w32.push_back(to32(a));
        const auto out = rnn_forward(to32(x64), to32(h64), to32(c64), w32, p, true);
        ASSERT_TRUE(out.has_value()) << what << ": " << rnn_stats().refusal;
        const auto grads = rnn_backward(to32(x64), to32(h64), to32(c64), w32, out->y, to32(dy64), to32(dhy64),
                                        to32(dcy64), out->reserve, p);
        ASSERT_TRUE(grads.has_value()) << what << ": " << rnn_stats().refusal;
        // The reference, with autograd's gradients.
        Array xr = x64.copy().set_requires_grad(), hr = h64.copy().set_requires_grad();
        Array cr = c64.defined() ? c64.copy().set_requires_grad() : Array();
        std::vector<Array> wr;
        for (const Array& a : w64) wr.push_back(a.copy().set_requires_grad());
        const Reference ref = reference(mode, xr, hr, cr, wr, p);
        Array loss = sum(ref.y * dy64) + sum(ref.hy * dhy64);
        if (mode == RnnMode::Lstm) loss = loss + sum(ref.cy * dcy64);
        loss.backward();
        const double tol = 2e-5;
        kiln_test::expect_close_scaled(out->y, ref.y.detach(), tol, "y " + what, 1e-3);
        kiln_test::expect_close_scaled(out->hy, ref.hy.detach(), tol, "hy " + what, 1e-3);
        if (mode == RnnMode::Lstm) kiln_test::expect_close_scaled(out->cy, ref.cy.detach(), tol, "cy " + what, 1e-3);
        kiln_test::expect_close_scaled(grads->dx, xr.grad(), tol, "dx " + what, 1e-3);
        kiln_test::expect_close_scaled(grads->dhx, hr.grad(), tol, "dhx " + what, 1e-3);
        if (mode == RnnMode::Lstm) kiln_test::expect_close_scaled(grads->dcx, cr.grad(), tol, "dcx " + what, 1e-3);
        ASSERT_EQ(grads->dweights.size(), wr.size());
        for (size_t i = 0; i < wr.size(); ++i)
          kiln_test::expect_close_scaled(grads->dweights[i], wr[i].grad(), tol, "weight " + std::to_string(i) + " " + what, 1e-3);
      }
    }
  }
  cudnn::set_allow_tf32(true);
}

TEST(RnnGpu, ThePrimitivesCheckTheirOperandsAndDeclineBfloat16) {
  KILN_REQUIRE_GPU();
  const Device d = gpu(0);
  const RnnParams p{RnnMode::Gru, 4, 1, false, true};
  const Array x = ones({3, 2, 5}, float32, d), hx = zeros({1, 2, 4}, float32, d);
  std::vector<Array> w{ones({12, 5}, float32, d), ones({12, 4}, float32, d), ones({12}, float32, d), ones({12}, float32, d)};
  using kiln_test::expect_error;
  expect_error<ShapeError>([&] { (void)rnn_forward(x, zeros({2, 2, 4}, float32, d), {}, w, p, false); },
                           {"rnn_forward", "hx must have shape (1, 2, 4)"});
  std::vector<Array> bad = w;
  bad[1] = ones({12, 5}, float32, d);
  expect_error<ShapeError>([&] { (void)rnn_forward(x, hx, {}, bad, p, false); },
                           {"layer 0 weight 1 must have shape (12, 4)"});
  std::vector<Array> bf;
  for (const Array& a : w) bf.push_back(a.astype(bfloat16));
  EXPECT_FALSE(rnn_forward(x.astype(bfloat16), hx.astype(bfloat16), {}, bf, p, false).has_value());
  EXPECT_NE(rnn_stats().refusal.find("bfloat16"), std::string::npos) << rnn_stats().refusal;
}

/// Output and every parameter's gradient of `m` (on a GPU) against the same weights in float64 on the CPU.
void expect_matches_cpu_float64(nn::LSTM& m, const Array& x, const std::string& what) {
  nn::LSTM ref(m.input_size(), m.hidden_size(), {.num_layers = m.options().num_layers, .dtype = float64});
  ref.load_state_dict(m.state_dict());
  m.zero_grad();
  const Array y = m(x);
  sum(y * y).backward();
  const Array y_ref = ref(x.to(cpu()).astype(float64));
  sum(y_ref * y_ref).backward();
  auto near = [&](const Array& got, const Array& want, const std::string& name) {
    const std::vector<double> g = got.to(cpu()).astype(float64).to_vector<double>();
    const std::vector<double> w = want.to_vector<double>();
    ASSERT_EQ(g.size(), w.size()) << what << " " << name;
    for (size_t i = 0; i < g.size(); ++i)
      ASSERT_NEAR(g[i], w[i], 2e-4 * (1 + std::abs(w[i]))) << what << " " << name << " " << i;
  };
  near(y, y_ref, "output");
  for (const auto& [name, p] : m.named_parameters()) near(p.grad(), ref.parameter(name).grad(), name + " gradient");
}

TEST(RnnGpu, LstmParametersAreViewsOfCudnnsWeightSpaceAndNoCallPacksThem) {
  KILN_REQUIRE_GPU();
  const bool tf32 = kiln::cudnn::allow_tf32();
  kiln::cudnn::set_allow_tf32(false);
  const Device d = gpu(0);
  random::seed(21);
  nn::LSTM lstm(5, 8, {.num_layers = 2});
  lstm.to(d);  // laid out again in cuDNN's weight space on the GPU
  const Array& space = lstm.flat_weights();
  ASSERT_TRUE(space.defined());
  EXPECT_EQ(space.device(), d);
  const auto layout = rnn_weight_layout(5, RnnParams{RnnMode::Lstm, 8, 2, false, true}, float32, d);
  ASSERT_TRUE(layout.has_value());
  const auto* base = static_cast<const char*>(space.data_ptr());
  size_t i = 0;
  for (const auto& [name, p] : lstm.named_parameters()) {
    EXPECT_TRUE(p.shares_storage(space)) << name;
    EXPECT_EQ(p.data_ptr(), base + layout->offsets[i++] * 4) << name;
  }
  const Array x = random::normal({6, 3, 5}, float32, d);
  const int64_t packed = rnn_stats().packed, forward = rnn_stats().forward, backward = rnn_stats().backward;
  expect_matches_cpu_float64(lstm, x, "flat");
  EXPECT_EQ(rnn_stats().forward, forward + 1);
  EXPECT_EQ(rnn_stats().backward, backward + 1);
  EXPECT_EQ(rnn_stats().packed, packed);  // neither call copied the weights
  // (The backward's weight gradients are views of one gradient space, but a leaf's grad() is its own array: the
  // engine owns what it accumulates into.)
  // An optimizer step writes through the views; the next calls read the stepped values, still without packing.
  optim::SGD sgd(lstm.parameters(), {.lr = 0.05});
  sgd.step();
  expect_matches_cpu_float64(lstm, x, "after a step");
  EXPECT_EQ(rnn_stats().packed, packed);
  // A parameter the user replaced is packed with the others on each call, then flatten_parameters lays it out.
  lstm.parameter("weight_hh_l1") = random::normal({32, 8}, float32, d).set_requires_grad();
  expect_matches_cpu_float64(lstm, x, "replaced");
  EXPECT_EQ(rnn_stats().packed, packed + 2);
  lstm.flatten_parameters();
  expect_matches_cpu_float64(lstm, x, "flattened again");
  EXPECT_EQ(rnn_stats().packed, packed + 2);
  kiln::cudnn::set_allow_tf32(tf32);
}

}  // namespace
}  // namespace kiln

#endif  // KILN_WITH_CUDA
