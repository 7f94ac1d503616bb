// Neural-network modules, initialisation and losses (as torch.nn / LibTorch), built on autograd.
//
//   auto model = std::make_shared<nn::Sequential>();
//   model->push_back(std::make_shared<nn::Linear>(784, 100));
//   model->push_back(std::make_shared<nn::ReLU>());
//   model->push_back(std::make_shared<nn::Linear>(100, 10));
//   model->to(gpu());                       // before making the optimizer: parameters move to new arrays
//   optim::SGD opt(model->parameters(), {.lr = 0.1, .momentum = 0.9});
//   Array loss = nn::cross_entropy((*model)(x), labels);
//   opt.zero_grad(); loss.backward(); opt.step();
//
// Parameters are leaves that require grad, registered by name; a module's registry is the one place that
// holds them (accessors such as Linear::weight() return the registry's entry), so to(device)/to(dtype) and
// load_state_dict update what forward() reads. Initialisation draws from kiln's Philox generator: the same
// seed gives bit-identical models on the CPU and on a GPU.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "kiln/array.hpp"
#include "kiln/autograd.hpp"

namespace kiln::nn {

/// An ordered list of (name, array), as PyTorch's state_dict: "0.weight", "0.bias", "2.running_mean", ...
class StateDict {
 public:
  void insert(std::string name, Array value);
  /// The entry named `name`, or nullptr.
  const Array* find(const std::string& name) const;
  const Array& at(const std::string& name) const;  ///< ValueError naming the missing key
  const std::vector<std::pair<std::string, Array>>& items() const { return items_; }
  size_t size() const { return items_.size(); }
  auto begin() const { return items_.begin(); }
  auto end() const { return items_.end(); }
  /// The entries with `prefix` put before each name (to save a model and its optimizer in one file).
  StateDict prefixed(const std::string& prefix) const;
  /// The entries whose name starts with `prefix`, with the prefix removed.
  StateDict strip_prefix(const std::string& prefix) const;

 private:
  std::vector<std::pair<std::string, Array>> items_;
};

class Module : public std::enable_shared_from_this<Module> {
 public:
  virtual ~Module() = default;
  /// The computation of a module with one input and one output (Sequential chains these). A module with other
  /// inputs or outputs (attention: q, k, v and a mask) declares its own forward overloads instead, with
  /// `using Module::forward;` beside them, and is called as `m.forward(q, k, v)` or `nn::call(m, q, k, v)`;
  /// this one then throws ValueError (such a module cannot be a step of a Sequential).
  virtual Array forward(const Array& x);
  Array operator()(const Array& x) {
    if (!is_anomaly_enabled()) return forward(x);
    AnomalyScope scope(name());  // anomaly mode names the module an op ran in
    return forward(x);
  }
  /// A short description, e.g. "Linear(in_features=784, out_features=100, bias=true)".
  virtual std::string name() const = 0;
  /// The module tree as PyTorch prints it: a leaf's name(), a container's children one per line as
  /// "(key): child", indented.
  std::string repr() const;
  /// The number of parameter elements (this module's and its children's); only those that require grad when
  /// `trainable_only`.
  int64_t num_parameters(bool trainable_only = false) const;

  /// Parameters of this module and (recurse) its children, in registration order.
  std::vector<Array> parameters(bool recurse = true) const;
  std::vector<std::pair<std::string, Array>> named_parameters(bool recurse = true) const;
  std::vector<std::pair<std::string, Array>> named_buffers(bool recurse = true) const;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> named_children() const { return children_; }

  /// Moves every parameter and buffer to `device` / converts the floating ones to `dtype` (parameters stay
  /// leaves that require grad; their gradients move with them). Returns *this.
  Module& to(Device device);
  Module& to(DType dtype);
  /// Lays every 4-d parameter (convolution weights) out channels-last (torch.channels_last; values, gradients
  /// and requires-grad kept), as model.to(memory_format=torch.channels_last). With channels-last inputs the
  /// network's activations stay channels-last end to end. Make the optimizer after it. Returns *this.
  Module& to_channels_last();
  /// Training mode (the default) or evaluation mode (dropout off), for this module and its children.
  Module& train(bool on = true);
  Module& eval() { return train(false); }
  bool is_training() const { return training_; }
  /// Clears every parameter's gradient (set_grad(Array())).
  void zero_grad();
  /// Parameters then buffers, by dotted name.
  StateDict state_dict() const;
  /// Copies each entry into the parameter or buffer of that name (converted to its dtype and device).
  /// ValueError listing missing and unexpected keys (strict), ShapeError naming a mis-shaped entry.
  void load_state_dict(const StateDict& state, bool strict = true);
  /// The registered parameter / buffer `name` of this module (ValueError if none). The reference is the
  /// registry's entry: valid as long as the module, and it follows to() (which puts the moved array there).
  Array& parameter(const std::string& name);
  Array& buffer(const std::string& name);

