// The parts of the decoder-only language models that do not depend on the model: the KV cache, attention
// through it, loading Hugging Face state dicts, the language-modelling loss, and generation (the sampling
// filters of Hugging Face's generate: temperature, top-k, top-p).
#include "decoder.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "kiln/autograd.hpp"
#include "kiln/cuda.hpp"
#include "kiln/indexing.hpp"
#include "kiln/ops.hpp"
#include "kiln/random.hpp"

namespace kiln::models {

// ---------------------------------------------------------------- KVCache
KVCache::KVCache(int64_t layers, int64_t batch, int64_t kv_heads, int64_t max_length, int64_t head_dim, DType dtype,
                 Device device)
    : max_length_(max_length) {
  if (layers <= 0 || batch <= 0 || kv_heads <= 0 || max_length <= 0 || head_dim <= 0)
    throw ValueError("KVCache: layers, batch, kv_heads, max_length and head_dim must be positive, got " +
                     std::to_string(layers) + ", " + std::to_string(batch) + ", " + std::to_string(kv_heads) + ", " +
                     std::to_string(max_length) + ", " + std::to_string(head_dim));
  for (int64_t i = 0; i < layers; ++i) {
    keys_.push_back(zeros({batch, kv_heads, max_length, head_dim}, dtype, device));
    values_.push_back(zeros({batch, kv_heads, max_length, head_dim}, dtype, device));
  }
}

void KVCache::reset() {
  length_ = 0;
  padding_.clear();
  padding_array_ = Array();
  static_ = false;
}

void KVCache::set_static(bool on) {
  if (on && !static_ && !keys_.empty()) {  // the device's copy of length() is kept only while static
    const Device device = keys_.front().device();
    if (!columns_.defined())
      columns_ = arange(int64_t{0}, max_length_, int64_t{1}, int64, device).reshape({1, 1, max_length_, 1});
    position_ = full({1}, Scalar(length_), int64, device);
  }
  static_ = on;
}

void KVCache::crop(int64_t length) {
  if (length < 0 || length > length_)
    throw ValueError("KVCache::crop: length " + std::to_string(length) + " outside [0, " + std::to_string(length_) +
                     "] (the positions filled)");
  length_ = length;
  if (static_) position_.fill(Scalar(length));
}

void KVCache::replayed(int64_t t) {
  if (t < 0 || length_ + t > max_length_)
    throw ValueError("KVCache::replayed: " + std::to_string(t) + " positions after " + std::to_string(length_) +
                     " exceed the cache's " + std::to_string(max_length_));
  length_ += t;  // the replayed graph moved position_ itself
}

std::pair<Array, Array> KVCache::update_static(int64_t layer, const Array& k, const Array& v) {
  if (layer < 0 || layer >= layers())
    throw ValueError("KVCache::update_static: layer " + std::to_string(layer) + " of a cache of " +
                     std::to_string(layers()) + " layers");
  Array& keys = keys_[static_cast<size_t>(layer)];
  Array& values = values_[static_cast<size_t>(layer)];
  const Shape want{keys.shape(0), keys.shape(1), 1, keys.shape(3)};
  if (k.shape() != want || v.shape() != want)
    throw ShapeError("KVCache::update_static: a static step writes one position: keys and values must be " +
                     shape_str(want) + ", got " + shape_str(k.shape()) + " and " + shape_str(v.shape()));
  // The new position's row is chosen on the device (no host offset), so a captured step writes where the
  // replayed position points.
  const Array here = equal(columns_, position_.reshape({1, 1, 1, 1}));
  keys.assign(where(here, k.astype(keys.dtype()), keys));
  values.assign(where(here, v.astype(values.dtype()), values));
  return {keys, values};
}

Array KVCache::visible_static() const {
  Array visible = less_equal(columns_.reshape({1, 1, 1, max_length_}), position_.reshape({1, 1, 1, 1}));
  if (padding_array_.defined())
    visible = logical_and(visible, greater_equal(columns_.reshape({1, 1, 1, max_length_}),
                                                 padding_array_.reshape({-1, 1, 1, 1})));
  return visible;
}

std::pair<Array, Array> KVCache::update(int64_t layer, const Array& k, const Array& v) {
  if (layer < 0 || layer >= layers())
    throw ValueError("KVCache::update: layer " + std::to_string(layer) + " of a cache of " + std::to_string(layers()) +
                     " layers");
  const Array& buffer = keys_[static_cast<size_t>(layer)];
  const Shape want{buffer.shape(0), buffer.shape(1), k.ndim() == 4 ? k.shape(2) : -1, buffer.shape(3)};
  if (k.shape() != want || v.shape() != want)
    throw ShapeError("KVCache::update: keys and values must be (batch, kv_heads, T, head_dim) = " + shape_str(want) +
                     ", got " + shape_str(k.shape()) + " and " + shape_str(v.shape()));
  const int64_t t = k.shape(2), end = length_ + t;
  if (end > max_length_)
    throw ValueError("KVCache::update: " + std::to_string(t) + " new positions after " + std::to_string(length_) +
                     " exceed the cache's " + std::to_string(max_length_) + " (make a longer cache)");
  Array& keys = keys_[static_cast<size_t>(layer)];
  Array& values = values_[static_cast<size_t>(layer)];
  keys.slice(2, length_, end).assign(k);
  values.slice(2, length_, end).assign(v);
  return {keys.slice(2, 0, end), values.slice(2, 0, end)};
}

void KVCache::set_padding(std::vector<int64_t> padding) {
  if (!padding.empty() && static_cast<int64_t>(padding.size()) != batch())
    throw ValueError("KVCache::set_padding: " + std::to_string(padding.size()) + " values for a cache of " +
                     std::to_string(batch()) + " sequences; give one per sequence");
  for (int64_t p : padding)
    if (p < 0 || p >= max_length_)
      throw ValueError("KVCache::set_padding: padding " + std::to_string(p) + " outside [0, " +
                       std::to_string(max_length_) + ")");
  padding_ = std::move(padding);
  padding_array_ = padding_.empty() ? Array() : from_data(padding_, Shape{batch()}, keys_.front().device());
}

void KVCache::advance(int64_t t) {
  if (t < 0 || length_ + t > max_length_)
    throw ValueError("KVCache::advance: " + std::to_string(t) + " positions after " + std::to_string(length_) +
                     " exceed the cache's " + std::to_string(max_length_));
  length_ += t;
  if (static_) position_ += Scalar(t);
}

Array lm_loss(const Array& logits, const Array& targets) {
  if (logits.ndim() != 3 || targets.ndim() != 2 || targets.shape(0) != logits.shape(0) ||
      targets.shape(1) != logits.shape(1))
    throw ShapeError("lm_loss: logits must be (B, T, vocab) and targets (B, T), got " + shape_str(logits.shape()) +
                     " and " + shape_str(targets.shape()));
  return nn::cross_entropy(logits.reshape(-1, logits.shape(2)), targets.reshape(-1));
}

namespace detail {

void check_tokens(const std::string& who, const Array& tokens) {
  if (tokens.ndim() != 2 || tokens.shape(1) < 1 || is_floating(tokens.dtype()) || tokens.dtype() == bool_)
    throw ShapeError(who + ": tokens must be a 2-d integer array (batch, T) with T >= 1, got " +
                     shape_str(tokens.shape()) + " " + std::string(dtype_name(tokens.dtype())));
}

Array decode_mask(const KVCache* cache, int64_t t) {
  if (cache && cache->is_static()) return cache->visible_static();
  if (!cache || cache->padding().empty()) return Array();
  // Key j is seen from position i when j <= i and j is past the sequence's padding. A padding position itself
  // sees only itself (its output is never read; a row with nothing to attend to would make NaNs).
  const Array& pad = cache->padding_array();
  const int64_t offset = cache->length(), s = offset + t;
  const Array col = arange(int64_t{0}, s, int64_t{1}, int64, pad.device()).reshape({1, 1, 1, s});
  const Array row = arange(offset, s, int64_t{1}, int64, pad.device()).reshape({1, 1, t, 1});
  return logical_and(less_equal(col, row), logical_or(greater_equal(col, pad.reshape({-1, 1, 1, 1})), equal(col, row)));
}

Array causal_attention(const Array& q, const Array& k, const Array& v, KVCache* cache, int64_t layer, double dropout_p,
                       const Array& mask) {
  const bool gqa = k.shape(1) != q.shape(1);
  if (!cache) return nn::scaled_dot_product_attention(q, k, v, {}, dropout_p, true, {}, gqa);
  if (cache->is_static()) {  // the whole buffer, the positions past this one masked (mask: visible_static)
    auto [keys, values] = cache->update_static(layer, k, v);
    if (keys.dtype() != q.dtype()) {
      keys = keys.astype(q.dtype());
      values = values.astype(q.dtype());
    }
    return nn::scaled_dot_product_attention(q, keys, values, mask, 0.0, false, {}, gqa);
  }
  const int64_t offset = cache->length(), t = q.shape(2);
  auto [keys, values] = cache->update(layer, k, v);
  if (keys.dtype() != q.dtype()) {  // under autocast the projections are low precision, the cache the model's dtype
    keys = keys.astype(q.dtype());
    values = values.astype(q.dtype());
  }
  if (mask.defined()) return nn::scaled_dot_product_attention(q, keys, values, mask, 0.0, false, {}, gqa);
  // One new position sees every cached one (no mask); a first chunk is the plain causal triangle; a later chunk
  // of several positions needs the triangle shifted by the cached length (is_causal's is anchored top-left).
  if (t == 1) return nn::scaled_dot_product_attention(q, keys, values, {}, 0.0, false, {}, gqa);
  if (offset == 0) return nn::scaled_dot_product_attention(q, keys, values, {}, 0.0, true, {}, gqa);
  const Array col = arange(int64_t{0}, offset + t, int64_t{1}, int64, q.device()).reshape({1, offset + t});
  const Array row = arange(offset, offset + t, int64_t{1}, int64, q.device()).reshape({t, 1});
  return nn::scaled_dot_product_attention(q, keys, values, less_equal(col, row), 0.0, false, {}, gqa);
}

void load_hf(nn::Module& model, const std::string& who, const nn::StateDict& state,
             const std::function<std::optional<std::string>(const std::string&)>& map,
             const std::string& tied_embedding) {
  const nn::StateDict own = model.state_dict();
  std::set<std::string> expected;
  for (const auto& [name, value] : own) expected.insert(name);
  nn::StateDict mapped;
  std::vector<std::string> unexpected;
  const Array* head = nullptr;
  std::string head_name;
  for (const auto& [name, value] : state) {
    const std::optional<std::string> to = map(name);
    if (!to) continue;
    if (!tied_embedding.empty() && *to == "lm_head.weight") {
      head = &value;
      head_name = name;
      continue;
    }
    if (expected.count(*to) == 0 || mapped.find(*to)) {
      unexpected.push_back(name);
      continue;
    }
    mapped.insert(*to, value);
  }
  std::vector<std::string> missing;
  for (const auto& [name, value] : own)
    if (!mapped.find(name)) missing.push_back(name);
  if (!missing.empty() || !unexpected.empty()) {
    auto list = [](const std::vector<std::string>& names) {
      std::string s;
      for (size_t i = 0; i < names.size() && i < 8; ++i) s += (i ? ", " : "") + names[i];
      if (names.size() > 8) s += ", ... (" + std::to_string(names.size()) + " in all)";
      return s;
    };
    std::string message = who + ": the state dict does not match the model:";
    if (!missing.empty()) message += " missing " + list(missing) + ";";
    if (!unexpected.empty()) message += " unexpected " + list(unexpected) + ";";
    throw ValueError(message + " (is it the same architecture and configuration?)");
  }
  if (head) {
    const Array& embedding = mapped.at(tied_embedding);
    if (head->shape() != embedding.shape() || !array_equal(head->to(cpu()), embedding.to(cpu())))
      throw ValueError(who + ": \"" + head_name + "\" differs from the embedding \"" + tied_embedding +
                       "\" that the model's head is tied to (an untied checkpoint: untie the model's config)");
  }
  model.load_state_dict(mapped);
}

}  // namespace detail

// ---------------------------------------------------------------- generation
std::vector<double> sampling_probabilities(const std::vector<double>& logits, double temperature, int64_t top_k,
                                           double top_p) {
  if (!(temperature >= 0.0))
    throw ValueError("sampling_probabilities: temperature must be >= 0, got " + std::to_string(temperature));
  if (top_k < 0) throw ValueError("sampling_probabilities: top_k must be >= 0 (0: off), got " + std::to_string(top_k));
  if (!(top_p > 0.0 && top_p <= 1.0))
    throw ValueError("sampling_probabilities: top_p must be in (0, 1] (1: off), got " + std::to_string(top_p));
  if (logits.empty()) throw ValueError("sampling_probabilities: no logits");
  const size_t n = logits.size();
  std::vector<double> p(n, 0.0);
  if (temperature == 0.0) {
    p[static_cast<size_t>(std::max_element(logits.begin(), logits.end()) - logits.begin())] = 1.0;
    return p;
  }
  // Tokens by decreasing logit, ties in index order.
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return logits[a] > logits[b]; });
  size_t kept = n;
  if (top_k > 0 && static_cast<size_t>(top_k) < n) {
    // Every token at least as likely as the k-th stays (Hugging Face's TopKLogitsWarper keeps ties).
    const double threshold = logits[order[static_cast<size_t>(top_k) - 1]];
    kept = static_cast<size_t>(top_k);
    while (kept < n && logits[order[kept]] >= threshold) ++kept;
  }
  const double top = logits[order[0]] / temperature;
  double total = 0.0;
  for (size_t i = 0; i < kept; ++i) total += (p[order[i]] = std::exp(logits[order[i]] / temperature - top));
  for (size_t i = 0; i < kept; ++i) p[order[i]] /= total;
  if (top_p < 1.0) {
    // A token stays while the tokens more likely than it hold less than top_p (the first always stays).
    double before = 0.0;
    size_t i = 0;
    for (; i < kept && (i == 0 || before < top_p); ++i) before += p[order[i]];
    for (size_t j = i; j < kept; ++j) p[order[j]] = 0.0;
    double sum = 0.0;
    for (size_t j = 0; j < i; ++j) sum += p[order[j]];
    for (size_t j = 0; j < i; ++j) p[order[j]] /= sum;
  }
  return p;
}

