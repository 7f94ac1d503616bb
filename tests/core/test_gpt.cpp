// GPT-2 (models::GPT2): Hugging Face's names and shapes for the 124M configuration, the presets, logits of a tiny
// Hub-named checkpoint against NumPy's float64 forward (tests/golden/gpt_golden.py) on every backend, strict
// loading, the tied embedding's summed gradient, gradients against central differences, the KV cache against the
// full forward, and a few AdamW steps on the tokenizer's corpus.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "core/lm_test_util.hpp"
#include "harness/op_harness.hpp"
#include "kiln/kiln.hpp"
#include "kiln/models.hpp"
#include "kiln/text.hpp"
#include "text/text_test_util.hpp"

namespace kiln {
namespace {

using kiln_test::expect_close;
using kiln_test::kGptGolden;
using kiln_test::message_has;
using kiln_test::tiny_gpt2_config;

std::shared_ptr<models::GPT2> golden_gpt2(DType dtype, Device device) {
  return models::load_gpt2(kGptGolden + "gpt2_tiny.safetensors", tiny_gpt2_config(), dtype, device);
}

TEST(GPT2, StateDictHasHuggingFacesNamesAndShapesFor124M) {
  models::GPT2 model(models::GPT2Config::gpt2_124m(), bfloat16);
  // GPT2LMHeadModel(GPT2Config()).state_dict(), written out: name and shape.
  std::vector<std::pair<std::string, Shape>> want{{"transformer.wte.weight", {50257, 768}},
                                                  {"transformer.wpe.weight", {1024, 768}}};
  for (int i = 0; i < 12; ++i) {
    const std::string p = "transformer.h." + std::to_string(i) + ".";
    for (const auto& [name, shape] : std::vector<std::pair<std::string, Shape>>{{"ln_1.weight", {768}},
                                                                                {"ln_1.bias", {768}},
                                                                                {"attn.c_attn.weight", {768, 2304}},
                                                                                {"attn.c_attn.bias", {2304}},
                                                                                {"attn.c_proj.weight", {768, 768}},
                                                                                {"attn.c_proj.bias", {768}},
                                                                                {"ln_2.weight", {768}},
                                                                                {"ln_2.bias", {768}},
                                                                                {"mlp.c_fc.weight", {768, 3072}},
                                                                                {"mlp.c_fc.bias", {3072}},
                                                                                {"mlp.c_proj.weight", {3072, 768}},
                                                                                {"mlp.c_proj.bias", {768}}})
      want.emplace_back(p + name, shape);
  }
  want.push_back({"transformer.ln_f.weight", {768}});
  want.push_back({"transformer.ln_f.bias", {768}});
  want.push_back({"lm_head.weight", {50257, 768}});
  const nn::StateDict sd = model.hf_state_dict();
  ASSERT_EQ(sd.size(), want.size());
  size_t i = 0;
  for (const auto& [name, value] : sd) {
    EXPECT_EQ(name, want[i].first);
    EXPECT_EQ(value.shape(), want[i].second) << name;
    ++i;
  }
  EXPECT_TRUE(sd.at("lm_head.weight").shares_storage(sd.at("transformer.wte.weight")));
  EXPECT_EQ(model.num_parameters(), 124439808);  // HF's count for gpt2 (the tied head counted once)
}

TEST(GPT2, PresetsAndDepthConfigs) {
  const auto d6 = models::GPT2Config::from_name("d6");
  EXPECT_EQ(d6.n_layer, 6);
  EXPECT_EQ(d6.n_embd, 384);
  EXPECT_EQ(d6.n_head, 6);
  const auto d12 = models::GPT2Config::from_name("d12");
  EXPECT_EQ(d12.n_embd, 768);
  EXPECT_EQ(d12.n_head, 12);
  EXPECT_EQ(models::GPT2Config::from_name("gpt2-medium").n_embd, 1024);
  EXPECT_EQ(models::GPT2Config::from_name("774m").n_layer, 36);
  const auto xl = models::GPT2Config::from_name("1558m");
  EXPECT_EQ(xl.n_embd, 1600);
  EXPECT_EQ(xl.n_head, 25);
  EXPECT_EQ(xl.n_layer, 48);
  EXPECT_TRUE(message_has([] { models::GPT2Config::from_name("gpt3"); }, "d<depth>"));
  EXPECT_THROW(models::GPT2({.n_embd = 10, .n_head = 3}), ValueError);
}

TEST(GPT2, WithoutBiasesTheProjectionsAndNormsHaveWeightsOnly) {
  models::GPT2 model({.vocab_size = 20, .n_positions = 8, .n_embd = 8, .n_layer = 1, .n_head = 2, .bias = false});
  std::vector<std::string> names;
  for (const auto& [name, p] : model.named_parameters()) names.push_back(name);
  EXPECT_EQ(names,
            (std::vector<std::string>{"transformer.wte.weight", "transformer.wpe.weight", "transformer.h.0.ln_1.weight",
                                      "transformer.h.0.attn.c_attn.weight", "transformer.h.0.attn.c_proj.weight",
                                      "transformer.h.0.ln_2.weight", "transformer.h.0.mlp.c_fc.weight",
                                      "transformer.h.0.mlp.c_proj.weight", "transformer.ln_f.weight"}));
  EXPECT_EQ(model.forward(zeros({2, 3}, int64)).shape(), (Shape{2, 3, 20}));
  const std::string tree = model.repr();
  for (const char* part : {"GPT2Model", "GPT2Block", "GPT2Attention", "GPT2MLP", "Conv1D(nf=24, nx=8, bias=false)"})
    EXPECT_NE(tree.find(part), std::string::npos) << part << " not in\n" << tree;
}

TEST(GPT2, InitialisationFollowsHuggingFace) {
  random::seed(3);
  models::GPT2 model({.vocab_size = 100, .n_positions = 32, .n_embd = 64, .n_layer = 8, .n_head = 4});
  const nn::StateDict sd = model.state_dict();
  auto stddev = [&](const std::string& name) { return sd.at(name).astype(float64).std().item<double>(); };
  EXPECT_NEAR(stddev("transformer.wte.weight"), 0.02, 0.002);
  EXPECT_NEAR(stddev("transformer.h.0.attn.c_attn.weight"), 0.02, 0.002);
  EXPECT_NEAR(stddev("transformer.h.3.mlp.c_fc.weight"), 0.02, 0.002);
  EXPECT_NEAR(stddev("transformer.h.0.attn.c_proj.weight"), 0.02 / 4, 0.0006);  // 0.02 / sqrt(2 * 8)
  EXPECT_NEAR(stddev("transformer.h.7.mlp.c_proj.weight"), 0.02 / 4, 0.0006);
  EXPECT_EQ(abs(sd.at("transformer.h.2.attn.c_attn.bias")).max().item<double>(), 0.0);
  EXPECT_EQ(sd.at("transformer.ln_f.weight").min().item<double>(), 1.0);
}

TEST(GPT2, LogitsOfATinyHubCheckpointEqualNumPysOnEveryBackend) {
  const Array tokens = load(kGptGolden + "gpt2_tokens.npy");
  const Array want = load(kGptGolden + "gpt2_logits.npy");
  for (Device d : harness::backends()) {
    auto model = golden_gpt2(float64, d);
    model->eval();
    expect_close(model->forward(tokens.to(d)), want, 1e-12, "float64 on " + d.str());
    auto model32 = golden_gpt2(float32, d);
    expect_close(model32->forward(tokens.to(d).astype(int32)), want, 2e-5, "float32 on " + d.str());
  }
}

TEST(GPT2, ModelsOfOneSeedAgreeOnEveryBackend) {
  // Within the few ulps by which the backends' normal draws differ (their log/sin/cos; tests/cuda/test_random_gpu.cpp).
  const models::GPT2Config config{.vocab_size = 50, .n_positions = 8, .n_embd = 16, .n_layer = 2, .n_head = 2};
  random::seed(11);
  const nn::StateDict reference = models::GPT2(config).state_dict();
  for (Device d : harness::backends()) {
    random::seed(11);
    models::GPT2 model(config, float32, d);
    for (const auto& [name, value] : model.state_dict())
      expect_close(value, reference.at(name), 1e-7, name + " on " + d.str());
  }
}

TEST(GPT2, LoadingTakesBothNamingsAndNamesAMissingOrExtraTensor) {
  const std::string path = kGptGolden + "gpt2_tiny.safetensors";
  const nn::StateDict hub = nn::load_safetensors(path);
  ASSERT_TRUE(hub.find("h.0.attn.bias"));  // the Hub's naming, with the old mask buffers
  auto model = golden_gpt2(float64, cpu());
  const Array tokens = load(kGptGolden + "gpt2_tokens.npy");
  const Array want = load(kGptGolden + "gpt2_logits.npy");

  // GPT2LMHeadModel's names (prefixed, with lm_head) load too.
  models::GPT2 other(tiny_gpt2_config(), float64);
  other.load_hf_state_dict(model->hf_state_dict());
  expect_close(other.forward(tokens), want, 1e-12, "from the prefixed names");

  auto without = [&](const std::string& skip) {
    nn::StateDict s;
    for (const auto& [name, value] : hub)
      if (name != skip) s.insert(name, value);
    return s;
  };
  EXPECT_TRUE(message_has([&] { other.load_hf_state_dict(without("h.1.mlp.c_fc.bias")); }, "h.1.mlp.c_fc.bias"));
  nn::StateDict extra = without("");
  extra.insert("h.0.mlp.gate.weight", zeros({2}));
  EXPECT_TRUE(message_has([&] { other.load_hf_state_dict(extra); }, "h.0.mlp.gate.weight"));
  nn::StateDict untied = without("");
  untied.insert("lm_head.weight", zeros({61, 16}, float64));
  EXPECT_TRUE(message_has([&] { other.load_hf_state_dict(untied); }, "lm_head.weight"));
  nn::StateDict misshaped = without("ln_f.bias");
  misshaped.insert("ln_f.bias", zeros({15}, float64));
  EXPECT_THROW(other.load_hf_state_dict(misshaped), ShapeError);

  // A kiln-saved Hugging Face state dict round-trips through a file; load_gpt2 infers a config of heads of 64.
  const std::string saved = testing::TempDir() + "kiln_gpt2_roundtrip.safetensors";
  random::seed(5);
  models::GPT2 big({.vocab_size = 40, .n_positions = 8, .n_embd = 128, .n_layer = 1, .n_head = 2});
  nn::save_safetensors(saved, big.hf_state_dict());
  auto back = models::load_gpt2(saved);
  EXPECT_EQ(back->config().n_head, 2);
  EXPECT_EQ(back->config().n_layer, 1);
  big.eval();
  const Array t = from_data(std::vector<int64_t>{1, 5, 39, 0}, Shape{1, 4});
  EXPECT_TRUE(array_equal(back->forward(t), big.forward(t)));
  std::remove(saved.c_str());
}

/// GPT-2's forward written out from its parameters with two copies of the embedding: `embed` for the token
/// lookup and `head` for the logits.
Array written_out_forward(const nn::StateDict& p, const Array& tokens, const Array& embed, const Array& head,
                          int64_t n_head) {
  const int64_t b = tokens.shape(0), t = tokens.shape(1), c = embed.shape(1), d = c / n_head;
  auto ln = [&](const Array& x, const std::string& name) {
    const Array mu = x.mean({-1}, true), var = square(x - mu).mean({-1}, true);
    return (x - mu) / sqrt(var + 1e-5) * p.at(name + ".weight") + p.at(name + ".bias");
  };
  auto conv = [&](const Array& x, const std::string& name) {
    return matmul(x, p.at(name + ".weight")) + p.at(name + ".bias");
  };
  Array x = take(embed, tokens, 0) + p.at("transformer.wpe.weight").slice(0, 0, t);
  const Array mask = triu(ones({t, t}, bool_), 1);
  for (int i = 0; p.find("transformer.h." + std::to_string(i) + ".ln_1.weight"); ++i) {
    const std::string h = "transformer.h." + std::to_string(i) + ".";
    const Array qkv = conv(ln(x, h + "ln_1"), h + "attn.c_attn");
    auto heads = [&](int64_t j) {
      return swapaxes(qkv.slice(-1, j * c, (j + 1) * c).reshape({b, t, n_head, d}), 1, 2);
    };
    Array s = matmul(heads(0), swapaxes(heads(1), 2, 3)) / std::sqrt(static_cast<double>(d));
    s = where(mask, -INFINITY, s);
    const Array a = matmul(nn::softmax(s, -1), heads(2));
    x = x + conv(swapaxes(a, 1, 2).reshape({b, t, c}), h + "attn.c_proj");
    x = x + conv(gelu_tanh(conv(ln(x, h + "ln_2"), h + "mlp.c_fc")), h + "mlp.c_proj");
  }
  return matmul(ln(x, "transformer.ln_f"), head.T());
}

TEST(GPT2, TheTiedEmbeddingGetsTheSumOfTheLookupsAndTheHeadsGradients) {
  auto model = golden_gpt2(float64, cpu());
  const Array tokens = load(kGptGolden + "gpt2_tokens.npy");
  const Array targets = (tokens + 1) % 61;
  models::lm_loss(model->forward(tokens), targets).backward();
  const nn::StateDict p = model->state_dict();
  Array embed = p.at("transformer.wte.weight").detach().copy().set_requires_grad();
  Array head = p.at("transformer.wte.weight").detach().copy().set_requires_grad();
  const Array logits = written_out_forward(p, tokens, embed, head, 4);
  expect_close(logits, load(kGptGolden + "gpt2_logits.npy"), 1e-12, "the written-out forward");
  nn::cross_entropy(logits.reshape(-1, 61), targets.reshape(-1)).backward();
  Array wte_grad;
  for (const auto& [name, value] : model->named_parameters())
    if (name == "transformer.wte.weight") wte_grad = value.grad();
  ASSERT_TRUE(wte_grad.defined());
  expect_close(wte_grad, embed.grad() + head.grad(), 1e-10, "wte's gradient");
  EXPECT_GT(abs(embed.grad()).max().item<double>(), 1e-3);  // both paths contribute
  EXPECT_GT(abs(head.grad()).max().item<double>(), 1e-3);
  EXPECT_EQ(model->parameters().size(), model->state_dict().size());  // one array for both uses
}

TEST(GPT2, GradientsOfATinyModelMatchCentralDifferences) {
  random::seed(21);
  models::GPT2 model({.vocab_size = 11,
                      .n_positions = 6,
                      .n_embd = 8,
                      .n_layer = 2,
                      .n_head = 2,
                      .embd_pdrop = 0,
                      .attn_pdrop = 0,
                      .resid_pdrop = 0},
                     float64);
  for (auto& [name, p] : model.named_parameters()) {  // larger weights than HF's 0.02, so every term matters
    NoGradGuard no_grad;
    p += random::normal(p.shape(), 0.0, 0.3, float64);
  }
  const Array tokens = from_data(std::vector<int64_t>{1, 4, 9, 2, 0, 7, 3, 3, 10, 5}, Shape{2, 5});
  const Array targets = from_data(std::vector<int64_t>{4, 9, 2, 0, 6, 3, 3, 10, 5, 1}, Shape{2, 5});
  kiln_test::expect_gradients_match_differences(
      model, [&] { return models::lm_loss(model.forward(tokens), targets); }, 1e-6);
}

TEST(GPT2, TheCachedForwardGivesTheFullForwardsLogitsAtEveryStepOnEveryBackend) {
  const Array tokens = load(kGptGolden + "gpt2_tokens.npy");
  for (Device d : harness::backends()) {
    auto model = golden_gpt2(float64, d);
    const Array full = model->forward(tokens.to(d));
    models::KVCache cache = model->make_cache(2, 10);
    EXPECT_EQ(cache.max_length(), 10);
    // A prompt of 3, two single tokens, then a chunk of 2 after cached positions (the shifted causal mask).
    int64_t at = 0;
    for (int64_t n : {3, 1, 1, 2}) {
      const Array step = model->forward(tokens.to(d).slice(1, at, at + n), cache);
      EXPECT_FALSE(step.requires_grad());
      expect_close(step, full.slice(1, at, at + n), 1e-12, d.str() + " positions from " + std::to_string(at));
      at += n;
      EXPECT_EQ(cache.length(), at);
    }
    EXPECT_TRUE(message_has([&] { model->forward(tokens.to(d).slice(1, 0, 4), cache); }, "exceed"));
  }
}

TEST(GPT2, UnderAutocastTheProjectionsRunInBFloat16AndTheGradientsStayFloat32) {
  const Array tokens = load(kGptGolden + "gpt2_tokens.npy");
  const Array want = load(kGptGolden + "gpt2_logits.npy");
  for (Device d : harness::backends()) {
    auto model = golden_gpt2(float32, d);
    Array logits;
    {
      AutocastGuard amp(bfloat16);
      logits = model->forward(tokens.to(d));
      models::lm_loss(logits, ((tokens + 1) % 61).to(d)).backward();
      // Generation under autocast: the float32 cache meets bfloat16 projections.
      EXPECT_EQ(models::generate(*model, {3, 14}, {.max_new_tokens = 4, .temperature = 0.0}).size(), 4u);
    }
    EXPECT_EQ(logits.dtype(), bfloat16);
    expect_close(logits, want, 0.1, "bfloat16 logits on " + d.str());  // a few bfloat16 ulps of logits near 5
    for (const auto& [name, p] : model->named_parameters()) {
      ASSERT_TRUE(p.grad().defined()) << name;
      EXPECT_EQ(p.grad().dtype(), float32) << name;
    }
  }
}

TEST(GPT2, PositionsPastTheModelAreRefused) {
  auto model = golden_gpt2(float64, cpu());
  EXPECT_TRUE(message_has([&] { model->forward(zeros({1, 17}, int64)); }, "n_positions"));
  EXPECT_THROW(model->forward(zeros({1, 3}, float32)), ShapeError);
}

TEST(GPT2, AFewAdamWStepsOnTheTokenizersCorpusLowerTheLoss) {
  KILN_SKIP_WITHOUT_ICU();  // the corpus is not ASCII
  const std::string data = KILN_TEXT_DATA_DIR;
  const auto tok = text::BpeTokenizer::load(data + "/vocab.json", data + "/merges.txt");
  const std::vector<int32_t> ids = tok.encode(text::read_text(data + "/corpus.txt"));
  ASSERT_GT(ids.size(), 2000u);
  random::seed(4);
  models::GPT2 model({.vocab_size = tok.vocab_size(),
                      .n_positions = 32,
                      .n_embd = 32,
                      .n_layer = 2,
                      .n_head = 2,
                      .embd_pdrop = 0,
                      .attn_pdrop = 0,
                      .resid_pdrop = 0});
  optim::AdamW opt(model.parameters(), {.lr = 3e-3, .weight_decay = 0.01});
  const int64_t batch = 8, seq = 32;
  std::vector<int64_t> x(batch * seq), y(batch * seq);
  const std::vector<int64_t> starts = random::randint(0, static_cast<int64_t>(ids.size()) - seq - 1, {batch}, int64)
                                          .to_vector<int64_t>();  // one fixed batch: the loss must fall on it
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t t = 0; t < seq; ++t) {
      x[static_cast<size_t>(b * seq + t)] = ids[static_cast<size_t>(starts[static_cast<size_t>(b)] + t)];
      y[static_cast<size_t>(b * seq + t)] = ids[static_cast<size_t>(starts[static_cast<size_t>(b)] + t + 1)];
    }
  const Array xs = from_data(x, Shape{batch, seq}), ys = from_data(y, Shape{batch, seq});
  double first = 0, last = 0;
  for (int step = 0; step < 30; ++step) {
    const Array loss = models::lm_loss(model.forward(xs), ys);
    (step == 0 ? first : last) = loss.item<double>();
    opt.zero_grad();
    loss.backward();
    opt.step();
  }
  EXPECT_NEAR(first, std::log(static_cast<double>(tok.vocab_size())), 0.3);  // a fresh model is nearly uniform
  EXPECT_LT(last, 0.7 * first);
}

}  // namespace
}  // namespace kiln
