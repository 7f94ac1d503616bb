// The module API as a new user meets it: references from register_parameter stay valid while more are
// registered, kept copies of a parameter fail loudly after Module::to replaced it (and optimizers made before),
// modules with several inputs (nn::call), ModuleList / ModuleDict with PyTorch's state-dict names, the printed
// tree with parameter counts, Linear refusing a dtype it was not made for, AutogradFunction::apply found by name
// (not std::apply through argument-dependent lookup).
#include <gtest/gtest.h>

#include <memory>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "kiln/kiln.hpp"
#include "test_util.hpp"

namespace kiln {
namespace {

/// A module that keeps the references register_parameter returns, registering many so a vector would move.
class ManyParameters : public nn::Module {
 public:
  ManyParameters() {
    first_ = &register_parameter("p0", full({2}, 1.0, float32, cpu()));
    const std::vector<std::string> names = {"a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l", "m", "n"};
    for (size_t i = 0; i < names.size(); ++i) register_parameter(names[i], full({2}, double(i), float32, cpu()));
  }
  Array forward(const Array& x) override { return x * *first_; }
  std::string name() const override { return "ManyParameters"; }
  Array& first() { return *first_; }

 private:
  Array* first_;
};

TEST(ModuleApi, AReferenceFromRegisterParameterStaysValidAndFollowsTo) {
  ManyParameters m;
  EXPECT_EQ(&m.first(), &m.parameter("p0"));
  EXPECT_EQ(m.first().to_vector<float>(), (std::vector<float>{1.0f, 1.0f}));
  m.to(float64);
  EXPECT_EQ(m.first().dtype(), float64);  // the entry holds the converted array
  EXPECT_EQ(&m.first(), &m.parameter("p0"));
  const Array y = m(full({2}, 3.0, float64, cpu()));
  sum(y).backward();
  EXPECT_EQ(m.parameter("p0").grad().to_vector<double>(), (std::vector<double>{3.0, 3.0}));
}

/// A module written the way the stale-handle report found: it keeps a copy of its weight.
class KeepsACopy : public nn::Module {
 public:
  KeepsACopy() { w_ = register_parameter("w", full({3}, 2.0, float32, cpu())); }
  Array forward(const Array& x) override { return x * w_; }
  std::string name() const override { return "KeepsACopy"; }

