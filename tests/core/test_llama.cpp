// The LLaMA-style decoder (models::Llama): Hugging Face's names (grouped-query shapes, a tied head), logits of a
// tiny checkpoint against NumPy's float64 forward (tests/golden/gpt_golden.py) on every backend, strict loading,
// gradients against central differences, the KV cache against the full forward, greedy generation.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/lm_test_util.hpp"
#include "harness/op_harness.hpp"
#include "kiln/kiln.hpp"
#include "kiln/models.hpp"
#include "test_util.hpp"

namespace kiln {
namespace {

using kiln_test::expect_close;
using kiln_test::kGptGolden;
using kiln_test::tiny_llama_config;

std::shared_ptr<models::Llama> golden_llama(DType dtype, Device device) {
  auto model = std::make_shared<models::Llama>(tiny_llama_config(), dtype, device);
  model->load_hf_state_dict(nn::load_safetensors(kGptGolden + "llama_tiny.safetensors"));
  return model;
}

TEST(Llama, StateDictHasHuggingFacesNamesAndShapes) {
  models::Llama model(tiny_llama_config());
  std::vector<std::pair<std::string, Shape>> want{{"model.embed_tokens.weight", {53, 16}}};
  for (int i = 0; i < 2; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    for (const auto& [name, shape] :
         std::vector<std::pair<std::string, Shape>>{{"self_attn.q_proj.weight", {16, 16}},
                                                    {"self_attn.k_proj.weight", {8, 16}},
                                                    {"self_attn.v_proj.weight", {8, 16}},
                                                    {"self_attn.o_proj.weight", {16, 16}},
                                                    {"mlp.gate_proj.weight", {24, 16}},
                                                    {"mlp.up_proj.weight", {24, 16}},
                                                    {"mlp.down_proj.weight", {16, 24}},
                                                    {"input_layernorm.weight", {16}},
                                                    {"post_attention_layernorm.weight", {16}}})
      want.emplace_back(p + name, shape);
  }
  want.push_back({"model.norm.weight", {16}});
  want.push_back({"lm_head.weight", {53, 16}});
  const nn::StateDict sd = model.hf_state_dict();
  ASSERT_EQ(sd.size(), want.size());
  size_t i = 0;
  for (const auto& [name, value] : sd) {
    EXPECT_EQ(name, want[i].first);
    EXPECT_EQ(value.shape(), want[i].second) << name;
    ++i;
  }
  auto tied_config = tiny_llama_config();
  tied_config.tie_word_embeddings = true;
  models::Llama tied(tied_config);
  EXPECT_EQ(tied.parameters().size(), want.size() - 1);
  const nn::StateDict tsd = tied.hf_state_dict();
  EXPECT_TRUE(tsd.at("lm_head.weight").shares_storage(tsd.at("model.embed_tokens.weight")));
  EXPECT_THROW(models::Llama({.hidden_size = 16, .num_attention_heads = 4, .num_key_value_heads = 3}), ValueError);
}

TEST(Llama, LogitsOfATinyCheckpointEqualNumPysOnEveryBackend) {
  const Array tokens = load(kGptGolden + "llama_tokens.npy");
  const Array want = load(kGptGolden + "llama_logits.npy");
  for (Device d : harness::backends()) {
    // The rotary angles are float32 in both (as transformers'): their cos/sin may differ by an ulp of float32.
    expect_close(golden_llama(float64, d)->forward(tokens.to(d)), want, 1e-6, "float64 on " + d.str());
    expect_close(golden_llama(float32, d)->forward(tokens.to(d)), want, 3e-5, "float32 on " + d.str());
  }
}

TEST(Llama, LoadingNamesAMissingOrExtraTensorAndChecksATiedHead) {
  const nn::StateDict file = nn::load_safetensors(kGptGolden + "llama_tiny.safetensors");
  models::Llama model(tiny_llama_config(), float64);
  nn::StateDict missing, extra;
  for (const auto& [name, value] : file) {
    if (name != "model.layers.1.mlp.up_proj.weight") missing.insert(name, value);
    extra.insert(name, value);
  }
  extra.insert("model.layers.0.self_attn.rotary_emb.inv_freq", zeros({2}));  // old transformers' buffer: ignored
  model.load_hf_state_dict(extra);
  extra.insert("model.layers.0.self_attn.q_proj.bias", zeros({16}));
  try {
    model.load_hf_state_dict(missing);
    ADD_FAILURE() << "no error for a missing tensor";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("model.layers.1.mlp.up_proj.weight"), std::string::npos) << e.what();
  }
  try {
    model.load_hf_state_dict(extra);
    ADD_FAILURE() << "no error for an extra tensor";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("q_proj.bias"), std::string::npos) << e.what();
  }
  auto tied_config = tiny_llama_config();
  tied_config.tie_word_embeddings = true;
  models::Llama tied(tied_config, float64);
  EXPECT_THROW(tied.load_hf_state_dict(file), ValueError);  // its lm_head differs from embed_tokens
}