 protected:
  /// Registers `value` as a parameter (a leaf that requires grad) and returns the registry's entry, which stays
  /// valid as long as the module (later registrations do not move it) and follows to(). Keep that reference (or
  /// call parameter(name)), not a copy of the Array: to(device/dtype) puts a new array in the entry and retires
  /// the old one, so an op recording a gradient through a kept copy throws ValueError saying so.
  Array& register_parameter(std::string name, Array value);
  Array& register_buffer(std::string name, Array value);
  template <class M>
  std::shared_ptr<M> register_module(std::string name, std::shared_ptr<M> module) {
    children_.emplace_back(std::move(name), module);
    return module;
  }
  /// Puts `module` in place of the child registered as `name` (its parameters and buffers under that name from
  /// then on); a null module removes the child. ValueError when there is no such child.
  void replace_module(const std::string& name, std::shared_ptr<Module> module);
  /// Called on each module of the tree after to(device/dtype) put new arrays in its parameters (the recurrent
  /// layers lay theirs out again as views of one weight space).
  virtual void parameters_moved() {}

 private:
  using Entries = std::deque<std::pair<std::string, Array>>;  // a deque: registering keeps earlier entries in place
  void visit(const std::string& prefix, const std::function<void(const std::string&, Module&)>& f);
  std::vector<std::pair<std::string, Array>> collect(bool recurse, Entries Module::*which) const;
  Entries parameters_, buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  bool training_ = true;
};

/// Calls `module.forward(args...)` with anomaly mode's label (as Module::operator() does for one input): for
/// modules with several inputs or outputs.
template <class M, class... Args>
decltype(auto) call(M& module, Args&&... args) {
  AnomalyScope scope(is_anomaly_enabled() ? module.name() : std::string());
  return module.forward(std::forward<Args>(args)...);
}

/// (*module)(x) under autograd::checkpoint: the module's activations are not kept for backward but computed again
/// there (its parameters and x get their gradients as without it). The module is held until backward.
Array checkpoint(std::shared_ptr<Module> module, const Array& x);

/// Prints module.repr() and the parameter count.
std::ostream& operator<<(std::ostream& out, const Module& module);

/// Modules held in order and registered as "0", "1", ... (torch.nn.ModuleList); no forward of its own.
class ModuleList : public Module {
 public:
  ModuleList() = default;
  explicit ModuleList(std::vector<std::shared_ptr<Module>> modules);
  void push_back(std::shared_ptr<Module> module);
  std::string name() const override { return "ModuleList"; }
  size_t size() const { return modules_.size(); }
  /// The i-th module (negative i counts from the end); ValueError when out of range.
  Module& operator[](int64_t i) const;
  /// The i-th module as its own type (ValueError when it is another).
  template <class M>
  M& at(int64_t i) const {
    auto* m = dynamic_cast<M*>(&(*this)[i]);
    if (!m) throw ValueError("ModuleList::at: module " + std::to_string(i) + " is " + (*this)[i].name());
    return *m;
  }
  auto begin() const { return modules_.begin(); }
  auto end() const { return modules_.end(); }

 private:
  std::vector<std::shared_ptr<Module>> modules_;
};

/// Modules by name in insertion order (torch.nn.ModuleDict); the names are the state-dict prefixes.
class ModuleDict : public Module {
 public:
  ModuleDict() = default;
  /// Adds `module` as `key`, or puts it in place of the module of that key.
  void insert(const std::string& key, std::shared_ptr<Module> module);
  std::string name() const override { return "ModuleDict"; }
  size_t size() const { return named_children().size(); }
  bool contains(const std::string& key) const;
  /// The module of `key`; ValueError listing the keys when there is none.
  Module& operator[](const std::string& key) const;
  std::vector<std::string> keys() const;
};

/// Children applied in order; parameters are named "<index>.<name>".
class Sequential : public Module {
 public:
  Sequential() = default;
  explicit Sequential(std::vector<std::shared_ptr<Module>> modules);
  void push_back(std::shared_ptr<Module> module);
  Array forward(const Array& x) override;
  std::string name() const override { return "Sequential"; }
  size_t size() const { return modules_.size(); }
  Module& operator[](size_t i) { return *modules_.at(i); }

 private:
  std::vector<std::shared_ptr<Module>> modules_;
};

/// y = x W^T + b; W (out, in) and b (out,) start as PyTorch's: uniform(-1/sqrt(in), 1/sqrt(in)) (kaiming_uniform
/// with a = sqrt(5)).
class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true, DType dtype = float32,
         std::optional<Device> device = {});
  Array forward(const Array& x) override;
  std::string name() const override;
  Array& weight() { return parameter("weight"); }
  Array& bias() { return parameter("bias"); }

 private:
  int64_t in_, out_;
  bool has_bias_;
};

