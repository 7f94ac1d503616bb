// nn modules, initialisation, losses and optimizers on every backend, against hand-computed float64 values,
// gradcheck, and two small trainings (d2l's linear regression, an MLP on separable blobs).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <numeric>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "harness/op_harness.hpp"
#include "kiln/kiln.hpp"
#include "kiln/train.hpp"
#include "test_util.hpp"

namespace kiln {
namespace {

std::vector<Device> devices() { return harness::backends(); }

std::vector<double> host(const Array& a) { return a.to_vector<double>(); }

void expect_near_all(const std::vector<double>& got, const std::vector<double>& want, double tol,
                     const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], tol * (1 + std::abs(want[i]))) << what << " element " << i;
}

// ---------------------------------------------------------------- modules
TEST(NnModule, LinearStartsAsPyTorchAndIsBitIdenticalOnEveryDevice) {
  random::seed(7);
  nn::Linear reference(20, 5);
  for (Device d : devices()) {
    random::seed(7);
    nn::Linear layer(20, 5, true, float32, d);
    EXPECT_EQ(layer.weight().device(), d);
    EXPECT_EQ(layer.weight().to_vector<float>(), reference.weight().to_vector<float>()) << d.str();
    EXPECT_EQ(layer.bias().to_vector<float>(), reference.bias().to_vector<float>()) << d.str();
    const double bound = 1 / std::sqrt(20.0);
    for (double w : host(layer.weight())) EXPECT_LE(std::abs(w), bound);
    for (double b : host(layer.bias())) EXPECT_LE(std::abs(b), bound);
    EXPECT_TRUE(layer.weight().requires_grad());
    EXPECT_TRUE(layer.weight().is_leaf());
    EXPECT_EQ(layer.name(), "Linear(in_features=20, out_features=5, bias=true)");
  }
}

TEST(NnModule, LinearForwardAndBackwardMatchHandValues) {
  for (Device d : devices()) {
    nn::Linear layer(3, 2, true, float64, d);
    {
      NoGradGuard no_grad;
      layer.weight().assign(from_data(std::vector<double>{1, 2, 3, -1, 0, 2}, Shape{2, 3}, d));
      layer.bias().assign(from_data(std::vector<double>{0.5, -0.5}, Shape{2}, d));
    }
    const Array x = from_data(std::vector<double>{1, 0, -1, 2, 1, 0}, Shape{2, 3}, d);
    Array y = layer(x);
    // y = x W^T + b: row 0: (1 - 3 + 0.5, -1 - 2 - 0.5), row 1: (2 + 2 + 0.5, -2 + 0 - 0.5)
    EXPECT_EQ(host(y), (std::vector<double>{-1.5, -3.5, 4.5, -2.5}));
    sum(y * from_data(std::vector<double>{1, 2, 3, 4}, Shape{2, 2}, d)).backward();
    // dW = g^T x with g = [[1, 2], [3, 4]]: [[1+6, 0+3, -1+0], [2+8, 0+4, -2+0]]; db = column sums of g.
    EXPECT_EQ(host(layer.weight().grad()), (std::vector<double>{7, 3, -1, 10, 4, -2}));
    EXPECT_EQ(host(layer.bias().grad()), (std::vector<double>{4, 6}));
    EXPECT_THROW(layer(ones({2, 4}, float64, d)), ShapeError);
    EXPECT_EQ(y.grad_fn_name(), "AddmmBackward");  // PyTorch: AddmmBackward0
    // Gradients of every input (x, weight, bias), for 1-, 2- and 3-d inputs, with and without a bias.
    for (bool bias : {true, false}) {
      nn::Linear l(3, 2, bias, float64, d);
      for (const Shape& shape : {Shape{3}, Shape{4, 3}, Shape{2, 2, 3}}) {
        const Array xin = random::normal(shape, 0.0, 1.0, float64, d);
        std::vector<Array> inputs = {xin, l.weight().detach()};
        if (bias) inputs.push_back(l.bias().detach());
        const GradcheckResult r = gradcheck(
            [&](const std::vector<Array>& in) {
              nn::Linear f(3, 2, bias, float64, d);
              f.weight() = in[1];
              if (bias) f.bias() = in[2];
              return f(in[0]);
            },
            inputs);
        EXPECT_TRUE(r.passed) << d.str() << " bias " << bias << " shape " << shape_str(shape) << ": " << r.report;
      }
    }
  }
}

std::shared_ptr<nn::Sequential> mlp(Device d, DType t = float32) {
  auto model = std::make_shared<nn::Sequential>();
  model->push_back(std::make_shared<nn::Linear>(4, 8, true, t, d));
  model->push_back(std::make_shared<nn::ReLU>());
  model->push_back(std::make_shared<nn::Dropout>(0.25));
  model->push_back(std::make_shared<nn::Linear>(8, 3, true, t, d));
  return model;
}

