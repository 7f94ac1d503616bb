// kiln::compile: a traced and replayed training step against the same steps run eagerly (bit for bit), and the
// refusals of what a replay cannot repeat. Runs on every available backend.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kiln/compile.hpp"
#include "kiln/kiln.hpp"
#include "lm_test_util.hpp"
#include "test_util.hpp"

using namespace kiln;

namespace {

std::vector<Device> devices() {
  std::vector<Device> d{cpu()};
  if (num_gpus() > 0) d.push_back(gpu(0));
  return d;
}

/// An MLP with dropout and its optimizer, built from one seed.
struct Mlp {
  std::shared_ptr<nn::Sequential> model = std::make_shared<nn::Sequential>();
  std::unique_ptr<optim::Optimizer> opt;

  Mlp(Device device, bool adam, bool capturable = true) {
    random::seed(5);
    model->push_back(std::make_shared<nn::Linear>(12, 32));
    model->push_back(std::make_shared<nn::ReLU>());
    model->push_back(std::make_shared<nn::Dropout>(0.25));
    model->push_back(std::make_shared<nn::Linear>(32, 4));
    model->to(device);
    if (adam)
      opt = std::make_unique<optim::Adam>(
          model->parameters(), optim::AdamOptions{.lr = 0.01, .weight_decay = 0.1, .capturable = capturable});
    else
      opt = std::make_unique<optim::SGD>(model->parameters(),
                                         optim::SGDOptions{.lr = 0.1, .momentum = 0.9, .nesterov = true});
  }

  /// zero_grad, forward, loss, backward, clipping, step: returns {loss}.
  std::vector<Array> step(const std::vector<Array>& in) {
    opt->zero_grad();
    Array loss = nn::cross_entropy((*model)(in[0]), in[1]);
    loss.backward();
    optim::clip_grad_norm(model->parameters(), 0.5);
    opt->step();
    return {loss};
  }
};

struct Batches {
  std::vector<Array> x, y;
  Batches(Device device, int n, int64_t rows = 10) {
    random::seed(99);
    for (int i = 0; i < n; ++i) {
      x.push_back(random::normal({rows, 12}).to(device));
      y.push_back(random::randint(0, 4, {rows}, int64).to(device));
    }
  }
};

void expect_same_parameters(const nn::Module& a, const nn::Module& b, const std::string& what) {
  const auto pa = a.named_parameters(), pb = b.named_parameters();
  ASSERT_EQ(pa.size(), pb.size());
  for (size_t i = 0; i < pa.size(); ++i)
    EXPECT_EQ(pa[i].second.to_vector<float>(), pb[i].second.to_vector<float>()) << what << ": " << pa[i].first;
}

}  // namespace

TEST(Compile, ReplayedStepsEqualEagerStepsBitForBit) {
  for (Device device : devices()) {
    for (bool adam : {false, true}) {
      const std::string what = device.str() + (adam ? " Adam" : " SGD");
      const Batches data(device, 7);
      Mlp eager(device, adam), compiled(device, adam);
      CompiledStep step = compile([&](const std::vector<Array>& in) { return compiled.step(in); });
      random::seed(123);
      std::vector<float> eager_losses, compiled_losses;
      for (int i = 0; i < 7; ++i) eager_losses.push_back(eager.step({data.x[i], data.y[i]})[0].item<float>());
      random::seed(123);  // the same dropout masks
      for (int i = 0; i < 7; ++i) compiled_losses.push_back(step({data.x[i], data.y[i]})[0].item<float>());
      EXPECT_EQ(eager_losses, compiled_losses) << what;
      expect_same_parameters(*eager.model, *compiled.model, what);
      // One warm-up call, two traces, four replays.
      EXPECT_TRUE(step.compiled()) << what;
      EXPECT_EQ(step.eager_calls(), 1) << what;
      EXPECT_EQ(step.traced_calls(), 2) << what;
      EXPECT_EQ(step.replays(), 4) << what;
      EXPECT_GT(step.recorded_ops(), 20) << what;
      EXPECT_NE(step.summary().find("matmul: "), std::string::npos) << what << "\n" << step.summary();
      EXPECT_NE(step.summary().find("random: 1"), std::string::npos) << what << "\n" << step.summary();
    }
  }
}