namespace {

/// Restores the model's training mode on the way out.
struct ModeGuard {
  nn::Module& model;
  bool training;
  ~ModeGuard() { model.train(training); }
};

/// The token whose cumulative probability first exceeds u (the last possible one if rounding leaves u above all).
int64_t draw(const std::vector<double>& p, double u) {
  double cumulative = 0.0;
  int64_t last = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] <= 0.0) continue;
    cumulative += p[i];
    last = static_cast<int64_t>(i);
    if (u < cumulative) return last;
  }
  return last;
}

/// The one-token steps after the prompt. On a GPU with cuda_graph: the first runs op by op in the cache's static
/// mode (kernels compiled, plans built), the second is captured in a CUDA graph on a side stream and every step
/// from then on replays it on the current stream, after the token is written into the graph's input buffer.
/// Otherwise each step is an ordinary forward.
class StaticDecoder {
 public:
  StaticDecoder(CausalLM& model, KVCache& cache, Device device, bool graphed)
      : model_(model), cache_(cache), device_(device), graphed_(graphed) {}
  ~StaticDecoder() { cache_.set_static(false); }
  StaticDecoder(const StaticDecoder&) = delete;
  StaticDecoder& operator=(const StaticDecoder&) = delete;

  Array step(const std::vector<int64_t>& next) {
    const Shape shape{cache_.batch(), 1};
    if (!graphed_) return model_.forward(from_data(next, shape, device_), cache_);
    const Array host = from_data(next, shape, cpu());
    if (!tokens_.defined()) {
      cache_.set_static(true);
      tokens_ = host.to(device_);
      return model_.forward(tokens_, cache_);
    }
    tokens_.copy_from(host);
#ifdef KILN_WITH_CUDA
    if (graph_.is_ready()) {
      graph_.replay(Stream::current(device_));
      cache_.replayed(1);
      return logits_;
    }
    if (!capture_failed_) {
      const int64_t before = cache_.length();
      try {
        const Stream side = Stream::create(device_);
        {
          cuda::GraphCapture capture(graph_, side);
          logits_ = model_.forward(tokens_, cache_);  // recorded, not run; moves the host's length
        }
        graph_.replay(Stream::current(device_));
        return logits_;
      } catch (const Error&) {
        // Something in the step cannot be captured: the steps run op by op (same results, more launches).
        capture_failed_ = true;
        graph_.reset();
        cache_.crop(before);
      }
    }
#endif
    return model_.forward(tokens_, cache_);
  }

