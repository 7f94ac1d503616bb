// torch.nn's transformer layers: encoder and decoder layers (post-norm or pre-norm, relu or gelu) and their
// stacks, with PyTorch's child names so its state dicts load.
#include <functional>
#include <memory>
#include <string>

#include "kiln/nn.hpp"
#include "kiln/ops.hpp"

namespace kiln::nn {

namespace {

void check(const TransformerLayerOptions& o, const char* who) {
  if (o.activation != "relu" && o.activation != "gelu")
    throw ValueError(std::string(who) + ": activation must be \"relu\" or \"gelu\", got \"" + o.activation + "\"");
  if (o.dim_feedforward <= 0)
    throw ValueError(std::string(who) + ": dim_feedforward must be positive, got " + std::to_string(o.dim_feedforward));
}

/// The children both layers share: linear1, dropout, linear2 (the feed-forward block).
void add_feed_forward(const TransformerLayerOptions& o,
                      const std::function<void(const std::string&, std::shared_ptr<Module>)>& add) {
  add("linear1", std::make_shared<Linear>(o.d_model, o.dim_feedforward, o.bias, o.dtype, o.device));
  add("dropout", std::make_shared<Dropout>(o.dropout));
  add("linear2", std::make_shared<Linear>(o.dim_feedforward, o.d_model, o.bias, o.dtype, o.device));
}

Module& child(const Module& m, const std::string& name) {
  for (const auto& [key, c] : m.named_children())
    if (key == name) return *c;
  throw ValueError(m.name() + ": no child \"" + name + "\"");
}

Array feed_forward(const Module& m, const TransformerLayerOptions& o, const Array& x) {
  Array h = child(m, "linear1")(x);
  h = o.activation == "gelu" ? gelu(h) : relu(h);
  return child(m, "linear2")(child(m, "dropout")(h));
}

Array attend(const Module& m, const std::string& name, const Array& q, const Array& kv, const Array& mask,
             const Array& padding, bool causal) {
  auto& attention = dynamic_cast<MultiheadAttention&>(child(m, name));
  return attention.forward(q, kv, kv, padding, false, mask, true, causal).first;
}

std::shared_ptr<LayerNorm> layer_norm(const TransformerLayerOptions& o) {
  return std::make_shared<LayerNorm>(Shape{o.d_model}, o.layer_norm_eps, true, o.dtype, o.device);
}

std::shared_ptr<MultiheadAttention> attention_of(const TransformerLayerOptions& o) {
  return std::make_shared<MultiheadAttention>(o.d_model, o.nhead, o.dropout, o.bias, o.batch_first, o.dtype,
                                              o.device);
}

}  // namespace

TransformerEncoderLayer::TransformerEncoderLayer(const TransformerLayerOptions& options) : o_(options) {
  check(o_, "TransformerEncoderLayer");
  register_module("self_attn", attention_of(o_));
  add_feed_forward(o_, [&](const std::string& n, std::shared_ptr<Module> c) { register_module(n, c); });
  register_module("norm1", layer_norm(o_));
  register_module("norm2", layer_norm(o_));
  register_module("dropout1", std::make_shared<Dropout>(o_.dropout));
  register_module("dropout2", std::make_shared<Dropout>(o_.dropout));
}

Array TransformerEncoderLayer::forward(const Array& src, const Array& src_mask, const Array& src_key_padding_mask,
                                       bool is_causal) {
  Module &norm1 = child(*this, "norm1"), &norm2 = child(*this, "norm2");
  Module &drop1 = child(*this, "dropout1"), &drop2 = child(*this, "dropout2");
  auto sa = [&](const Array& x) {
    return drop1(attend(*this, "self_attn", x, x, src_mask, src_key_padding_mask, is_causal));
  };
  auto ff = [&](const Array& x) { return drop2(feed_forward(*this, o_, x)); };
  Array x = src;
  if (o_.norm_first) {
    x = x + sa(norm1(x));
    return x + ff(norm2(x));
  }
  x = norm1(x + sa(x));
  return norm2(x + ff(x));
}

TransformerDecoderLayer::TransformerDecoderLayer(const TransformerLayerOptions& options) : o_(options) {
  check(o_, "TransformerDecoderLayer");
  register_module("self_attn", attention_of(o_));
  register_module("multihead_attn", attention_of(o_));
  add_feed_forward(o_, [&](const std::string& n, std::shared_ptr<Module> c) { register_module(n, c); });
  for (const char* n : {"norm1", "norm2", "norm3"}) register_module(n, layer_norm(o_));
  for (const char* n : {"dropout1", "dropout2", "dropout3"}) register_module(n, std::make_shared<Dropout>(o_.dropout));
}

Array TransformerDecoderLayer::forward(const Array& tgt, const Array& memory, const Array& tgt_mask,
                                       const Array& memory_mask, const Array& tgt_key_padding_mask,
                                       const Array& memory_key_padding_mask, bool tgt_is_causal) {
  Module &norm1 = child(*this, "norm1"), &norm2 = child(*this, "norm2"), &norm3 = child(*this, "norm3");
  Module &drop1 = child(*this, "dropout1"), &drop2 = child(*this, "dropout2"), &drop3 = child(*this, "dropout3");
  auto sa = [&](const Array& x) {
    return drop1(attend(*this, "self_attn", x, x, tgt_mask, tgt_key_padding_mask, tgt_is_causal));
  };
  auto ca = [&](const Array& x) {
    return drop2(attend(*this, "multihead_attn", x, memory, memory_mask, memory_key_padding_mask, false));
  };
  auto ff = [&](const Array& x) { return drop3(feed_forward(*this, o_, x)); };
  Array x = tgt;
  if (o_.norm_first) {
    x = x + sa(norm1(x));
    x = x + ca(norm2(x));
    return x + ff(norm3(x));
  }
  x = norm1(x + sa(x));
  x = norm2(x + ca(x));
  return norm3(x + ff(x));
}

TransformerEncoder::TransformerEncoder(const TransformerLayerOptions& layer, int64_t num_layers, bool final_norm) {
  if (num_layers <= 0) throw ValueError("TransformerEncoder: num_layers must be positive, got " + std::to_string(num_layers));
  layers_ = register_module("layers", std::make_shared<ModuleList>());
  for (int64_t i = 0; i < num_layers; ++i) layers_->push_back(std::make_shared<TransformerEncoderLayer>(layer));
  if (final_norm) norm_ = register_module("norm", layer_norm(layer));
}

Array TransformerEncoder::forward(const Array& src, const Array& mask, const Array& src_key_padding_mask,
                                  bool is_causal) {
  Array x = src;
  for (size_t i = 0; i < layers_->size(); ++i)
    x = layers_->at<TransformerEncoderLayer>(static_cast<int64_t>(i)).forward(x, mask, src_key_padding_mask, is_causal);
  return norm_ ? (*norm_)(x) : x;
}

TransformerDecoder::TransformerDecoder(const TransformerLayerOptions& layer, int64_t num_layers, bool final_norm) {
  if (num_layers <= 0) throw ValueError("TransformerDecoder: num_layers must be positive, got " + std::to_string(num_layers));
  layers_ = register_module("layers", std::make_shared<ModuleList>());
  for (int64_t i = 0; i < num_layers; ++i) layers_->push_back(std::make_shared<TransformerDecoderLayer>(layer));
  if (final_norm) norm_ = register_module("norm", layer_norm(layer));
}

Array TransformerDecoder::forward(const Array& tgt, const Array& memory, const Array& tgt_mask,
                                  const Array& memory_mask, const Array& tgt_key_padding_mask,
                                  const Array& memory_key_padding_mask, bool tgt_is_causal) {
  Array x = tgt;
  for (size_t i = 0; i < layers_->size(); ++i)
    x = layers_->at<TransformerDecoderLayer>(static_cast<int64_t>(i))
            .forward(x, memory, tgt_mask, memory_mask, tgt_key_padding_mask, memory_key_padding_mask, tgt_is_causal);
  return norm_ ? (*norm_)(x) : x;
}

}  // namespace kiln::nn