namespace {

/// Every parameter's values, in named_parameters' order.
std::vector<std::vector<float>> snapshot(const nn::Module& m) {
  std::vector<std::vector<float>> v;
  for (const auto& [name, p] : m.named_parameters()) v.push_back(p.to_vector<float>());
  return v;
}

/// The first parameter of m whose values differ from `before` (a snapshot), with its largest difference; empty
/// when all are equal.
std::string first_difference(const nn::Module& m, const std::vector<std::vector<float>>& before) {
  const auto named = m.named_parameters();
  for (size_t i = 0; i < named.size(); ++i) {
    const std::vector<float> v = named[i].second.to_vector<float>();
    if (v == before[i]) continue;
    double worst = 0;
    for (size_t j = 0; j < v.size(); ++j) worst = std::max(worst, std::abs(double(v[j]) - double(before[i][j])));
    return named[i].first + " (largest difference " + std::to_string(worst) + ")";
  }
  return "";
}

/// GPT-2 tiny with dropout everywhere, trained by AdamW (capturable) from one seed.
struct TinyGpt {
  std::shared_ptr<models::GPT2> model;
  std::unique_ptr<optim::AdamW> opt;
  TinyGpt(const models::GPT2Config& config, Device device) {
    random::seed(3);
    model = std::make_shared<models::GPT2>(config, float32, device);
    model->train();
    opt = std::make_unique<optim::AdamW>(model->parameters(), optim::AdamOptions{.lr = 1e-3, .capturable = true});
  }
  std::vector<Array> step(const std::vector<Array>& in) {
    opt->zero_grad();
    Array loss = models::lm_loss((*model)(in[0]), in[1]);
    loss.backward();
    opt->step();
    return {loss};
  }
};

/// m's training step under bfloat16 autocast (no clipping): zero_grad, forward and loss, backward, AdamW.
std::function<std::vector<Array>(const std::vector<Array>&)> autocast_step(TinyGpt& m) {
  return [&m](const std::vector<Array>& in) {
    m.opt->zero_grad();
    Array loss;
    {
      AutocastGuard amp(bfloat16);
      loss = models::lm_loss((*m.model)(in[0]), in[1]);
    }
    loss.backward();
    m.opt->step();
    return std::vector<Array>{loss};
  };
}

models::GPT2Config tiny_dropout_config(const std::string& recompute) {
  models::GPT2Config config = kiln_test::tiny_gpt2_config();
  config.embd_pdrop = config.attn_pdrop = config.resid_pdrop = 0.1;
  config.recompute = recompute;
  return config;
}

/// Six batches of 2 x 9 tokens, 18 different ones each. (Written when the embedding's GPU gradient added with
/// atomics, so a row hit three or more times could vary in its last bits run to run; it now sums each row in the
/// CPU's order, ApiGpu.take_gradient_along_an_axis_equals_the_cpus_bits, and repeated tokens would do too.)
std::vector<Array> tiny_tokens(const models::GPT2Config& config, Device device) {
  std::vector<Array> tokens;
  for (int64_t i = 0; i < 6; ++i)
    tokens.push_back(remainder(arange(18, int64) * int64_t{7} + int64_t{11 * i + 3}, Scalar(config.vocab_size))
                         .reshape({2, 9})
                         .to(device));
  return tokens;
}

}  // namespace

/// Runs `step` on five batches of `tokens` (the generator seeded once, or before each step when `reseed`) and
/// checks each loss and the parameters of `model` after each step against `expected` (losses, snapshots), which
/// it fills when empty.
void run_steps(const std::function<std::vector<Array>(const std::vector<Array>&)>& step, const nn::Module& model,
               const std::vector<Array>& tokens, bool reseed, std::vector<float>& losses,
               std::vector<std::vector<std::vector<float>>>& params, const std::string& what) {
  const bool record = losses.empty();
  random::seed(1);
  for (int i = 0; i < 5; ++i) {
    if (reseed) random::seed(10 + i);
    const float loss = step({tokens[i], tokens[i + 1]})[0].item<float>();
    if (record) {
      losses.push_back(loss);
      params.push_back(snapshot(model));
      continue;
    }
    EXPECT_EQ(loss, losses[i]) << what << " step " << i;
    EXPECT_EQ(first_difference(model, params[i]), "") << what << " after step " << i;
  }
}