 private:
  Array w_;
};

TEST(ModuleApi, AKeptCopyOfAParameterFailsLoudlyAfterToInsteadOfTrainingTheOldArray) {
  KeepsACopy m;
  const Array x = full({3}, 1.0, float64, cpu());
  m.to(float64);
  kiln_test::expect_error<ValueError>([&] { (void)m(x); },
                                      {"retired", "parameter \"w\"", "Module::to(float64)", "register_parameter"});
  // Without gradients nothing is recorded, so nothing is refused (and nothing can train).
  NoGradGuard no_grad;
  EXPECT_NO_THROW((void)m(x));
}

TEST(ModuleApi, AnOptimizerMadeBeforeToRefusesToStep) {
  nn::Linear lin(3, 2, true, float32, cpu());
  optim::SGD early(lin.parameters(), {.lr = 0.1});
  lin.to(float64);
  optim::SGD late(lin.parameters(), {.lr = 0.1});
  const Array x = full({4, 3}, 0.5, float64, cpu());
  sum(lin(x)).backward();
  kiln_test::expect_error<ValueError>([&] { early.step(); },
                                      {"SGD::step", "parameter 0 is retired", "make the optimizer after"});
  const std::vector<double> before = lin.weight().to_vector<double>();
  late.step();
  const std::vector<double> after = lin.weight().to_vector<double>();
  // d sum(x W^T + b) / dW = sum over rows of x = 4 * 0.5 = 2 for every weight: each one moves by -0.1 * 2.
  ASSERT_EQ(before.size(), after.size());
  for (size_t i = 0; i < before.size(); ++i) EXPECT_NEAR(after[i], before[i] - 0.2, 1e-12) << i;
}

TEST(ModuleApi, LinearRefusesAnInputOfAnotherDtypeAsPyTorchDoes) {
  nn::Linear lin(3, 2, true, float32, cpu());
  kiln_test::expect_error<DTypeError>([&] { (void)lin(ones({1, 3}, float64, cpu())); },
                                      {"Linear(in_features=3", "float64", "float32", "astype(float32)"});
  kiln_test::expect_error<DTypeError>([&] { (void)lin(ones({1, 3}, int64, cpu())); }, {"int64", "float32"});
  EXPECT_EQ(lin(ones({1, 3}, float32, cpu())).dtype(), float32);
}

/// Scaled dot-product attention in miniature: a module with three inputs and two outputs.
class TinyAttention : public nn::Module {
 public:
  using Module::forward;
  std::pair<Array, Array> forward(const Array& q, const Array& k, const Array& v) {
    const Array w = nn::softmax(matmul(q, k.T()), -1);
    return {matmul(w, v), w};
  }
  std::string name() const override { return "TinyAttention"; }
};

TEST(ModuleApi, AModuleWithSeveralInputsIsCalledWithThemAndRefusesOne) {
  TinyAttention attention;
  const Array q = eye(2, 2, 0, float64, cpu()), k = eye(2, 2, 0, float64, cpu());
  const Array v = from_data(std::vector<double>{1, 2, 3, 4}).reshape({2, 2});
  const auto [out, weights] = nn::call(attention, q, k, v);
  // Row 0 of softmax([[1, 0], [0, 1]]): (e, 1) / (e + 1).
  const double a = std::exp(1.0) / (std::exp(1.0) + 1.0), b = 1.0 / (std::exp(1.0) + 1.0);
  const std::vector<double> w = weights.to_vector<double>(), o = out.to_vector<double>();
  EXPECT_NEAR(w[0], a, 1e-15);
  EXPECT_NEAR(w[1], b, 1e-15);
  EXPECT_NEAR(o[0], a * 1 + b * 3, 1e-14);
  EXPECT_NEAR(o[3], b * 2 + a * 4, 1e-14);
  kiln_test::expect_error<ValueError>([&] { (void)attention(q); }, {"TinyAttention", "does not take one array"});
  nn::Sequential seq;
  seq.push_back(std::make_shared<TinyAttention>());
  kiln_test::expect_error<ValueError>([&] { (void)seq(q); }, {"TinyAttention", "Sequential"});
}

TEST(ModuleApi, ModuleListAndModuleDictNameTheirChildrenAsPyTorch) {
  auto blocks = std::make_shared<nn::ModuleList>();
  blocks->push_back(std::make_shared<nn::Linear>(4, 4, true, float32, cpu()));
  blocks->push_back(std::make_shared<nn::Linear>(4, 2, false, float32, cpu()));
  auto heads = std::make_shared<nn::ModuleDict>();
  heads->insert("cls", std::make_shared<nn::Linear>(2, 3, true, float32, cpu()));
  heads->insert("reg", std::make_shared<nn::Linear>(2, 1, true, float32, cpu()));
  nn::Sequential model;  // only as a holder here: "0" is the list, "1" the dict
  model.push_back(blocks);
  model.push_back(heads);
  std::vector<std::string> names;
  for (const auto& [name, p] : model.named_parameters()) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{"0.0.weight", "0.0.bias", "0.1.weight", "1.cls.weight", "1.cls.bias",
                                             "1.reg.weight", "1.reg.bias"}));
  EXPECT_EQ(blocks->size(), 2u);
  EXPECT_EQ(blocks->at<nn::Linear>(-1).weight().shape(), (Shape{2, 4}));
  EXPECT_EQ((*heads)["reg"].name(), "Linear(in_features=2, out_features=1, bias=true)");
  EXPECT_EQ(heads->keys(), (std::vector<std::string>{"cls", "reg"}));
  kiln_test::expect_error<ValueError>([&] { (void)(*heads)["box"]; }, {"no module named \"box\"", "\"cls\", \"reg\""});
  kiln_test::expect_error<ValueError>([&] { (void)(*blocks)[2]; }, {"index 2 is out of range", "2 modules"});
  kiln_test::expect_error<ValueError>([&] { heads->insert("a.b", std::make_shared<nn::ReLU>()); }, {"no '.'"});
  // insert on an existing key replaces the module in place (same position, new parameters).
  heads->insert("cls", std::make_shared<nn::Linear>(2, 5, false, float32, cpu()));
  EXPECT_EQ(heads->keys(), (std::vector<std::string>{"cls", "reg"}));
  EXPECT_EQ(heads->num_parameters(), 2 * 5 + 2 * 1 + 1);
}

TEST(ModuleApi, PrintingAModelShowsItsTreeAndParameterCount) {
  nn::Sequential model;
  model.push_back(std::make_shared<nn::Linear>(784, 100, true, float32, cpu()));
  model.push_back(std::make_shared<nn::ReLU>());
  auto inner = std::make_shared<nn::Sequential>();
  inner->push_back(std::make_shared<nn::Linear>(100, 10, true, float32, cpu()));
  model.push_back(inner);
  std::ostringstream out;
  out << model;
  EXPECT_EQ(out.str(),
            "Sequential(\n"
            "  (0): Linear(in_features=784, out_features=100, bias=true)\n"
            "  (1): ReLU\n"
            "  (2): Sequential(\n"
            "    (0): Linear(in_features=100, out_features=10, bias=true)\n"
            "  )\n"
            ")\n"
            "79510 parameters");  // 784*100 + 100 + 100*10 + 10
  model.parameters()[0].set_requires_grad(false);
  std::ostringstream frozen;
  frozen << model;
  EXPECT_NE(frozen.str().find("79510 parameters (1110 trainable)"), std::string::npos) << frozen.str();
}

TEST(ModuleApi, AutogradFunctionApplyIsAMemberSoArgumentDependentLookupCannotPickStdApply) {
  const AutogradFunction cube{"CubeBackward",
                              [](const std::vector<Array>& in, std::vector<Array>& saved) {
                                saved = {in[0]};
                                return in[0] * in[0] * in[0];
                              },
                              [](const Array& g, const std::vector<Array>& saved, const std::vector<bool>&) {
                                return std::vector<Array>{g * saved[0] * saved[0] * 3.0};
                              }};
  Array x = full({2}, 2.0, float64, cpu()).set_requires_grad();
  sum(cube.apply({x})).backward();
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{12.0, 12.0}));
  // std::apply on a tuple still means the standard one next to kiln's names.
  using namespace kiln;
  EXPECT_EQ(std::apply([](int a, int b) { return a + b; }, std::make_tuple(2, 3)), 5);
}

}  // namespace
}  // namespace kiln
