// Generation (models::generate, sampling_probabilities): the temperature / top-k / top-p filters against
// hand-computed probabilities, greedy generation against the argmax of repeated full forwards, sampling that
// stays within top-k and repeats with its seed, the stop token and streaming, on every backend.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/lm_test_util.hpp"
#include "harness/op_harness.hpp"
#include "kiln/kiln.hpp"
#include "kiln/models.hpp"

namespace kiln {
namespace {

using kiln_test::kGptGolden;

void expect_probabilities(const std::vector<double>& got, const std::vector<double>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-12) << what << " token " << i;
}

TEST(Generate, SamplingFiltersKeepOnlyTheAllowedTokens) {
  const double e = std::exp(1.0);
  // Temperature 0.5 on logits (0, ln 2): weights 1 and 4.
  expect_probabilities(models::sampling_probabilities({0.0, std::log(2.0)}, 0.5), {0.2, 0.8}, "temperature");
  // Greedy: all mass on the first largest logit.
  expect_probabilities(models::sampling_probabilities({1, 3, 2, 3}, 0.0), {0, 1, 0, 0}, "greedy");
  // top_k 2 of (1, 3, 2, 0): tokens 1 and 2, weights e^3 and e^2.
  expect_probabilities(models::sampling_probabilities({1, 3, 2, 0}, 1.0, 2), {0, e / (e + 1), 1 / (e + 1), 0}, "top_k");
  // top_k 2 of (1, 3, 2, 3): the two 3s (a tie at the k-th value keeps every tied token, as HF).
  expect_probabilities(models::sampling_probabilities({1, 3, 2, 3, 3}, 1.0, 2), {0, 1.0 / 3, 0, 1.0 / 3, 1.0 / 3},
                       "top_k ties");
  // top_p 0.7 of probabilities (0.5, 0.3, 0.15, 0.05): 0.5 and 0.3 (0.8 >= 0.7), renormalised.
  const std::vector<double> lp{std::log(0.15), std::log(0.5), std::log(0.05), std::log(0.3)};
  expect_probabilities(models::sampling_probabilities(lp, 1.0, 0, 0.7), {0, 0.625, 0, 0.375}, "top_p");
  // top_p 0.4: only the most likely token.
  expect_probabilities(models::sampling_probabilities(lp, 1.0, 0, 0.4), {0, 1, 0, 0}, "top_p one");
  // top_k then top_p: top_k 3 leaves (0.5, 0.3, 0.15)/0.95; top_p 0.6 keeps 0.5/0.95 and 0.3/0.95.
  expect_probabilities(models::sampling_probabilities(lp, 1.0, 3, 0.6), {0, 0.625, 0, 0.375}, "top_k and top_p");
  EXPECT_THROW(models::sampling_probabilities(lp, -1.0), ValueError);
  EXPECT_THROW(models::sampling_probabilities(lp, 1.0, -2), ValueError);
  EXPECT_THROW(models::sampling_probabilities(lp, 1.0, 0, 0.0), ValueError);
}

/// Greedy continuation by full forwards of the growing sequence, written out.
std::vector<int64_t> greedy_by_full_forwards(models::CausalLM& model, std::vector<int64_t> seq, int64_t n, Device d) {
  std::vector<int64_t> out;
  NoGradGuard no_grad;
  for (int64_t i = 0; i < n; ++i) {
    const Array logits = model.forward(from_data(seq, Shape{1, static_cast<int64_t>(seq.size())}, d));
    const int64_t next = kiln_test::argmax_rows(logits.slice(1, logits.shape(1) - 1, logits.shape(1))).front();
    out.push_back(next);
    seq.push_back(next);
  }
  return out;
}

TEST(Generate, GreedyEqualsTheArgmaxOfRepeatedFullForwardsOnEveryBackend) {
  for (Device d : harness::backends()) {
    auto model = models::load_gpt2(kGptGolden + "gpt2_tiny.safetensors", kiln_test::tiny_gpt2_config(), float64, d);
    const std::vector<int64_t> prompt{3, 14, 15};
    std::vector<int64_t> streamed;
    const auto got = models::generate(
        *model, prompt,
        {.max_new_tokens = 10, .temperature = 0.0, .on_token = [&](int64_t t) { streamed.push_back(t); }});
    EXPECT_EQ(got, greedy_by_full_forwards(*model, prompt, 10, d)) << d.str();
    EXPECT_EQ(streamed, got);
    EXPECT_TRUE(model->is_training());  // the mode is restored
    // Stopping at the third token's value returns up to and including its first occurrence.
    const auto stopped =
        models::generate(*model, prompt, {.max_new_tokens = 10, .temperature = 0.0, .stop_token = got[2]});
    size_t first = 0;
    while (got[first] != got[2]) ++first;
    EXPECT_EQ(stopped, std::vector<int64_t>(got.begin(), got.begin() + static_cast<std::ptrdiff_t>(first) + 1));
  }
}

TEST(Generate, SamplingStaysInTheTopKAndRepeatsWithItsSeed) {
  auto model = models::load_gpt2(kGptGolden + "gpt2_tiny.safetensors", kiln_test::tiny_gpt2_config(), float64);
  model->eval();
  const std::vector<int64_t> prompt{7};
  const models::GenerateOptions o{.max_new_tokens = 12, .temperature = 1.5, .top_k = 3, .seed = 99};
  const auto a = models::generate(*model, prompt, o);
  EXPECT_EQ(models::generate(*model, prompt, o), a);
  std::vector<int64_t> seq = prompt;
  for (int64_t token : a) {
    const Array logits = model->forward(from_data(seq, Shape{1, static_cast<int64_t>(seq.size())}));
    const std::vector<double> last = logits.slice(1, logits.shape(1) - 1, logits.shape(1)).to_vector<double>();
    int64_t above = 0;  // tokens with a larger logit than the one drawn
    for (double v : last) above += v > last[static_cast<size_t>(token)];
    EXPECT_LT(above, 3) << "token " << token;
    seq.push_back(token);
  }
  // top_k 1 is greedy whatever the temperature.
  EXPECT_EQ(models::generate(*model, prompt, {.max_new_tokens = 6, .temperature = 2.0, .top_k = 1}),
            greedy_by_full_forwards(*model, prompt, 6, cpu()));
}

// Each prompt of a batch (left-padded to the longest) gets the tokens it gets alone.
template <class Model>
void expect_batch_equals_each_alone(Model& model, const std::string& what) {
  const std::vector<std::vector<int64_t>> prompts{{3, 14, 15, 9, 2}, {7}, {11, 4, 8}};
  const models::GenerateOptions greedy{.max_new_tokens = 8, .temperature = 0.0};
  const auto batch = models::generate_batch(model, prompts, greedy);
  ASSERT_EQ(batch.size(), prompts.size()) << what;
  for (size_t b = 0; b < prompts.size(); ++b)
    EXPECT_EQ(batch[b], models::generate(model, prompts[b], greedy)) << what << ", prompt " << b;
  // A stop token ends its sequence only; the others run on.
  const int64_t stop = batch[1][1];
  const auto stopped =
      models::generate_batch(model, prompts, {.max_new_tokens = 8, .temperature = 0.0, .stop_token = stop});
  for (size_t b = 0; b < prompts.size(); ++b)
    EXPECT_EQ(stopped[b],
              models::generate(model, prompts[b], {.max_new_tokens = 8, .temperature = 0.0, .stop_token = stop}))
        << what << ", prompt " << b;
  // Sampling: a batch of one is generate() with the same seed.
  const models::GenerateOptions sampled{.max_new_tokens = 6, .temperature = 1.2, .top_k = 5, .seed = 3};
  EXPECT_EQ(models::generate_batch(model, {prompts[2]}, sampled).front(), models::generate(model, prompts[2], sampled))
      << what;
}

TEST(Generate, ABatchOfPromptsOfDifferentLengthsGivesEachItsOwnTokensOnEveryBackend) {
  for (Device d : harness::backends()) {
    auto gpt = models::load_gpt2(kGptGolden + "gpt2_tiny.safetensors", kiln_test::tiny_gpt2_config(), float64, d);
    expect_batch_equals_each_alone(*gpt, "GPT-2 on " + d.str());
    models::Llama llama(kiln_test::tiny_llama_config(), float64, d);
    llama.load_hf_state_dict(nn::load_safetensors(kGptGolden + "llama_tiny.safetensors"));
    expect_batch_equals_each_alone(llama, "Llama on " + d.str());
  }
}

TEST(Generate, PaddedCachedLogitsEqualEachSequencesOwn) {
  auto model = models::load_gpt2(kGptGolden + "gpt2_tiny.safetensors", kiln_test::tiny_gpt2_config(), float64);
  // Row 0: three padding slots, then tokens 5 6; row 1: tokens 1 2 3 4 5.
  models::KVCache cache = model->make_cache(2, 8);
  cache.set_padding({3, 0});
  const Array logits =
      model->forward(from_data(std::vector<int64_t>{9, 9, 9, 5, 6, 1, 2, 3, 4, 5}, Shape{2, 5}), cache);
  const Array next = model->forward(from_data(std::vector<int64_t>{7, 6}, Shape{2, 1}), cache);
  const Array alone0 = model->forward(from_data(std::vector<int64_t>{5, 6, 7}, Shape{1, 3}));
  const Array alone1 = model->forward(from_data(std::vector<int64_t>{1, 2, 3, 4, 5, 6}, Shape{1, 6}));
  kiln_test::expect_close(logits.slice(0, 0, 1).slice(1, 3, 5), alone0.slice(1, 0, 2), 1e-12, "row 0's prompt");
  kiln_test::expect_close(logits.slice(0, 1, 2), alone1.slice(1, 0, 5), 1e-12, "row 1's prompt");
  kiln_test::expect_close(next.slice(0, 0, 1), alone0.slice(1, 2, 3), 1e-12, "row 0's next token");
  kiln_test::expect_close(next.slice(0, 1, 2), alone1.slice(1, 5, 6), 1e-12, "row 1's next token");
  EXPECT_THROW(cache.set_padding({1}), ValueError);      // one value per sequence
  EXPECT_THROW(cache.set_padding({1, 8}), ValueError);   // below max_length
  EXPECT_THROW(cache.set_padding({-1, 0}), ValueError);  // non-negative
}

// The static cache (one token per step, position read from the device, the whole buffer attended with the
// positions past it masked: what a CUDA graph replays) gives the dynamic cache's logits, padded rows included.
template <class Model>
void expect_static_steps_equal_dynamic(Model& model, Device d, const std::string& what) {
  const std::vector<int64_t> prompt{9, 9, 5, 6, 1, 2, 3, 4};  // row 0 padded by 2
  models::KVCache dynamic = model.make_cache(2, 12), fixed = model.make_cache(2, 12);
  dynamic.set_padding({2, 0});
  fixed.set_padding({2, 0});
  kiln_test::expect_close(model.forward(from_data(prompt, Shape{2, 4}, d), fixed),
                          model.forward(from_data(prompt, Shape{2, 4}, d), dynamic), 0.0, what + ": prompt");
  fixed.set_static(true);
  for (int64_t step = 0; step < 4; ++step) {
    const Array next = from_data(std::vector<int64_t>{7 + step, 3 * step + 1}, Shape{2, 1}, d);
    const Array want = model.forward(next, dynamic);
    const Array got = model.forward(next, fixed);
    kiln_test::expect_close(got, want, 1e-12, what + ": step " + std::to_string(step));
    EXPECT_EQ(fixed.length(), dynamic.length()) << what;
    EXPECT_EQ(fixed.position_array().to(cpu()).to_vector<int64_t>(), std::vector<int64_t>{dynamic.length()}) << what;
  }
  // A static step writes one position; crop goes back (host and device counts).
  EXPECT_THROW(model.forward(from_data(std::vector<int64_t>{1, 2, 3, 4}, Shape{2, 2}, d), fixed), ShapeError) << what;
  fixed.crop(5);
  EXPECT_EQ(fixed.length(), 5);
  EXPECT_EQ(fixed.position_array().to(cpu()).to_vector<int64_t>(), std::vector<int64_t>{5}) << what;
  EXPECT_THROW(fixed.crop(6), ValueError);
  EXPECT_THROW(fixed.replayed(8), ValueError);  // past max_length 12
  fixed.reset();
  EXPECT_FALSE(fixed.is_static());
  EXPECT_EQ(fixed.length(), 0);
  fixed.set_static(true);  // static again: the device's position is written from the (reset) length
  EXPECT_EQ(fixed.position_array().to(cpu()).to_vector<int64_t>(), std::vector<int64_t>{0}) << what;
}

TEST(Generate, StaticCacheStepsEqualTheDynamicCachesOnEveryBackend) {
  for (Device d : harness::backends()) {
    auto gpt = models::load_gpt2(kGptGolden + "gpt2_tiny.safetensors", kiln_test::tiny_gpt2_config(), float64, d);
    expect_static_steps_equal_dynamic(*gpt, d, "GPT-2 on " + d.str());
    models::Llama llama(kiln_test::tiny_llama_config(), float64, d);
    llama.load_hf_state_dict(nn::load_safetensors(kGptGolden + "llama_tiny.safetensors"));
    expect_static_steps_equal_dynamic(llama, d, "Llama on " + d.str());
  }
}

// On a GPU the decode steps replay a captured CUDA graph (cuda_graph, the default); the tokens are those of the
// op-by-op steps, greedy and sampled, for one prompt and a padded batch.
TEST(Generate, GraphedDecodingGivesTheTokensOfOpByOpDecoding) {
  for (Device d : harness::backends()) {
    auto gpt = models::load_gpt2(kGptGolden + "gpt2_tiny.safetensors", kiln_test::tiny_gpt2_config(), float32, d);
    for (double temperature : {0.0, 0.9}) {
      models::GenerateOptions graphed{.max_new_tokens = 12, .temperature = temperature, .top_k = 8, .seed = 5};
      models::GenerateOptions eager = graphed;
      eager.cuda_graph = false;
      EXPECT_EQ(models::generate(*gpt, {3, 14, 15}, graphed), models::generate(*gpt, {3, 14, 15}, eager)) << d.str();
      const std::vector<std::vector<int64_t>> prompts{{3, 14, 15, 9}, {7}};
      EXPECT_EQ(models::generate_batch(*gpt, prompts, graphed), models::generate_batch(*gpt, prompts, eager))
          << d.str();
    }
  }
}

TEST(Generate, RotaryPositionsOnTheDeviceEqualAnOffset) {
  nn::RotaryEmbedding rope(8);
  const Array x = random::normal({2, 3, 4, 8}, 0.0, 1.0, float64);
  kiln_test::expect_close(rope.rotate(x, from_data(std::vector<int64_t>{5, 6, 7, 8}, Shape{4})), rope.rotate(x, 5),
                          0.0, "rotate");
  EXPECT_THROW(rope.rotate(x, from_data(std::vector<int64_t>{5, 6}, Shape{2})), ShapeError);
  EXPECT_THROW(rope.rotate(x, full({4}, 1.0, float64)), ShapeError);
}

TEST(Generate, RefusesAnEmptyPromptAndTooManyTokens) {
  auto model = models::load_gpt2(kGptGolden + "gpt2_tiny.safetensors", kiln_test::tiny_gpt2_config(), float64);
  EXPECT_THROW(models::generate(*model, {}), ValueError);
  EXPECT_THROW(models::generate(*model, {1, 2}, {.max_new_tokens = 15}), ValueError);  // 17 > 16 positions
  EXPECT_EQ(models::generate(*model, {1, 2}, {.max_new_tokens = 14, .temperature = 0.0}).size(), 14u);
  EXPECT_THROW(models::generate_batch(*model, {}), ValueError);
  EXPECT_THROW(models::generate_batch(*model, {{1}, {}}), ValueError);
  EXPECT_THROW(models::generate_batch(*model, {{1}, {1, 2}}, {.max_new_tokens = 15}), ValueError);
  EXPECT_THROW(models::generate_batch(*model, {{1}, {2}}, {.on_token = [](int64_t) {}}), ValueError);
}

}  // namespace
}  // namespace kiln