 private:
  CausalLM& model_;
  KVCache& cache_;
  Device device_;
  bool graphed_;
  Array tokens_, logits_;  // the graph's input (batch, 1) and output
#ifdef KILN_WITH_CUDA
  bool capture_failed_ = false;
  cuda::Graph graph_;
#endif
};

}  // namespace

std::vector<std::vector<int64_t>> generate_batch(CausalLM& model, const std::vector<std::vector<int64_t>>& prompts,
                                                 const GenerateOptions& options) {
  if (prompts.empty()) throw ValueError("generate: no prompts (give at least one)");
  if (options.on_token && prompts.size() > 1)
    throw ValueError("generate: on_token streams one sequence; with " + std::to_string(prompts.size()) +
                     " prompts, read the returned tokens (or generate each prompt alone)");
  if (options.max_new_tokens < 0)
    throw ValueError("generate: max_new_tokens must be >= 0, got " + std::to_string(options.max_new_tokens));
  const auto batch = static_cast<int64_t>(prompts.size());
  int64_t longest = 0;
  for (size_t b = 0; b < prompts.size(); ++b) {
    const std::string which = batch > 1 ? " " + std::to_string(b) : "";
    if (prompts[b].empty())
      throw ValueError("generate: the prompt" + which + " is empty (give at least one token, e.g. end-of-text)");
    longest = std::max(longest, static_cast<int64_t>(prompts[b].size()));
  }
  const int64_t length = longest + options.max_new_tokens;
  if (length > model.max_positions())
    throw ValueError("generate: the " + std::string(batch > 1 ? "longest prompt" : "prompt") + " (" +
                     std::to_string(longest) + " tokens) plus max_new_tokens (" +
                     std::to_string(options.max_new_tokens) + ") exceed the model's " +
                     std::to_string(model.max_positions()) + " positions");
  sampling_probabilities({0.0}, options.temperature, options.top_k, options.top_p);  // checks the options
  std::vector<std::vector<int64_t>> out(prompts.size());
  if (options.max_new_tokens == 0) return out;
  ModeGuard mode{model, model.is_training()};
  model.eval();
  NoGradGuard no_grad;
  const Device device = model.parameters().front().device();
  KVCache cache = model.make_cache(batch, length);
  // Left-padded to the longest prompt; a padding slot holds the prompt's first token (never attended to).
  std::vector<int64_t> tokens(static_cast<size_t>(batch * longest)), padding(static_cast<size_t>(batch));
  bool padded = false;
  for (int64_t b = 0; b < batch; ++b) {
    const std::vector<int64_t>& p = prompts[static_cast<size_t>(b)];
    const int64_t pad = longest - static_cast<int64_t>(p.size());
    padding[static_cast<size_t>(b)] = pad;
    padded = padded || pad > 0;
    for (int64_t i = 0; i < longest; ++i)
      tokens[static_cast<size_t>(b * longest + i)] = p[static_cast<size_t>(std::max<int64_t>(0, i - pad))];
  }
  if (padded) cache.set_padding(padding);
  random::Generator gen(options.seed);
  std::vector<bool> done(prompts.size(), false);
  std::vector<int64_t> next(prompts.size(), 0);
  Array logits = model.forward(from_data(tokens, Shape{batch, longest}, device), cache);
  StaticDecoder decoder(model, cache, device, options.cuda_graph && device.is_cuda());
  for (int64_t step = 0; step < options.max_new_tokens; ++step) {
    const Array last = logits.slice(1, logits.shape(1) - 1, logits.shape(1)).reshape({batch, -1});
    if (options.temperature == 0.0) {
      // Greedy: the first largest logit of each sequence, found where the logits are (one integer per sequence
      // crosses to the host, not the vocabulary's logits); top_k and top_p keep the largest, so cannot change it.
      next = argmax(last, 1).to_vector<int64_t>();
    } else {
      const std::vector<double> all = last.to(cpu()).to_vector<double>();
      const auto vocab = static_cast<size_t>(last.shape(1));
      for (size_t b = 0; b < prompts.size(); ++b) {
        if (done[b]) continue;
        const std::vector<double> row(all.begin() + static_cast<std::ptrdiff_t>(b * vocab),
                                      all.begin() + static_cast<std::ptrdiff_t>((b + 1) * vocab));
        const std::vector<double> p = sampling_probabilities(row, options.temperature, options.top_k, options.top_p);
        next[b] = draw(p, gen.uniform({1}, 0.0, 1.0, float64, cpu()).item<double>());
      }
    }
    bool all_done = true;
    for (size_t b = 0; b < prompts.size(); ++b) {
      if (done[b]) continue;
      out[b].push_back(next[b]);
      if (options.on_token) options.on_token(next[b]);
      done[b] = options.stop_token && next[b] == *options.stop_token;
      all_done = all_done && done[b];
    }
    if (all_done || step + 1 == options.max_new_tokens) break;
    // A stopped sequence is fed its last token again (its results are not read).
    logits = decoder.step(next);
  }
  return out;
}

std::vector<int64_t> generate(CausalLM& model, const std::vector<int64_t>& prompt, const GenerateOptions& options) {
  return generate_batch(model, {prompt}, options).front();
}

}  // namespace kiln::models
