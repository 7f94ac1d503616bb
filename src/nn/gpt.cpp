// GPT-2 (Hugging Face's GPT2LMHeadModel): its module tree and parameter names, Conv1D projections (weight
// (in, out)), the embedding tied to the head, and HF's initialisation, so Hub checkpoints load as they are and a
// kiln-saved model loads in transformers.
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "decoder.hpp"
#include "kiln/autocast.hpp"
#include "kiln/autograd.hpp"
#include "kiln/ops.hpp"

namespace kiln::models {

namespace {

/// Hugging Face's Conv1D: y = x W + b with W (in, out), as GPT-2's checkpoints store it.
class Conv1D : public nn::Module {
 public:
  Conv1D(int64_t in, int64_t out, bool bias, DType dtype, std::optional<Device> device) : in_(in), out_(out) {
    register_parameter("weight", zeros({in, out}, dtype, device));
    if (bias) register_parameter("bias", zeros({out}, dtype, device));
    bias_ = bias;
  }
  Array forward(const Array& x) override { return product(x, false); }
  /// gelu_tanh(forward(x)), GELU folded into the product with a bias (addmm_gelu: cuBLASLt's epilogue on a GPU).
  Array forward_gelu(const Array& x) {
    if (!is_anomaly_enabled()) return product(x, true);
    AnomalyScope scope(name());
    return product(x, true);
  }
  std::string name() const override {
    return "Conv1D(nf=" + std::to_string(out_) + ", nx=" + std::to_string(in_) + (bias_ ? "" : ", bias=false") + ")";
  }

 private:
  Array product(const Array& x, bool gelu) {
    if (x.ndim() == 0 || x.shape(-1) != in_)
      throw ShapeError(name() + ": the input has shape " + shape_str(x.shape()) + "; its last axis must have " +
                       std::to_string(in_) + " features");
    const Array xa = autocast_low(x), wa = autocast_low(parameter("weight"));
    if (xa.dtype() != wa.dtype())
      throw DTypeError(name() + ": the input is " + std::string(dtype_name(x.dtype())) + " but the weight is " +
                       std::string(dtype_name(wa.dtype())) + "; convert the input or the model (model.to(dtype))");
    // One 2-d product over every position: the weight's gradient is then one (in, out) product, not a batch of
    // them summed; the bias folded into it (addmm: cuBLASLt's bias epilogue on a GPU).
    Shape shape = x.shape();
    shape.back() = out_;
    const Array x2 = xa.reshape(-1, in_);
    if (!bias_) return (gelu ? gelu_tanh(matmul(x2, wa)) : matmul(x2, wa)).reshape(shape);
    const Array bias = autocast_low(parameter("bias"));
    return (gelu ? addmm_gelu(bias, x2, wa) : addmm(bias, x2, wa)).reshape(shape);
  }

  int64_t in_, out_;
  bool bias_ = true;
};

/// A layer norm with a weight and no bias (nanoGPT's bias=False).
class LayerNormNoBias : public nn::Module {
 public:
  LayerNormNoBias(int64_t features, double eps, DType dtype, std::optional<Device> device)
      : features_(features), eps_(eps) {
    register_parameter("weight", ones({features}, dtype, device));
  }
  Array forward(const Array& x_in) override {
    const Array x = autocast_float32(x_in);
    const Array centred = x - x.mean({-1}, true);
    return centred / sqrt(square(centred).mean({-1}, true) + eps_) * parameter("weight");
  }
  std::string name() const override { return "LayerNorm((" + std::to_string(features_) + ",), bias=false)"; }