TEST(NnModule, NamesStateDictsAndTheirErrors) {
  for (Device d : devices()) {
    random::seed(1);
    auto model = mlp(d);
    std::vector<std::string> names;
    for (auto& [name, p] : model->named_parameters()) names.push_back(name);
    EXPECT_EQ(names, (std::vector<std::string>{"0.weight", "0.bias", "3.weight", "3.bias"}));
    EXPECT_EQ(model->parameters().size(), 4u);
    model->eval();
    const Array x = random::normal({5, 4}, 0.0, 1.0, float32, d);
    const Array y = (*model)(x);
    random::seed(2);
    auto other = mlp(d);
    other->eval();
    EXPECT_NE((*other)(x).to_vector<float>(), y.to_vector<float>());
    other->load_state_dict(model->state_dict());
    EXPECT_EQ((*other)(x).to_vector<float>(), y.to_vector<float>());

    nn::StateDict partial;
    partial.insert("0.weight", model->state_dict().at("0.weight"));
    partial.insert("extra", zeros({1}));
    try {
      other->load_state_dict(partial);
      FAIL() << "expected ValueError";
    } catch (const ValueError& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("\"0.bias\""), std::string::npos) << m;
      EXPECT_NE(m.find("\"extra\""), std::string::npos) << m;
    }
    EXPECT_NO_THROW(other->load_state_dict(partial, false));
    nn::StateDict bad;
    bad.insert("0.weight", zeros({8, 5}));
    EXPECT_THROW(other->load_state_dict(bad, false), ShapeError);
  }
}

TEST(NnModule, ToDtypeAndDeviceKeepLeavesThatRequireGrad) {
  for (Device d : devices()) {
    random::seed(3);
    auto model = mlp(cpu());
    const std::vector<float> w0 = model->parameters()[0].to_vector<float>();
    model->to(d).to(float64);
    for (const Array& p : model->parameters()) {
      EXPECT_EQ(p.device(), d);
      EXPECT_EQ(p.dtype(), float64);
      EXPECT_TRUE(p.requires_grad());
      EXPECT_TRUE(p.is_leaf());
    }
    const std::vector<double> w1 = host(model->parameters()[0]);
    for (size_t i = 0; i < w0.size(); ++i) EXPECT_EQ(w1[i], static_cast<double>(w0[i]));
    EXPECT_THROW(model->to(int32), DTypeError);
  }
}

TEST(NnModule, DropoutTrainsAndEvaluates) {
  for (Device d : devices()) {
    nn::Dropout drop(0.25);
    Array x = ones({100, 100}, float32, d).set_requires_grad();
    random::seed(4);
    Array y = drop(x);
    const std::vector<float> v = y.to_vector<float>();
    const auto zeros_count = std::count(v.begin(), v.end(), 0.0f);
    EXPECT_NEAR(static_cast<double>(zeros_count) / 10000.0, 0.25, 0.03);
    for (float e : v) EXPECT_TRUE(e == 0.0f || std::abs(e - 1.0f / 0.75f) < 1e-6f);
    sum(y).backward();
    EXPECT_EQ(x.grad().to_vector<float>(), v);  // the gradient is the mask times the scale
    drop.eval();
    EXPECT_EQ(drop(x).to_vector<float>(), std::vector<float>(10000, 1.0f));
    EXPECT_THROW(nn::Dropout(1.5), ValueError);
  }
}

// layer_norm_backward, the primitive under LayerNorm's backward: the gradients asked for and no others, equal to
// the module's; operands that do not fit are refused naming the fix.
TEST(NnModule, LayerNormBackwardGivesTheGradientsAskedForAndRefusesMisfits) {
  for (Device d : devices()) {
    random::seed(9);
    const Array x = random::normal({3, 5}, 0.0, 1.0, float64, d), up = random::normal({3, 5}, 0.0, 1.0, float64, d);
    nn::LayerNorm norm({5}, 1e-5, true, float64, d);
    Array xg = x.copy();
    xg.set_requires_grad(true);
    (norm(xg) * up).sum().backward();
    const Array mu = mean(x, 1, true), rstd = 1.0 / sqrt(mean(square(x - mu), 1, true) + 1e-5);
    const Array w = norm.parameter("weight").detach();
    const LayerNormGrads all = layer_norm_backward(up, x, w, mu, rstd);
    expect_near_all(host(all.input), host(xg.grad()), 1e-12, "input");
    expect_near_all(host(all.weight), host(norm.parameter("weight").grad()), 1e-12, "weight");
    expect_near_all(host(all.bias), host(norm.parameter("bias").grad()), 1e-12, "bias");
    const LayerNormGrads bias_only = layer_norm_backward(up, x, w, mu, rstd, {false, false, true});
    EXPECT_FALSE(bias_only.input.defined());
    EXPECT_FALSE(bias_only.weight.defined());
    EXPECT_EQ(host(bias_only.bias), host(all.bias));
    EXPECT_THROW(layer_norm_backward(up, x, Array(), mu, rstd), ValueError);  // no weight: input only
    EXPECT_THROW(layer_norm_backward(up.reshape({15}), x, w, mu, rstd), ShapeError);
    EXPECT_THROW(layer_norm_backward(up, x.reshape({15}), w, mu, rstd), ShapeError);
    EXPECT_THROW(layer_norm_backward(up, x, w, mu.reshape({3}), rstd), ShapeError);
  }
}