TEST(Compile, GptEagerStepsAreDeterministic) {
  // What the compiled step is held to: two eager runs from one seed give the same parameters after every step.
  for (Device device : devices()) {
    const models::GPT2Config config = tiny_dropout_config("none");
    const std::vector<Array> tokens = tiny_tokens(config, device);
    TinyGpt a(config, device), b(config, device);
    std::vector<float> losses;
    std::vector<std::vector<std::vector<float>>> params;
    run_steps([&](const std::vector<Array>& in) { return a.step(in); }, *a.model, tokens, false, losses, params, "");
    run_steps([&](const std::vector<Array>& in) { return b.step(in); }, *b.model, tokens, false, losses, params,
              device.str());
  }
}

TEST(Compile, AGptStepWithDropoutReplaysAsItRunsEagerly) {
  // Also with each block checkpointed: its backward recomputes the block (draws included) inside the trace. The
  // generator seeded once (each step's draws follow the last's) and before each step (a replay's draws follow the
  // generator's state, not the trace's).
  for (const std::string recompute : {"none", "block"}) {
    for (bool reseed : {false, true}) {
      for (Device device : devices()) {
        const std::string what = device.str() + " recompute " + recompute + (reseed ? " reseeded" : "");
        const models::GPT2Config config = tiny_dropout_config(recompute);
        const std::vector<Array> tokens = tiny_tokens(config, device);
        TinyGpt eager(config, device), compiled(config, device);
        CompiledStep step = compile([&](const std::vector<Array>& in) { return compiled.step(in); });
        std::vector<float> losses;
        std::vector<std::vector<std::vector<float>>> params;
        run_steps([&](const std::vector<Array>& in) { return eager.step(in); }, *eager.model, tokens, reseed, losses,
                  params, what);
        run_steps([&](const std::vector<Array>& in) { return step(in); }, *compiled.model, tokens, reseed, losses,
                  params, what);  // warm-up, two traces, two replays
        EXPECT_EQ(step.replays(), 2) << what;
      }
    }
  }
}

TEST(Compile, HostValuesThatChangeBetweenStepsAreRefused) {
  // Adam's bias correction computed on the host from its step count: the two traces differ in those scalars.
  const Batches data(cpu(), 4);
  Mlp m(cpu(), true, /*capturable=*/false);
  CompiledStep step = compile([&](const std::vector<Array>& in) { return m.step(in); });
  step({data.x[0], data.y[0]});
  step({data.x[1], data.y[1]});
  try {
    step({data.x[2], data.y[2]});
    FAIL() << "expected ValueError";
  } catch (const ValueError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("two traces differ at op"), std::string::npos) << msg;
    EXPECT_NE(msg.find("capturable"), std::string::npos) << msg;
  }
  EXPECT_FALSE(step.compiled());
  // A branch on a host counter: another op in the second trace.
  int calls = 0;
  const Array x = arange(6, float32);
  CompiledStep branchy = compile([&](const std::vector<Array>& in) {
    return std::vector<Array>{++calls % 2 ? in[0] * 2.0 : in[0] + 2.0};
  }, {.warmup = 0});
  EXPECT_EQ(branchy({x})[0].to_vector<float>(), (x * 2.0).to_vector<float>());
  EXPECT_THROW(branchy({x}), ValueError);
}

