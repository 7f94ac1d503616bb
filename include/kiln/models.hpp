// Reference models, built from kiln::nn layers with their reference implementation's layout and parameter names:
// ResNets as torchvision's (a torchvision state_dict saved as safetensors, as scripts/resnet-reference.py saves
// one, loads with load_state_dict directly), GPT-2 and a LLaMA-style decoder as Hugging Face transformers' (a Hub
// model.safetensors loads with load_hf_state_dict / load_gpt2), with a KV cache and generate().
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kiln/nn.hpp"

namespace kiln::models {

/// torchvision.models.ResNet: conv1 (7x7, stride 2) bn1 relu maxpool, layer1..layer4 of residual blocks, avgpool,
/// fc. BasicBlock (resnet18/34): two 3x3 convolutions; Bottleneck (resnet50/101): 1x1, 3x3 (carrying the
/// stride, as torchvision's v1.5), 1x1 to 4x the width. A block whose shape changes adds downsample
/// (1x1 convolution + BatchNorm2d). Convolutions start kaiming-normal (fan_out, ReLU gain), BatchNorm weight 1
/// and bias 0, fc as nn::Linear: torchvision's initialisation (from kiln's Philox, so CPU and GPU models start
/// bit-identical). Input (N, 3, H, W), output (N, num_classes) logits.
class ResNet : public nn::Module {
 public:
  /// `blocks`: blocks per stage (e.g. {3, 4, 6, 3}); `bottleneck`: Bottleneck blocks, else BasicBlock.
  ResNet(std::vector<int64_t> blocks, bool bottleneck, int64_t num_classes = 1000, DType dtype = float32,
         std::optional<Device> device = {});
  Array forward(const Array& x) override;
  std::string name() const override;

  /// For inference (torch.fx's conv/bn fusion, or torch.jit.freeze's): folds every BatchNorm2d into the
  /// convolution before it (nn::fuse_conv_bn_eval: its running statistics and affine parameters become the
  /// convolution's weight and bias) and runs each convolution's bias, the ReLU and the residual add as one fused
  /// elementwise pass over the convolution's output, in place (a downsample's bias joins the block's last one):
  /// per block 2-3 passes over its activations instead of 5-8 (batch norm, ReLU and add each reading and writing
  /// them). The model must be in evaluation mode, and stays for inference: forward in training mode then throws
  /// ValueError. The state dict changes accordingly ("conv1.bias" appears, "bn1.*" goes), as a folded PyTorch
  /// model's does. Returns *this.
  ResNet& fold_batch_norm();
  bool folded() const { return folded_; }

 private:
  std::vector<int64_t> blocks_;
  bool bottleneck_;
  bool folded_ = false;
  std::vector<std::shared_ptr<nn::Module>> stem_, stages_, head_;
};

std::shared_ptr<ResNet> resnet18(int64_t num_classes = 1000, DType dtype = float32, std::optional<Device> device = {});
std::shared_ptr<ResNet> resnet34(int64_t num_classes = 1000, DType dtype = float32, std::optional<Device> device = {});
std::shared_ptr<ResNet> resnet50(int64_t num_classes = 1000, DType dtype = float32, std::optional<Device> device = {});
std::shared_ptr<ResNet> resnet101(int64_t num_classes = 1000, DType dtype = float32, std::optional<Device> device = {});

// ---------------------------------------------------------------- language models
// GPT-2 and a LLaMA-style decoder with Hugging Face transformers' parameter names and layouts, so a Hub
// model.safetensors loads (load_hf_state_dict), a key-value cache for generation, and generate().

/// Per-layer keys and values of a decoder, preallocated to `max_length` positions: each forward step writes its
/// new positions in place (no buffer grows) and attention reads the filled prefix. For inference: the forward
/// that takes a cache records no gradient.
class KVCache {
 public:
  KVCache() = default;
  /// `layers` pairs of (batch, kv_heads, max_length, head_dim) zero buffers.
  KVCache(int64_t layers, int64_t batch, int64_t kv_heads, int64_t max_length, int64_t head_dim, DType dtype,
          Device device);
  /// Positions filled so far (the next token's position).
  int64_t length() const { return length_; }
  int64_t max_length() const { return max_length_; }
  int64_t layers() const { return static_cast<int64_t>(keys_.size()); }
  /// Writes k and v (batch, kv_heads, T, head_dim) of `layer` at positions [length(), length() + T) and returns
  /// views of positions [0, length() + T). ValueError when the cache would overflow, ShapeError for other shapes.
  std::pair<Array, Array> update(int64_t layer, const Array& k, const Array& v);
  /// Marks `t` more positions filled (the model calls it once per forward, after its last layer); in static mode
  /// also moves position_array() on the device.
  void advance(int64_t t);
  /// Empties the cache (the buffers are kept), its padding and static mode.
  void reset();
  /// Keeps the first `length` positions (as Hugging Face's DynamicCache.crop): later ones are forgotten and
  /// will be overwritten. ValueError for a length outside [0, length()].
  void crop(int64_t length);
  /// In static mode, length() as an int64 array (1,) on the buffers' device (set_static(true) writes it, advance
  /// moves it): what a static step reads. Undefined before the first set_static(true).
  const Array& position_array() const { return position_; }

