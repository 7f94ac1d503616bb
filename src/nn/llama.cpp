// A LLaMA-style decoder (Hugging Face's LlamaForCausalLM): RMSNorm pre-norm blocks, rotary position embeddings
// (nn::RotaryEmbedding, HF's rotate_half convention), grouped-query attention and a SwiGLU feed-forward, with
// HF's module tree and parameter names so its checkpoints load.
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "decoder.hpp"
#include "kiln/autocast.hpp"
#include "kiln/autograd.hpp"
#include "kiln/ops.hpp"

namespace kiln::models {

struct Llama::Parts {
  struct Layer {
    std::shared_ptr<nn::Linear> q, k, v, o, gate, up, down;
    std::shared_ptr<nn::RMSNorm> input_norm, post_norm;
  };
  std::shared_ptr<nn::Embedding> embed;
  std::vector<Layer> layers;
  std::shared_ptr<nn::RMSNorm> norm;
  std::shared_ptr<nn::RotaryEmbedding> rope;
  std::shared_ptr<nn::Linear> lm_head;  // null when tied to embed
};

Llama::Llama(const LlamaConfig& c, DType dtype, std::optional<Device> device)
    : config_(c), parts_(std::make_shared<Parts>()) {
  if (c.vocab_size <= 0 || c.hidden_size <= 0 || c.intermediate_size <= 0 || c.num_hidden_layers <= 0 ||
      c.num_attention_heads <= 0 || c.num_key_value_heads <= 0 || c.max_position_embeddings <= 0)
    throw ValueError("Llama: every size in the config must be positive");
  if (c.hidden_size % c.num_attention_heads != 0 || c.num_attention_heads % c.num_key_value_heads != 0 ||
      (c.hidden_size / c.num_attention_heads) % 2 != 0)
    throw ValueError("Llama: hidden_size (" + std::to_string(c.hidden_size) + ") must be num_attention_heads (" +
                     std::to_string(c.num_attention_heads) +
                     ") times an even head size, and num_attention_heads "
                     "a multiple of num_key_value_heads (" +
                     std::to_string(c.num_key_value_heads) + ")");
  Parts& parts = *parts_;
  const int64_t head_dim = c.hidden_size / c.num_attention_heads, kv = c.num_key_value_heads * head_dim;
  auto linear = [&](int64_t in, int64_t out) {
    auto m = std::make_shared<nn::Linear>(in, out, false, dtype, device);
    nn::init::normal(m->weight(), 0.0, c.initializer_range);
    return m;
  };
  auto rms = [&] { return std::make_shared<nn::RMSNorm>(Shape{c.hidden_size}, c.rms_norm_eps, true, dtype, device); };
  auto model = register_module("model", std::make_shared<detail::Node>("LlamaModel"));
  parts.embed = model->add("embed_tokens", std::make_shared<nn::Embedding>(c.vocab_size, c.hidden_size, dtype, device));
  nn::init::normal(parts.embed->weight(), 0.0, c.initializer_range);
  auto layers = model->add("layers", std::make_shared<nn::ModuleList>());
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    auto layer = std::make_shared<detail::Node>("LlamaDecoderLayer");
    Parts::Layer l;
    auto attn = layer->add("self_attn", std::make_shared<detail::Node>("LlamaAttention"));
    l.q = attn->add("q_proj", linear(c.hidden_size, c.hidden_size));
    l.k = attn->add("k_proj", linear(c.hidden_size, kv));
    l.v = attn->add("v_proj", linear(c.hidden_size, kv));
    l.o = attn->add("o_proj", linear(c.hidden_size, c.hidden_size));
    auto mlp = layer->add("mlp", std::make_shared<detail::Node>("LlamaMLP"));
    l.gate = mlp->add("gate_proj", linear(c.hidden_size, c.intermediate_size));
    l.up = mlp->add("up_proj", linear(c.hidden_size, c.intermediate_size));
    l.down = mlp->add("down_proj", linear(c.intermediate_size, c.hidden_size));
    l.input_norm = layer->add("input_layernorm", rms());
    l.post_norm = layer->add("post_attention_layernorm", rms());
    layers->push_back(layer);
    parts.layers.push_back(l);
  }
  parts.norm = model->add("norm", rms());
  parts.rope = model->add("rotary_emb", std::make_shared<nn::RotaryEmbedding>(head_dim, c.rope_theta));
  if (!c.tie_word_embeddings) parts.lm_head = register_module("lm_head", linear(c.hidden_size, c.vocab_size));
}