TEST(Compile, WhatAReplayCannotRepeatIsRefusedWhileTracing) {
  const Array x = arange(6, float32);
  CompiledStep reads = compile([](const std::vector<Array>& in) {
    const double total = sum(in[0]).item<double>();  // a host read
    return std::vector<Array>{in[0] * total};
  }, {.warmup = 0});
  try {
    reads({x});
    FAIL() << "expected ValueError";
  } catch (const ValueError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("reading array values on the host (item())"), std::string::npos) << msg;
    EXPECT_NE(msg.find("eagerly"), std::string::npos) << msg;
  }
  random::Generator own(4);
  CompiledStep draws = compile([&](const std::vector<Array>& in) {
    return std::vector<Array>{in[0] + own.normal(in[0].shape())};
  }, {.warmup = 0});
  try {
    draws({x});
    FAIL() << "expected ValueError";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("kiln::random::Generator"), std::string::npos) << e.what();
  }
  EXPECT_THROW(compile([](const std::vector<Array>&) { return std::vector<Array>{Array()}; }, {.warmup = 0})({x}),
               ValueError);
  EXPECT_THROW(compile([](const std::vector<Array>& in) { return in; })({x.copy().set_requires_grad()}),
               ValueError);
  EXPECT_THROW(compile(nullptr), ValueError);
  CompiledStep inner = compile([](const std::vector<Array>& in) { return std::vector<Array>{in[0] + 1.0}; });
  CompiledStep outer = compile([&](const std::vector<Array>& in) { return inner(in); }, {.warmup = 0});
  EXPECT_THROW(outer({x}), ValueError);
  CompiledStep prints = compile([](const std::vector<Array>& in) {
    EXPECT_FALSE(in[0].str().empty());
    return in;
  }, {.warmup = 0});
  EXPECT_THROW(prints({x}), ValueError);
}

TEST(Compile, InputsAreCopiedInAndOtherShapesRunEagerly) {
  // The replay reads each call's inputs (copied into the traced ones), host gathers included (take on the CPU).
  for (Device device : devices()) {
    const Array table = arange(40, float32).reshape({10, 4}).to(device);
    CompiledStep gather = compile([&](const std::vector<Array>& in) {
      return std::vector<Array>{take(table, in[0], 0) * 2.0 + in[1]};
    });
    for (int i = 0; i < 5; ++i) {
      const Array idx = random::randint(0, 10, {3}, int64).to(device);
      const Array shift = full({3, 4}, static_cast<double>(i), float32, device);
      const Array expected = take(table, idx, 0) * 2.0 + shift;
      const Array got = gather({idx, shift})[0];
      EXPECT_EQ(got.to_vector<float>(), expected.to_vector<float>()) << device.str() << " call " << i;
    }
    EXPECT_EQ(gather.replays(), 2) << device.str();
    const Array four = full({4, 4}, 1.0, float32, device);
    EXPECT_EQ(gather({random::randint(0, 10, {4}, int64).to(device), four})[0].shape(), (Shape{4, 4}));
    EXPECT_EQ(gather.eager_calls(), 2) << device.str();
    // Out-of-range indices still fail at a replay (the CPU's range check is a host step of the record).
    if (device.is_cpu()) {
      EXPECT_THROW(gather({full({3}, 12, int64), full({3, 4}, 0.0, float32)}), Error);
    }
  }
}

TEST(Compile, TrainStepCompiledTrainsAsItsEagerSteps) {
  for (Device device : devices()) {
    const Batches data(device, 8);
    Mlp eager(device, true), compiled(device, true);
    train::TrainStep plain(*eager.model, *eager.opt, {.max_grad_norm = 0.5});
    train::TrainStep replayed(*compiled.model, *compiled.opt, {.compile = true, .warmup = 2, .max_grad_norm = 0.5});
    random::seed(77);
    for (int i = 0; i < 8; ++i) plain(data.x[i], data.y[i]);
    random::seed(77);
    for (int i = 0; i < 8; ++i) replayed(data.x[i], data.y[i]);
    EXPECT_EQ(plain.mean_loss(), replayed.mean_loss()) << device.str();
    EXPECT_EQ(plain.accuracy(), replayed.accuracy()) << device.str();
    expect_same_parameters(*eager.model, *compiled.model, device.str());
    EXPECT_TRUE(replayed.graphed()) << device.str();
    EXPECT_GT(replayed.graph_nodes(), 20u) << device.str();
    EXPECT_EQ(replayed.replays(), 4) << device.str();  // 2 eager, 2 traced, 4 replayed
  }
  Mlp m(cpu(), true);
  EXPECT_THROW(train::TrainStep(*m.model, *m.opt, {.graph = true, .compile = true}), ValueError);
  EXPECT_THROW(train::TrainStep(*m.model, *m.opt, {.compile = true, .warmup = 0}), ValueError);
  optim::StepLR schedule(*m.opt, 2);
  EXPECT_THROW(train::TrainStep(*m.model, *m.opt, {.compile = true, .scheduler = &schedule}), ValueError);
}