 private:
  int64_t features_;
  double eps_;
};

}  // namespace

struct GPT2::Parts {
  struct Block {
    std::shared_ptr<nn::Module> ln_1, ln_2, attn_proj, mlp_proj, attn_resid_drop, mlp_drop;
    std::shared_ptr<Conv1D> fc;  // c_fc, whose output goes through GELU (folded into its product)
    std::shared_ptr<nn::Module> c_attn;
    std::shared_ptr<nn::Module> module, mlp;  // the block and its MLP (their parameters)
  };
  std::shared_ptr<nn::Embedding> wte, wpe;
  std::shared_ptr<nn::Module> drop, ln_f;
  std::vector<Block> blocks;
};

GPT2Config GPT2Config::depth(int64_t d) {
  if (d <= 0) throw ValueError("GPT2Config::depth: the depth must be positive, got " + std::to_string(d));
  return {.n_embd = 64 * d, .n_layer = d, .n_head = d};
}

GPT2Config GPT2Config::from_name(const std::string& name) {
  if (name == "124m" || name == "gpt2") return gpt2_124m();
  if (name == "355m" || name == "gpt2-medium") return gpt2_355m();
  if (name == "774m" || name == "gpt2-large") return gpt2_774m();
  if (name == "1558m" || name == "gpt2-xl") return gpt2_1558m();
  if (name.size() > 1 && name[0] == 'd' && name.find_first_not_of("0123456789", 1) == std::string::npos &&
      name.size() < 6)
    return depth(std::stoll(name.substr(1)));
  throw ValueError("GPT2Config::from_name: unknown configuration \"" + name +
                   "\" (124m, 355m, 774m, 1558m, gpt2, gpt2-medium, gpt2-large, gpt2-xl, or d<depth> such as d6)");
}

GPT2::GPT2(const GPT2Config& c, DType dtype, std::optional<Device> device)
    : config_(c), parts_(std::make_shared<Parts>()) {
  if (c.vocab_size <= 0 || c.n_positions <= 0 || c.n_layer <= 0 || c.n_head <= 0 || c.n_embd <= 0 ||
      c.n_embd % c.n_head != 0)
    throw ValueError("GPT2: vocab_size, n_positions, n_layer, n_head and n_embd must be positive and n_embd (" +
                     std::to_string(c.n_embd) + ") a multiple of n_head (" + std::to_string(c.n_head) + ")");
  if (c.recompute != "none" && c.recompute != "gelu" && c.recompute != "block")
    throw ValueError("GPT2: recompute is \"none\", \"gelu\" or \"block\", got \"" + c.recompute + "\"");
  for (double p : {c.embd_pdrop, c.attn_pdrop, c.resid_pdrop})
    if (!(p >= 0.0 && p < 1.0))
      throw ValueError("GPT2: dropout probabilities must be in [0, 1), got " + std::to_string(p));
  constexpr double kStd = 0.02;  // HF's initializer_range
  Parts& parts = *parts_;
  auto norm = [&]() -> std::shared_ptr<nn::Module> {
    if (c.bias) return std::make_shared<nn::LayerNorm>(Shape{c.n_embd}, c.layer_norm_epsilon, true, dtype, device);
    return std::make_shared<LayerNormNoBias>(c.n_embd, c.layer_norm_epsilon, dtype, device);
  };
  auto conv = [&](int64_t in, int64_t out, double std) {
    auto m = std::make_shared<Conv1D>(in, out, c.bias, dtype, device);
    nn::init::normal(m->parameter("weight"), 0.0, std);
    return m;
  };
  const double proj_std = kStd / std::sqrt(2.0 * static_cast<double>(c.n_layer));
  auto transformer = register_module("transformer", std::make_shared<detail::Node>("GPT2Model"));
  parts.wte = transformer->add("wte", std::make_shared<nn::Embedding>(c.vocab_size, c.n_embd, dtype, device));
  nn::init::normal(parts.wte->weight(), 0.0, kStd);
  parts.wpe = transformer->add("wpe", std::make_shared<nn::Embedding>(c.n_positions, c.n_embd, dtype, device));
  nn::init::normal(parts.wpe->weight(), 0.0, kStd);
  parts.drop = transformer->add("drop", std::make_shared<nn::Dropout>(c.embd_pdrop));
  auto h = transformer->add("h", std::make_shared<nn::ModuleList>());
  for (int64_t i = 0; i < c.n_layer; ++i) {
    auto block = std::make_shared<detail::Node>("GPT2Block");
    Parts::Block b;
    b.ln_1 = block->add("ln_1", norm());
    auto attn = block->add("attn", std::make_shared<detail::Node>("GPT2Attention"));
    b.c_attn = attn->add("c_attn", conv(c.n_embd, 3 * c.n_embd, kStd));
    b.attn_proj = attn->add("c_proj", conv(c.n_embd, c.n_embd, proj_std));
    // attn_dropout and act complete HF's tree (repr); forward passes attn_pdrop to the attention and calls
    // gelu_tanh itself.
    attn->add("attn_dropout", std::make_shared<nn::Dropout>(c.attn_pdrop));
    b.attn_resid_drop = attn->add("resid_dropout", std::make_shared<nn::Dropout>(c.resid_pdrop));
    b.ln_2 = block->add("ln_2", norm());
    auto mlp = block->add("mlp", std::make_shared<detail::Node>("GPT2MLP"));
    b.fc = mlp->add("c_fc", conv(c.n_embd, 4 * c.n_embd, kStd));
    b.mlp_proj = mlp->add("c_proj", conv(4 * c.n_embd, c.n_embd, proj_std));
    mlp->add("act", std::make_shared<nn::GELU>("tanh"));
    b.mlp_drop = mlp->add("dropout", std::make_shared<nn::Dropout>(c.resid_pdrop));
    b.module = block;
    b.mlp = mlp;
    h->push_back(block);
    parts.blocks.push_back(b);
  }
  parts.ln_f = transformer->add("ln_f", norm());
}

Array GPT2::run(const Array& tokens, KVCache* cache) {
  detail::check_tokens("GPT2", tokens);
  const GPT2Config& c = config_;
  const Parts& parts = *parts_;
  const int64_t batch = tokens.shape(0), t = tokens.shape(1), heads = c.n_head, d = c.n_embd / c.n_head;
  const int64_t offset = cache ? cache->length() : 0;
  if (offset + t > c.n_positions)
    throw ValueError("GPT2: positions " + std::to_string(offset) + " to " + std::to_string(offset + t - 1) +
                     " exceed n_positions (" + std::to_string(c.n_positions) + "); pass at most " +
                     std::to_string(c.n_positions - offset) + " tokens");
  // Under autocast, every low-precision copy of the parameters in one multi-tensor pass (reused by the layers).
  if (autocast_dtype()) autocast_cache(parameters());
  const Array& wte = parts.wte->weight();
  // A static step (one token, CUDA-graph friendly) reads its position from the device.
  Array positions = cache && cache->is_static() ? cache->position_array()
                                                : arange(offset, offset + t, int64_t{1}, int64, wte.device());
  const Array mask = detail::decode_mask(cache, t);
  if (cache && !cache->padding().empty())  // left-padded sequences count their positions from their first token
    positions = maximum(positions.reshape({1, t}) - cache->padding_array().reshape({batch, 1}), Scalar(int64_t{0}));
  Array x = (*parts.drop)((*parts.wte)(tokens) + (*parts.wpe)(positions));
  const double attn_p = is_training() ? c.attn_pdrop : 0.0;
  // Recomputation (autograd::checkpoint) only where backward will need activations: a training forward.
  const bool recompute = !cache && is_grad_enabled() && c.recompute != "none";
  for (size_t i = 0; i < parts.blocks.size(); ++i) {
    // By value: a checkpoint runs these again in backward, after run() returned.
    const Parts::Block b = parts.blocks[i];
    const int64_t embd = c.n_embd, layer = static_cast<int64_t>(i);
    // Under autocast a checkpoint's recomputation casts its parameters in one pass, as run() does for the forward.
    auto mlp = [b](const Array& u) { return (*b.mlp_proj)(b.fc->forward_gelu(u)); };
    auto block = [=](const Array& x_in) {
      if (recompute && autocast_dtype()) autocast_cache(b.module->parameters());
      auto heads_of = [&](const Array& qkv, int64_t part) {  // (B, T, 3C) -> (B, H, T, D)
        return swapaxes(qkv.slice(-1, part * embd, (part + 1) * embd).reshape({batch, t, heads, d}), 1, 2);
      };
      const Array qkv = (*b.c_attn)((*b.ln_1)(x_in));
      Array a = detail::causal_attention(heads_of(qkv, 0), heads_of(qkv, 1), heads_of(qkv, 2), cache, layer, attn_p,
                                         mask);
      a = swapaxes(a, 1, 2).reshape({batch, t, embd});
      Array y = x_in + (*b.attn_resid_drop)((*b.attn_proj)(a));
      if (!recompute || c.recompute != "gelu") return y + (*b.mlp_drop)(mlp((*b.ln_2)(y)));
      // The MLP's input (in the autocast dtype, as c_fc casts it) is all it keeps for backward.
      const Array u = autocast_low((*b.ln_2)(y));
      auto again = [b, mlp](const std::vector<Array>& in) {
        if (autocast_dtype()) autocast_cache(b.mlp->parameters());
        return mlp(in[0]);
      };
      return y + (*b.mlp_drop)(autograd::checkpoint(again, {u}));
    };
    if (recompute && c.recompute == "block")
      x = autograd::checkpoint([block](const std::vector<Array>& in) { return block(in[0]); }, {x});
    else
      x = block(x);
  }
  x = (*parts.ln_f)(x);
  if (cache) cache->advance(t);
  // lm_head is the embedding (tied), applied as one 2-d product over every position.
  return matmul(autocast_low(x).reshape(-1, c.n_embd), autocast_low(wte).T()).reshape({batch, t, c.vocab_size});
}

Array GPT2::forward(const Array& tokens) { return run(tokens, nullptr); }

Array GPT2::forward(const Array& tokens, KVCache& cache) {
  NoGradGuard no_grad;
  return run(tokens, &cache);
}

KVCache GPT2::make_cache(int64_t batch, std::optional<int64_t> max_length) const {
  const Array& w = parts_->wte->weight();
  return KVCache(config_.n_layer, batch, config_.n_head, max_length.value_or(config_.n_positions),
                 config_.n_embd / config_.n_head, w.dtype(), w.device());
}

std::string GPT2::name() const {
  const GPT2Config& c = config_;
  return "GPT2(vocab_size=" + std::to_string(c.vocab_size) + ", n_positions=" + std::to_string(c.n_positions) +
         ", n_embd=" + std::to_string(c.n_embd) + ", n_layer=" + std::to_string(c.n_layer) +
         ", n_head=" + std::to_string(c.n_head) + ")";
}

nn::StateDict GPT2::hf_state_dict() const {
  nn::StateDict sd = state_dict();
  sd.insert("lm_head.weight", parts_->wte->weight().detach());
  return sd;
}

void GPT2::load_hf_state_dict(const nn::StateDict& state) {
  auto map = [](const std::string& name) -> std::optional<std::string> {
    const bool prefixed = name.rfind("transformer.", 0) == 0;
    const std::string bare = prefixed ? name.substr(12) : name;
    // The causal-mask buffers of older transformers (not parameters: the mask is is_causal here).
    auto ends_with = [&](const std::string& tail) {
      return bare.size() >= tail.size() && bare.compare(bare.size() - tail.size(), tail.size(), tail) == 0;
    };
    if (bare.rfind("h.", 0) == 0 && (ends_with(".attn.bias") || ends_with(".attn.masked_bias"))) return std::nullopt;
    if (name == "lm_head.weight") return name;
    return "transformer." + bare;
  };
  detail::load_hf(*this, "GPT2::load_hf_state_dict", state, map, "transformer.wte.weight");
}

std::shared_ptr<GPT2> load_gpt2(const std::string& path, std::optional<GPT2Config> config, DType dtype,
                                std::optional<Device> device) {
  const nn::StateDict state = nn::load_safetensors(path);
  if (!config) {
    auto find = [&](const std::string& name) -> const Array& {
      if (const Array* a = state.find(name)) return *a;
      if (const Array* a = state.find("transformer." + name)) return *a;
      throw ValueError("load_gpt2: " + path + " has no \"" + name + "\" (nor \"transformer." + name +
                       "\"): not a GPT-2 checkpoint with Hugging Face's names");
    };
    const Array& wte = find("wte.weight");
    const Array& wpe = find("wpe.weight");
    int64_t layers = 0;
    while (state.find("h." + std::to_string(layers) + ".ln_1.weight") ||
           state.find("transformer.h." + std::to_string(layers) + ".ln_1.weight"))
      ++layers;
    const bool bias = state.find("ln_f.bias") || state.find("transformer.ln_f.bias");
    const int64_t embd = wte.shape(1);
    if (embd % 64 != 0)
      throw ValueError("load_gpt2: n_embd " + std::to_string(embd) + " is not a multiple of 64: give the config");
    config = GPT2Config{.vocab_size = wte.shape(0),
                        .n_positions = wpe.shape(0),
                        .n_embd = embd,
                        .n_layer = layers,
                        .n_head = embd / 64,
                        .embd_pdrop = 0,
                        .attn_pdrop = 0,
                        .resid_pdrop = 0,
                        .bias = bias};
  }
  auto model = std::make_shared<GPT2>(*config, dtype, device);
  model->load_hf_state_dict(state);
  return model;
}

}  // namespace kiln::models
