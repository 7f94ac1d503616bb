// Activation recomputation (autograd::checkpoint, nn::checkpoint, GPT2Config::recompute) and the bfloat16
// master-weight policy of mixed-precision training (float32 parameters, gradients and optimizer state).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_set>
#include <vector>

#include "core/autograd.hpp"
#include "core/lm_test_util.hpp"
#include "kiln/kiln.hpp"
#include "kiln/models.hpp"

using namespace kiln;
using kiln_test::message_has;
namespace {

/// The values of `a` (exact in double for every floating dtype kiln has).
std::vector<double> values(const Array& a) { return a.to(cpu()).to_vector<double>(); }

/// Bit-for-bit equality of two arrays' values (and shapes and dtypes).
void expect_same(const Array& got, const Array& want, const std::string& what) {
  ASSERT_TRUE(got.defined()) << what << ": no gradient";
  ASSERT_TRUE(want.defined()) << what;
  EXPECT_EQ(got.shape(), want.shape()) << what;
  EXPECT_EQ(got.dtype(), want.dtype()) << what;
  EXPECT_EQ(values(got), values(want)) << what;
}

/// Two layers with dropout between them; `w1`, `b1`, `w2` are captured, as a module's parameters are.
struct TwoLayers {
  Array w1, b1, w2;
  std::shared_ptr<nn::Dropout> drop1 = std::make_shared<nn::Dropout>(0.5), drop2 = std::make_shared<nn::Dropout>(0.25);
  explicit TwoLayers(DType dtype) {
    w1 = random::normal({6, 8}, 0.0, 0.5, dtype).set_requires_grad();
    b1 = random::normal({8}, 0.0, 0.5, dtype).set_requires_grad();
    w2 = random::normal({8, 5}, 0.0, 0.5, dtype).set_requires_grad();
  }
  Array operator()(const Array& x) const {
    const Array h = (*drop1)(tanh(matmul(x, w1) + b1));
    return (*drop2)(matmul(h, w2));
  }
  std::vector<Array> params() const { return {w1, b1, w2}; }
};

/// The loss of `net` on x (through a checkpoint or not), after seeding the generator.
Array two_layer_loss(const TwoLayers& net, const Array& x, bool checkpointed) {
  random::seed(7);
  const Array y = checkpointed
                      ? autograd::checkpoint([net](const std::vector<Array>& in) { return net(in[0]); }, {x * 2.0})
                      : net(x * 2.0);
  return square(y).sum();
}

/// Bytes of the distinct storages that the nodes of root's graph keep for backward.
int64_t saved_bytes(const Array& root) {
  std::unordered_set<const void*> storages;
  std::unordered_set<const detail::Node*> seen;
  std::vector<const detail::Node*> stack{root.autograd_meta()->grad_fn.get()};
  int64_t total = 0;
  while (!stack.empty()) {
    const detail::Node* node = stack.back();
    stack.pop_back();
    if (!node || !seen.insert(node).second) continue;
    for (const detail::SavedArray& s : node->saved)
      if (s.defined() && storages.insert(s.get(node->name).storage().get()).second)
        total += static_cast<int64_t>(s.get(node->name).storage()->nbytes());
    for (const detail::Edge& e : node->next) stack.push_back(e.node.get());
  }
  return total;
}

}  // namespace