TEST(Compile, CollectivesAreRefusedWhileTracing) {
  dist::ProcessGroup group({.rank = 0, .world_size = 1, .device = cpu()});
  EXPECT_FALSE(tracing_step());
  bool seen = false;
  CompiledStep step = compile([&](const std::vector<Array>& in) {
    seen = tracing_step();
    Array x = in[0] * 2.0;
    group.all_reduce(x, dist::ReduceOp::sum).wait();
    return std::vector<Array>{x};
  }, {.warmup = 0});
  try {
    step({arange(4, float32)});
    FAIL() << "expected ValueError";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("all_reduce: a collective inside a step traced by kiln::compile"),
              std::string::npos) << e.what();
  }
  EXPECT_TRUE(seen);
  EXPECT_FALSE(tracing_step());
}

namespace {

/// The same step function eagerly and compiled (warm-up, two traces, then replays) on four inputs: returns the
/// compiled step after checking every output of every call against the eager one, bit for bit.
CompiledStep expect_replays_equal_eager(const CompiledStep::Function& fn, Device device, const std::string& what,
                                        StepCompileOptions options = {}) {
  CompiledStep step = compile(fn, options);
  random::seed(8);
  for (int i = 0; i < 5; ++i) {
    const Array x = random::normal({6, 40}).to(device);
    const std::vector<Array> want = fn({x}), got = step({x});
    EXPECT_EQ(got.size(), want.size()) << what;
    for (size_t k = 0; k < std::min(got.size(), want.size()); ++k)
      EXPECT_TRUE(array_equal(got[k], want[k])) << what << ": call " << i << ", output " << k;
  }
  EXPECT_EQ(step.replays(), 2) << what;
  return step;
}

}  // namespace

TEST(Compile, TheFusionPassMergesAChainWhoseIntermediatesNothingElseReads) {
  for (Device device : devices()) {
    random::seed(4);
    const Array w = random::normal({6, 40}).to(device), b = random::normal({40}).to(device);
    auto chain = [&](const std::vector<Array>& in) { return std::vector<Array>{exp(in[0] * w) + b}; };
    CompiledStep step = expect_replays_equal_eager(chain, device, device.str() + " chain");
    // multiply, exp, add: one fused call, its two intermediates never written.
    EXPECT_EQ(step.fused_ops(), 2) << device.str() << "\n" << step.summary();
    EXPECT_EQ(step.recorded_ops(), 1) << device.str() << "\n" << step.summary();
    EXPECT_NE(step.summary().find("fused multiply+exp+add: 1"), std::string::npos) << step.summary();
    CompiledStep unfused = expect_replays_equal_eager(chain, device, device.str() + " chain, fuse off", {.fuse = false});
    EXPECT_EQ(unfused.fused_ops(), 0);
    EXPECT_EQ(unfused.recorded_ops(), 3) << unfused.summary();
  }
}

