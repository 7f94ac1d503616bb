// Layers of transformers: rotary position embeddings and MultiheadAttention, with PyTorch's (and, for the
// rotary embedding, Hugging Face LLaMA's) names, defaults and initialisation. Attention itself is
// scaled_dot_product_attention (attention.cpp).
#include <cmath>
#include <limits>
#include <string>
#include <utility>

#include "kiln/autocast.hpp"
#include "kiln/nn.hpp"
#include "kiln/numpy_extra.hpp"
#include "kiln/ops.hpp"
#include "kiln/random.hpp"

namespace kiln::nn {

// ---------------------------------------------------------------- rotary embeddings
RotaryEmbedding::RotaryEmbedding(int64_t dim, double base) : dim_(dim), base_(base) {
  if (dim <= 0 || dim % 2 != 0)
    throw ValueError("RotaryEmbedding: dim must be a positive even number, got " + std::to_string(dim));
  if (!(base > 0.0)) throw ValueError("RotaryEmbedding: base must be positive, got " + std::to_string(base));
}

std::pair<Array, Array> RotaryEmbedding::cos_sin(int64_t length, int64_t offset, DType dtype, Device device) const {
  return cos_sin(arange(offset, offset + length, int64_t{1}, int64, device), dtype);
}

std::pair<Array, Array> RotaryEmbedding::cos_sin(const Array& positions, DType dtype) const {
  // inv_freq[i] = base^(-2i/dim) and the angles in float32, as Hugging Face's LLaMA computes them.
  const Device device = positions.device();
  const Array i = arange(int64_t{0}, dim_, int64_t{2}, float32, device);
  const Array inv_freq = 1.0 / power(full({1}, base_, float32, device), i / static_cast<double>(dim_));
  const Array freqs = outer(positions.astype(float32), inv_freq);
  const Array emb = concatenate({freqs, freqs}, -1);
  return {cos(emb).astype(dtype), sin(emb).astype(dtype)};
}

Array RotaryEmbedding::rotate(const Array& x, int64_t offset) const {
  check_input(x);
  return rotate(x, arange(offset, offset + x.shape(-2), int64_t{1}, int64, x.device()));
}

Array RotaryEmbedding::rotate(const Array& x, const Array& positions) const {
  check_input(x);
  if (positions.ndim() != 1 || positions.shape(0) != x.shape(-2) || is_floating(positions.dtype()) ||
      positions.dtype() == bool_)
    throw ShapeError(name() + ": positions must be a 1-d integer array of the input's " +
                     std::to_string(x.shape(-2)) + " positions, got " + shape_str(positions.shape()) + " " +
                     std::string(dtype_name(positions.dtype())));
  const int64_t half = dim_ / 2;
  const auto [c, s] = cos_sin(positions, x.dtype());
  const Array rotated = concatenate({-x.slice(-1, half, dim_), x.slice(-1, 0, half)}, -1);  // rotate_half
  return x * c + rotated * s;
}

void RotaryEmbedding::check_input(const Array& x) const {
  if (x.ndim() < 2 || x.shape(-1) != dim_)
    throw ShapeError(name() + ": the input has shape " + shape_str(x.shape()) + "; it must be (..., T, " +
                     std::to_string(dim_) + ")");
}

std::string RotaryEmbedding::name() const {
  return "RotaryEmbedding(dim=" + std::to_string(dim_) + ", base=" + std::to_string(base_) + ")";
}

// ---------------------------------------------------------------- MultiheadAttention
MultiheadAttention::MultiheadAttention(int64_t embed_dim, int64_t num_heads, double dropout, bool bias,
                                       bool batch_first, DType dtype, std::optional<Device> device)
    : embed_(embed_dim), heads_(num_heads), dropout_(dropout), batch_first_(batch_first) {
  if (embed_dim <= 0 || num_heads <= 0 || embed_dim % num_heads != 0)
    throw ValueError("MultiheadAttention: embed_dim (" + std::to_string(embed_dim) +
                     ") must be a positive multiple of num_heads (" + std::to_string(num_heads) + ")");
  if (!(dropout >= 0.0 && dropout < 1.0))
    throw ValueError("MultiheadAttention: dropout must be in [0, 1), got " + std::to_string(dropout));
  Array& w = register_parameter("in_proj_weight", empty({3 * embed_dim, embed_dim}, dtype, device));
  init::xavier_uniform(w);
  if (bias) register_parameter("in_proj_bias", zeros({3 * embed_dim}, dtype, device));
  bias_ = bias;
  out_proj_ = register_module("out_proj", std::make_shared<Linear>(embed_dim, embed_dim, bias, dtype, device));
  if (bias) init::zeros(out_proj_->bias());
}

namespace {
/// A boolean "not allowed" mask as an additive one (-inf where true), a float mask as it is.
Array additive(const Array& mask, DType dtype) {
  if (mask.dtype() == bool_) return where(mask, -std::numeric_limits<double>::infinity(), 0.0).astype(dtype);
  if (!is_floating(mask.dtype()))
    throw DTypeError("MultiheadAttention: masks must be boolean or floating, got " +
                     std::string(dtype_name(mask.dtype())));
  return mask.astype(dtype);
}
}  // namespace

std::pair<Array, Array> MultiheadAttention::forward(const Array& query, const Array& key, const Array& value,
                                                    const Array& key_padding_mask, bool need_weights,
                                                    const Array& attn_mask, bool average_attn_weights,
                                                    bool is_causal) {
  for (const Array* a : {&query, &key, &value})
    if (a->ndim() != 3 || a->shape(-1) != embed_)
      throw ShapeError(name() + ": query, key and value must be 3-d with " + std::to_string(embed_) +
                       " features (" + (batch_first_ ? "(N, L, E)" : "(L, N, E)") + "), got " +
                       shape_str(a->shape()));
  // (N, L, E) from here on.
  const Array q_in = batch_first_ ? query : swapaxes(query, 0, 1);
  const Array k_in = batch_first_ ? key : swapaxes(key, 0, 1);
  const Array v_in = batch_first_ ? value : swapaxes(value, 0, 1);
  const int64_t n = q_in.shape(0), l = q_in.shape(1), s = k_in.shape(1), d = embed_ / heads_;
  if (k_in.shape(0) != n || v_in.shape(0) != n || v_in.shape(1) != s)
    throw ShapeError(name() + ": key and value must have query's batch and one length, got " +
                     shape_str(key.shape()) + " and " + shape_str(value.shape()));
  const Array& w = parameter("in_proj_weight");
  auto project = [&](const Array& x, int64_t part) {
    const Array wp = w.slice(0, part * embed_, (part + 1) * embed_);
    Array y = matmul(x, wp.T());
    if (bias_) y = y + parameter("in_proj_bias").slice(0, part * embed_, (part + 1) * embed_);
    return swapaxes(y.reshape({n, x.shape(1), heads_, d}), 1, 2);  // (N, H, len, D)
  };
  const Array q = project(q_in, 0), k = project(k_in, 1), v = project(v_in, 2);
  const DType dtype = q.dtype();
  // One additive mask of shape broadcastable to (N, H, L, S).
  Array mask;
  if (attn_mask.defined()) {
    if (attn_mask.ndim() == 2 && attn_mask.shape(0) == l && attn_mask.shape(1) == s)
      mask = additive(attn_mask, dtype).reshape({1, 1, l, s});
    else if (attn_mask.ndim() == 3 && attn_mask.shape(0) == n * heads_ && attn_mask.shape(1) == l &&
             attn_mask.shape(2) == s)
      mask = additive(attn_mask, dtype).reshape({n, heads_, l, s});
    else
      throw ShapeError(name() + ": attn_mask must be (L, S) = (" + std::to_string(l) + ", " + std::to_string(s) +
                       ") or (N*num_heads, L, S), got " + shape_str(attn_mask.shape()));
  }
  if (key_padding_mask.defined()) {
    if (key_padding_mask.ndim() != 2 || key_padding_mask.shape(0) != n || key_padding_mask.shape(1) != s)
      throw ShapeError(name() + ": key_padding_mask must be (N, S) = (" + std::to_string(n) + ", " +
                       std::to_string(s) + "), got " + shape_str(key_padding_mask.shape()));
    const Array kpm = additive(key_padding_mask, dtype).reshape({n, 1, 1, s});
    mask = mask.defined() ? mask + kpm : kpm;
  }
  const bool causal = is_causal && !mask.defined();  // with a mask, is_causal is PyTorch's hint that it is causal
  const double p = is_training() ? dropout_ : 0.0;
  Array out, weights;
  if (need_weights) {
    // The weights are returned, so they are made in full (as PyTorch's module does).
    Array scores = matmul(q, swapaxes(k, 2, 3)) * (1.0 / std::sqrt(static_cast<double>(d)));
    if (causal) scores = where(triu(ones({l, s}, bool_, q.device()), 1), -std::numeric_limits<double>::infinity(), scores);
    if (mask.defined()) scores = scores + mask;
    weights = softmax(scores, -1);
    if (p > 0) {
      const Array keep = random::uniform(weights.shape(), 0.0, 1.0, float32, weights.device()) >= p;
      weights = weights * keep.astype(weights.dtype()) * (1.0 / (1.0 - p));
    }
    out = matmul(weights, v);
    if (average_attn_weights) weights = weights.mean({1});
  } else {
    out = scaled_dot_product_attention(q, k, v, mask, p, causal);
  }
  out = swapaxes(out, 1, 2).reshape({n, l, embed_});
  out = (*out_proj_)(out);
  if (!batch_first_) out = swapaxes(out, 0, 1);
  return {out, weights};
}

Array MultiheadAttention::forward(const Array& x) { return forward(x, x, x, {}, false).first; }

std::string MultiheadAttention::name() const {
  return "MultiheadAttention(embed_dim=" + std::to_string(embed_) + ", num_heads=" + std::to_string(heads_) +
         (batch_first_ ? ", batch_first=true" : "") + ")";
}

}  // namespace kiln::nn
