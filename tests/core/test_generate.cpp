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

TEST(Generate, RefusesAnEmptyPromptAndTooManyTokens) {
  auto model = models::load_gpt2(kGptGolden + "gpt2_tiny.safetensors", kiln_test::tiny_gpt2_config(), float64);
  EXPECT_THROW(models::generate(*model, {}), ValueError);
  EXPECT_THROW(models::generate(*model, {1, 2}, {.max_new_tokens = 15}), ValueError);  // 17 > 16 positions
  EXPECT_EQ(models::generate(*model, {1, 2}, {.max_new_tokens = 14, .temperature = 0.0}).size(), 14u);
}

}  // namespace
}  // namespace kiln
