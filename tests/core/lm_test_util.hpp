// Shared by the language-model tests (test_gpt.cpp, test_llama.cpp, test_generate.cpp): the golden checkpoints
// of tests/golden/gpt_golden.py, comparisons, and a central-difference check of a model's parameter gradients.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "kiln/kiln.hpp"
#include "kiln/models.hpp"

namespace kiln_test {

/// True when f throws a kiln::Error whose message contains `text`; a test failure (and false) otherwise.
inline bool message_has(const std::function<void()>& f, const std::string& text) {
  try {
    f();
  } catch (const kiln::Error& e) {
    if (std::string(e.what()).find(text) != std::string::npos) return true;
    ADD_FAILURE() << "the message \"" << e.what() << "\" does not name " << text;
    return false;
  }
  ADD_FAILURE() << "no exception (expected one naming " << text << ")";
  return false;
}

inline const std::string kGptGolden = std::string(KILN_GOLDEN_DIR) + "/gpt/";

/// The tiny GPT-2 of gpt_golden.py (its config cannot be inferred: n_embd 16 has heads of 4).
inline kiln::models::GPT2Config tiny_gpt2_config() {
  return {.vocab_size = 61,
          .n_positions = 16,
          .n_embd = 16,
          .n_layer = 2,
          .n_head = 4,
          .embd_pdrop = 0,
          .attn_pdrop = 0,
          .resid_pdrop = 0};
}
inline kiln::models::LlamaConfig tiny_llama_config() {
  return {.vocab_size = 53,
          .hidden_size = 16,
          .intermediate_size = 24,
          .num_hidden_layers = 2,
          .num_attention_heads = 4,
          .num_key_value_heads = 2,
          .rms_norm_eps = 1e-6,
          .rope_theta = 10000.0,
          .max_position_embeddings = 16};
}

/// Every element of `got` within tol * (1 + |want|) of `want` (same shape).
inline void expect_close(const kiln::Array& got, const kiln::Array& want, double tol, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  const std::vector<double> g = got.to(kiln::cpu()).to_vector<double>();
  const std::vector<double> w = want.to(kiln::cpu()).to_vector<double>();
  double worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    const double e = std::abs(g[i] - w[i]) / (1 + std::abs(w[i]));
    if (!(e <= worst)) worst = e, at = i;
  }
  EXPECT_LE(worst, tol) << what << ": element " << at << " is " << g[at] << ", want " << w[at];
}

/// The row of the largest value of each (last-axis) row of a host copy of `logits`, first one on ties.
inline std::vector<int64_t> argmax_rows(const kiln::Array& logits) {
  const std::vector<double> v = logits.to(kiln::cpu()).to_vector<double>();
  const int64_t n = logits.shape(-1);
  std::vector<int64_t> out;
  for (size_t r = 0; r * static_cast<size_t>(n) < v.size(); ++r) {
    auto first = v.begin() + static_cast<std::ptrdiff_t>(r * static_cast<size_t>(n));
    out.push_back(std::max_element(first, first + n) - first);
  }
  return out;
}

/// Compares each float64 parameter's gradient of loss() with central differences at a few of its elements
/// (first, middle, last): the loss is recomputed with the element moved by +-eps in place.
inline void expect_gradients_match_differences(kiln::nn::Module& model, const std::function<kiln::Array()>& loss,
                                               double tol) {
  model.zero_grad();
  loss().backward();
  for (auto& [name, p] : model.named_parameters()) {
    ASSERT_TRUE(p.grad().defined()) << name;
    const std::vector<double> analytic = p.grad().to(kiln::cpu()).to_vector<double>();
    kiln::Array flat;
    {
      kiln::NoGradGuard no_grad;
      flat = p.reshape(-1);
    }
    for (int64_t j : {int64_t{0}, p.size() / 2, p.size() - 1}) {
      const double eps = 1e-6;
      auto at = [&](double delta) {
        kiln::NoGradGuard no_grad;
        flat.slice(0, j, j + 1) += delta;
        return loss().item<double>();
      };
      const double plus = at(eps), minus = at(-2 * eps);
      at(eps);
      const double numeric = (plus - minus) / (2 * eps);
      EXPECT_NEAR(analytic[static_cast<size_t>(j)], numeric, tol * (1 + std::abs(numeric))) << name << "[" << j << "]";
    }
  }
}

}  // namespace kiln_test