/// Elementwise activations.
class ReLU : public Module {
 public:
  Array forward(const Array& x) override;
  std::string name() const override { return "ReLU"; }
};
class GELU : public Module {
 public:
  /// approximate = "none" (erf) or "tanh", as torch.nn.GELU.
  explicit GELU(std::string approximate = "none");
  Array forward(const Array& x) override;
  std::string name() const override { return "GELU(approximate=" + approximate_ + ")"; }

 private:
  std::string approximate_;
};
class Sigmoid : public Module {
 public:
  Array forward(const Array& x) override;
  std::string name() const override { return "Sigmoid"; }
};
class Tanh : public Module {
 public:
  Array forward(const Array& x) override;
  std::string name() const override { return "Tanh"; }
};

/// Zeroes each element with probability p in training mode and scales the rest by 1/(1-p); identity in eval.
class Dropout : public Module {
 public:
  explicit Dropout(double p = 0.5);
  Array forward(const Array& x) override;
  std::string name() const override;

 private:
  double p_;
};

/// Flattens axes start_dim..end_dim into one (default: everything after the batch axis).
class Flatten : public Module {
 public:
  explicit Flatten(int64_t start_dim = 1, int64_t end_dim = -1) : start_(start_dim), end_(end_dim) {}
  Array forward(const Array& x) override;
  std::string name() const override { return "Flatten"; }

 private:
  int64_t start_, end_;
};

/// Splits axis `dim` into `sizes` (torch.nn.Unflatten): Unflatten(1, {1, 28, 28}) makes (N, 784) images.
class Unflatten : public Module {
 public:
  Unflatten(int64_t dim, Shape sizes) : dim_(dim), sizes_(std::move(sizes)) {}
  Array forward(const Array& x) override;
  std::string name() const override { return "Unflatten(" + std::to_string(dim_) + ", " + shape_str(sizes_) + ")"; }

 private:
  int64_t dim_;
  Shape sizes_;
};

/// Rows of a (num_embeddings, dim) table picked by integer indices; weight ~ normal(0, 1) as PyTorch.
class Embedding : public Module {
 public:
  Embedding(int64_t num_embeddings, int64_t embedding_dim, DType dtype = float32, std::optional<Device> device = {});
  Array forward(const Array& indices) override;
  std::string name() const override;
  Array& weight() { return parameter("weight"); }

 private:
  int64_t num_, dim_;
};

/// Normalises over the last len(normalized_shape) axes: (x - mean) / sqrt(var + eps) * weight + bias.
class LayerNorm : public Module {
 public:
  explicit LayerNorm(Shape normalized_shape, double eps = 1e-5, bool elementwise_affine = true, DType dtype = float32,
                     std::optional<Device> device = {});
  Array forward(const Array& x) override;
  std::string name() const override;

 private:
  Shape shape_;
  double eps_;
  bool affine_;
};

/// y = x / sqrt(mean(x^2 over the last axes) + eps) * weight (torch.nn.RMSNorm); eps defaults to the machine
/// epsilon of the input's dtype, as PyTorch's. weight starts at ones.
class RMSNorm : public Module {
 public:
  explicit RMSNorm(Shape normalized_shape, std::optional<double> eps = {}, bool elementwise_affine = true,
                   DType dtype = float32, std::optional<Device> device = {});
  Array forward(const Array& x) override;
  std::string name() const override;

 private:
  Shape shape_;
  std::optional<double> eps_;
  bool affine_;
};

/// Rotary position embeddings as LLaMA's (Hugging Face's rotate_half convention): the pairs (x[i], x[i + D/2])
/// of the last axis rotated by position * base^(-2i/D). `rotate(x, offset)` takes (..., T, D) at positions
/// offset .. offset + T - 1 (a KV cache's next positions: offset = the cached length).
class RotaryEmbedding : public Module {
 public:
  explicit RotaryEmbedding(int64_t dim, double base = 10000.0);
  /// cos and sin of positions [offset, offset + length), each (length, dim), in `dtype` on `device`.
  std::pair<Array, Array> cos_sin(int64_t length, int64_t offset, DType dtype, Device device) const;
  /// cos and sin of integer `positions` (T,), each (T, dim), in `dtype` on the positions' device.
  std::pair<Array, Array> cos_sin(const Array& positions, DType dtype) const;
  /// x (..., T, dim) rotated for positions offset .. offset + T - 1.
  Array rotate(const Array& x, int64_t offset = 0) const;
  /// x (..., T, dim) rotated for the integer positions (T,) given on the device (a static decode step reads its
  /// position there). ShapeError for another shape or dtype.
  Array rotate(const Array& x, const Array& positions) const;
  Array forward(const Array& x) override { return rotate(x); }
  std::string name() const override;

 private:
  void check_input(const Array& x) const;
  int64_t dim_;
  double base_;
};