TEST(Compile, TheFusionPassLeavesResultsThatAreReadAgainOrKept) {
  for (Device device : devices()) {
    random::seed(4);
    const Array w = random::normal({6, 40}).to(device);
    // t is an output of the step: exp cannot take multiply's place (t would not be written).
    auto kept = [&](const std::vector<Array>& in) {
      const Array t = in[0] * w;
      return std::vector<Array>{t, exp(t) + 1.0};
    };
    CompiledStep a = expect_replays_equal_eager(kept, device, device.str() + " kept");
    EXPECT_EQ(a.fused_ops(), 0) << a.summary();  // exp's result is then added to a scalar: not merged either
    // u is read by two calls: neither merges into exp.
    auto twice = [&](const std::vector<Array>& in) {
      const Array u = exp(in[0]);
      return std::vector<Array>{u * w, u - w};
    };
    CompiledStep b = expect_replays_equal_eager(twice, device, device.str() + " read twice");
    EXPECT_EQ(b.fused_ops(), 0) << b.summary();
    // A result the user's code keeps past the step (a reference the trace does not hold) is written as before:
    // after each replay it holds that replay's value.
    Array last;
    CompiledStep c = compile([&](const std::vector<Array>& in) {
      last = exp(in[0]);
      return std::vector<Array>{last * w};
    });
    for (int i = 0; i < 5; ++i) {
      const Array x = random::normal({6, 40}).to(device);
      const Array got = c({x})[0];
      EXPECT_TRUE(array_equal(last, exp(x))) << device.str() << " held, call " << i;
      EXPECT_TRUE(array_equal(got, exp(x) * w)) << device.str() << " held, call " << i;
    }
    EXPECT_EQ(c.replays(), 2);
    EXPECT_EQ(c.fused_ops(), 0) << c.summary();
  }
}

TEST(Compile, ALayerNormAndTheCastOfItsOutputBecomeOneKernel) {
  for (Device device : devices()) {
    random::seed(4);
    nn::LayerNorm ln(Shape{40});
    ln.to(device);
    const Array w = random::normal({6, 40}).astype(bfloat16).to(device);
    // The rows kernel writes the bfloat16 copy; its float32 result is never written.
    auto cast = [&](const std::vector<Array>& in) {
      NoGradGuard no_grad;
      return std::vector<Array>{ln(in[0]).astype(bfloat16)};
    };
    CompiledStep a = expect_replays_equal_eager(cast, device, device.str() + " layer norm, cast");
    EXPECT_EQ(a.fused_ops(), 1) << device.str() << "\n" << a.summary();
    EXPECT_NE(a.summary().find("fused layer_norm+identity: 1"), std::string::npos) << a.summary();
    auto scaled = [&](const std::vector<Array>& in) {
      NoGradGuard no_grad;
      return std::vector<Array>{ln(in[0]).astype(bfloat16) * w};
    };
    CompiledStep b = expect_replays_equal_eager(scaled, device, device.str() + " layer norm, cast, multiply");
    EXPECT_EQ(b.fused_ops(), 2) << device.str() << "\n" << b.summary();
    EXPECT_NE(b.summary().find("fused layer_norm+identity+multiply: 1"), std::string::npos) << b.summary();
  }
}

TEST(Compile, AGptStepUnderAutocastFusesItsLayerNormsWithTheirNeighbours) {
  // bfloat16 autocast, no dropout: each layer norm's float32 output is only cast for the product after it, and
  // its input's gradient is added to the residual's: the pass makes each pair one rows kernel, bit for bit (on a
  // GPU the backward is one opaque pass over x and the gradient instead, its addition a separate kernel).
  for (Device device : devices()) {
    const std::string what = device.str() + " autocast";
    const models::GPT2Config config = kiln_test::tiny_gpt2_config();
    const std::vector<Array> tokens = tiny_tokens(config, device);
    TinyGpt eager(config, device), compiled(config, device);
    // epilogues off: a GPU would fold the MLP's GELU gradient into its product (not bit for bit; the next test).
    CompiledStep step = compile(autocast_step(compiled), {.epilogues = false});
    std::vector<float> losses;
    std::vector<std::vector<std::vector<float>>> params;
    run_steps(autocast_step(eager), *eager.model, tokens, false, losses, params, what);
    run_steps([&](const std::vector<Array>& in) { return step(in); }, *compiled.model, tokens, false, losses, params,
              what);
    EXPECT_EQ(step.replays(), 2) << what;
    const std::string summary = step.summary();
    EXPECT_EQ(summary.find("matmul+gelu_tanh_backward"), std::string::npos) << what << "\n" << summary;
    EXPECT_NE(summary.find("fused layer_norm+identity: "), std::string::npos) << what << "\n" << summary;
    if (device.is_cpu()) {
      EXPECT_NE(summary.find("fused layer_norm_backward+add: "), std::string::npos) << what << "\n" << summary;
    } else {  // the backward is the GPU's one-pass layer_norm_backward call, which the pass does not merge into
      EXPECT_NE(("\n" + summary).find("\nlayer_norm_backward: "), std::string::npos) << what << "\n" << summary;
    }
    EXPECT_GE(step.fused_ops(), 2 * config.n_layer + 1) << what << "\n" << summary;
  }
}