// The inputs and the captured parameters get the gradients they get without checkpoint, bit for bit, with the
// dropout masks drawn again in the recomputation; afterwards the generator is where it is without checkpoint.
TEST(ActivationCheckpoint, GradientsOfInputsAndCapturedParametersEqualThoseWithoutIt) {
  for (DType dtype : {float32, float64}) {
    random::seed(1);
    const TwoLayers net(dtype);
    const Array x = random::normal({4, 6}, 0.0, 1.0, dtype).set_requires_grad();
    Array plain = two_layer_loss(net, x, false);
    plain.backward();
    const random::GeneratorState after_plain = random::get_state();
    std::vector<Array> want{x.grad()};
    for (const Array& p : net.params()) want.push_back(p.grad());
    Array(x).set_grad(Array());
    for (const Array& p : net.params()) Array(p).set_grad(Array());

    Array checked = two_layer_loss(net, x, true);
    EXPECT_EQ(checked.grad_fn_name(), "SumBackward");
    EXPECT_EQ(values(checked), values(plain)) << dtype_name(dtype);
    EXPECT_EQ(random::get_state().offset, after_plain.offset);
    (void)random::uniform({5});  // draws between forward and backward: the recomputation must not replay them
    const random::GeneratorState before_backward = random::get_state();
    checked.backward();
    EXPECT_EQ(random::get_state().offset, before_backward.offset) << "the recomputation moved the generator";
    std::vector<Array> got{x.grad()};
    for (const Array& p : net.params()) got.push_back(p.grad());
    const char* names[] = {"x", "w1", "b1", "w2"};
    for (size_t i = 0; i < got.size(); ++i)
      expect_same(got[i], want[i], std::string(names[i]) + " " + std::string(dtype_name(dtype)));
  }
}

// Nothing of fn's inside is kept: the graph holds the checkpoint's one node and its inputs.
TEST(ActivationCheckpoint, KeepsOnlyItsInputsForBackward) {
  random::seed(1);
  const TwoLayers net(float32);
  const Array x = random::normal({64, 6}).set_requires_grad();
  const Array plain = net(x);
  const Array checked = autograd::checkpoint([net](const std::vector<Array>& in) { return net(in[0]); }, {x});
  EXPECT_EQ(checked.grad_fn_name(), "CheckpointBackward");
  EXPECT_EQ(saved_bytes(checked), x.nbytes());
  EXPECT_GT(saved_bytes(plain), 4 * x.nbytes());  // the hidden layer, its tanh, the dropout masks
}

// Parameters get their gradients when no input requires grad (torch's reentrant checkpoint loses them).
TEST(ActivationCheckpoint, ParametersGetGradientsWhenNoInputRequiresGrad) {
  random::seed(3);
  const TwoLayers net(float64);
  const Array x = random::normal({3, 6}, 0.0, 1.0, float64);
  Array plain = two_layer_loss(net, x, false);
  plain.backward();
  std::vector<Array> want;
  for (const Array& p : net.params()) want.push_back(p.grad());
  for (const Array& p : net.params()) Array(p).set_grad(Array());
  Array checked = two_layer_loss(net, x, true);
  ASSERT_TRUE(checked.requires_grad());
  checked.backward();
  for (size_t i = 0; i < want.size(); ++i)
    expect_same(net.params()[i].grad(), want[i], "parameter " + std::to_string(i));
}

// The recomputation runs under the forward's autocast dtype, also when backward runs outside the scope.
TEST(ActivationCheckpoint, RecomputesUnderTheForwardsAutocastDtype) {
  random::seed(4);
  auto layer = std::make_shared<nn::Linear>(8, 8);
  const Array x = random::normal({4, 8}).set_requires_grad();
  std::vector<Array> want;
  for (bool checked : {false, true}) {
    Array loss;
    {
      AutocastGuard amp(bfloat16);
      const Array y = checked ? nn::checkpoint(layer, x) : (*layer)(x);
      EXPECT_EQ(y.dtype(), bfloat16);
      loss = y.astype(float32).sum();
    }
    loss.backward();
    std::vector<Array> got{x.grad(), layer->weight().grad(), layer->bias().grad()};
    if (!checked) want = got;
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i].dtype(), float32);
      if (checked) expect_same(got[i], want[i], "gradient " + std::to_string(i));
    }
    Array(x).set_grad(Array());
    layer->zero_grad();
  }
}

// A callback queued from a hook that the recomputation's backward runs (DistributedDataParallel's) runs when the
// whole backward ends, not when the checkpoint's own part of it does.
TEST(ActivationCheckpoint, CallbacksQueuedInsideRunAtTheEndOfTheOuterBackward) {
  const Array w = full({3}, 2.0).set_requires_grad();
  const Array v = full({3}, 3.0).set_requires_grad();  // before the checkpoint: accumulated after its node ran
  bool v_done_at_callback = false;
  int calls = 0;
  Array(w).register_post_accumulate_grad_hook([&](const Array&) {
    queue_callback([&] {
      ++calls;
      v_done_at_callback = v.grad().defined();
    });
  });
  const Array y = autograd::checkpoint([w](const std::vector<Array>& in) { return in[0] * w; }, {v * 1.5});
  y.sum().backward();
  EXPECT_EQ(calls, 1);
  EXPECT_TRUE(v_done_at_callback);
  EXPECT_EQ(values(w.grad()), std::vector<double>(3, 4.5));
}

