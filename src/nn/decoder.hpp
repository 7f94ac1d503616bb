// What GPT-2 and the LLaMA-style decoder share (gpt.cpp, llama.cpp): a plain container module to build Hugging
// Face's module tree with, attention through a KV cache, and the loading of Hugging Face state dicts.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "kiln/models.hpp"

namespace kiln::models::detail {

/// A module that only holds children (Hugging Face's GPT2Block, LlamaAttention, ...): the tree gives the
/// state-dict names; the model's forward reads the children it keeps pointers to.
class Node : public nn::Module {
 public:
  explicit Node(std::string name) : name_(std::move(name)) {}
  template <class M>
  std::shared_ptr<M> add(std::string key, std::shared_ptr<M> module) {
    return register_module(std::move(key), std::move(module));
  }
  std::string name() const override { return name_; }

 private:
  std::string name_;
};

/// softmax(q k^T / sqrt(D)) v with q (B, H, T, D) at positions offset .. offset + T - 1 and k, v (B, Hkv, T, D):
/// causal over the new positions; with a cache, also over the cached ones (k and v are written into it first).
/// `mask` (decode_mask's, for a left-padded or static cache) replaces the causal one.
Array causal_attention(const Array& q, const Array& k, const Array& v, KVCache* cache, int64_t layer, double dropout_p,
                       const Array& mask = {});

/// The attention mask of T new positions after the cache's filled ones, built once per forward and shared by its
/// layers: for a static cache its visible_static(); for left-padded sequences (B, 1, T, length + T); else
/// undefined (the causal structure needs none).
Array decode_mask(const KVCache* cache, int64_t t);

/// Loads a Hugging Face state dict into `model`: `map` gives the model's name of each entry, or nullopt for an
/// entry to ignore. When `tied_embedding` names the embedding that the head shares, an entry mapped to
/// "lm_head.weight" must equal that embedding's entry. Strict: ValueError naming missing and unexpected tensors.
void load_hf(nn::Module& model, const std::string& who, const nn::StateDict& state,
             const std::function<std::optional<std::string>(const std::string&)>& map,
             const std::string& tied_embedding);

/// Throws ShapeError unless `tokens` is a 2-d integer array (B, T) with T >= 1.
void check_tokens(const std::string& who, const Array& tokens);

}  // namespace kiln::models::detail