  /// Static mode (for CUDA graphs, as Hugging Face's StaticCache): a forward of one token per sequence writes its
  /// keys and values at position_array() and attends over the whole buffer with the positions past it masked, so
  /// every step has the same shapes and addresses and reads its position from the device. generate() captures one
  /// such step in a CUDA graph and replays it for every token. The logits equal the dynamic mode's.
  void set_static(bool on);
  bool is_static() const { return static_; }
  /// Records `t` positions written by a replayed graph of a static step: the graph moved position_array()
  /// itself; this moves length() to match. ValueError past max_length().
  void replayed(int64_t t);
  /// Static mode: writes k and v (batch, kv_heads, 1, head_dim) of `layer` at position_array() and returns the
  /// whole buffers. ShapeError for other shapes.
  std::pair<Array, Array> update_static(int64_t layer, const Array& k, const Array& v);
  /// Static mode: which key positions each sequence's new token sees, (batch or 1, 1, 1, max_length) bool: those
  /// up to position_array() and past the sequence's padding.
  Array visible_static() const;
  /// The sequences the buffers hold.
  int64_t batch() const { return keys_.empty() ? 0 : keys_.front().shape(0); }
  /// Left padding per sequence, for a batch of prompts of different lengths (generate() sets it): the first
  /// padding[b] positions of sequence b hold no token, so attention never reads them, and a model with learned
  /// position embeddings (GPT-2) numbers sequence b's tokens from 0 at position padding[b]. Rotary embeddings
  /// (Llama) need no renumbering: their scores depend on the distance between positions only. ValueError unless
  /// there is one non-negative value per sequence below max_length; empty: no padding.
  void set_padding(std::vector<int64_t> padding);
  const std::vector<int64_t>& padding() const { return padding_; }
  /// padding() as an int64 array (batch,) on the buffers' device, copied there once by set_padding (undefined
  /// without padding): what the models' position and mask arithmetic reads at every step.
  const Array& padding_array() const { return padding_array_; }