TEST(NnModule, FlattenEmbeddingLayerNormAndActivations) {
  for (Device d : devices()) {
    EXPECT_EQ(nn::Flatten()(zeros({2, 3, 4, 5}, float32, d)).shape(), (Shape{2, 60}));
    EXPECT_EQ(nn::Flatten(1, 2)(zeros({2, 3, 4, 5}, float32, d)).shape(), (Shape{2, 12, 5}));

    random::seed(5);
    nn::Embedding embed(5, 3, float64, d);
    const Array idx = from_data(std::vector<int64_t>{1, 1, 4}, Shape{3}, d);
    Array e = embed(idx);
    const std::vector<double> table = host(embed.weight());
    EXPECT_EQ(host(e), (std::vector<double>{table[3], table[4], table[5], table[3], table[4], table[5], table[12],
                                            table[13], table[14]}));
    sum(e).backward();  // row 1 picked twice
    EXPECT_EQ(host(embed.weight().grad()), (std::vector<double>{0, 0, 0, 2, 2, 2, 0, 0, 0, 0, 0, 0, 1, 1, 1}));
    EXPECT_THROW(embed(ones({2}, float32, d)), DTypeError);

    nn::LayerNorm norm({4}, 1e-5, true, float64, d);
    const Array x = from_data(std::vector<double>{1, 2, 3, 4, -1, 0, 5, 2}, Shape{2, 4}, d);
    const std::vector<double> y = host(norm(x));
    for (int r = 0; r < 2; ++r) {
      double m = 0, v = 0;
      for (int c = 0; c < 4; ++c) m += y[static_cast<size_t>(r * 4 + c)] / 4;
      for (int c = 0; c < 4; ++c) v += std::pow(y[static_cast<size_t>(r * 4 + c)] - m, 2) / 4;
      EXPECT_NEAR(m, 0, 1e-12);
      EXPECT_NEAR(v, 1, 1e-4);
    }
    const GradcheckResult r = gradcheck([&](auto& in) { return norm(in[0]); }, {x});
    EXPECT_TRUE(r.passed) << r.report;
    // Without weight and bias: (x - mean) / sqrt(var + eps) per row, by hand (row 0: mean 2.5, var 1.25).
    nn::LayerNorm plain({4}, 1e-5, false, float64, d);
    const std::vector<double> p = host(plain(x));
    for (int c = 0; c < 4; ++c) EXPECT_NEAR(p[static_cast<size_t>(c)], (c + 1 - 2.5) / std::sqrt(1.25 + 1e-5), 1e-12);
    const GradcheckResult rp = gradcheck([&](auto& in) { return plain(in[0]); }, {x});
    EXPECT_TRUE(rp.passed) << rp.report;

    const Array z = from_data(std::vector<double>{-1, 0.5}, Shape{2}, d);
    EXPECT_EQ(host(nn::ReLU()(z)), (std::vector<double>{0, 0.5}));
    expect_near_all(host(nn::Sigmoid()(z)), {1 / (1 + std::exp(1.0)), 1 / (1 + std::exp(-0.5))}, 1e-12, "sigmoid");
    expect_near_all(host(nn::Tanh()(z)), {std::tanh(-1.0), std::tanh(0.5)}, 1e-12, "tanh");
    expect_near_all(host(nn::GELU()(z)),
                    {-1 * 0.5 * std::erfc(1 / std::sqrt(2.0)), 0.5 * 0.5 * std::erfc(-0.5 / std::sqrt(2.0))}, 1e-12,
                    "gelu");
    EXPECT_THROW(nn::GELU("fast"), ValueError);
  }
}

