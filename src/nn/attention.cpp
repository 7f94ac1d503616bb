// Scaled dot-product attention with PyTorch's semantics (torch.nn.functional.scaled_dot_product_attention):
// softmax(q k^T * scale + mask) v, with boolean or additive masks broadcast over batch and heads, is_causal,
// dropout on the attention weights, and grouped-query attention by repeating k/v heads.
//
// Computed in blocks of query rows, as the memory-efficient kernels do: each block's scores (rows x keys) exist
// only while it is computed, so the memory is linear in the sequence length (a block, not T x T). The backward
// is one custom node that recomputes each block's weights from the saved log-sum-exp of its rows (FlashAttention's
// recomputation) and regenerates the dropout mask from the generator state the forward started at. With is_causal
// a block of rows computes only the keys its last row can see (about half the work). Half types compute in
// float32. The ops are kiln's, so every backend runs it; on a GPU, half-precision problems without a mask run
// cuDNN's fused kernel instead (kiln/flash_attention.hpp), dropout included: its mask is then cuDNN's, saved for
// the backward as the (seed, offset) the forward drew with.
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "kiln/autograd.hpp"
#include "kiln/flash_attention.hpp"
#include "kiln/nn.hpp"
#include "kiln/ops.hpp"
#include "kiln/random.hpp"
#include "kiln/shape.hpp"