TEST(ActivationCheckpoint, ErrorsNameCheckpointAndTheFix) {
  const Array x = full({2}, 1.0);
  auto twice = [](const std::vector<Array>& in) { return in[0] * 2.0; };
  EXPECT_TRUE(message_has([&] { autograd::checkpoint(twice, {x}); }, "checkpoint: fn's result does not depend"));
  const Array p = full({2}, 1.0).set_requires_grad();
  const Array input = p * 1.0;
  const Array y = autograd::checkpoint(twice, {input});
  {
    NoGradGuard no_grad;
    Array(input) += 1.0;
  }
  EXPECT_TRUE(message_has([&] { y.sum().backward(); }, "checkpoint: input 0 was modified in place"));
  EXPECT_TRUE(message_has([&] { autograd::checkpoint(twice, {Array()}); }, "checkpoint: input 0 is undefined"));
  {
    NoGradGuard no_grad;  // without gradients checkpoint only calls fn
    EXPECT_FALSE(autograd::checkpoint(twice, {p}).requires_grad());
  }
}

namespace {

struct GptStep {
  Array loss;
  nn::StateDict grads;
  random::GeneratorState generator;
};

/// One training forward and backward of a tiny GPT-2 with dropout, from a fixed seed (under autocast to `amp`).
GptStep gpt_step(const std::string& recompute, DType dtype, std::optional<DType> amp = std::nullopt) {
  random::seed(11);
  models::GPT2Config config{.vocab_size = 37, .n_positions = 16, .n_embd = 32, .n_layer = 2, .n_head = 4};
  config.embd_pdrop = config.attn_pdrop = config.resid_pdrop = 0.2;
  config.recompute = recompute;
  models::GPT2 model(config, dtype);
  random::Generator data(5);
  const Array tokens = data.randint(0, 37, {3, 12});
  const Array targets = data.randint(0, 37, {3, 12});
  GptStep r;
  {
    AutocastGuard autocast(amp);
    r.loss = models::lm_loss(model.forward(tokens), targets);
  }
  r.loss.backward();
  r.generator = random::get_state();
  for (const auto& [name, p] : model.named_parameters()) r.grads.insert(name, p.grad());
  return r;
}

}  // namespace

TEST(GPT2Recompute, LossAndEveryGradientEqualThoseWithoutRecomputation) {
  for (DType dtype : {float32, float64}) {
    const GptStep want = gpt_step("none", dtype);
    for (const char* mode : {"gelu", "block"}) {
      const GptStep got = gpt_step(mode, dtype);
      const std::string what = std::string(mode) + " " + std::string(dtype_name(dtype));
      EXPECT_EQ(values(got.loss), values(want.loss)) << what;
      EXPECT_EQ(got.generator.offset, want.generator.offset) << what;
      ASSERT_EQ(got.grads.size(), want.grads.size());
      for (const auto& [name, g] : want.grads) expect_same(*got.grads.find(name), g, what + " " + name);
    }
  }
}

// Under bfloat16 autocast too: the recomputation casts the parameters again, as the forward did.
TEST(GPT2Recompute, UnderBfloat16AutocastLossAndGradientsEqualThoseWithoutRecomputation) {
  const GptStep want = gpt_step("none", float32, bfloat16);
  for (const char* mode : {"gelu", "block"}) {
    const GptStep got = gpt_step(mode, float32, bfloat16);
    EXPECT_EQ(values(got.loss), values(want.loss)) << mode;
    for (const auto& [name, g] : want.grads) {
      EXPECT_EQ(g.dtype(), float32) << name;
      expect_same(*got.grads.find(name), g, std::string(mode) + " " + name);
    }
  }
}