TEST(NnInit, InitialisersHaveTheirBoundsAndSpreads) {
  for (Device d : devices()) {
    Array w = empty({200, 300}, float32, d);
    nn::init::xavier_uniform(w);
    const double bound = std::sqrt(6.0 / 500);
    std::vector<double> v = host(w);
    double sq = 0;
    for (double e : v) {
      EXPECT_LE(std::abs(e), bound);
      sq += e * e;
    }
    EXPECT_NEAR(std::sqrt(sq / static_cast<double>(v.size())), bound / std::sqrt(3.0), 0.01 * bound);
    nn::init::kaiming_normal(w);
    v = host(w);
    sq = 0;
    for (double e : v) sq += e * e;
    EXPECT_NEAR(std::sqrt(sq / static_cast<double>(v.size())), std::sqrt(2.0 / 300), 0.02 * std::sqrt(2.0 / 300));
    nn::init::constant(w, 0.5);
    EXPECT_EQ(w.to_vector<float>(), std::vector<float>(60000, 0.5f));
    EXPECT_EQ(nn::init::fans(empty({8, 3, 5, 5}, float32, d)), (std::pair<int64_t, int64_t>{75, 200}));
  }
}

// ---------------------------------------------------------------- losses
double logsumexp_row(const std::vector<double>& v) {
  double m = *std::max_element(v.begin(), v.end()), s = 0;
  for (double e : v) s += std::exp(e - m);
  return m + std::log(s);
}

// The label's score is gathered through the rows' strides: logits that are a transposed view, a column slice with
// gaps between rows, or reversed rows give the contiguous copy's loss and gradients exactly.
TEST(NnLoss, CrossEntropyLabelsChangedInPlaceBeforeBackwardAreCaught) {
  // The backward reads the labels again (the softmax minus their one-hot): changing them in place in between
  // would give another loss's gradient, so it throws as for any saved array.
  for (Device d : devices())
    for (DType dtype : {float32, float64}) {
      const Array logits = random::normal({4, 6}, dtype, d).set_requires_grad();
      Array labels = from_data(std::vector<int64_t>{1, 0, 5, 2}, Shape{4}, d);
      const Array loss = nn::cross_entropy(logits, labels);
      labels += int64_t{1};
      kiln_test::expect_error<ValueError>([&] { loss.backward(); }, {"CrossEntropyBackward", "modified in place"});
    }
}

TEST(NnLoss, CrossEntropyAndNllOfStridedLogitsEqualTheirContiguousCopy) {
  for (Device d : devices()) {
    random::set_state({5, 0});
    const Array store = random::normal({7, 9}, float64, d);
    const Array labels = from_data(std::vector<int64_t>{3, 0, 4, 4, 1}, Shape{5}, d);
    const std::vector<std::pair<std::string, std::function<Array(const Array&)>>> layouts = {
        {"transposed", [](const Array& a) { return a.T().slice(0, 0, 5).slice(1, 0, 5); }},
        {"column slice", [](const Array& a) { return a.slice(0, 1, 6).slice(1, 2, 7); }},
        {"reversed rows", [](const Array& a) { return a.slice(0, 6, 1, -1).slice(1, 0, 5); }}};
    for (const auto& [what, view] : layouts) {
      for (int loss_kind = 0; loss_kind < 2; ++loss_kind) {
        Array x = store * 1.0, xc = store * 1.0;
        x.set_requires_grad(true);
        xc.set_requires_grad(true);
        const Array strided = view(x), copied = view(xc).contiguous();
        ASSERT_FALSE(strided.is_contiguous()) << what;
        const Array a = loss_kind == 0 ? nn::cross_entropy(strided, labels) : nn::nll_loss(strided, labels);
        const Array b = loss_kind == 0 ? nn::cross_entropy(copied, labels) : nn::nll_loss(copied, labels);
        EXPECT_EQ(a.item<double>(), b.item<double>()) << d.str() << " " << what << " loss " << loss_kind;
        a.backward();
        b.backward();
        EXPECT_TRUE(array_equal(x.grad().to(cpu()), xc.grad().to(cpu()))) << d.str() << " " << what;
      }
    }
  }
}