/// torch.nn.MultiheadAttention: in_proj_weight (3E, E) xavier-uniform, in_proj_bias and out_proj.bias zeros,
/// out_proj a Linear; PyTorch's parameter names, so its state dict loads. Inputs (L, N, E) or, with batch_first,
/// (N, L, E). Masks as PyTorch's module (not as scaled_dot_product_attention): a boolean key_padding_mask (N, S)
/// or attn_mask (L, S) / (N*heads, L, S) is true where attention is NOT allowed; float masks are added.
/// forward returns the output and, with need_weights, the attention weights (N, L, S) averaged over heads
/// (or (N, heads, L, S)), which are computed in full as PyTorch does; without need_weights the blocked
/// scaled_dot_product_attention runs (no L x S matrix). Dropout applies to the weights in training mode.
class MultiheadAttention : public Module {
 public:
  MultiheadAttention(int64_t embed_dim, int64_t num_heads, double dropout = 0.0, bool bias = true,
                     bool batch_first = false, DType dtype = float32, std::optional<Device> device = {});
  using Module::forward;
  std::pair<Array, Array> forward(const Array& query, const Array& key, const Array& value,
                                  const Array& key_padding_mask = {}, bool need_weights = true,
                                  const Array& attn_mask = {}, bool average_attn_weights = true,
                                  bool is_causal = false);
  /// Self-attention without weights (forward(x, x, x, {}, false).first): a step of a Sequential.
  Array forward(const Array& x) override;
  std::string name() const override;

 private:
  int64_t embed_, heads_;
  double dropout_;
  bool batch_first_;
  bool bias_ = true;
  std::shared_ptr<Linear> out_proj_;
};

/// The options of torch.nn.TransformerEncoderLayer / TransformerDecoderLayer, with PyTorch's defaults.
struct TransformerLayerOptions {
  int64_t d_model = 512;
  int64_t nhead = 8;
  int64_t dim_feedforward = 2048;
  double dropout = 0.1;
  std::string activation = "relu";  ///< "relu" or "gelu"
  double layer_norm_eps = 1e-5;
  bool batch_first = false;
  bool norm_first = false;  ///< pre-norm (x + f(norm(x))) instead of post-norm (norm(x + f(x)))
  bool bias = true;
  DType dtype = float32;
  std::optional<Device> device;
};

/// torch.nn.TransformerEncoderLayer: self-attention then the feed-forward block, each with a residual connection
/// and a LayerNorm; PyTorch's children (self_attn, linear1, dropout, linear2, norm1, norm2, dropout1, dropout2),
/// so its state dict loads. Masks as MultiheadAttention's (true = not allowed).
class TransformerEncoderLayer : public Module {
 public:
  explicit TransformerEncoderLayer(const TransformerLayerOptions& options);
  using Module::forward;
  Array forward(const Array& src, const Array& src_mask, const Array& src_key_padding_mask = {},
                bool is_causal = false);
  Array forward(const Array& src) override { return forward(src, Array()); }
  std::string name() const override { return "TransformerEncoderLayer"; }

 private:
  TransformerLayerOptions o_;
};

/// torch.nn.TransformerDecoderLayer: self-attention, attention over the encoder's output (`memory`), then the
/// feed-forward block; children self_attn, multihead_attn, linear1, dropout, linear2, norm1-3, dropout1-3.
class TransformerDecoderLayer : public Module {
 public:
  explicit TransformerDecoderLayer(const TransformerLayerOptions& options);
  using Module::forward;
  Array forward(const Array& tgt, const Array& memory, const Array& tgt_mask = {}, const Array& memory_mask = {},
                const Array& tgt_key_padding_mask = {}, const Array& memory_key_padding_mask = {},
                bool tgt_is_causal = false);
  std::string name() const override { return "TransformerDecoderLayer"; }

 private:
  TransformerLayerOptions o_;
};

/// num_layers encoder layers ("layers.0", ...) and, with final_norm, a LayerNorm ("norm") after them
/// (torch.nn.TransformerEncoder with norm=LayerNorm(d_model)).
class TransformerEncoder : public Module {
 public:
  TransformerEncoder(const TransformerLayerOptions& layer, int64_t num_layers, bool final_norm = false);
  using Module::forward;
  Array forward(const Array& src, const Array& mask, const Array& src_key_padding_mask = {}, bool is_causal = false);
  Array forward(const Array& src) override { return forward(src, Array()); }
  std::string name() const override { return "TransformerEncoder"; }

 private:
  std::shared_ptr<ModuleList> layers_;
  std::shared_ptr<LayerNorm> norm_;
};

/// num_layers decoder layers and an optional final LayerNorm (torch.nn.TransformerDecoder).
class TransformerDecoder : public Module {
 public:
  TransformerDecoder(const TransformerLayerOptions& layer, int64_t num_layers, bool final_norm = false);
  using Module::forward;
  Array forward(const Array& tgt, const Array& memory, const Array& tgt_mask = {}, const Array& memory_mask = {},
                const Array& tgt_key_padding_mask = {}, const Array& memory_key_padding_mask = {},
                bool tgt_is_causal = false);
  std::string name() const override { return "TransformerDecoder"; }