TEST(Llama, LoadLlamaReadsAHubFolderWithShardsAndItsConfig) {
  const std::string hub = kGptGolden + "llama_hub";
  const models::LlamaConfig c = models::load_llama_config(hub + "/config.json");
  const models::LlamaConfig want = tiny_llama_config();
  EXPECT_EQ(c.vocab_size, want.vocab_size);
  EXPECT_EQ(c.hidden_size, want.hidden_size);
  EXPECT_EQ(c.intermediate_size, want.intermediate_size);
  EXPECT_EQ(c.num_hidden_layers, want.num_hidden_layers);
  EXPECT_EQ(c.num_attention_heads, want.num_attention_heads);
  EXPECT_EQ(c.num_key_value_heads, want.num_key_value_heads);
  EXPECT_EQ(c.max_position_embeddings, 64);
  EXPECT_FALSE(c.tie_word_embeddings);
  const Array tokens = load(kGptGolden + "llama_tokens.npy");
  const Array logits = load(kGptGolden + "llama_logits.npy");
  for (Device d : harness::backends())
    expect_close(models::load_llama(hub, {}, float64, d)->forward(tokens.to(d)), logits, 1e-6, "on " + d.str());

  kiln_test::TempDir dir;
  auto message = [](auto&& fn) { return kiln_test::value_error_message(fn); };
  auto write = [&](const std::string& name, const std::string& text) { std::ofstream(dir.str() + "/" + name) << text; };
  // One file with config.json beside it; a config given replaces the file.
  std::filesystem::copy_file(kGptGolden + "llama_tiny.safetensors", dir.str() + "/weights.safetensors");
  EXPECT_NE(message([&] { models::load_llama(dir.str() + "/weights.safetensors"); }).find("config.json"),
            std::string::npos);
  expect_close(models::load_llama(dir.str() + "/weights.safetensors", tiny_llama_config(), float64)->forward(tokens),
               logits, 1e-6, "a file and a config");
  EXPECT_NE(message([&] { models::load_llama(dir.str(), tiny_llama_config()); }).find("neither model.safetensors"),
            std::string::npos);
  write("model.safetensors.index.json", R"({"weight_map": {"model.norm.weight": "model-00009.safetensors"}})");
  EXPECT_NE(message([&] { models::load_llama(dir.str(), tiny_llama_config()); }).find("model-00009.safetensors"),
            std::string::npos);
  write("config.json", R"({"hidden_size": 16, "num_attention_heads": 4, "rope_scaling": {"type": "linear"}})");
  EXPECT_NE(message([&] { models::load_llama_config(dir.str() + "/config.json"); }).find("rope_scaling"),
            std::string::npos);
  write("config.json", R"({"hidden_size": "sixteen"})");
  EXPECT_NE(message([&] { models::load_llama_config(dir.str() + "/config.json"); }).find("hidden_size"),
            std::string::npos);
  write("config.json", R"({"num_attention_heads": 8})");  // key-value heads default to the attention heads
  EXPECT_EQ(models::load_llama_config(dir.str() + "/config.json").num_key_value_heads, 8);
}

TEST(Llama, GradientsOfATinyModelMatchCentralDifferences) {
  random::seed(31);
  auto config = tiny_llama_config();
  config.hidden_size = 8;
  config.intermediate_size = 12;
  config.vocab_size = 9;
  config.tie_word_embeddings = true;
  config.initializer_range = 0.4;
  models::Llama model(config, float64);
  const Array tokens = from_data(std::vector<int64_t>{1, 4, 8, 2, 0, 7, 3, 3}, Shape{2, 4});
  const Array targets = from_data(std::vector<int64_t>{4, 8, 2, 0, 6, 3, 3, 5}, Shape{2, 4});
  kiln_test::expect_gradients_match_differences(
      model, [&] { return models::lm_loss(model.forward(tokens), targets); }, 1e-6);
}

TEST(Llama, TheCachedForwardAndGreedyGenerationMatchFullForwardsOnEveryBackend) {
  const Array tokens = load(kGptGolden + "llama_tokens.npy");
  for (Device d : harness::backends()) {
    auto model = golden_llama(float64, d);
    const Array full = model->forward(tokens.to(d));
    models::KVCache cache = model->make_cache(2);
    EXPECT_EQ(cache.max_length(), 16);
    int64_t at = 0;
    for (int64_t n : {2, 1, 3}) {
      const Array step = model->forward(tokens.to(d).slice(1, at, at + n), cache);
      expect_close(step, full.slice(1, at, at + n), 1e-12, d.str() + " positions from " + std::to_string(at));
      at += n;
    }
    std::vector<int64_t> seq{5, 17};
    const auto got = models::generate(*model, seq, {.max_new_tokens = 6, .temperature = 0.0});
    for (int64_t token : got) {
      const Array logits = model->forward(from_data(seq, Shape{1, static_cast<int64_t>(seq.size())}, d));
      EXPECT_EQ(token, kiln_test::argmax_rows(logits.slice(1, logits.shape(1) - 1, logits.shape(1))).front());
      seq.push_back(token);
    }
  }
}

}  // namespace
}  // namespace kiln