TEST(NnLoss, CrossEntropyNllMseAndBceMatchHandValues) {
  const std::vector<std::vector<double>> rows = {{1, 2, 3}, {1, 0, -1}};
  const std::vector<int64_t> labels = {2, 0};
  std::vector<double> nll;
  double smooth_total = 0;
  for (size_t r = 0; r < 2; ++r) {
    const double lse = logsumexp_row(rows[r]);
    nll.push_back(lse - rows[r][static_cast<size_t>(labels[r])]);
    double mean_logp = 0;
    for (double e : rows[r]) mean_logp += (e - lse) / 3;
    smooth_total += 0.9 * nll.back() - 0.1 * mean_logp;
  }
  for (Device d : devices()) {
    const Array logits = from_data(std::vector<double>{1, 2, 3, 1, 0, -1}, Shape{2, 3}, d);
    const Array y = from_data(labels, Shape{2}, d);
    EXPECT_NEAR(nn::cross_entropy(logits, y).item<double>(), (nll[0] + nll[1]) / 2, 1e-12);
    expect_near_all(host(nn::cross_entropy(logits, y, nn::Reduction::None)), nll, 1e-12, "per row");
    EXPECT_NEAR(nn::cross_entropy(logits, y, nn::Reduction::Sum, 0.1).item<double>(), smooth_total, 1e-12);
    // Probability targets equal to one-hot labels give the same loss.
    const Array onehot = from_data(std::vector<double>{0, 0, 1, 1, 0, 0}, Shape{2, 3}, d);
    EXPECT_NEAR(nn::cross_entropy(logits, onehot).item<double>(), (nll[0] + nll[1]) / 2, 1e-12);
    EXPECT_NEAR(nn::nll_loss(nn::log_softmax(logits), y).item<double>(), (nll[0] + nll[1]) / 2, 1e-12);
    expect_near_all(host(sum(nn::softmax(logits), 1)), {1, 1}, 1e-12, "softmax rows");
    EXPECT_NEAR(nn::accuracy(logits, y).item<double>(), 1.0, 0);
    EXPECT_NEAR(nn::accuracy(logits, from_data(std::vector<int64_t>{0, 0}, Shape{2}, d)).item<double>(), 0.5, 0);
    // A bad label throws on the CPU at once, on a GPU at the next synchronisation (item() here).
    kiln_test::expect_error<ValueError>(
        [&] { (void)nn::cross_entropy(logits, from_data(std::vector<int64_t>{3, 0}, Shape{2}, d)).item<double>(); },
        {"cross_entropy", "label 3", "[0, 3)"});
    kiln_test::expect_error<ValueError>(
        [&] { (void)nn::cross_entropy(logits, from_data(std::vector<int64_t>{-1, 0}, Shape{2}, d)).item<double>(); },
        {"cross_entropy", "label -1"});
    EXPECT_NEAR(nn::cross_entropy(logits, y).item<double>(), (nll[0] + nll[1]) / 2, 1e-12) << "usable afterwards";
    EXPECT_THROW(nn::cross_entropy(logits, zeros({2, 2}, float64, d)), ShapeError);

    const Array a = from_data(std::vector<double>{1, -2, 3}, Shape{3}, d);
    const Array b = from_data(std::vector<double>{0.5, 1, 0}, Shape{3}, d);
    EXPECT_NEAR(nn::mse_loss(a, b).item<double>(), (0.25 + 9 + 9) / 3, 1e-12);
    double bce = 0;
    const double xs[] = {1, -2, 3}, ts[] = {0.5, 1, 0};
    for (int i = 0; i < 3; ++i)
      bce += -(ts[i] * std::log(1 / (1 + std::exp(-xs[i]))) + (1 - ts[i]) * std::log(1 - 1 / (1 + std::exp(-xs[i]))));
    EXPECT_NEAR(nn::binary_cross_entropy_with_logits(a, b, nn::Reduction::Sum).item<double>(), bce, 1e-12);

    EXPECT_EQ(nn::cross_entropy(logits.astype(float32), y).dtype(), float32) << "float32 logits, float32 loss";
    EXPECT_NEAR(nn::cross_entropy(logits.astype(float32), y).item<double>(), (nll[0] + nll[1]) / 2, 1e-6);

    // Gradients of every loss with respect to its scores.
    auto check = [&](const std::string& what, const std::function<Array(const std::vector<Array>&)>& f) {
      const GradcheckResult r = gradcheck(f, {logits});
      EXPECT_TRUE(r.passed) << what << " on " << d.str() << ": " << r.report;
    };
    check("cross_entropy", [&](auto& v) { return nn::cross_entropy(v[0], y); });
    check("cross_entropy smoothed", [&](auto& v) { return nn::cross_entropy(v[0], y, nn::Reduction::Sum, 0.2); });
    check("cross_entropy probabilities", [&](auto& v) { return nn::cross_entropy(v[0], nn::softmax(onehot * 2.0)); });
    check("mse", [&](auto& v) { return nn::mse_loss(v[0], onehot); });
    check("bce with logits", [&](auto& v) { return nn::binary_cross_entropy_with_logits(v[0], onehot * 0.7); });
  }
}

// ---------------------------------------------------------------- optimizers
/// Three steps of an optimizer on f(p) = sum(p^2 * c), against `reference` (float64 by hand).
void three_steps(const std::function<std::unique_ptr<optim::Optimizer>(std::vector<Array>)>& make,
                 const std::function<void(std::vector<double>&, const std::vector<double>&, int)>& reference,
                 const std::string& what) {
  for (Device d : devices()) {
    std::vector<double> p = {1.0, -2.0, 0.5}, c = {1.0, 0.5, 3.0};
    Array param = from_data(p, Shape{3}, d).set_requires_grad();
    const Array coef = from_data(c, Shape{3}, d);
    auto opt = make({param});
    for (int t = 1; t <= 3; ++t) {
      opt->zero_grad();
      sum(square(param) * coef).backward();
      opt->step();
      std::vector<double> g(3);
      for (size_t i = 0; i < 3; ++i) g[i] = 2 * p[i] * c[i];
      reference(p, g, t);
    }
    expect_near_all(host(param), p, 1e-12, what + " on " + d.str());
  }
}