 private:
  std::shared_ptr<ModuleList> layers_;
  std::shared_ptr<LayerNorm> norm_;
};

// ---------------------------------------------------------------- recurrent layers
/// The options of torch.nn.RNN / LSTM / GRU beyond input_size and hidden_size, with PyTorch's defaults.
struct RNNOptions {
  int64_t num_layers = 1;
  std::string nonlinearity = "tanh";  ///< RNN only: "tanh" or "relu"
  bool bias = true;
  bool batch_first = false;  ///< input and output (N, T, features) instead of (T, N, features)
  double dropout = 0.0;      ///< on the outputs of each layer but the last, in training mode
  bool bidirectional = false;
  int64_t proj_size = 0;  ///< LSTM only, < hidden_size: h = weight_hr_l{k} (proj_size, hidden) (o * tanh(c))
  DType dtype = float32;
  std::optional<Device> device;
};

/// What RNN, LSTM and GRU share: PyTorch's parameters per layer k and direction (suffix "_reverse" for the
/// backward one), in its order: weight_ih_l{k} (gates*hidden, in), weight_hh_l{k} (gates*hidden, hidden),
/// bias_ih_l{k}, bias_hh_l{k} (gates*hidden) [, LSTM with proj_size: weight_hr_l{k} (proj_size, hidden), and
/// weight_hh's second axis proj_size], all uniform(-1/sqrt(hidden), 1/sqrt(hidden)); gate order LSTM
/// (i, f, g, o), GRU (r, z, n). Each layer and direction projects the whole input sequence with one matmul, then
/// runs the recurrence as one autograd node (per step one matmul with weight_hh and one fused elementwise pass,
/// forward and backward). Input (T, N, in), (N, T, in) with batch_first, or unbatched (T, in); states
/// (layers*directions, N, hidden), or (layers*directions, hidden) unbatched; undefined states start at zeros.
class RNNBase : public Module {
 public:
  enum class Mode { RNNTanh, RNNRelu, LSTM, GRU };
  using Module::forward;
  /// The output (T, N, directions*hidden) alone: a step of a Sequential.
  Array forward(const Array& input) override;
  std::string name() const override;
  int64_t input_size() const { return input_; }
  int64_t hidden_size() const { return hidden_; }
  const RNNOptions& options() const { return o_; }
  /// Lays the parameters out as views of one flat array, each where the device's engine wants it (cuDNN's weight
  /// space on a GPU, which it then reads without a copy; PyTorch's order elsewhere), values, gradients and
  /// requires-grad kept, as torch's flatten_parameters. The constructor and to() call it; call it yourself after
  /// putting a new array in a parameter's entry, and make optimizers after it (it retires the arrays it replaces).
  /// Until then a GPU call copies the weights into a scratch space. No-op when already laid out.
  void flatten_parameters();
  /// The flat array the parameters are views of (undefined before flatten_parameters).
  const Array& flat_weights() const;

 protected:
  RNNBase(Mode mode, int64_t input_size, int64_t hidden_size, RNNOptions options);
  /// output, h_n and (LSTM) c_n. ShapeError / DTypeError / DeviceError naming the layer and the operand.
  std::tuple<Array, Array, Array> run(const Array& input, const Array& h0, const Array& c0);
  void parameters_moved() override { flatten_parameters(); }

 private:
  struct FlatWeights;
  /// The parameters' names in PyTorch's order (weight_ih, weight_hh, [bias_ih, bias_hh], [weight_hr] per layer
  /// and direction).
  std::vector<std::string> weight_names() const;
  Mode mode_;
  int64_t input_, hidden_;
  RNNOptions o_;
  std::shared_ptr<FlatWeights> flat_;
};

/// torch.nn.RNN: h' = tanh(W_ih x + b_ih + W_hh h + b_hh) (or relu, options.nonlinearity).
class RNN : public RNNBase {
 public:
  RNN(int64_t input_size, int64_t hidden_size, RNNOptions options = {});
  using RNNBase::forward;
  /// (output, h_n) from the input and the initial state h0 (undefined: zeros).
  std::pair<Array, Array> forward(const Array& input, const Array& h0);
};

/// torch.nn.LSTM: i, f, o = sigmoid(.), g = tanh(.) of W_ih x + b_ih + W_hh h + b_hh; c' = f c + i g,
/// h' = o tanh(c').
class LSTM : public RNNBase {
 public:
  LSTM(int64_t input_size, int64_t hidden_size, RNNOptions options = {});
  using RNNBase::forward;
  /// (output, h_n, c_n) from the input and the initial states (PyTorch's (output, (h_n, c_n)); undefined: zeros).
  std::tuple<Array, Array, Array> forward(const Array& input, const Array& h0, const Array& c0);
};