 private:
  std::vector<Array> keys_, values_;
  std::vector<int64_t> padding_;
  Array padding_array_;
  Array position_, columns_;  // static mode: (1,) int64; (1, 1, max_length, 1) int64 0..max_length-1
  int64_t length_ = 0, max_length_ = 0;
  bool static_ = false;
};

/// What generate() needs of a decoder-only language model.
class CausalLM : public nn::Module {
 public:
  using nn::Module::forward;
  /// Logits (B, T, vocab) of integer tokens (B, T) at positions 0..T-1.
  Array forward(const Array& tokens) override = 0;
  /// Logits (B, T, vocab) of tokens at positions cache.length() .. + T - 1, attending to the cached positions
  /// and to each other causally; writes their keys and values into the cache and advances it. Records no
  /// gradient. ValueError past the cache's or the model's length.
  virtual Array forward(const Array& tokens, KVCache& cache) = 0;
  /// A cache for `batch` sequences of up to `max_length` positions (default: the model's maximum), in the
  /// dtype and on the device of the model's parameters.
  virtual KVCache make_cache(int64_t batch = 1, std::optional<int64_t> max_length = {}) const = 0;
  /// The longest sequence the model takes (n_positions, max_position_embeddings).
  virtual int64_t max_positions() const = 0;
  /// Hugging Face's state dict (the model's own plus "lm_head.weight" when it is tied to the embedding: the same
  /// array under both names, as torch's state_dict lists tied weights).
  virtual nn::StateDict hf_state_dict() const = 0;
  /// Loads a Hugging Face state dict (see each model for the names it accepts). Strict: ValueError naming the
  /// missing and the unexpected tensors, ShapeError naming a mis-shaped one.
  virtual void load_hf_state_dict(const nn::StateDict& state) = 0;
};

/// Cross entropy of next-token logits (B, T, vocab) against targets (B, T), averaged over every position.
Array lm_loss(const Array& logits, const Array& targets);

/// GPT-2's hyperparameters with Hugging Face's names (GPT2Config); defaults are gpt2 (124M).
struct GPT2Config {
  int64_t vocab_size = 50257;
  int64_t n_positions = 1024;
  int64_t n_embd = 768;
  int64_t n_layer = 12;
  int64_t n_head = 12;
  double layer_norm_epsilon = 1e-5;
  double embd_pdrop = 0.1, attn_pdrop = 0.1, resid_pdrop = 0.1;
  bool bias = true;  ///< biases in the projections and layer norms (nanoGPT's bias=False drops them)
  /// Activation recomputation in training (autograd::checkpoint): "none" keeps every activation for backward;
  /// "gelu" (llm.c's GELU recomputation, extended to the MLP) keeps each MLP's input only, neither its pre-GELU sum
  /// nor its GELU output (4 n_embd per position each), and runs c_fc, GELU and c_proj again in backward; "block"
  /// keeps each block's input only and runs the block again in backward. Losses and gradients equal "none"'s bit
  /// for bit (on the CPU, tested). ValueError for another name.
  std::string recompute = "none";

  static GPT2Config gpt2_124m() { return {}; }                                              ///< Hub "gpt2"
  static GPT2Config gpt2_355m() { return {.n_embd = 1024, .n_layer = 24, .n_head = 16}; }   ///< "gpt2-medium"
  static GPT2Config gpt2_774m() { return {.n_embd = 1280, .n_layer = 36, .n_head = 20}; }   ///< "gpt2-large"
  static GPT2Config gpt2_1558m() { return {.n_embd = 1600, .n_layer = 48, .n_head = 25}; }  ///< "gpt2-xl"
  /// llm.c's depth-d models: n_layer = d, n_embd = 64 d, n_head = d (heads of 64); d12 is gpt2_124m.
  static GPT2Config depth(int64_t d);
  /// "124m", "355m", "774m", "1558m" (or "gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl"), or "d<depth>" ("d6").
  /// ValueError listing the names for another.
  static GPT2Config from_name(const std::string& name);
};

/// GPT-2 as Hugging Face's GPT2LMHeadModel: transformer.{wte, wpe, h.{i}.{ln_1, attn.{c_attn, c_proj}, ln_2,
/// mlp.{c_fc, c_proj}}, ln_f} and lm_head tied to wte (one array, so one gradient: the embedding's and the
/// head's summed). The projections are HF's Conv1D: weight (in, out), y = x W + b. Pre-norm blocks, GELU with
/// the tanh approximation (HF's "gelu_new"), causal attention through nn::scaled_dot_product_attention.
/// Initialisation as HF's _init_weights: weights and embeddings normal(0, 0.02), the two c_proj weights
/// normal(0, 0.02 / sqrt(2 n_layer)), biases 0, layer norms 1 and 0, from kiln's generator (the same seed gives
/// the same model on every device, to the few ulps by which the backends' normal draws differ). Dropout (embd,
/// attn, resid) in training mode only.
class GPT2 : public CausalLM {
 public:
  explicit GPT2(const GPT2Config& config = {}, DType dtype = float32, std::optional<Device> device = {});
  using CausalLM::forward;
  Array forward(const Array& tokens) override;
  Array forward(const Array& tokens, KVCache& cache) override;
  KVCache make_cache(int64_t batch = 1, std::optional<int64_t> max_length = {}) const override;
  int64_t max_positions() const override { return config_.n_positions; }
  std::string name() const override;
  const GPT2Config& config() const { return config_; }
  nn::StateDict hf_state_dict() const override;
  /// Takes GPT2LMHeadModel's names, or GPT2Model's (no "transformer." prefix, as the Hub's model.safetensors
  /// stores them). The attention-mask buffers "h.{i}.attn.bias" / "attn.masked_bias" that older transformers
  /// saved are ignored; "lm_head.weight", when present, must equal wte (ValueError otherwise: the head is tied).
  void load_hf_state_dict(const nn::StateDict& state) override;