TEST(NnOptim, SgdVariantsFollowPyTorchsFormulas) {
  three_steps([](auto ps) { return std::make_unique<optim::SGD>(ps, optim::SGDOptions{.lr = 0.1}); },
              [](auto& p, auto& g, int) {
                for (size_t i = 0; i < 3; ++i) p[i] -= 0.1 * g[i];
              },
              "sgd");
  std::vector<double> buf(3);
  three_steps(
      [](auto ps) {
        return std::make_unique<optim::SGD>(
            ps, optim::SGDOptions{.lr = 0.1, .momentum = 0.9, .dampening = 0.1, .weight_decay = 0.01});
      },
      [&](auto& p, auto& g, int t) {
        for (size_t i = 0; i < 3; ++i) {
          const double d = g[i] + 0.01 * p[i];
          buf[i] = t == 1 ? d : 0.9 * buf[i] + 0.9 * d;
          p[i] -= 0.1 * buf[i];
        }
      },
      "sgd momentum");
  three_steps(
      [](auto ps) {
        return std::make_unique<optim::SGD>(ps, optim::SGDOptions{.lr = 0.05, .momentum = 0.8, .nesterov = true});
      },
      [&](auto& p, auto& g, int t) {
        for (size_t i = 0; i < 3; ++i) {
          buf[i] = t == 1 ? g[i] : 0.8 * buf[i] + g[i];
          p[i] -= 0.05 * (g[i] + 0.8 * buf[i]);
        }
      },
      "sgd nesterov");
  EXPECT_THROW(optim::SGD({zeros({2})}, {}), ValueError);  // does not require grad
}

TEST(NnOptim, AdamAndAdamWFollowPyTorchsFormulas) {
  for (bool decoupled : {false, true}) {
    std::vector<double> m(3, 0), v(3, 0);
    const double lr = 0.01, b1 = 0.9, b2 = 0.99, eps = 1e-8, wd = 0.1;
    three_steps(
        [&](auto ps) -> std::unique_ptr<optim::Optimizer> {
          const optim::AdamOptions o{.lr = lr, .beta1 = b1, .beta2 = b2, .eps = eps, .weight_decay = wd};
          if (decoupled) return std::make_unique<optim::AdamW>(ps, o);
          return std::make_unique<optim::Adam>(ps, o);
        },
        [&](auto& p, auto& g, int t) {
          if (t == 1) m.assign(3, 0.0), v.assign(3, 0.0);  // a fresh optimizer on each device
          for (size_t i = 0; i < 3; ++i) {
            double d = g[i];
            if (decoupled)
              p[i] *= 1 - lr * wd;
            else
              d += wd * p[i];
            m[i] = b1 * m[i] + (1 - b1) * d;
            v[i] = b2 * v[i] + (1 - b2) * d * d;
            const double bc1 = 1 - std::pow(b1, t), bc2 = 1 - std::pow(b2, t);
            p[i] -= lr / bc1 * m[i] / (std::sqrt(v[i]) / std::sqrt(bc2) + eps);
          }
        },
        decoupled ? "adamw" : "adam");
  }
}

#if defined(__x86_64__) || defined(__i386__)
// The CPU's multi-tensor update flushes subnormals to zero (src/cpu/multi_tensor.cpp says why; a GPU keeps them):
// Adam's second moment of a 1e-20 gradient, (1e-20)^2 * (1 - beta2) = 1e-43, is subnormal in float32; SGD's
// momentum buffer of a subnormal gradient too.
TEST(NnOptim, TheCpuStepFlushesSubnormalMomentsToZero) {
  Array p = full({4}, 1.0, float32, cpu()).set_requires_grad();
  optim::Adam adam({p}, {.lr = 0.01});
  (sum(p) * 1e-20f).backward();
  adam.step();
  const nn::StateDict state = adam.state_dict();
  EXPECT_EQ(host(state.at("exp_avg_sq.0")), std::vector<double>(4, 0.0)) << "1e-43 is subnormal: flushed";
  for (double m : host(state.at("exp_avg.0"))) EXPECT_NEAR(m, 1e-21, 1e-27);
  EXPECT_EQ(host(p), std::vector<double>(4, 1.0)) << "the update (about 1e-14) is below float32's resolution at 1";

  Array q = full({4}, 1.0, float32, cpu()).set_requires_grad();
  optim::SGD sgd({q}, {.lr = 0.5, .momentum = 0.9});
  (sum(q) * 1e-40f).backward();  // a subnormal gradient
  ASSERT_GT(host(q.grad())[0], 0.0);
  sgd.step();
  sgd.step();
  EXPECT_EQ(host(sgd.state_dict().at("momentum_buffer.0")), std::vector<double>(4, 0.0));
  EXPECT_EQ(host(q), std::vector<double>(4, 1.0));
}
#endif