/// torch.nn.GRU: r, z = sigmoid(.), n = tanh(W_in x + b_in + r * (W_hn h + b_hn)), h' = (1 - z) n + z h.
class GRU : public RNNBase {
 public:
  GRU(int64_t input_size, int64_t hidden_size, RNNOptions options = {});
  using RNNBase::forward;
  /// (output, h_n) from the input and the initial state h0 (undefined: zeros).
  std::pair<Array, Array> forward(const Array& input, const Array& h0);
};

/// What the cells share: weight_ih (gates*hidden, in), weight_hh (gates*hidden, hidden), bias_ih, bias_hh, all
/// uniform(-1/sqrt(hidden), 1/sqrt(hidden)) as PyTorch's. Input (N, in) or unbatched (in,); states (N, hidden)
/// or (hidden,); undefined states start at zeros. One step of the matching layer (the same node).
class RNNCellBase : public Module {
 public:
  using Module::forward;
  std::string name() const override;

 protected:
  RNNCellBase(RNNBase::Mode mode, int64_t input_size, int64_t hidden_size, bool bias, DType dtype,
              std::optional<Device> device);
  /// h' and (LSTM) c'.
  std::pair<Array, Array> step(const Array& input, const Array& h, const Array& c);

 private:
  RNNBase::Mode mode_;
  int64_t input_, hidden_;
  bool bias_;
};

/// torch.nn.RNNCell: h' = tanh (or relu) of W_ih x + b_ih + W_hh h + b_hh.
class RNNCell : public RNNCellBase {
 public:
  RNNCell(int64_t input_size, int64_t hidden_size, bool bias = true, std::string nonlinearity = "tanh",
          DType dtype = float32, std::optional<Device> device = {});
  Array forward(const Array& input, const Array& h);
  Array forward(const Array& input) override { return forward(input, Array()); }
};

/// torch.nn.LSTMCell: returns (h', c').
class LSTMCell : public RNNCellBase {
 public:
  LSTMCell(int64_t input_size, int64_t hidden_size, bool bias = true, DType dtype = float32,
           std::optional<Device> device = {});
  std::pair<Array, Array> forward(const Array& input, const Array& h, const Array& c);
  /// h' from zero states.
  Array forward(const Array& input) override { return forward(input, Array(), Array()).first; }
};

/// torch.nn.GRUCell: returns h'.
class GRUCell : public RNNCellBase {
 public:
  GRUCell(int64_t input_size, int64_t hidden_size, bool bias = true, DType dtype = float32,
          std::optional<Device> device = {});
  Array forward(const Array& input, const Array& h);
  Array forward(const Array& input) override { return forward(input, Array()); }
};

// ---------------------------------------------------------------- checkpoints
/// Writes `state` to `path` in the safetensors format (an 8-byte little-endian header size, a JSON header of
/// dtype/shape/data_offsets per name, then the data, C order, little endian), which the Python `safetensors`
/// package and PyTorch read. GPU arrays are copied to the host. `metadata`: string pairs for "__metadata__".
/// Crash-safe (kiln::write_file_atomically): a crash during the save leaves the previous file whole.
/// Throws ValueError when the file cannot be written (the previous file is then unchanged).
void save_safetensors(const std::string& path, const StateDict& state,
                      const std::vector<std::pair<std::string, std::string>>& metadata = {});
/// Reads a safetensors file (entries in the file's order) onto `device` (default: the CPU). A truncated or
/// corrupt file (header size past the end, bad JSON, unknown dtype, offsets outside the data or not matching
/// the shape) is a ValueError naming the file and the fault; nothing is allocated beyond the file's size.
StateDict load_safetensors(const std::string& path, std::optional<Device> device = {});

// ---------------------------------------------------------------- initialisation (in place, unrecorded)
namespace init {
/// fan_in and fan_out of a weight (dim 1 and dim 0 times the receptive field, as PyTorch).
std::pair<int64_t, int64_t> fans(const Array& weight);
void uniform(Array& w, double low, double high);
void normal(Array& w, double mean, double std);
void constant(Array& w, double value);
void zeros(Array& w);
void ones(Array& w);
/// uniform(-b, b), b = gain * sqrt(6 / (fan_in + fan_out)).
void xavier_uniform(Array& w, double gain = 1.0);
/// normal(0, gain * sqrt(2 / (fan_in + fan_out))).
void xavier_normal(Array& w, double gain = 1.0);
/// uniform(-b, b), b = sqrt(3) * gain / sqrt(fan), gain = sqrt(2 / (1 + a^2)) (leaky_relu), fan = fan_in.
void kaiming_uniform(Array& w, double a = 0.0, bool fan_in = true);
/// normal(0, gain / sqrt(fan)), gain = sqrt(2 / (1 + a^2)).
void kaiming_normal(Array& w, double a = 0.0, bool fan_in = true);
}  // namespace init

