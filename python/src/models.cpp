// kiln.models: the ready-made networks as kiln.nn Modules (ResNet in torchvision's layout, random weights; GPT-2
// and a LLaMA-style decoder with Hugging Face's names, their loaders and generate()), and kiln.cudnn's setting
// of the convolutions they run.
#include <nanobind/stl/function.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <string>
#include <vector>

#include "bindings.hpp"
#include "convert.hpp"
#include "typed.hpp"

namespace kiln::python {
namespace {

// A prompt as token ids: a sequence of ints, or a 1-d integer array (kiln's or NumPy's).
std::vector<int64_t> to_tokens(TokensLike prompt) {
  nb::object list = nb::borrow(prompt);
  if (!nb::isinstance<nb::list>(prompt) && !nb::isinstance<nb::tuple>(prompt))
    list = nb::module_::import_("numpy").attr("asarray")(prompt).attr("tolist")();
  std::vector<int64_t> tokens;
  if (!nb::try_cast(list, tokens))
    throw nb::type_error("kiln.models.generate: a prompt must be token ids: a sequence of ints or a 1-d integer "
                         "array");
  return tokens;
}

models::GenerateOptions generate_options(int64_t max_new_tokens, double temperature, int64_t top_k, double top_p,
                                         std::optional<int64_t> stop_token, uint64_t seed, TokenCallback on_token,
                                         bool cuda_graph) {
  models::GenerateOptions options{max_new_tokens, temperature, top_k, top_p, stop_token, seed, {}, cuda_graph};
  // The GIL stays held through generate(), so the callback may be called (and copied) without taking it.
  if (!on_token.is_none()) options.on_token = [callback = nb::borrow(on_token)](int64_t token) { callback(token); };
  return options;
}

void bind_language_models(nb::module_& models) {
  nb::class_<models::GPT2Config>(models, "GPT2Config", "GPT-2's hyperparameters with Hugging Face's names; "
                                                       "defaults: gpt2 (124M).")
      .def("__init__", [](models::GPT2Config* self, int64_t vocab_size, int64_t n_positions, int64_t n_embd,
                          int64_t n_layer, int64_t n_head, double layer_norm_epsilon, double embd_pdrop,
                          double attn_pdrop, double resid_pdrop, bool bias) {
        new (self) models::GPT2Config{vocab_size, n_positions, n_embd, n_layer, n_head, layer_norm_epsilon,
                                      embd_pdrop, attn_pdrop, resid_pdrop, bias};
      }, "vocab_size"_a = 50257, "n_positions"_a = 1024, "n_embd"_a = 768, "n_layer"_a = 12, "n_head"_a = 12,
         "layer_norm_epsilon"_a = 1e-5, "embd_pdrop"_a = 0.1, "attn_pdrop"_a = 0.1, "resid_pdrop"_a = 0.1,
         "bias"_a = true)
      .def_rw("vocab_size", &models::GPT2Config::vocab_size)
      .def_rw("n_positions", &models::GPT2Config::n_positions)
      .def_rw("n_embd", &models::GPT2Config::n_embd)
      .def_rw("n_layer", &models::GPT2Config::n_layer)
      .def_rw("n_head", &models::GPT2Config::n_head)
      .def_rw("layer_norm_epsilon", &models::GPT2Config::layer_norm_epsilon)
      .def_rw("embd_pdrop", &models::GPT2Config::embd_pdrop)
      .def_rw("attn_pdrop", &models::GPT2Config::attn_pdrop)
      .def_rw("resid_pdrop", &models::GPT2Config::resid_pdrop)
      .def_rw("bias", &models::GPT2Config::bias)
      .def_static("from_name", &models::GPT2Config::from_name, "name"_a,
                  "'124m', '355m', '774m', '1558m' (or 'gpt2', 'gpt2-medium'...), or 'd<depth>' (llm.c's).")
      .def("__repr__", [](const models::GPT2Config& c) {
        return "GPT2Config(vocab_size=" + std::to_string(c.vocab_size) + ", n_positions=" +
               std::to_string(c.n_positions) + ", n_embd=" + std::to_string(c.n_embd) + ", n_layer=" +
               std::to_string(c.n_layer) + ", n_head=" + std::to_string(c.n_head) + ")";
      });
  nb::class_<models::LlamaConfig>(models, "LlamaConfig", "A LLaMA-style decoder's hyperparameters with Hugging "
                                                         "Face's names; defaults: Llama-2-7B's.")
      .def("__init__", [](models::LlamaConfig* self, int64_t vocab_size, int64_t hidden_size,
                          int64_t intermediate_size, int64_t num_hidden_layers, int64_t num_attention_heads,
                          std::optional<int64_t> num_key_value_heads, double rms_norm_eps, double rope_theta,
                          int64_t max_position_embeddings, bool tie_word_embeddings, double initializer_range) {
        new (self) models::LlamaConfig{vocab_size, hidden_size, intermediate_size, num_hidden_layers,
                                       num_attention_heads, num_key_value_heads.value_or(num_attention_heads),
                                       rms_norm_eps, rope_theta, max_position_embeddings, tie_word_embeddings,
                                       initializer_range};
      }, "vocab_size"_a = 32000, "hidden_size"_a = 4096, "intermediate_size"_a = 11008, "num_hidden_layers"_a = 32,
         "num_attention_heads"_a = 32, "num_key_value_heads"_a = nb::none(), "rms_norm_eps"_a = 1e-6,
         "rope_theta"_a = 10000.0, "max_position_embeddings"_a = 4096, "tie_word_embeddings"_a = false,
         "initializer_range"_a = 0.02)
      .def_rw("vocab_size", &models::LlamaConfig::vocab_size)
      .def_rw("hidden_size", &models::LlamaConfig::hidden_size)
      .def_rw("intermediate_size", &models::LlamaConfig::intermediate_size)
      .def_rw("num_hidden_layers", &models::LlamaConfig::num_hidden_layers)
      .def_rw("num_attention_heads", &models::LlamaConfig::num_attention_heads)
      .def_rw("num_key_value_heads", &models::LlamaConfig::num_key_value_heads)
      .def_rw("rms_norm_eps", &models::LlamaConfig::rms_norm_eps)
      .def_rw("rope_theta", &models::LlamaConfig::rope_theta)
      .def_rw("max_position_embeddings", &models::LlamaConfig::max_position_embeddings)
      .def_rw("tie_word_embeddings", &models::LlamaConfig::tie_word_embeddings)
      .def_rw("initializer_range", &models::LlamaConfig::initializer_range)
      .def_static("from_json", &models::load_llama_config, "config_json"_a,
                  "A LlamaConfig from the text of a Hugging Face config.json (ValueError for what the decoder "
                  "does not compute: rope_scaling, biases, another head_dim).");

  nb::class_<models::KVCache>(models, "KVCache",
                              "Per-layer keys and values of a decoder preallocated to max_length positions (as "
                              "Hugging Face's cache): model(tokens, cache) writes the new positions in place and "
                              "attends to the cached ones. Make one with model.make_cache(batch, max_length).")
      .def(nb::init<int64_t, int64_t, int64_t, int64_t, int64_t, DType, Device>(), "layers"_a, "batch"_a,
           "kv_heads"_a, "max_length"_a, "head_dim"_a, "dtype"_a, "device"_a)
      .def_prop_ro("length", &models::KVCache::length, "Positions filled so far (the next token's position).")
      .def("__len__", &models::KVCache::length)
      .def_prop_ro("max_length", &models::KVCache::max_length)
      .def_prop_ro("layers", &models::KVCache::layers)
      .def_prop_ro("batch", &models::KVCache::batch)
      .def("reset", &models::KVCache::reset, "Empties the cache (the buffers are kept).")
      .def("crop", &models::KVCache::crop, "length"_a,
           "Keeps the first length positions (Hugging Face's DynamicCache.crop).")
      .def("get_seq_length", &models::KVCache::length, "Hugging Face's name for length.");

  auto causal_forward = [](models::CausalLM& self, const Array& tokens, models::KVCache* cache) {
    return cache ? self.forward(tokens, *cache) : self.forward(tokens);
  };
  nb::class_<models::CausalLM, nn::Module>(models, "CausalLM",
                                           "A decoder-only language model: forward(tokens (B, T)) gives logits "
                                           "(B, T, vocab).")
      .def("forward", causal_forward, "tokens"_a, "cache"_a = nb::none(),
           "Logits (B, T, vocab) of tokens (B, T); with a cache, of positions cache.length ... + T - 1, writing "
           "their keys and values into it (no gradient recorded).")
      .def("__call__", causal_forward, "tokens"_a, "cache"_a = nb::none())
      .def("make_cache", &models::CausalLM::make_cache, "batch"_a = 1, "max_length"_a = nb::none(),
           "A KVCache for batch sequences of up to max_length positions (default: the model's), in the model's "
           "dtype and on its device.")
      .def_prop_ro("max_positions", &models::CausalLM::max_positions)
      .def("hf_state_dict", [](const models::CausalLM& self) { return state_to_dict(self.hf_state_dict()); },
           "Hugging Face's state dict (a tied lm_head listed under its own name too).")
      .def("load_hf_state_dict", [](models::CausalLM& self, nb::dict state) {
        self.load_hf_state_dict(dict_to_state(state));
      }, "state_dict"_a, "Loads Hugging Face's names, strictly (ValueError naming missing or unexpected tensors).");
  nb::class_<models::GPT2, models::CausalLM>(models, "GPT2", "GPT-2 as Hugging Face's GPT2LMHeadModel.")
      .def("__init__", [](models::GPT2* self, const models::GPT2Config& config, DTypeLike dtype, DeviceLike device) {
        auto t = to_optional_dtype(dtype);
        new (self) models::GPT2(config, t ? *t : kDefaultFloat, to_optional_device(device));
      }, "config"_a = models::GPT2Config{}, "dtype"_a = nb::none(), "device"_a = nb::none())
      .def_prop_ro("config", &models::GPT2::config);
  nb::class_<models::Llama, models::CausalLM>(models, "Llama", "A LLaMA-style decoder as Hugging Face's "
                                                               "LlamaForCausalLM.")
      .def("__init__", [](models::Llama* self, const models::LlamaConfig& config, DTypeLike dtype, DeviceLike device) {
        auto t = to_optional_dtype(dtype);
        new (self) models::Llama(config, t ? *t : kDefaultFloat, to_optional_device(device));
      }, "config"_a = models::LlamaConfig{}, "dtype"_a = nb::none(), "device"_a = nb::none())
      .def_prop_ro("config", &models::Llama::config);

  models.def("load_gpt2", [](const std::string& path, std::optional<models::GPT2Config> config, DTypeLike dtype,
                             DeviceLike device) {
    auto t = to_optional_dtype(dtype);
    return models::load_gpt2(path, config, t ? *t : kDefaultFloat, to_optional_device(device));
  }, "path"_a, "config"_a = nb::none(), "dtype"_a = nb::none(), "device"_a = nb::none(),
     "A GPT-2 from a safetensors file with Hugging Face's names; without config the shapes give it.");
  models.def("load_llama", [](const std::string& path, std::optional<models::LlamaConfig> config, DTypeLike dtype,
                              DeviceLike device) {
    auto t = to_optional_dtype(dtype);
    return models::load_llama(path, config, t ? *t : kDefaultFloat, to_optional_device(device));
  }, "path"_a, "config"_a = nb::none(), "dtype"_a = nb::none(), "device"_a = nb::none(),
     "A LLaMA-style decoder from a folder with config.json and model.safetensors (or its shards), or a "
     ".safetensors file with config.json beside it.");
  models.def("generate", [](models::CausalLM& model, TokensLike prompt, int64_t max_new_tokens, double temperature,
                            int64_t top_k, double top_p, std::optional<int64_t> stop_token, uint64_t seed,
                            TokenCallback on_token, bool cuda_graph) {
    return models::generate(model, to_tokens(prompt), generate_options(max_new_tokens, temperature, top_k, top_p,
                                                                       stop_token, seed, on_token, cuda_graph));
  }, "model"_a, "prompt"_a, "max_new_tokens"_a = 32, "temperature"_a = 1.0, "top_k"_a = 0, "top_p"_a = 1.0,
     "stop_token"_a = nb::none(), "seed"_a = 0, "on_token"_a = nb::none(), "cuda_graph"_a = true,
     "The new tokens (a list of ints) after prompt: temperature 0 is greedy; top_k / top_p filter as Hugging "
     "Face's warpers; on_token(token) is called as each is chosen. Runs in eval mode with no gradient. On a GPU "
     "the steps after the prompt replay one captured CUDA graph (cuda_graph=False: op by op; same tokens).");
  models.def("generate_batch", [](models::CausalLM& model, nb::sequence prompts, int64_t max_new_tokens,
                                  double temperature, int64_t top_k, double top_p, std::optional<int64_t> stop_token,
                                  uint64_t seed, bool cuda_graph) {
    std::vector<std::vector<int64_t>> tokens;
    for (nb::handle prompt : prompts) tokens.push_back(to_tokens(prompt));
    return models::generate_batch(model, tokens,
                                  generate_options(max_new_tokens, temperature, top_k, top_p, stop_token, seed,
                                                   TokenCallback(nb::none()), cuda_graph));
  }, "model"_a, "prompts"_a, "max_new_tokens"_a = 32, "temperature"_a = 1.0, "top_k"_a = 0, "top_p"_a = 1.0,
     "stop_token"_a = nb::none(), "seed"_a = 0, "cuda_graph"_a = true,
     "generate() for several prompts in one forward per token (left-padded); greedy gives each the tokens it "
     "would get alone.");
  models.def("sampling_probabilities", &models::sampling_probabilities, "logits"_a, "temperature"_a, "top_k"_a = 0,
             "top_p"_a = 1.0, "The probabilities generate() draws each token from, after temperature, top_k, top_p.");
}

}  // namespace

void bind_models(nb::module_& m) {
  nb::module_ models = m.def_submodule("models", "Ready-made networks (kiln::models).");
  nb::class_<models::ResNet, nn::Module>(models, "ResNet",
                                         "ResNet in torchvision's layout: (N, 3, H, W) images to (N, classes) logits.")
      .def("fold_batch_norm", [](nb::handle self) {
        nb::cast<models::ResNet&>(self).fold_batch_norm();
        return nb::borrow(self);
      }, "Folds each BatchNorm into its convolution for inference (eval mode; irreversible).")
      .def_prop_ro("folded", &models::ResNet::folded);
  nb::module_ cudnn = m.def_submodule("cudnn", "cuDNN's settings (kiln::cudnn).");
  cudnn.def("set_benchmark", &cudnn::set_benchmark, "on"_a,
            "Times cuDNN's convolution algorithms once per shape and keeps the fastest, as "
            "torch.backends.cudnn.benchmark (no effect without cuDNN).");
  using Factory = std::shared_ptr<models::ResNet> (*)(int64_t, DType, std::optional<Device>);
  const std::pair<const char*, Factory> factories[] = {{"resnet18", &models::resnet18},
                                                       {"resnet34", &models::resnet34},
                                                       {"resnet50", &models::resnet50},
                                                       {"resnet101", &models::resnet101}};
  for (const auto& [name, factory] : factories) {
    models.def(name, [factory](int64_t num_classes, DTypeLike dtype, DeviceLike device) {
      auto t = to_optional_dtype(dtype);
      return factory(num_classes, t ? *t : kDefaultFloat, to_optional_device(device));
    }, "num_classes"_a = 1000, "dtype"_a = nb::none(), "device"_a = nb::none(),
       "A ResNet with random (He) weights, as torchvision's constructor of that name without weights.");
  }
  bind_language_models(models);
}

}  // namespace kiln::python