TEST(Compile, AGeluGradientBecomesTheEpilogueOfTheProductThatMakesIt) {
  // bfloat16 autocast: each MLP's backward multiplies the product g W^T by gelu_tanh'(pre). Where the backend
  // folds that into the product (cuBLASLt's DGELU on a GPU) the pass makes the two calls one; the product is then
  // not rounded to bfloat16 before the multiply, so the step is held to bfloat16's precision, not to its bits.
  // The CPU has no such epilogue: nothing is folded and every bit stays the eager step's.
  for (Device device : devices()) {
    const std::string what = device.str() + " autocast, epilogues";
    const models::GPT2Config config = kiln_test::tiny_gpt2_config();
    const std::vector<Array> tokens = tiny_tokens(config, device);
    TinyGpt eager(config, device), compiled(config, device);
    CompiledStep step = compile(autocast_step(compiled));
    const bool folds = device.is_cuda();
    std::vector<float> losses;
    std::vector<std::vector<std::vector<float>>> params;
    run_steps(autocast_step(eager), *eager.model, tokens, false, losses, params, what);
    if (!folds) {
      run_steps([&](const std::vector<Array>& in) { return step(in); }, *compiled.model, tokens, false, losses,
                params, what);
    } else {
      random::seed(1);
      for (int i = 0; i < 5; ++i) {
        const float loss = step({tokens[i], tokens[i + 1]})[0].item<float>();
        EXPECT_NEAR(loss, losses[i], 2e-2 * std::abs(losses[i])) << what << " step " << i;
      }
      const auto named = compiled.model->named_parameters();
      for (size_t k = 0; k < named.size(); ++k) {
        const std::vector<float> v = named[k].second.to_vector<float>();
        double worst = 0, scale = 0;
        for (size_t e = 0; e < v.size(); ++e) {
          worst = std::max(worst, std::abs(double(v[e]) - double(params[4][k][e])));
          scale = std::max(scale, std::abs(double(params[4][k][e])));
        }
        // AdamW's steps are lr-sized (1e-3) whatever the gradient: five of them, a bfloat16 gradient's sign
        // flipping in a few elements at most.
        EXPECT_LE(worst, 1e-2 + 1e-2 * scale) << what << ": " << named[k].first;
      }
    }
    EXPECT_EQ(step.replays(), 2) << what;
    const std::string summary = step.summary();
    const size_t at = summary.find("matmul+gelu_tanh_backward: ");
    if (folds) {
      ASSERT_NE(at, std::string::npos) << what << "\n" << summary;
      EXPECT_EQ(std::stoll(summary.substr(at + 27)), config.n_layer) << what << "\n" << summary;
    } else {
      EXPECT_EQ(at, std::string::npos) << what << "\n" << summary;
    }
  }
}