// ---------------------------------------------------------------- functions and losses
/// Reductions of the losses: mean over the batch (the default), sum, or none (per element / per sample).
enum class Reduction { Mean, Sum, None };

// ---------------------------------------------------------------- convolutional layers (NCHW)
// Reference implementations on every backend: conv2d gathers input windows with a strided view (im2col) and
// multiplies them by the weights with BLAS / cuBLAS; its gradient scatters window gradients back (col2im);
// pooling likewise. cuDNN / oneDNN engines are to replace them for speed (not yet). Pairs are (height, width).

/// y[n, o] = sum over the window of x * weight[o] (+ bias[o]), as torch.nn.functional.conv2d: weight
/// (out_channels, in_channels / groups, KH, KW), bias (out_channels,) or undefined. Differentiable in x, weight
/// and bias. Throws ShapeError for shapes that do not fit (naming them), ValueError for non-positive sizes.
Array conv2d(const Array& x, const Array& weight, const Array& bias = {}, std::pair<int64_t, int64_t> stride = {1, 1},
             std::pair<int64_t, int64_t> padding = {0, 0}, std::pair<int64_t, int64_t> dilation = {1, 1},
             int64_t groups = 1);
/// The maximum of each window (padding counts as -inf; the first maximum gets the gradient, as PyTorch).
Array max_pool2d(const Array& x, std::pair<int64_t, int64_t> kernel,
                 std::optional<std::pair<int64_t, int64_t>> stride = {}, std::pair<int64_t, int64_t> padding = {0, 0},
                 std::pair<int64_t, int64_t> dilation = {1, 1});
/// The mean of each window (padding counts as zeros: PyTorch's count_include_pad).
Array avg_pool2d(const Array& x, std::pair<int64_t, int64_t> kernel,
                 std::optional<std::pair<int64_t, int64_t>> stride = {}, std::pair<int64_t, int64_t> padding = {0, 0});
/// Averages to output_size, as torch's adaptive_avg_pool2d: output (i, j) averages input rows floor(i*H/oh) to
/// ceil((i+1)*H/oh) and likewise columns (one average pooling when the sizes divide; else one mean per output).
Array adaptive_avg_pool2d(const Array& x, std::pair<int64_t, int64_t> output_size);
/// Normalises each channel of (N, C, H, W) x: with the batch's statistics when training (and updates the running
/// ones, when defined, in place: running = (1 - momentum) running + momentum batch, the variance unbiased), else
/// with the running ones; then * weight + bias (each (C,) or undefined). As torch's batch_norm.
Array batch_norm2d(const Array& x, Array& running_mean, Array& running_var, const Array& weight = {},
                   const Array& bias = {}, bool training = true, double momentum = 0.1, double eps = 1e-5);
/// relu(batch_norm2d(...)) as one autograd node: on a GPU one pass forward and one backward (kiln's kernels apply
/// the ReLU and its mask inside the normalisation's), which a conv-BN-ReLU network (ResNet) runs at every block.
/// Same values and gradients as the two calls.
Array batch_norm_relu2d(const Array& x, Array& running_mean, Array& running_var, const Array& weight = {},
                        const Array& bias = {}, bool training = true, double momentum = 0.1, double eps = 1e-5);

struct Conv2dOptions {
  std::pair<int64_t, int64_t> stride{1, 1};
  std::pair<int64_t, int64_t> padding{0, 0};
  std::pair<int64_t, int64_t> dilation{1, 1};
  int64_t groups = 1;
  bool bias = true;
};

/// torch.nn.Conv2d: weight kaiming-uniform(a = sqrt(5)), bias uniform(+-1/sqrt(fan_in)), as PyTorch.
class Conv2d : public Module {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, std::pair<int64_t, int64_t> kernel_size, Conv2dOptions options = {},
         DType dtype = float32, std::optional<Device> device = {});
  Array forward(const Array& x) override;
  std::string name() const override;
  Array& weight() { return parameter("weight"); }
  int64_t in_channels() const { return in_; }
  int64_t out_channels() const { return out_; }
  std::pair<int64_t, int64_t> kernel_size() const { return kernel_; }
  const Conv2dOptions& options() const { return options_; }

 private:
  int64_t in_, out_;
  std::pair<int64_t, int64_t> kernel_;
  Conv2dOptions options_;
};

class MaxPool2d : public Module {
 public:
  explicit MaxPool2d(std::pair<int64_t, int64_t> kernel, std::optional<std::pair<int64_t, int64_t>> stride = {},
                     std::pair<int64_t, int64_t> padding = {0, 0});
  Array forward(const Array& x) override;
  std::string name() const override;

 private:
  std::pair<int64_t, int64_t> kernel_, stride_, padding_;
};

