// Recurrent layers and cells (RNN, LSTM, GRU): outputs, final states and the gradients of the input, the initial
// states and every parameter against tests/golden/rnn_golden.py (NumPy float64, written from PyTorch's equations;
// gradients by central differences) on every backend; PyTorch's state-dict names and shapes; dropout between
// layers in training only; a float64 gradcheck; errors naming the layer, the operand and the fix.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "harness/op_harness.hpp"
#include "kiln/kiln.hpp"
#include "test_util.hpp"

namespace kiln {
namespace {

std::string golden_path(const std::string& c, const std::string& name) {
  return harness::golden_dir() + "/rnn/" + c + "_" + name + ".npy";
}
bool has_golden(const std::string& c, const std::string& name) { return std::filesystem::exists(golden_path(c, name)); }
Array golden(const std::string& c, const std::string& name, Device d) { return load(golden_path(c, name), d); }

void expect_close(const Array& got, const Array& want, double tol, const std::string& what) {
  ASSERT_TRUE(got.defined()) << what << ": undefined";
  ASSERT_EQ(got.shape(), want.shape()) << what;
  const std::vector<double> g = got.to(cpu()).astype(float64).to_vector<double>();
  const std::vector<double> w = want.to(cpu()).astype(float64).to_vector<double>();
  for (size_t i = 0; i < g.size(); ++i) ASSERT_NEAR(g[i], w[i], tol * (1 + std::abs(w[i]))) << what << " element " << i;
}

/// Loads the case's parameters into `m`, runs `run(x, h0, c0)` -> (y, h_n, c_n), then checks the outputs and,
/// after backward of sum(y gy) + sum(h_n gh) + sum(c_n gc), the gradients.
template <class Run>
void check_case(nn::Module& m, const std::string& c, Device d, Run run) {
  const std::string what = c + " on " + d.str();
  nn::StateDict state;
  for (const auto& [name, p] : m.named_parameters()) state.insert(name, golden(c, "p_" + name, d));
  m.load_state_dict(state);
  Array x = golden(c, "x", d).set_requires_grad();
  Array h0 = has_golden(c, "h0") ? golden(c, "h0", d).set_requires_grad() : Array();
  Array c0 = has_golden(c, "c0") ? golden(c, "c0", d).set_requires_grad() : Array();
  const auto [y, hn, cn] = run(x, h0, c0);
  expect_close(y, golden(c, "y", d), 1e-12, what + " output");
  expect_close(hn, golden(c, "hn", d), 1e-12, what + " h_n");
  if (has_golden(c, "cn")) expect_close(cn, golden(c, "cn", d), 1e-12, what + " c_n");
  Array loss = sum(y * golden(c, "gy", d)) + sum(hn * golden(c, "gh", d));
  if (cn.defined()) loss = loss + sum(cn * golden(c, "gc", d));
  loss.backward();
  // The golden gradients are central differences (step 1e-6): good to ~1e-9.
  expect_close(x.grad(), golden(c, "d_x", d), 1e-7, what + " d input");
  if (h0.defined()) expect_close(h0.grad(), golden(c, "d_h0", d), 1e-7, what + " d h0");
  if (c0.defined()) expect_close(c0.grad(), golden(c, "d_c0", d), 1e-7, what + " d c0");
  for (const auto& [name, p] : m.named_parameters())
    expect_close(p.grad(), golden(c, "d_" + name, d), 1e-7, what + " d " + name);
}

nn::RNNOptions opts(Device d, int64_t layers = 1, bool bidirectional = false, bool batch_first = false) {
  return {
      .num_layers = layers, .batch_first = batch_first, .bidirectional = bidirectional, .dtype = float64, .device = d};
}

TEST(RNN, LayersMatchTheNumPyReferenceWithItsGradientsOnEveryBackend) {
  for (Device d : harness::backends()) {
    nn::LSTM lstm(2, 3, opts(d, 2, true));
    check_case(lstm, "lstm_bi2", d,
               [&](const Array& x, const Array& h0, const Array& c0) { return lstm.forward(x, h0, c0); });

    nn::GRU gru(2, 3, opts(d, 2, true, true));
    check_case(gru, "gru_bi2_bf", d, [&](const Array& x, const Array& h0, const Array&) {
      auto [y, h] = gru.forward(x, h0);
      return std::tuple{y, h, Array()};
    });

    nn::RNN rnn(2, 3, opts(d, 2, true));
    check_case(rnn, "rnn_tanh_bi2", d, [&](const Array& x, const Array& h0, const Array&) {
      auto [y, h] = nn::call(rnn, x, h0);
      return std::tuple{y, h, Array()};
    });

    auto relu_options = opts(d);
    relu_options.nonlinearity = "relu";
    relu_options.bias = false;
    nn::RNN relu(3, 4, relu_options);
    check_case(relu, "rnn_relu_nobias", d, [&](const Array& x, const Array& h0, const Array&) {
      auto [y, h] = relu.forward(x, h0);
      return std::tuple{y, h, Array()};
    });

    auto proj_options = opts(d, 2, true);
    proj_options.proj_size = 3;
    nn::LSTM projected(2, 4, proj_options);
    check_case(projected, "lstm_proj_bi2", d,
               [&](const Array& x, const Array& h0, const Array& c0) { return projected.forward(x, h0, c0); });

    nn::LSTM unbatched(3, 2, opts(d, 2));
    check_case(unbatched, "lstm_unbatched", d,
               [&](const Array& x, const Array& h0, const Array& c0) { return unbatched.forward(x, h0, c0); });

    auto gru_options = opts(d);
    gru_options.bias = false;
    nn::GRU plain(2, 3, gru_options);
    check_case(plain, "gru_nobias_nostate", d, [&](const Array& x, const Array&, const Array&) {
      auto [y, h] = plain.forward(x, Array());
      return std::tuple{y, h, Array()};
    });
  }
}

TEST(RNN, Float32MatchesTheReferenceOnEveryBackend) {
  // cuDNN's float32 RNN may use TF32 tensor cores (kiln::cudnn::allow_tf32, on by default as PyTorch's): off
  // here, so that the GPU is held to float32's accuracy.
  struct Tf32Off {
    bool was = cudnn::allow_tf32();
    Tf32Off() { cudnn::set_allow_tf32(false); }
    ~Tf32Off() { cudnn::set_allow_tf32(was); }
  } tf32_off;
  for (Device d : harness::backends()) {
    nn::LSTM lstm(2, 3, {.num_layers = 2, .bidirectional = true, .device = d});
    nn::StateDict state;
    for (const auto& [name, p] : lstm.named_parameters()) state.insert(name, golden("lstm_bi2", "p_" + name, d));
    lstm.load_state_dict(state);  // converted to float32
    auto f32 = [&](const char* name) { return golden("lstm_bi2", name, d).astype(float32); };
    const auto [y, hn, cn] = lstm.forward(f32("x"), f32("h0"), f32("c0"));
    EXPECT_EQ(y.dtype(), float32);
    expect_close(y, golden("lstm_bi2", "y", d), 1e-5, "float32 output on " + d.str());
    expect_close(cn, golden("lstm_bi2", "cn", d), 1e-5, "float32 c_n on " + d.str());
  }
}

TEST(RNN, WithoutGradientsTheOutputsAreTheSame) {
  // No-grad runs keep one step's gates instead of every step's: the same numbers either way.
  random::seed(6);
  const Array x = random::normal({5, 2, 3}, float64, cpu());
  const nn::RNNOptions o{.num_layers = 2, .bidirectional = true, .dtype = float64};
  nn::LSTM lstm(3, 4, o);
  nn::GRU gru(3, 4, o);
  const auto [y, h, c] = lstm.forward(x, Array(), Array());
  const Array g = gru(x);
  NoGradGuard no_grad;
  const auto [y2, h2, c2] = lstm.forward(x, Array(), Array());
  expect_close(y2, y, 0.0, "LSTM output");
  expect_close(c2, c, 0.0, "LSTM c_n");
  expect_close(gru(x), g, 0.0, "GRU output");
}

TEST(RNN, AutocastRunsTheRecurrenceInFloat32) {
  random::seed(4);
  nn::GRU gru(4, 5);
  const Array x = random::normal({3, 2, 4}).astype(bfloat16);
  Array want = gru(x.astype(float32)), got;
  {
    AutocastGuard amp(bfloat16);
    got = gru(x);
  }
  EXPECT_EQ(got.dtype(), float32);
  expect_close(got, want, 0.0, "autocast");
  kiln_test::expect_error<DTypeError>([&] { (void)gru(x); }, {"GRU", "bfloat16", "float32"});
}

TEST(RNN, CellsMatchTheNumPyReferenceWithItsGradientsOnEveryBackend) {
  for (Device d : harness::backends()) {
    nn::LSTMCell lstm(3, 4, true, float64, d);
    check_case(lstm, "lstm_cell", d, [&](const Array& x, const Array& h, const Array& c) {
      auto [h1, c1] = lstm.forward(x, h, c);
      return std::tuple{h1, h1, c1};
    });
    nn::GRUCell gru(3, 4, true, float64, d);
    check_case(gru, "gru_cell", d, [&](const Array& x, const Array& h, const Array&) {
      const Array h1 = gru.forward(x, h);
      return std::tuple{h1, h1, Array()};
    });
    nn::RNNCell rnn(3, 4, true, "tanh", float64, d);
    check_case(rnn, "rnn_cell", d, [&](const Array& x, const Array& h, const Array&) {
      const Array h1 = nn::call(rnn, x, h);
      return std::tuple{h1, h1, Array()};
    });
    nn::GRUCell unbatched(3, 2, true, float64, d);
    check_case(unbatched, "gru_cell_unbatched", d, [&](const Array& x, const Array& h, const Array&) {
      const Array h1 = unbatched.forward(x, h);
      return std::tuple{h1, h1, Array()};
    });
  }
}

std::vector<std::pair<std::string, Shape>> names_and_shapes(const nn::Module& m) {
  std::vector<std::pair<std::string, Shape>> r;
  for (const auto& [name, a] : m.state_dict()) r.emplace_back(name, a.shape());
  return r;
}

TEST(RNN, StateDictHasPyTorchsNamesAndShapes) {
  // [(k, tuple(v.shape)) for k, v in torch.nn.LSTM(10, 20, num_layers=2, bidirectional=True).state_dict().items()]
  using V = std::vector<std::pair<std::string, Shape>>;
  EXPECT_EQ(names_and_shapes(nn::LSTM(10, 20, {.num_layers = 2, .bidirectional = true})),
            (V{{"weight_ih_l0", {80, 10}},
               {"weight_hh_l0", {80, 20}},
               {"bias_ih_l0", {80}},
               {"bias_hh_l0", {80}},
               {"weight_ih_l0_reverse", {80, 10}},
               {"weight_hh_l0_reverse", {80, 20}},
               {"bias_ih_l0_reverse", {80}},
               {"bias_hh_l0_reverse", {80}},
               {"weight_ih_l1", {80, 40}},
               {"weight_hh_l1", {80, 20}},
               {"bias_ih_l1", {80}},
               {"bias_hh_l1", {80}},
               {"weight_ih_l1_reverse", {80, 40}},
               {"weight_hh_l1_reverse", {80, 20}},
               {"bias_ih_l1_reverse", {80}},
               {"bias_hh_l1_reverse", {80}}}));
  // torch.nn.LSTM(6, 5, num_layers=2, proj_size=2)
  EXPECT_EQ(names_and_shapes(nn::LSTM(6, 5, {.num_layers = 2, .proj_size = 2})), (V{{"weight_ih_l0", {20, 6}},
                                                                                    {"weight_hh_l0", {20, 2}},
                                                                                    {"bias_ih_l0", {20}},
                                                                                    {"bias_hh_l0", {20}},
                                                                                    {"weight_hr_l0", {2, 5}},
                                                                                    {"weight_ih_l1", {20, 2}},
                                                                                    {"weight_hh_l1", {20, 2}},
                                                                                    {"bias_ih_l1", {20}},
                                                                                    {"bias_hh_l1", {20}},
                                                                                    {"weight_hr_l1", {2, 5}}}));
  // torch.nn.GRU(5, 7, num_layers=2, bias=False)
  EXPECT_EQ(
      names_and_shapes(nn::GRU(5, 7, {.num_layers = 2, .bias = false})),
      (V{{"weight_ih_l0", {21, 5}}, {"weight_hh_l0", {21, 7}}, {"weight_ih_l1", {21, 7}}, {"weight_hh_l1", {21, 7}}}));
  // torch.nn.RNN(4, 6)
  EXPECT_EQ(names_and_shapes(nn::RNN(4, 6)),
            (V{{"weight_ih_l0", {6, 4}}, {"weight_hh_l0", {6, 6}}, {"bias_ih_l0", {6}}, {"bias_hh_l0", {6}}}));
  // torch.nn.LSTMCell(3, 5), torch.nn.GRUCell(3, 5, bias=False), torch.nn.RNNCell(3, 5)
  EXPECT_EQ(names_and_shapes(nn::LSTMCell(3, 5)),
            (V{{"weight_ih", {20, 3}}, {"weight_hh", {20, 5}}, {"bias_ih", {20}}, {"bias_hh", {20}}}));
  EXPECT_EQ(names_and_shapes(nn::GRUCell(3, 5, false)), (V{{"weight_ih", {15, 3}}, {"weight_hh", {15, 5}}}));
  EXPECT_EQ(names_and_shapes(nn::RNNCell(3, 5)),
            (V{{"weight_ih", {5, 3}}, {"weight_hh", {5, 5}}, {"bias_ih", {5}}, {"bias_hh", {5}}}));
}

TEST(RNN, ParametersStartUniformInPlusMinusOneOverSqrtHidden) {
  random::seed(3);
  nn::GRU gru(8, 16, {.num_layers = 2});
  const double k = 0.25;  // 1 / sqrt(16)
  for (const auto& [name, p] : gru.named_parameters()) {
    const std::vector<double> v = p.astype(float64).to_vector<double>();
    double lo = 1, hi = -1, mean = 0;
    for (double e : v) lo = std::min(lo, e), hi = std::max(hi, e), mean += e / static_cast<double>(v.size());
    EXPECT_GE(lo, -k) << name;
    EXPECT_LE(hi, k) << name;
    EXPECT_GT(hi - lo, k) << name;  // spread over the range, not a constant
    EXPECT_NEAR(mean, 0.0, 0.1) << name;
  }
}

TEST(RNN, DropoutActsBetweenLayersInTrainingOnly) {
  random::seed(5);
  const Array x = random::normal({6, 3, 4}, float64, cpu());
  nn::LSTM two(4, 5, {.num_layers = 2, .dropout = 1.0, .dtype = float64});
  // p = 1 drops every output of layer 0: in training layer 1 reads zeros (as a one-layer LSTM with layer 1's
  // weights given a zero input); in eval mode nothing is dropped.
  nn::LSTM top(5, 5, {.dtype = float64});
  nn::StateDict top_state;
  for (const char* n : {"weight_ih", "weight_hh", "bias_ih", "bias_hh"})
    top_state.insert(std::string(n) + "_l0", two.parameter(std::string(n) + "_l1"));
  top.load_state_dict(top_state);
  const Array trained = two(x);
  expect_close(trained, top(zeros({6, 3, 5}, float64, cpu())), 1e-12, "training: layer 1 reads zeros");
  two.eval();
  nn::LSTM no_dropout(4, 5, {.num_layers = 2, .dtype = float64});
  no_dropout.load_state_dict(two.state_dict());
  expect_close(two(x), no_dropout(x), 0.0, "eval: no dropout");
  // The last layer's output is never dropped.
  nn::GRU one(4, 5, {.dropout = 1.0, .dtype = float64});
  const Array in_training = one(x);
  one.eval();
  expect_close(in_training, one(x), 0.0, "one layer");
}

TEST(RNN, GradcheckThroughTwoBidirectionalLayers) {
  random::seed(9);
  for (const char* kind : {"lstm", "lstm_proj", "gru", "rnn"}) {
    std::shared_ptr<nn::RNNBase> m;
    const nn::RNNOptions o{.num_layers = 2, .bidirectional = true, .dtype = float64};
    if (std::string(kind) == "lstm") m = std::make_shared<nn::LSTM>(2, 2, o);
    if (std::string(kind) == "lstm_proj") {
      auto p = o;
      p.proj_size = 1;
      m = std::make_shared<nn::LSTM>(2, 2, p);
    }
    if (std::string(kind) == "gru") m = std::make_shared<nn::GRU>(2, 2, o);
    if (std::string(kind) == "rnn") m = std::make_shared<nn::RNN>(2, 2, o);
    const Array x = random::normal({3, 2, 2}, float64, cpu());
    const GradcheckResult r = gradcheck([&](const std::vector<Array>& in) { return (*m)(in[0]); }, {x});
    EXPECT_TRUE(r.passed) << kind << ": " << r.report;
  }
}

TEST(RNN, ASequentialStepReturnsTheOutputAndNamesPrintLikePyTorch) {
  auto seq = std::make_shared<nn::Sequential>();
  seq->push_back(std::make_shared<nn::GRU>(3, 4, nn::RNNOptions{.batch_first = true, .bidirectional = true}));
  seq->push_back(std::make_shared<nn::Linear>(8, 2));
  EXPECT_EQ((*seq)(random::normal({5, 7, 3})).shape(), (Shape{5, 7, 2}));
  EXPECT_EQ(nn::LSTM(10, 20, {.num_layers = 2, .dropout = 0.5}).name(), "LSTM(10, 20, num_layers=2, dropout=0.5)");
  EXPECT_EQ(nn::GRUCell(3, 4).name(), "GRUCell(3, 4)");
}

TEST(RNN, ErrorsNameTheLayerTheOperandAndTheFix) {
  using kiln_test::expect_error;
  nn::LSTM lstm(4, 5, {.num_layers = 2});
  expect_error<ShapeError>([&] { (void)lstm(zeros({6, 3, 7})); }, {"LSTM", "input", "(6, 3, 7)", "input_size is 4"});
  expect_error<ShapeError>([&] { (void)lstm(zeros({6})); }, {"LSTM", "input", "(T, N, 4)"});
  expect_error<ShapeError>(
      [&] {
        (void)lstm.forward(zeros({6, 3, 4}), zeros({1, 3, 5}), Array());
      },
      {"LSTM", "h0", "(1, 3, 5)", "(2, 3, 5)"});
  expect_error<ShapeError>(
      [&] {
        (void)lstm.forward(zeros({6, 3, 4}), Array(), zeros({2, 3, 4}));
      },
      {"LSTM", "c0", "(2, 3, 5)"});
  expect_error<DTypeError>([&] { (void)lstm(zeros({6, 3, 4}, float64)); }, {"LSTM", "input", "float64", "astype"});
  expect_error<ValueError>([] { nn::LSTM(4, 5, {.proj_size = 5}); }, {"LSTM", "proj_size", "hidden_size 5"});
  expect_error<ValueError>([] { nn::GRU(4, 5, {.proj_size = 3}); }, {"GRU", "proj_size is an LSTM option"});
  nn::LSTM projected(4, 5, {.proj_size = 3});
  expect_error<ShapeError>(
      [&] {
        (void)projected.forward(zeros({6, 3, 4}), zeros({1, 3, 5}), Array());
      },
      {"LSTM", "h0", "(1, 3, 3)", "proj_size"});
  expect_error<ValueError>([] { nn::RNN(4, 5, {.nonlinearity = "sigmoid"}); }, {"RNN", "nonlinearity", "tanh"});
  expect_error<ValueError>([] { nn::GRU(4, 0); }, {"GRU", "hidden_size"});
  expect_error<ValueError>([] { nn::GRU(4, 5, {.dropout = 1.5}); }, {"GRU", "dropout"});
  nn::GRUCell cell(4, 5);
  expect_error<ShapeError>([&] { (void)cell.forward(zeros({3, 4}), zeros({2, 5})); }, {"GRUCell", "h", "(3, 5)"});
  expect_error<ShapeError>([&] { (void)cell(zeros({3, 5})); }, {"GRUCell", "input", "(N, 4)"});
}

}  // namespace
}  // namespace kiln