// What the graph keeps for backward: "gelu" drops the MLP's 4 n_embd wide pre-GELU sums and GELU outputs of every
// layer, "block" everything but the blocks' inputs (and what the embeddings, ln_f and the head keep).
TEST(GPT2Recompute, KeepsLessForBackward) {
  const int64_t batch = 2, t = 16, embd = 32, layers = 2;
  models::GPT2Config config{.vocab_size = 37, .n_positions = 16, .n_embd = embd, .n_layer = layers, .n_head = 4};
  const Array tokens = random::Generator(5).randint(0, 37, {batch, t});
  std::vector<int64_t> kept;
  for (const char* mode : {"none", "gelu", "block"}) {
    config.recompute = mode;
    models::GPT2 model(config);
    kept.push_back(saved_bytes(model.forward(tokens)));
  }
  const int64_t mlp_wide = batch * t * 4 * embd * 4;  // one (B, T, 4 C) float32 activation
  EXPECT_GE(kept[0] - kept[1], 2 * layers * mlp_wide) << "none " << kept[0] << ", gelu " << kept[1];
  EXPECT_LT(kept[2], kept[1]) << "block " << kept[2];
  EXPECT_TRUE(message_has([] { models::GPT2({.recompute = "all"}); }, "recompute is \"none\", \"gelu\" or \"block\""));
}

// Mixed precision keeps float32 masters: under autocast(bfloat16) GPT-2's products run on bfloat16 copies of the
// parameters, while the parameters, their gradients and AdamW's moments stay float32, so an update far below a
// bfloat16 ulp of a weight still moves it (bfloat16 weights would round it away).
TEST(MasterWeights, Bfloat16AutocastTrainsFloat32ParametersGradientsAndAdamState) {
  random::seed(12);
  models::GPT2Config config{.vocab_size = 37, .n_positions = 16, .n_embd = 32, .n_layer = 2, .n_head = 4};
  config.embd_pdrop = config.attn_pdrop = config.resid_pdrop = 0.0;
  models::GPT2 model(config);
  const double lr = 1e-5;  // Adam's first step moves each weight by about lr (its gradient's sign)
  optim::AdamW opt(model.parameters(), {.lr = lr, .weight_decay = 0.0});
  random::Generator data(5);
  const Array tokens = data.randint(0, 37, {2, 12});
  const Array targets = data.randint(0, 37, {2, 12});
  Array loss, logits;
  {
    AutocastGuard amp(bfloat16);
    logits = model.forward(tokens);
    loss = models::lm_loss(logits, targets);
  }
  EXPECT_EQ(logits.dtype(), bfloat16) << "the head's product ran on bfloat16 copies";
  EXPECT_EQ(loss.dtype(), float32);
  loss.backward();
  Array norm_weight;  // ones: the bfloat16 values next to 1 are 1 - 2^-8 and 1 + 2^-7
  for (const auto& [name, p] : model.named_parameters())
    if (name == "transformer.h.0.ln_1.weight") norm_weight = p;
  ASSERT_TRUE(norm_weight.defined());
  const std::vector<double> before = values(norm_weight);
  opt.step();
  for (const auto& [name, p] : model.named_parameters()) {
    EXPECT_EQ(p.dtype(), float32) << name;
    EXPECT_EQ(p.grad().dtype(), float32) << name;
  }
  for (const auto& [name, s] : opt.state_dict())
    if (is_floating(s.dtype()) && s.ndim() > 0) {
      EXPECT_EQ(s.dtype(), float32) << name;
    }
  const std::vector<double> after = values(norm_weight);
  const std::vector<double> rounded = values(norm_weight.astype(bfloat16));
  const std::vector<double> g = values(norm_weight.grad());
  int moved = 0;
  for (size_t i = 0; i < after.size(); ++i) {
    if (g[i] == 0) continue;
    EXPECT_NE(after[i], before[i]) << "element " << i << ": the float32 master kept the small update";
    EXPECT_LT(std::abs(after[i] - before[i]), 0.5 * 0x1p-8) << "below half a bfloat16 ulp of the weight";
    EXPECT_EQ(rounded[i], before[i]) << "element " << i << ": in bfloat16 the update rounds away";
    ++moved;
  }
  EXPECT_GT(moved, 16);
}