class AvgPool2d : public Module {
 public:
  explicit AvgPool2d(std::pair<int64_t, int64_t> kernel, std::optional<std::pair<int64_t, int64_t>> stride = {},
                     std::pair<int64_t, int64_t> padding = {0, 0});
  Array forward(const Array& x) override;
  std::string name() const override;

 private:
  std::pair<int64_t, int64_t> kernel_, stride_, padding_;
};

class AdaptiveAvgPool2d : public Module {
 public:
  explicit AdaptiveAvgPool2d(std::pair<int64_t, int64_t> output_size);
  Array forward(const Array& x) override;
  std::string name() const override;

 private:
  std::pair<int64_t, int64_t> size_;
};

/// torch.nn.BatchNorm2d: weight 1, bias 0, buffers running_mean (0), running_var (1), num_batches_tracked.
class BatchNorm2d : public Module {
 public:
  explicit BatchNorm2d(int64_t num_features, double eps = 1e-5, double momentum = 0.1, bool affine = true,
                       DType dtype = float32, std::optional<Device> device = {});
  Array forward(const Array& x) override;
  /// relu(forward(x)) fused (batch_norm_relu2d): what ResNet's blocks call for a batch norm followed by ReLU.
  Array forward_relu(const Array& x);
  std::string name() const override;
  int64_t num_features() const { return features_; }
  double eps() const { return eps_; }
  bool affine() const { return affine_; }

 private:
  Array run(const Array& x, bool relu);
  int64_t features_;
  double eps_, momentum_;
  bool affine_;
};

/// torch.nn.utils.fusion.fuse_conv_bn_eval: a new Conv2d (with a bias) that computes bn(conv(x)) as `bn`
/// evaluates, from the running statistics: weight * s and (bias - running_mean) * s + beta per output channel,
/// s = gamma / sqrt(running_var + eps) (gamma 1 and beta 0 without affine parameters), computed in float64 and
/// stored in the convolution's dtype, device and layout. For inference: training would need the batch's
/// statistics. ShapeError when bn's features are not conv's output channels.
std::shared_ptr<Conv2d> fuse_conv_bn_eval(Conv2d& conv, BatchNorm2d& bn);

/// softmax / log_softmax along `axis`, max-shifted (exp(x - logsumexp(x))).
Array softmax(const Array& x, int64_t axis = -1);
/// softmax(q k^T * scale + mask) v over the last two axes, as torch.nn.functional.scaled_dot_product_attention:
/// query (..., L, E), key (..., S, E), value (..., S, Ev) -> (..., L, Ev); the leading (batch, head) axes broadcast.
/// attn_mask: boolean (true: the position takes part) or additive (added to the scores), broadcast to
/// (..., L, S); is_causal: query i sees keys j <= i (not with attn_mask). dropout_p drops attention weights (pass
/// 0 in eval; where cuDNN's fused attention runs, on a GPU, the mask is cuDNN's, not the CPU's); scale defaults to
/// 1/sqrt(E); enable_gqa: key/value with fewer heads (axis -3) than query, each serving Hq/Hk query heads.
/// Differentiable in query, key and value (not the mask). Computed in blocks of query rows with the backward
/// recomputing them, so memory grows linearly with the sequence (no L x S matrix); float16 and bfloat16 compute in
/// float32. A row whose keys are all masked gives NaN, as PyTorch.
Array scaled_dot_product_attention(const Array& query, const Array& key, const Array& value,
                                   const Array& attn_mask = {}, double dropout_p = 0.0, bool is_causal = false,
                                   std::optional<double> scale = {}, bool enable_gqa = false);
Array log_softmax(const Array& x, int64_t axis = -1);
/// Cross entropy of logits (N, C) (or (C,)) with integer class labels (N,) (int64/int32/...; out-of-range
/// labels throw), or with class probabilities of the logits' shape; label_smoothing mixes the target with the
/// uniform distribution, as torch.nn.functional.cross_entropy.
Array cross_entropy(const Array& logits, const Array& target, Reduction reduction = Reduction::Mean,
                    double label_smoothing = 0.0);
/// Negative log likelihood of log-probabilities (N, C) at integer labels (N,).
Array nll_loss(const Array& log_probs, const Array& labels, Reduction reduction = Reduction::Mean);
/// (x - y)^2, reduced.
Array mse_loss(const Array& x, const Array& y, Reduction reduction = Reduction::Mean);
/// max(x, 0) - x y + log(1 + exp(-|x|)), the stable binary cross entropy of logits x with targets y in [0, 1].
Array binary_cross_entropy_with_logits(const Array& x, const Array& y, Reduction reduction = Reduction::Mean);
/// The fraction (float32, 0-d, on the logits' device; no synchronisation) of rows whose argmax is the label.
Array accuracy(const Array& logits, const Array& labels);

}  // namespace kiln::nn