Array Llama::run(const Array& tokens, KVCache* cache) {
  detail::check_tokens("Llama", tokens);
  const LlamaConfig& c = config_;
  const Parts& parts = *parts_;
  const int64_t batch = tokens.shape(0), t = tokens.shape(1), d = c.hidden_size / c.num_attention_heads;
  const int64_t offset = cache ? cache->length() : 0;
  if (offset + t > c.max_position_embeddings)
    throw ValueError("Llama: positions " + std::to_string(offset) + " to " + std::to_string(offset + t - 1) +
                     " exceed max_position_embeddings (" + std::to_string(c.max_position_embeddings) + ")");
  auto heads = [&](const Array& y, int64_t n) { return swapaxes(y.reshape({batch, t, n, d}), 1, 2); };
  Array x = (*parts.embed)(tokens);
  const Array mask = detail::decode_mask(cache, t);
  // A static step (one token, CUDA-graph friendly) reads its position from the device.
  const bool on_device = cache && cache->is_static();
  auto rotate = [&](const Array& y) {
    return on_device ? parts.rope->rotate(y, cache->position_array()) : parts.rope->rotate(y, offset);
  };
  for (size_t i = 0; i < parts.layers.size(); ++i) {
    const Parts::Layer& l = parts.layers[i];
    const Array h = (*l.input_norm)(x);
    const Array q = rotate(heads((*l.q)(h), c.num_attention_heads));
    const Array k = rotate(heads((*l.k)(h), c.num_key_value_heads));
    const Array v = heads((*l.v)(h), c.num_key_value_heads);
    const Array a = detail::causal_attention(q, k, v, cache, static_cast<int64_t>(i), 0.0, mask);
    x = x + (*l.o)(swapaxes(a, 1, 2).reshape({batch, t, c.hidden_size}));
    const Array g = (*l.post_norm)(x);
    x = x + (*l.down)(silu((*l.gate)(g)) * (*l.up)(g));
  }
  x = (*parts.norm)(x);
  if (cache) cache->advance(t);
  if (parts.lm_head) return (*parts.lm_head)(x);
  return matmul(autocast_low(x).reshape(-1, c.hidden_size), autocast_low(parts.embed->weight()).T())
      .reshape({batch, t, c.vocab_size});  // tied: the embedding as the head
}

Array Llama::forward(const Array& tokens) { return run(tokens, nullptr); }

Array Llama::forward(const Array& tokens, KVCache& cache) {
  NoGradGuard no_grad;
  return run(tokens, &cache);
}

KVCache Llama::make_cache(int64_t batch, std::optional<int64_t> max_length) const {
  const Array& w = parts_->embed->weight();
  return KVCache(config_.num_hidden_layers, batch, config_.num_key_value_heads,
                 max_length.value_or(config_.max_position_embeddings),
                 config_.hidden_size / config_.num_attention_heads, w.dtype(), w.device());
}

std::string Llama::name() const {
  const LlamaConfig& c = config_;
  return "Llama(vocab_size=" + std::to_string(c.vocab_size) + ", hidden_size=" + std::to_string(c.hidden_size) +
         ", intermediate_size=" + std::to_string(c.intermediate_size) +
         ", num_hidden_layers=" + std::to_string(c.num_hidden_layers) +
         ", num_attention_heads=" + std::to_string(c.num_attention_heads) +
         ", num_key_value_heads=" + std::to_string(c.num_key_value_heads) + ")";
}

nn::StateDict Llama::hf_state_dict() const {
  nn::StateDict sd = state_dict();
  if (!parts_->lm_head) sd.insert("lm_head.weight", parts_->embed->weight().detach());
  return sd;
}

void Llama::load_hf_state_dict(const nn::StateDict& state) {
  auto map = [](const std::string& name) -> std::optional<std::string> {
    const std::string tail = "rotary_emb.inv_freq";  // a buffer of older transformers, recomputed here
    if (name.size() >= tail.size() && name.compare(name.size() - tail.size(), tail.size(), tail) == 0)
      return std::nullopt;
    return name;
  };
  detail::load_hf(*this, "Llama::load_hf_state_dict", state, map,
                  parts_->lm_head ? std::string() : std::string("model.embed_tokens.weight"));
}

namespace {

nlohmann::json read_json(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw ValueError(std::string("load_llama: cannot open ") + what + " '" + path +
                     "'; pass the folder Hugging Face's snapshot_download wrote (or the LlamaConfig)");
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw ValueError(std::string("load_llama: ") + what + " '" + path + "' is not valid JSON (" + e.what() + ")");
  }
}

}  // namespace