 private:
  struct Parts;  // typed pointers to the children forward reads
  Array run(const Array& tokens, KVCache* cache);
  GPT2Config config_;
  std::shared_ptr<Parts> parts_;
};

/// A GPT-2 from a safetensors file with Hugging Face's names (a Hub model.safetensors, or one saved from
/// hf_state_dict()). Without `config` the shapes give it: vocab and n_embd from wte, n_positions from wpe,
/// n_layer from the blocks, n_head = n_embd / 64 (true of every GPT-2 size). Dropout is 0 in the loaded config.
std::shared_ptr<GPT2> load_gpt2(const std::string& path, std::optional<GPT2Config> config = {}, DType dtype = float32,
                                std::optional<Device> device = {});

/// A LLaMA-style decoder's hyperparameters with Hugging Face's names (LlamaConfig; defaults: Llama-2-7B's).
struct LlamaConfig {
  int64_t vocab_size = 32000;
  int64_t hidden_size = 4096;
  int64_t intermediate_size = 11008;
  int64_t num_hidden_layers = 32;
  int64_t num_attention_heads = 32;
  int64_t num_key_value_heads = 32;  ///< fewer than the attention heads: grouped-query attention
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  int64_t max_position_embeddings = 4096;
  bool tie_word_embeddings = false;
  double initializer_range = 0.02;
};

/// LlamaForCausalLM: model.{embed_tokens, layers.{i}.{self_attn.{q,k,v,o}_proj, mlp.{gate,up,down}_proj,
/// input_layernorm, post_attention_layernorm}, norm}, lm_head (tied to embed_tokens with tie_word_embeddings).
/// Pre-norm blocks with RMSNorm, rotary position embeddings on q and k (HF's rotate_half convention:
/// nn::RotaryEmbedding), grouped-query attention, a SwiGLU feed-forward down(silu(gate(x)) * up(x)); no biases.
/// Weights start normal(0, initializer_range), norms at 1, as HF's _init_weights.
class Llama : public CausalLM {
 public:
  explicit Llama(const LlamaConfig& config = {}, DType dtype = float32, std::optional<Device> device = {});
  using CausalLM::forward;
  Array forward(const Array& tokens) override;
  Array forward(const Array& tokens, KVCache& cache) override;
  KVCache make_cache(int64_t batch = 1, std::optional<int64_t> max_length = {}) const override;
  int64_t max_positions() const override { return config_.max_position_embeddings; }
  std::string name() const override;
  const LlamaConfig& config() const { return config_; }
  nn::StateDict hf_state_dict() const override;
  /// Takes LlamaForCausalLM's names; "lm_head.weight" of a tied model must equal embed_tokens. Buffers
  /// "*.rotary_emb.inv_freq" that older transformers saved are ignored.
  void load_hf_state_dict(const nn::StateDict& state) override;

