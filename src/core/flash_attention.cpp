// Fused attention primitives (kiln/flash_attention.hpp): the operands' checks, the outputs' layout, and the
// backend's engine (Backend::attention: cuDNN's fused attention on a GPU). No reference here: the caller
// (nn::scaled_dot_product_attention) falls back to its blocked attention when no engine runs a problem.
#include "kiln/flash_attention.hpp"

#include <mutex>
#include <string>

#include "core/autograd.hpp"
#include "core/backend.hpp"
#include "kiln/ops.hpp"

namespace kiln {

namespace {

std::mutex g_stats_mutex;
FlashAttentionStats g_stats;

void count(bool ran, bool forward, const std::string& refusal) {
  std::lock_guard<std::mutex> lock(g_stats_mutex);
  if (!ran) {
    ++g_stats.declined;
    g_stats.refusal = refusal;
  } else {
    ++(forward ? g_stats.forward : g_stats.backward);
  }
}

/// The operand as the engine takes it: its last axis contiguous (a copy otherwise).
Array unit_last(const Array& a) { return a.shape(-1) <= 1 || a.strides().back() == 1 ? a : a.contiguous(); }

void check(const char* op, const Array& q, const Array& k, const Array& v) {
  for (const Array* a : {&q, &k, &v}) {
    if (!a->defined()) throw ValueError(std::string(op) + ": q, k and v must be defined arrays");
    if (a->ndim() != 4)
      throw ShapeError(std::string(op) + ": q, k and v must be 4-d (batch, heads, sequence, head size), got " +
                       shape_str(a->shape()) + "; reshape them");
  }
  if (k.dtype() != q.dtype() || v.dtype() != q.dtype())
    throw DTypeError(std::string(op) + ": q, k and v must have one dtype, got " + std::string(dtype_name(q.dtype())) +
                     ", " + std::string(dtype_name(k.dtype())) + " and " + std::string(dtype_name(v.dtype())));
  if (k.device() != q.device() || v.device() != q.device())
    throw DeviceError(std::string(op) + ": q is on " + q.device().str() + ", k on " + k.device().str() +
                      " and v on " + v.device().str() + "; move them to one device");
  const int64_t b = q.shape(0), h = q.shape(1), d = q.shape(3), hk = k.shape(1), skv = k.shape(2);
  if (k.shape(0) != b || v.shape(0) != b || k.shape(3) != d || v.shape(3) != d || v.shape(1) != hk ||
      v.shape(2) != skv || hk == 0 || h % hk != 0)
    throw ShapeError(std::string(op) + ": q " + shape_str(q.shape()) + ", k " + shape_str(k.shape()) + " and v " +
                     shape_str(v.shape()) + " do not fit: k and v need q's batch and head size, one shape, and a " +
                     "number of heads dividing q's");
}

void check_dropout(const char* op, double dropout_p) {
  if (!(dropout_p >= 0.0 && dropout_p < 1.0))
    throw ValueError(std::string(op) + ": dropout_p must be in [0, 1), got " + std::to_string(dropout_p));
}

}  // namespace

std::optional<FlashAttentionOutput> flash_attention_forward(const Array& q, const Array& k, const Array& v,
                                                            double scale, bool causal, double dropout_p) {
  constexpr const char* op = "flash_attention_forward";
  check(op, q, k, v);
  check_dropout(op, dropout_p);
  detail::reject_grad({&q, &k, &v}, op, "use nn::scaled_dot_product_attention, which records the gradient");
  const Array qc = unit_last(q), kc = unit_last(k), vc = unit_last(v);
  detail::AttentionCall call;
  call.kind = detail::AttentionKind::Forward;
  call.q = &qc, call.k = &kc, call.v = &vc;
  call.scale = scale;
  call.causal = causal;
  const int64_t b = q.shape(0), h = q.shape(1), s = q.shape(2), d = q.shape(3);
  // (B, Sq, H, D) in memory, as PyTorch's kernels lay it out: the heads' merge after it is a view.
  call.o = empty({b, s, h, d}, q.dtype(), q.device()).permute({0, 2, 1, 3});
  call.lse = empty({b, h, s}, float32, q.device());
  call.dropout = dropout_p;
  if (dropout_p > 0) call.rng = empty({2}, int64, q.device());
  const bool ran = b > 0 && h > 0 && s > 0 && k.shape(2) > 0 && d > 0 &&
                   detail::backend_for(q.device()).attention(call);
  if (!ran && call.refusal.empty()) call.refusal = "no fused attention engine on " + q.device().str();
  count(ran, true, call.refusal);
  if (!ran) return std::nullopt;
  return FlashAttentionOutput{call.o, call.lse, call.rng};
}

std::optional<FlashAttentionGrads> flash_attention_backward(const Array& q, const Array& k, const Array& v,
                                                            const Array& out, const Array& dout, const Array& lse,
                                                            double scale, bool causal, double dropout_p,
                                                            const Array& rng) {
  constexpr const char* op = "flash_attention_backward";
  check(op, q, k, v);
  check_dropout(op, dropout_p);
  if (dropout_p > 0 &&
      (!rng.defined() || rng.dtype() != int64 || rng.shape() != Shape{2} || rng.device() != q.device()))
    throw ValueError(std::string(op) + ": a backward with dropout needs the forward's rng (its seed and offset, " +
                     "int64 (2,) on " + q.device().str() + "), which regenerates the same mask");
  if (!out.defined() || !dout.defined() || out.shape() != q.shape() || dout.shape() != q.shape() ||
      out.dtype() != q.dtype() || dout.dtype() != q.dtype())
    throw ShapeError(std::string(op) + ": out and dout must have q's shape " + shape_str(q.shape()) + " and dtype");
  if (!lse.defined() || lse.dtype() != float32 || lse.shape() != Shape{q.shape(0), q.shape(1), q.shape(2)})
    throw ShapeError(std::string(op) + ": lse must be the forward's float32 (batch, heads, sequence) array");
  detail::reject_grad({&q, &k, &v, &out, &dout}, op,
                      "use nn::scaled_dot_product_attention, which records the gradient");
  const Array qc = unit_last(q), kc = unit_last(k), vc = unit_last(v), oc = unit_last(out), gc = unit_last(dout);
  detail::AttentionCall call;
  call.kind = detail::AttentionKind::Backward;
  call.q = &qc, call.k = &kc, call.v = &vc, call.out = &oc, call.dout = &gc;
  call.lse = lse.contiguous();
  call.scale = scale;
  call.causal = causal;
  call.dropout = dropout_p;
  if (dropout_p > 0) call.rng = rng.contiguous();
  call.dq = empty(q.shape(), q.dtype(), q.device());
  call.dk = empty(k.shape(), k.dtype(), k.device());
  call.dv = empty(v.shape(), v.dtype(), v.device());
  const bool ran = q.size() > 0 && k.size() > 0 && detail::backend_for(q.device()).attention(call);
  if (!ran && call.refusal.empty()) call.refusal = "no fused attention engine on " + q.device().str();
  count(ran, false, call.refusal);
  if (!ran) return std::nullopt;
  return FlashAttentionGrads{call.dq, call.dk, call.dv};
}

FlashAttentionStats flash_attention_stats() {
  std::lock_guard<std::mutex> lock(g_stats_mutex);
  return g_stats;
}

}  // namespace kiln