LlamaConfig load_llama_config(const std::string& config_json) {
  const nlohmann::json j = read_json(config_json, "config.json");
  if (!j.is_object()) throw ValueError("load_llama_config: '" + config_json + "' is not a JSON object");
  LlamaConfig c;
  const auto get = [&](const char* key, auto& field) {
    if (!j.contains(key) || j[key].is_null()) return false;
    try {
      field = j[key].get<std::remove_reference_t<decltype(field)>>();
    } catch (const nlohmann::json::exception&) {
      throw ValueError("load_llama_config: '" + config_json + "': \"" + key + "\" is " + j[key].dump() +
                       ", not the number (or boolean) LlamaConfig holds");
    }
    return true;
  };
  get("vocab_size", c.vocab_size);
  get("hidden_size", c.hidden_size);
  get("intermediate_size", c.intermediate_size);
  get("num_hidden_layers", c.num_hidden_layers);
  get("num_attention_heads", c.num_attention_heads);
  if (!get("num_key_value_heads", c.num_key_value_heads)) c.num_key_value_heads = c.num_attention_heads;
  get("rms_norm_eps", c.rms_norm_eps);
  get("rope_theta", c.rope_theta);
  if (!get("max_position_embeddings", c.max_position_embeddings)) c.max_position_embeddings = 2048;
  get("tie_word_embeddings", c.tie_word_embeddings);
  get("initializer_range", c.initializer_range);
  const auto refuse = [&](const std::string& key, const std::string& why) {
    throw ValueError("load_llama_config: '" + config_json + "' sets \"" + key + "\" = " + j[key].dump() + ": " + why);
  };
  if (j.contains("head_dim") && !j["head_dim"].is_null() && c.num_attention_heads > 0 &&
      j["head_dim"] != c.hidden_size / c.num_attention_heads)
    refuse("head_dim", "models::Llama uses hidden_size / num_attention_heads");
  if (j.contains("rope_scaling") && !j["rope_scaling"].is_null())
    refuse("rope_scaling", "models::Llama computes unscaled rotary embeddings (Llama 1/2, TinyLlama, ...)");
  if (j.contains("hidden_act") && j["hidden_act"] != "silu")
    refuse("hidden_act", "models::Llama's MLP is SwiGLU (silu)");
  for (const char* key : {"attention_bias", "mlp_bias"})
    if (j.contains(key) && j[key] == true) refuse(key, "models::Llama's projections have no biases");
  return c;
}

std::shared_ptr<Llama> load_llama(const std::string& path, std::optional<LlamaConfig> config, DType dtype,
                                  std::optional<Device> device) {
  namespace fs = std::filesystem;
  const bool folder = fs::is_directory(path);
  const fs::path dir = folder ? fs::path(path) : fs::path(path).parent_path();
  if (!config) config = load_llama_config((dir / "config.json").string());
  // The weights: one file, or the shards an index maps each tensor to.
  std::vector<std::string> files;
  if (!folder) {
    files.push_back(path);
  } else if (fs::exists(dir / "model.safetensors")) {
    files.push_back((dir / "model.safetensors").string());
  } else if (fs::exists(dir / "model.safetensors.index.json")) {
    const std::string index = (dir / "model.safetensors.index.json").string();
    const nlohmann::json j = read_json(index, "the shard index");
    if (!j.contains("weight_map") || !j["weight_map"].is_object())
      throw ValueError("load_llama: '" + index + "' has no \"weight_map\" object (tensor name -> shard file)");
    std::set<std::string> shards;
    for (const auto& [name, file] : j["weight_map"].items()) {
      if (!file.is_string()) throw ValueError("load_llama: '" + index + "' maps \"" + name + "\" to " + file.dump());
      shards.insert(file.get<std::string>());
    }
    for (const std::string& shard : shards) {
      if (fs::path(shard).has_parent_path() || !fs::exists(dir / shard))
        throw ValueError("load_llama: '" + index + "' names the shard '" + shard + "', which " + dir.string() +
                         " lacks; download every file of the model");
      files.push_back((dir / shard).string());
    }
  } else {
    throw ValueError("load_llama: " + dir.string() +
                     " holds neither model.safetensors nor model.safetensors.index.json; pass the folder of a "
                     "Hugging Face LLaMA model (or its .safetensors file)");
  }
  nn::StateDict state;
  for (const std::string& file : files)
    for (auto& [name, value] : nn::load_safetensors(file)) {
      if (state.find(name)) throw ValueError("load_llama: the tensor \"" + name + "\" is in two shards (" + file + ")");
      state.insert(name, value);
    }
  auto model = std::make_shared<Llama>(*config, dtype, device);
  model->load_hf_state_dict(state);
  return model;
}

}  // namespace kiln::models