namespace kiln::nn {

namespace {

constexpr const char* kOp = "scaled_dot_product_attention";
/// Score elements per block (batch x rows x keys): 4 MiB of float32.
constexpr int64_t kBlockElements = int64_t{1} << 20;

/// What the forward and the backward share.
struct Plan {
  int64_t batch = 1, rows = 0, keys = 0;
  int64_t block = 1;  // query rows per block
  double scale = 1.0;
  double dropout = 0.0;
  bool causal = false;
  Array mask;        // additive, broadcast to (lead..., rows, keys) as a view; undefined: none
  DType compute = float32;
  random::GeneratorState dropout_state{};
};

/// The keys rows [r0, r1) can see: all of them, or with is_causal those before r1 (the block's last row sees
/// keys j <= r1 - 1), so a causal attention computes about half the scores.
int64_t visible_keys(const Plan& p, int64_t r1) { return p.causal ? std::min(p.keys, r1) : p.keys; }

/// The additive mask of rows [r0, r1) over their visible keys as (batch, r1 - r0, visible), or undefined.
Array mask_block(const Plan& p, int64_t r0, int64_t r1, const Device& device) {
  Array m;
  const int64_t keys = visible_keys(p, r1);
  if (p.mask.defined()) m = p.mask.slice(-2, r0, r1).reshape({p.batch, r1 - r0, p.keys}).astype(p.compute);
  if (p.causal) {
    // Query row i attends keys j <= i (PyTorch's is_causal: the top-left triangle of rows x keys).
    const Array col = arange(int64_t{0}, keys, int64_t{1}, int64, device).reshape({1, 1, keys});
    const Array row = arange(r0, r1, int64_t{1}, int64, device).reshape({1, r1 - r0, 1});
    const Array c = where(greater(col, row), -std::numeric_limits<double>::infinity(), 0.0).astype(p.compute);
    m = m.defined() ? m + c : c;
  }
  return m;
}

/// The scores of rows [r0, r1): q_block k^T * scale + masks, (batch, rows, visible keys).
Array scores(const Plan& p, const Array& q, const Array& k, int64_t r0, int64_t r1) {
  Array s = matmul(q.slice(1, r0, r1), swapaxes(k.slice(1, 0, visible_keys(p, r1)), 1, 2)) * p.scale;
  const Array m = mask_block(p, r0, r1, q.device());
  return m.defined() ? s + m : s;
}

/// The dropout keep-scale of a block's visible keys (keep / (1 - p), or 0), drawn from `gen` (the forward's
/// generator state) for all its keys, so that the stream does not depend on the blocking.
Array dropout_scale(const Plan& p, random::Generator& gen, int64_t r0, int64_t r1, const Device& device) {
  const Array u = gen.uniform({p.batch, r1 - r0, p.keys}, 0.0, 1.0, float32, device).slice(2, 0, visible_keys(p, r1));
  return (u >= p.dropout).astype(p.compute) * (1.0 / (1.0 - p.dropout));
}

/// q (batch, rows, E), k (batch, keys, E), v (batch, keys, Ev) in the compute dtype: the output and the
/// log-sum-exp of each row.
/// `after` receives the dropout generator's state past the forward's draws.
std::pair<Array, Array> forward_blocks(const Plan& p, const Array& q, const Array& k, const Array& v,
                                       random::GeneratorState& after) {
  std::vector<Array> outs, lses;
  random::Generator gen;
  gen.set_state(p.dropout_state);
  for (int64_t r0 = 0; r0 < p.rows; r0 += p.block) {
    const int64_t r1 = std::min(p.rows, r0 + p.block);
    const Array s = scores(p, q, k, r0, r1);
    const Array m = s.max({-1}, true);
    Array e = exp(s - m);
    const Array l = e.sum({-1}, true);
    Array w = e / l;
    if (p.dropout > 0) w = w * dropout_scale(p, gen, r0, r1, q.device());
    outs.push_back(matmul(w, v.slice(1, 0, visible_keys(p, r1))));
    lses.push_back(m + log(l));
  }
  after = gen.get_state();
  return {concatenate(outs, 1), concatenate(lses, 1)};
}

/// The gradients of q, k, v from the output's gradient `g` (all in the compute dtype).
std::vector<Array> backward_blocks(const Plan& p, const Array& q, const Array& k, const Array& v, const Array& lse,
                                   const Array& g) {
  std::vector<Array> dqs;
  Array dk = zeros(k.shape(), p.compute, k.device()), dv = zeros(v.shape(), p.compute, v.device());
  random::Generator gen;
  gen.set_state(p.dropout_state);
  for (int64_t r0 = 0; r0 < p.rows; r0 += p.block) {
    const int64_t r1 = std::min(p.rows, r0 + p.block);
    const int64_t visible = visible_keys(p, r1);
    const Array kv = k.slice(1, 0, visible), vv = v.slice(1, 0, visible);
    const Array w = exp(scores(p, q, k, r0, r1) - lse.slice(1, r0, r1));  // the softmax, recomputed
    const Array go = g.slice(1, r0, r1);
    Array wd = w, dw = matmul(go, swapaxes(vv, 1, 2));
    if (p.dropout > 0) {
      const Array keep = dropout_scale(p, gen, r0, r1, q.device());
      wd = w * keep;
      dw = dw * keep;
    }
    Array dv_visible = dv.slice(1, 0, visible), dk_visible = dk.slice(1, 0, visible);
    dv_visible += matmul(swapaxes(wd, 1, 2), go);
    const Array ds = w * (dw - (w * dw).sum({-1}, true));  // softmax's backward
    dqs.push_back(matmul(ds, kv) * p.scale);
    dk_visible += matmul(swapaxes(ds, 1, 2), q.slice(1, r0, r1)) * p.scale;
  }
  return {concatenate(dqs, 1), dk, dv};
}

/// k (B, Hk, S, F) with each head repeated for the Hq / Hk query heads it serves: (B, Hq, S, F).
Array repeat_heads(const Array& a, int64_t hq) {
  const int64_t b = a.shape(0), hk = a.shape(1), s = a.shape(2), f = a.shape(3);
  if (hk == hq) return a;
  return broadcast_to(a.reshape({b, hk, 1, s, f}), {b, hk, hq / hk, s, f}).reshape({b, hq, s, f});
}

/// The gradient of repeat_heads' input from its result's: each k/v head sums its query heads' gradients.
Array sum_heads(const Array& g, int64_t hk) {
  const int64_t b = g.shape(0), hq = g.shape(1), s = g.shape(2), f = g.shape(3);
  if (hk == hq) return g;
  return g.reshape({b, hk, hq / hk, s, f}).sum({2});
}

/// Attention over 4-d q (B, H, L, E), k and v (B, Hk, S, E) of a half dtype, with no mask but the causal one:
/// the backend's fused kernel (kiln/flash_attention.hpp: cuDNN's flash attention on a GPU) when it has one for
/// the problem, else the blocked computation; the backward likewise (the blocked one recomputes from the
/// forward's log-sum-exp, which both compute alike). With dropout the fused forward saves the (seed, offset) of
/// the engine's mask, which only the fused backward can regenerate; the blocked forward draws kiln's mask.
Array fused_attention(const Array& query, const Array& key, const Array& value, double scale, bool causal,
                      double dropout) {
  const int64_t b = query.shape(0), hq = query.shape(1), rows = query.shape(2);
  const int64_t keys = key.shape(2), hk = key.shape(1);
  Plan p;
  p.batch = b * hq, p.rows = rows, p.keys = keys, p.scale = scale, p.causal = causal, p.compute = float32;
  p.dropout = dropout;
  p.block = std::clamp<int64_t>(kBlockElements / std::max<int64_t>(1, p.batch * keys), 1, rows);
  // Not const: the blocked forward records the generator state its dropout starts at for the backward.
  auto plan = std::make_shared<Plan>(p);
  auto fused = std::make_shared<bool>(false);
  const AutogradFunction attention{
      "ScaledDotProductAttentionBackward",
      [plan, fused, hq](const std::vector<Array>& in, std::vector<Array>& saved) {
        Plan& pl = *plan;
        if (auto r = flash_attention_forward(in[0], in[1], in[2], pl.scale, pl.causal, pl.dropout)) {
          *fused = true;
          saved = {in[0], in[1], in[2], r->out, r->lse, r->rng};
          return r->out;
        }
        const Array q = in[0].astype(pl.compute).reshape({pl.batch, pl.rows, -1});
        const Array k = repeat_heads(in[1], hq).astype(pl.compute).reshape({pl.batch, pl.keys, -1});
        const Array v = repeat_heads(in[2], hq).astype(pl.compute).reshape({pl.batch, pl.keys, -1});
        // As the general path: dropout from the default generator's stream, which then moves past the draws.
        if (pl.dropout > 0) pl.dropout_state = random::get_state();
        random::GeneratorState after;
        auto [out, lse] = forward_blocks(pl, q, k, v, after);
        if (pl.dropout > 0) random::set_state(after);
        const Array o = out.reshape(in[0].shape()).astype(in[0].dtype());
        saved = {in[0], in[1], in[2], o, lse.reshape({in[0].shape(0), hq, pl.rows})};
        return o;
      },
      [plan, fused, hq, hk](const Array& g, const std::vector<Array>& saved, const std::vector<bool>&) {
        const Plan& pl = *plan;
        const DType dtype = saved[0].dtype();
        if (*fused) {
          if (auto r = flash_attention_backward(saved[0], saved[1], saved[2], saved[3], g.astype(dtype), saved[4],
                                                pl.scale, pl.causal, pl.dropout, saved[5]))
            return std::vector<Array>{r->dq, r->dk, r->dv};
          if (pl.dropout > 0)
            throw DeviceError(std::string(kOp) + ": the fused forward ran with dropout but the engine declined " +
                              "the backward (" + flash_attention_stats().refusal + "); its dropout mask exists " +
                              "only in the engine, so no other backward can match it; pass dropout_p = 0, or " +
                              "float32 operands (the blocked attention) for this problem");
        }
        const Array q = saved[0].astype(pl.compute).reshape({pl.batch, pl.rows, -1});
        const Array k = repeat_heads(saved[1], hq).astype(pl.compute).reshape({pl.batch, pl.keys, -1});
        const Array v = repeat_heads(saved[2], hq).astype(pl.compute).reshape({pl.batch, pl.keys, -1});
        std::vector<Array> grads =
            backward_blocks(pl, q, k, v, saved[4].reshape({pl.batch, pl.rows, 1}),
                            g.astype(pl.compute).reshape({pl.batch, pl.rows, -1}));
        const int64_t batch = saved[0].shape(0);
        grads[0] = grads[0].reshape(saved[0].shape()).astype(dtype);
        for (int i : {1, 2})
          grads[i] = sum_heads(grads[i].reshape({batch, hq, pl.keys, saved[i].shape(3)}), hk).astype(dtype);
        return grads;
      }};
  return attention.apply({query, key, value});
}

void require(bool ok, const std::string& message) {
  if (!ok) throw ShapeError(std::string(kOp) + ": " + message);
}

}  // namespace

Array scaled_dot_product_attention(const Array& query, const Array& key, const Array& value, const Array& attn_mask,
                                   double dropout_p, bool is_causal, std::optional<double> scale, bool enable_gqa) {
  for (const Array* a : {&query, &key, &value}) {
    if (!a->defined()) throw ValueError(std::string(kOp) + ": query, key and value must be defined arrays");
    if (!is_floating(a->dtype()))
      throw DTypeError(std::string(kOp) + ": query, key and value must be floating, got " +
                       std::string(dtype_name(a->dtype())));
  }
  if (key.dtype() != query.dtype() || value.dtype() != query.dtype())
    throw DTypeError(std::string(kOp) + ": query, key and value must have one dtype, got " +
                     std::string(dtype_name(query.dtype())) + ", " + std::string(dtype_name(key.dtype())) + " and " +
                     std::string(dtype_name(value.dtype())) + "; convert them with astype");
  if (key.device() != query.device() || value.device() != query.device())
    throw DeviceError(std::string(kOp) + ": query is on " + query.device().str() + ", key on " + key.device().str() +
                      " and value on " + value.device().str() + "; move them to one device");
  require(query.ndim() >= 2 && key.ndim() >= 2 && value.ndim() >= 2,
          "query, key and value need at least 2 axes (..., sequence, features)");
  const int64_t rows = query.shape(-2), e = query.shape(-1), keys = key.shape(-2);
  require(key.shape(-1) == e, "key has " + std::to_string(key.shape(-1)) + " features per position but query has " +
                                  std::to_string(e) + "; they must match");
  require(value.shape(-2) == keys, "value has " + std::to_string(value.shape(-2)) + " positions but key has " +
                                       std::to_string(keys) + "; they must match");
  if (!(dropout_p >= 0.0 && dropout_p < 1.0))
    throw ValueError(std::string(kOp) + ": dropout_p must be in [0, 1), got " + std::to_string(dropout_p));
  if (is_causal && attn_mask.defined())
    throw ValueError(std::string(kOp) + ": pass either attn_mask or is_causal, not both (fold the causal triangle "
                                        "into the mask)");
  if (attn_mask.defined() && attn_mask.requires_grad())
    throw ValueError(std::string(kOp) + ": attn_mask requires grad, but no gradient flows to the mask; pass "
                                        "attn_mask.detach()");
  if (scale && !(std::isfinite(*scale)))
    throw ValueError(std::string(kOp) + ": scale must be finite, got " + std::to_string(*scale));

  // The fused path: 4-d half-precision operands without a mask (the causal one aside), one batch. With dropout
  // only on a GPU, whose engine draws its own mask: elsewhere no engine runs, and the general path keeps kiln's.
  const bool half = query.dtype() == float16 || query.dtype() == bfloat16;
  if (half && !attn_mask.defined() && (dropout_p == 0 || query.device().is_cuda()) && query.ndim() == 4 &&
      key.ndim() == 4 && value.ndim() == 4 && key.shape(0) == query.shape(0) && value.shape() == key.shape() &&
      value.shape(-1) == e && rows > 0 && keys > 0 && query.shape(0) > 0 && query.shape(1) > 0 && key.shape(1) > 0 &&
      (key.shape(1) == query.shape(1) || (enable_gqa && query.shape(1) % key.shape(1) == 0)))
    return fused_attention(query, key, value, scale ? *scale : 1.0 / std::sqrt(static_cast<double>(e)), is_causal,
                           dropout_p);

  // Grouped-query attention: each k/v head serves Hq / Hk query heads (repeat_interleave over the head axis).
  Array k = key, v = value;
  if (enable_gqa && query.ndim() >= 3 && key.ndim() >= 3 && key.shape(-3) != query.shape(-3)) {
    const int64_t hq = query.shape(-3), hk = key.shape(-3);
    require(value.ndim() >= 3 && value.shape(-3) == hk, "value must have key's " + std::to_string(hk) + " heads");
    require(hk > 0 && hq % hk == 0, "enable_gqa needs query's heads (" + std::to_string(hq) +
                                        ") to be a multiple of key's (" + std::to_string(hk) + ")");
    auto repeat_heads = [&](const Array& a) {
      Shape s = a.shape();
      Shape grouped = s;
      grouped.insert(grouped.size() - 2, 1);  // (..., Hk, 1, S, F)
      Shape wide = grouped;
      wide[wide.size() - 3] = hq / hk;
      Shape out = s;
      out[out.size() - 3] = hq;
      return broadcast_to(a.reshape(grouped), wide).reshape(out);
    };
    k = repeat_heads(key);
    v = repeat_heads(value);
  }
  // Leading axes broadcast against each other (PyTorch's math path does).
  Shape qlead(query.shape().begin(), query.shape().end() - 2), klead(k.shape().begin(), k.shape().end() - 2),
      vlead(v.shape().begin(), v.shape().end() - 2);
  Shape lead;
  try {
    lead = broadcast_shapes(broadcast_shapes(qlead, klead), vlead);
  } catch (const ShapeError&) {
    require(false, "the leading (batch, head) axes of query " + shape_str(query.shape()) + ", key " +
                       shape_str(key.shape()) + " and value " + shape_str(value.shape()) +
                       " do not broadcast (grouped-query attention needs enable_gqa = true)");
  }
  auto full = [&](const Array& a, int64_t n, int64_t f) {
    Shape s = lead;
    s.push_back(n);
    s.push_back(f);
    return broadcast_to(a, s);
  };
  Plan p;
  for (int64_t d : lead) p.batch *= d;
  p.rows = rows;
  p.keys = keys;
  p.scale = scale ? *scale : 1.0 / std::sqrt(static_cast<double>(e));
  p.causal = is_causal;
  p.compute = query.dtype() == float16 || query.dtype() == bfloat16 ? float32 : query.dtype();
  // Dropout (training only, as PyTorch: the caller passes 0 in eval) draws from the default generator; the
  // backward regenerates the same numbers from the state saved here.
  p.dropout = dropout_p;
  if (attn_mask.defined()) {
    Shape ms = lead;
    ms.push_back(rows);
    ms.push_back(keys);
    bool fits = attn_mask.ndim() <= static_cast<int64_t>(ms.size());
    if (fits) {
      try {
        fits = broadcast_shapes(attn_mask.shape(), ms) == ms;
      } catch (const ShapeError&) {
        fits = false;
      }
    }
    if (!fits) {
      require(false, "attn_mask of shape " + shape_str(attn_mask.shape()) + " does not broadcast to " +
                         shape_str(ms) + " (batch and heads, query positions, key positions)");
    }
    const Array additive = attn_mask.dtype() == bool_
                               ? where(attn_mask, 0.0, -std::numeric_limits<double>::infinity()).astype(p.compute)
                               : attn_mask.astype(p.compute);
    if (additive.device() != query.device())
      throw DeviceError(std::string(kOp) + ": attn_mask is on " + attn_mask.device().str() + " but query on " +
                        query.device().str() + "; move it there");
    p.mask = broadcast_to(additive, ms);
  }
  p.block = std::clamp<int64_t>(kBlockElements / std::max<int64_t>(1, p.batch * keys), 1, std::max<int64_t>(1, rows));
  if (rows == 0 || keys == 0 || p.batch == 0) {
    // Nothing to attend to: the weights are empty rows and their product with v is 0 (as PyTorch's math path).
    Shape out = lead;
    out.push_back(rows);
    out.push_back(v.shape(-1));
    return zeros(out, query.dtype(), query.device());
  }
  // Dropout (the caller passes 0 in eval, as with PyTorch's function) draws from the default generator's stream:
  // the forward from the state saved here, the backward again from it, and the default generator then moves on
  // past the draws as a plain dropout's would.
  if (dropout_p > 0) p.dropout_state = random::get_state();
  auto after = std::make_shared<random::GeneratorState>();
  const Array q3 = full(query, rows, e).reshape({p.batch, rows, e});
  const Array k3 = full(k, keys, e).reshape({p.batch, keys, e});
  const Array v3 = full(v, keys, v.shape(-1)).reshape({p.batch, keys, v.shape(-1)});
  auto plan = std::make_shared<const Plan>(p);
  const AutogradFunction attention{
      "ScaledDotProductAttentionBackward",
      [plan, after](const std::vector<Array>& in, std::vector<Array>& saved) {
        const Plan& pl = *plan;
        const Array q = in[0].astype(pl.compute), kk = in[1].astype(pl.compute), vv = in[2].astype(pl.compute);
        auto [out, lse] = forward_blocks(pl, q, kk, vv, *after);
        saved = {in[0], in[1], in[2], lse};
        return out.astype(in[0].dtype());
      },
      [plan](const Array& g, const std::vector<Array>& saved, const std::vector<bool>&) {
        const Plan& pl = *plan;
        const DType dtype = saved[0].dtype();
        std::vector<Array> grads = backward_blocks(pl, saved[0].astype(pl.compute), saved[1].astype(pl.compute),
                                                   saved[2].astype(pl.compute), saved[3], g.astype(pl.compute));
        for (Array& gr : grads) gr = gr.astype(dtype);
        return grads;
      }};
  const Array out3 = attention.apply({q3, k3, v3});
  if (dropout_p > 0) random::set_state(*after);
  Shape out = lead;
  out.push_back(rows);
  out.push_back(v.shape(-1));
  return out3.reshape(out);
}

}  // namespace kiln::nn