TEST(NnOptim, StateDictResumesTrainingExactly) {
  for (Device d : devices()) {
    auto run = [&](bool interrupt) {
      Array p = from_data(std::vector<double>{1.0, -2.0, 0.5}, Shape{3}, d).set_requires_grad();
      auto opt = std::make_unique<optim::Adam>(std::vector<Array>{p}, optim::AdamOptions{.lr = 0.1});
      for (int t = 0; t < 4; ++t) {
        if (interrupt && t == 2) {
          const nn::StateDict saved = opt->state_dict();
          opt = std::make_unique<optim::Adam>(std::vector<Array>{p}, optim::AdamOptions{.lr = 0.5});
          opt->load_state_dict(saved);
        }
        opt->zero_grad();
        sum(square(p) * p).backward();
        opt->step();
      }
      return host(p);
    };
    EXPECT_EQ(run(true), run(false));
  }
}

TEST(NnOptim, ClipGradNormAndSchedules) {
  for (Device d : devices()) {
    Array a = from_data(std::vector<float>{1, 1}, Shape{2}, d).set_requires_grad();
    Array b = from_data(std::vector<float>{1}, Shape{1}, d).set_requires_grad();
    (sum(a * from_data(std::vector<float>{3, 0}, Shape{2}, d)) + sum(b * 4.0f)).backward();
    const Array norm = optim::clip_grad_norm({a, b}, 1.0);
    EXPECT_NEAR(norm.item<double>(), 5.0, 1e-6);
    expect_near_all(host(a.grad()), {0.6, 0.0}, 1e-5, "clipped a");
    expect_near_all(host(b.grad()), {0.8}, 1e-5, "clipped b");
  }
  Array p = zeros({1}, float32, cpu()).set_requires_grad();
  optim::SGD opt({p}, {.lr = 1.0});
  optim::StepLR step(opt, 2, 0.5);
  std::vector<double> lrs;
  for (int i = 0; i < 5; ++i) {
    step.step();
    lrs.push_back(opt.lr());
  }
  EXPECT_EQ(lrs, (std::vector<double>{1.0, 0.5, 0.5, 0.25, 0.25}));
  optim::SGD opt2({p}, {.lr = 2.0});
  optim::CosineAnnealingLR cosine(opt2, 4, 0.0);
  cosine.step();
  cosine.step();
  EXPECT_NEAR(opt2.lr(), 1.0, 1e-12);
  optim::SGD opt3({p}, {.lr = 0.3});
  optim::LinearWarmupLR warm(opt3, 3, 0.1);
  EXPECT_NEAR(opt3.lr(), 0.03, 1e-12);
  warm.step();
  EXPECT_NEAR(opt3.lr(), 0.3 * (0.1 + 0.9 / 3), 1e-12);
  warm.step();
  warm.step();
  EXPECT_NEAR(opt3.lr(), 0.3, 1e-12);
}

// ---------------------------------------------------------------- training
TEST(NnTraining, LinearRegressionRecoversTheTrueWeights) {
  // d2l's linear regression from scratch: y = X w + b + noise, minibatch SGD on a Linear(2, 1).
  for (Device d : devices()) {
    random::seed(11);
    const Array true_w = from_data(std::vector<float>{2, -3.4f}, Shape{2, 1}, d);
    const Array X = random::normal({1000, 2}, 0.0, 1.0, float32, d);
    const Array Y = matmul(X, true_w) + 4.2f + random::normal({1000, 1}, 0.0, 0.01, float32, d);
    nn::Linear net(2, 1, true, float32, d);
    optim::SGD opt(net.parameters(), {.lr = 0.03});
    for (int epoch = 0; epoch < 3; ++epoch)
      for (int64_t i = 0; i < 1000; i += 10) {
        const Array loss = nn::mse_loss(net(X.slice(0, i, i + 10)), Y.slice(0, i, i + 10));
        opt.zero_grad();
        loss.backward();
        opt.step();
      }
    expect_near_all(host(net.weight()), {2.0, -3.4}, 0.01, "w on " + d.str());
    expect_near_all(host(net.bias()), {4.2}, 0.01, "b on " + d.str());
  }
}