TEST(Compile, FiftyTrainingStepsCompiledGiveTheEagerLosses) {
  // The check of the compiler as a whole: the same seed, 50 AdamW steps of a small GPT-2 with the compiler
  // on and off. float32: the losses are equal (the replays are the eager steps' calls, every bit). bfloat16
  // autocast: equal on the CPU; on a GPU the GELU-gradient epilogue rounds once where the eager step rounds twice,
  // so each loss must stay within bfloat16's noise of the eager one (its step-to-step changes are far larger).
  for (Device device : devices())
    for (bool bf16 : {false, true}) {
      const std::string what = device.str() + (bf16 ? " bfloat16 autocast" : " float32");
      const models::GPT2Config config = kiln_test::tiny_gpt2_config();
      const std::vector<Array> tokens = tiny_tokens(config, device);
      TinyGpt eager(config, device), compiled(config, device);
      auto step_of = [bf16](TinyGpt& m) {
        using Step = std::function<std::vector<Array>(const std::vector<Array>&)>;
        return bf16 ? autocast_step(m) : Step([&m](const std::vector<Array>& in) { return m.step(in); });
      };
      CompiledStep step = compile(step_of(compiled));
      auto eager_step = step_of(eager);
      const bool exact = !bf16 || device.is_cpu();
      double first = 0, last = 0;
      for (int i = 0; i < 50; ++i) {
        const std::vector<Array> in{tokens[i % 5], tokens[i % 5 + 1]};
        const float e = eager_step(in)[0].item<float>();
        const float c = step(in)[0].item<float>();
        if (i == 0) first = e;
        last = e;
        if (exact)
          EXPECT_EQ(c, e) << what << " step " << i;
        else
          EXPECT_NEAR(c, e, 2e-2 * std::abs(e)) << what << " step " << i;
      }
      EXPECT_EQ(step.replays(), 47) << what;
      EXPECT_LT(last, first - 0.2) << what << ": the model learns the five batches (about 4.1 to 3.6)";
    }
}

TEST(Compile, TheReplaysReuseTheMemoryOfArraysTheStepDropped) {
  // Thirty products in a row, each result read by the next only: an eager step holds two or three of them at
  // once, and so does the record (the arrays the step dropped gave their memory to later ones while traced), not
  // all thirty. Fusion off: every result is written, in memory that other results used before.
  for (Device device : devices()) {
    random::seed(6);
    const Array w = (random::normal({256, 256}) * (1.0 / 16.0)).to(device);
    auto chain = [&](const std::vector<Array>& in) {
      Array x = in[0];
      for (int i = 0; i < 30; ++i) x = tanh(matmul(x, w));
      return std::vector<Array>{x};
    };
    CompiledStep step = compile(chain, {.fuse = false});
    random::seed(8);
    for (int i = 0; i < 5; ++i) {
      const Array x = random::normal({256, 256}).to(device);
      const Array want = chain({x})[0], got = step({x})[0];
      EXPECT_TRUE(array_equal(got, want)) << device.str() << " call " << i;
    }
    EXPECT_EQ(step.replays(), 2);
    const int64_t one = 256 * 256 * 4;
    EXPECT_GE(step.memory_bytes(), one) << device.str();
    EXPECT_LE(step.memory_bytes(), 4 * one) << device.str() << ": the record holds " << step.memory_bytes()
                                            << " bytes; all 60 results would be " << 60 * one;
  }
}

TEST(Compile, TheFusionPassMergesIntoAnInPlaceAccumulation) {
  // acc += exp(x * w): the product and exp merge into the accumulation, whose result is its own first operand
  // (the merged kernel reads and writes acc element by element). acc lives outside the step, as a gradient
  // buffer does; each replay adds to it again, as each eager step does.
  for (Device device : devices()) {
    random::seed(4);
    const Array w = random::normal({6, 40}).to(device);
    Array acc_eager = zeros({6, 40}, float32, device), acc_compiled = zeros({6, 40}, float32, device);
    auto step_with = [&](Array& acc) {
      return [&acc, &w](const std::vector<Array>& in) {
        acc += exp(in[0] * w);
        return std::vector<Array>{acc * 1.0};
      };
    };
    CompiledStep step = compile(step_with(acc_compiled));
    auto eager = step_with(acc_eager);
    random::seed(8);
    for (int i = 0; i < 5; ++i) {
      const Array x = random::normal({6, 40}).to(device);
      const Array want = eager({x})[0], got = step({x})[0];
      EXPECT_TRUE(array_equal(got, want)) << device.str() << " call " << i;
      EXPECT_TRUE(array_equal(acc_compiled, acc_eager)) << device.str() << " call " << i;
    }
    EXPECT_EQ(step.replays(), 2);
    EXPECT_GE(step.fused_ops(), 2) << device.str() << "\n" << step.summary();
    EXPECT_NE(step.summary().find("fused multiply+exp+add"), std::string::npos) << step.summary();
  }
}