 private:
  struct Parts;
  Array run(const Array& tokens, KVCache* cache);
  LlamaConfig config_;
  std::shared_ptr<Parts> parts_;
};

/// A LlamaConfig from a Hugging Face config.json: the keys of LlamaConfig (missing ones keep LlamaConfig's
/// defaults, num_key_value_heads defaults to num_attention_heads and max_position_embeddings to 2048, as
/// transformers'). A head_dim other than hidden_size / num_attention_heads, a "rope_scaling", a hidden_act other
/// than "silu" or attention/MLP biases are refused (ValueError naming the key): the decoder does not compute them.
LlamaConfig load_llama_config(const std::string& config_json);

/// A LLaMA-style decoder from Hugging Face's files: `path` is a folder holding config.json and model.safetensors
/// (or the shards listed by model.safetensors.index.json), or a .safetensors file with config.json beside it.
/// `config` replaces config.json. Weights are converted to `dtype` on `device`. Strict as load_hf_state_dict;
/// ValueError naming a missing file or a shard the index names but the folder lacks.
std::shared_ptr<Llama> load_llama(const std::string& path, std::optional<LlamaConfig> config = {},
                                  DType dtype = float32, std::optional<Device> device = {});

/// How generate() picks each token.
struct GenerateOptions {
  int64_t max_new_tokens = 32;
  double temperature = 1.0;           ///< 0: greedy (the first largest logit)
  int64_t top_k = 0;                  ///< keep the k most likely tokens (0: all)
  double top_p = 1.0;                 ///< keep the fewest most likely tokens whose probability reaches top_p (1: all)
  std::optional<int64_t> stop_token;  ///< ends generation once generated (it is returned)
  uint64_t seed = 0;                  ///< of the sampling generator (a random::Generator of its own)
  std::function<void(int64_t)> on_token;  ///< called with each token as it is chosen (streaming)
  /// On a GPU, capture one decode step (a static KVCache) in a CUDA graph and replay it for every later token:
  /// one launch per token instead of one per op. Same tokens as without; false runs every step op by op.
  bool cuda_graph = true;
};

/// The probabilities sampling draws from: softmax(logits / temperature) over the tokens top_k and top_p keep
/// (the others 0), as Hugging Face's TopK and TopP warpers: top_k keeps every token tied with the k-th, top_p
/// keeps a token while the more likely ones hold less than top_p (so at least one). temperature 0: all mass on the
/// first largest logit. ValueError for a negative temperature or top_k, or top_p outside (0, 1].
std::vector<double> sampling_probabilities(const std::vector<double>& logits, double temperature, int64_t top_k = 0,
                                           double top_p = 1.0);

/// Generates up to max_new_tokens tokens after `prompt` (one sequence) and returns them (not the prompt): the
/// prompt in one forward that fills a KV cache, then one token per forward. Each token is drawn with
/// sampling_probabilities and one uniform number from a Generator seeded with `seed` (drawn on the CPU, so the
/// same logits give the same tokens on every device). Runs in evaluation mode with no gradient (the model's
/// mode is restored). ValueError for an empty prompt or a prompt plus new tokens past max_positions().
std::vector<int64_t> generate(CausalLM& model, const std::vector<int64_t>& prompt, const GenerateOptions& options = {});
/// generate() for a batch of prompts, one forward per token for all of them: prompts of different lengths are
/// left-padded (KVCache::set_padding), so each sequence gets the tokens it would get alone (greedy decoding: the
/// same tokens; sampling: each sequence draws from the one Generator in turn, sequence 0 first, so a batch of one
/// is generate()). A sequence that meets stop_token stops (the token is returned); the batch runs until every
/// sequence has stopped. on_token streams a single sequence: ValueError with it and more than one prompt. Other
/// errors as generate(), naming the prompt.
std::vector<std::vector<int64_t>> generate_batch(CausalLM& model, const std::vector<std::vector<int64_t>>& prompts,
                                                 const GenerateOptions& options = {});

}  // namespace kiln::models