TEST(NnTraining, AnMlpSeparatesThreeBlobs) {
  for (Device d : devices()) {
    random::seed(12);
    const Array centres = from_data(std::vector<float>{2, 0, 0, 0, -2, 2, 0, 0, 0, -2, -2, 0}, Shape{3, 4}, d);
    const Array labels = random::randint(0, 3, {600}, int64, d);
    const Array x = take(centres, labels, 0) + random::normal({600, 4}, 0.0, 0.7, float32, d);
    auto model = mlp(d);
    optim::Adam opt(model->parameters(), {.lr = 0.01});
    for (int step = 0; step < 150; ++step) {
      const int64_t start = (step * 100) % 600;
      const Array loss =
          nn::cross_entropy((*model)(x.slice(0, start, start + 100)), labels.slice(0, start, start + 100));
      opt.zero_grad();
      loss.backward();
      opt.step();
    }
    model->eval();
    NoGradGuard no_grad;
    EXPECT_GT(nn::accuracy((*model)(x), labels).item<double>(), 0.9) << d.str();
  }
}

TEST(NnTraining, TrainStepKeepsTheEpochsMetricsOnTheDevice) {
  for (Device d : devices()) {
    random::seed(14);
    const Array x = random::normal({64, 4}, 0.0, 1.0, float32, d);
    const Array y = (x.index({Slice(), 1}) > 0).astype(int64);
    auto model = mlp(d);
    auto reference = mlp(d);
    reference->load_state_dict(model->state_dict());
    optim::SGD opt(model->parameters(), {.lr = 0.1}), ref_opt(reference->parameters(), {.lr = 0.1});
    model->eval();  // no dropout: the reference below must draw nothing
    reference->eval();
    // graph is ignored on the CPU; on a GPU these two steps are the warm-up (eager).
    train::TrainStep step(*model, opt, {.graph = true, .warmup = 5});
    double loss_sum = 0, correct = 0;
    for (int64_t start : {0, 32}) {
      const Array xb = x.slice(0, start, start + 32), yb = y.slice(0, start, start + 32);
      {
        NoGradGuard no_grad;
        const Array out = (*reference)(xb);
        loss_sum += nn::cross_entropy(out, yb).item<double>() * 32;
        correct += nn::accuracy(out, yb).item<double>() * 32;
      }
      ref_opt.zero_grad();
      nn::cross_entropy((*reference)(xb), yb).backward();
      ref_opt.step();
      step(xb, yb);
    }
    EXPECT_FALSE(step.graphed());
    EXPECT_EQ(step.samples(), 64);
    EXPECT_NEAR(step.mean_loss(), loss_sum / 64, 1e-6) << d.str();
    EXPECT_NEAR(step.accuracy(), correct / 64, 1e-12) << d.str();
    step.reset_metrics();
    EXPECT_EQ(step.samples(), 0);
    EXPECT_EQ(step.mean_loss(), 0.0);
    EXPECT_THROW(train::TrainStep(*model, opt, {.graph = true, .warmup = 0}), ValueError);
  }
}

TEST(NnTraining, FitLogsEveryEpochAndStopsWhenACallbackSays) {
  for (Device d : devices()) {
    random::seed(13);
    const Array x = random::normal({200, 4}, 0.0, 1.0, float32, d);
    const Array y = (x.index({Slice(), 0}) > 0).astype(int64);
    data::DataLoader train(x, y, {.batch_size = 32, .shuffle = true, .device = d});
    data::DataLoader test(x, y, {.batch_size = 100, .device = d});
    auto model = mlp(d);
    optim::Adam opt(model->parameters(), {.lr = 0.02});
    const std::string log =
        (std::filesystem::temp_directory_path() / ("kiln_fit_" + std::to_string(::getpid()) + ".jsonl")).string();
    std::filesystem::remove(log);
    std::ostringstream out;
    int calls = 0;
    const auto history =
        train::fit(*model, opt, train, &test,
                   {.epochs = 10, .log_path = log, .out = &out, .on_epoch_end = {[&](const train::EpochMetrics& m) {
                                                                  ++calls;
                                                                  return m.epoch < 4;
                                                                }}});
    EXPECT_EQ(history.size(), 4u);  // the callback stopped it after epoch 4
    EXPECT_EQ(calls, 4);
    EXPECT_LT(history.back().train_loss, history.front().train_loss);
    EXPECT_GT(history.back().test_accuracy, 0.75);  // 28 steps on a linearly separable rule
    EXPECT_TRUE(model->is_training());
    std::ifstream in(log);
    std::string line;
    int lines = 0;
    while (std::getline(in, line)) {
      ++lines;
      EXPECT_NE(line.find("\"epoch\": " + std::to_string(lines)), std::string::npos) << line;
      EXPECT_NE(line.find("\"test_accuracy\""), std::string::npos) << line;
    }
    EXPECT_EQ(lines, 4);
    EXPECT_NE(out.str().find("epoch   4"), std::string::npos) << out.str();
    std::filesystem::remove(log);
    const auto [loss, acc] = train::evaluate(*model, test);
    EXPECT_NEAR(loss, history.back().test_loss, 1e-6);
    EXPECT_NEAR(acc, history.back().test_accuracy, 1e-12);
  }
}

}  // namespace
}  // namespace kiln
