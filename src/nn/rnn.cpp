// torch.nn's recurrent layers (RNN, LSTM, GRU) and cells, with PyTorch's parameter names, gate order and
// initialisation, so its state dicts load.
//
// Each layer and direction projects the whole input sequence at once (one matmul over T*N rows: half of the
// work when input_size = hidden_size, at full matmul efficiency); the recurrence left over is one autograd node
// (`recurrence`) whose forward runs per step one matmul with weight_hh and one fused elementwise pass over the
// gates (rnn_steps.hpp), and whose backward walks the steps in reverse the same way, then forms weight_hh's
// gradient with one matmul over all steps. Recording the per-step ops instead would make ~15 nodes a step and keep
// every intermediate.
//
// Where the backend has an engine for the whole stack (kiln/rnn.hpp: cuDNN's RNN on a GPU, every layer, direction
// and step in one call), RNNBase::run hands it the problem instead, as one autograd node (run_engine); the
// recurrence above remains the reference every backend runs (the CPU, bfloat16, proj_size, dropout between
// layers in training).
#include <cmath>
#include <optional>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "kiln/autocast.hpp"
#include "kiln/fuse.hpp"
#include "kiln/nn.hpp"
#include "kiln/ops.hpp"
#include "kiln/rnn.hpp"
#include "rnn_steps.hpp"

namespace kiln::nn {

namespace {

using namespace rnn_steps;

using Mode = RNNBase::Mode;

int64_t gates_of(Mode mode) { return mode == Mode::LSTM ? 4 : mode == Mode::GRU ? 3 : 1; }

const char* mode_name(Mode mode) {
  switch (mode) {
    case Mode::LSTM:
      return "LSTM";
    case Mode::GRU:
      return "GRU";
    default:
      return "RNN";
  }
}

// ---------------------------------------------------------------- the recurrence as one autograd node
struct Recurrence {
  Mode mode;
  int64_t hidden;
  bool reverse;  // steps run from the last to the first
  bool bias;     // GRU: b_hn follows weight_hh in the inputs
  int64_t proj;  // LSTM's proj_size (0: none): weight_hr ends the inputs, h = weight_hr (o * tanh(c))
};

/// Gate k of a (..., gates*hidden) array (a view).
Array gate(const Array& a, int64_t k, int64_t hidden) { return a.slice(-1, k * hidden, (k + 1) * hidden); }

/// The hidden states each step started from, (T, N, H): h0, then the outputs in the order the steps ran.
Array previous_states(const Array& out, const Array& h0, int64_t steps, bool reverse) {
  const Array first = h0.expand_dims(0);
  if (steps == 1) return first;
  return reverse ? concatenate({out.slice(0, 1, steps), first}, 0)
                 : concatenate({first, out.slice(0, 0, steps - 1)}, 0);
}

/// Inputs: xp (T, N, G*H) (the input projection with the biases that add to the gates), h0 (N, R), [c0 (N, H) for
/// LSTM], w_hh (G*H, R), [b_hn (H,) for GRU with bias], [w_hr (R, H) for LSTM with proj_size R] (R = H without).
/// Result: the hidden states (T, N, R); for LSTM, flat, the hidden states then the final cell state (N, H) (one
/// result per node: run_direction takes the two views apart). The per-step gate arrays it writes are gate-major,
/// (G, N, H) per step: fused outputs must not share memory, and the columns of one (N, G*H) row block interleave.
Array recurrence(const Recurrence& r, const Array& xp, const Array& h0, const Array& c0, const Array& w_hh,
                 const Array& b_hn, const Array& w_hr) {
  std::vector<Array> inputs{xp, h0};
  if (r.mode == Mode::LSTM) inputs.push_back(c0);
  inputs.push_back(w_hh);
  const bool gru_bias = r.mode == Mode::GRU && r.bias;
  if (gru_bias) inputs.push_back(b_hn);
  if (r.proj) inputs.push_back(w_hr);
  // Without a backward to come (inference, no-grad) the gates go to one step's scratch, not T steps' worth.
  bool keep = false;
  if (is_grad_enabled())
    for (const Array& a : inputs) keep = keep || a.requires_grad();
  const AutogradFunction fn{
      std::string(mode_name(r.mode)) + "RecurrenceBackward",
      [r, keep, gru_bias](const std::vector<Array>& in, std::vector<Array>& saved) {
        const Array& x = in[0];
        const int64_t steps = x.shape(0), n = x.shape(1), hs = r.hidden;
        const bool lstm = r.mode == Mode::LSTM, gru = r.mode == Mode::GRU;
        const Array& h_init = in[1];
        const size_t w_at = lstm ? 3 : 2;
        const Array w_t = in[w_at].T(), w_hr_t = r.proj ? in.back().T() : Array();
        const int64_t ps = r.proj ? r.proj : hs;
        // LSTM: the hidden states and the final cell state in one flat result
        Array result = empty({steps * n * ps + (lstm ? n * hs : 0)}, x.dtype(), x.device());
        Array out = result.slice(0, 0, steps * n * ps).reshape(steps, n, ps);
        Array raw;  // with proj_size: o * tanh(c) before the projection
        if (r.proj) raw = empty({keep ? steps : 1, n, hs}, x.dtype(), x.device());
        Array acts, extra;  // LSTM: gates (i, f, g, o) and cell states; GRU: gates (r, z, n) and h W_hn^T + b_hn
        if (lstm || gru) {
          acts = empty({keep ? steps : 1, gates_of(r.mode), n, hs}, x.dtype(), x.device());
          extra = empty({keep ? steps : 2, n, hs}, x.dtype(), x.device());  // LSTM's c: read one, write the other
        }
        Array h = h_init, c = lstm ? in[2] : Array();
        for (int64_t s = 0; s < steps; ++s) {
          const int64_t t = r.reverse ? steps - 1 - s : s, slot = keep ? t : s % 2;
          const Array xt = x[t], hh = matmul(h, w_t);
          Array ht = out[t];
          if (lstm) {
            const Array at = acts[keep ? t : 0], ct = extra[slot], rt = r.proj ? raw[keep ? t : 0] : ht;
            (void)lstm_step.out({at[0], at[1], at[2], at[3], ct, rt}, gate(xt, 0, hs), gate(xt, 1, hs), gate(xt, 2, hs),
                                gate(xt, 3, hs), gate(hh, 0, hs), gate(hh, 1, hs), gate(hh, 2, hs), gate(hh, 3, hs), c);
            if (r.proj) ht.assign(matmul(rt, w_hr_t));
            c = ct;
          } else if (gru) {
            const Array at = acts[keep ? t : 0];
            const Array xr = gate(xt, 0, hs), xz = gate(xt, 1, hs), xn = gate(xt, 2, hs);
            const Array hr = gate(hh, 0, hs), hz = gate(hh, 1, hs), hn = gate(hh, 2, hs);
            if (gru_bias)
              (void)gru_step.out({at[0], at[1], at[2], extra[slot], ht}, xr, xz, xn, hr, hz, hn, in[w_at + 1], h);
            else
              (void)gru_step.out({at[0], at[1], at[2], extra[slot], ht}, xr, xz, xn, hr, hz, hn, 0.0, h);
          } else if (r.mode == Mode::RNNTanh) {
            (void)rnn_tanh_step.out({ht}, xt, hh);
          } else {
            (void)rnn_relu_step.out({ht}, xt, hh);
          }
          h = ht;
        }
        if (lstm) result.slice(0, steps * n * ps, std::nullopt).reshape(n, hs).assign(c);
        if (keep)
          saved = {h_init, in[w_at], out, acts, extra, lstm ? in[2] : Array(), raw, r.proj ? in.back() : Array()};
        return result;
      },
      [r, gru_bias](const Array& grad, const std::vector<Array>& saved, const std::vector<bool>& needs) {
        const Array &h_init = saved[0], &w = saved[1], &out = saved[2], &acts = saved[3], &extra = saved[4];
        const Array &raw = saved[6], &w_hr = saved[7];
        const bool lstm = r.mode == Mode::LSTM, gru = r.mode == Mode::GRU;
        const int64_t steps = out.shape(0), n = out.shape(1), hs = r.hidden, ps = out.shape(2);
        const int64_t gates = gates_of(r.mode);
        const DType dt = out.dtype();
        const Device dev = out.device();
        // dg: the input projection's gradient per step and gate; dgh: that of h W_hh^T + b_hh (GRU's differs
        // in the n gate). w_gates[k] is gate k's (H, H) block of weight_hh, for one batched matmul per step.
        Array dg = empty({steps, gates, n, hs}, dt, dev);
        Array dgh = gru ? empty({steps, gates, n, hs}, dt, dev) : dg;
        const Array w_gates = w.reshape(gates, hs, ps);
        const Array g_out = grad.slice(0, 0, steps * n * ps).reshape(steps, n, ps);
        Array dh = zeros({n, ps}, dt, dev);
        Array dc = lstm ? grad.slice(0, steps * n * ps, std::nullopt).reshape(n, hs).copy() : Array();
        Array d_proj = r.proj ? empty({steps, n, ps}, dt, dev) : Array();  // h's gradient, before weight_hr
        for (int64_t s = steps - 1; s >= 0; --s) {
          const int64_t t = r.reverse ? steps - 1 - s : s;
          const bool first = s == 0;
          const int64_t prev = r.reverse ? t + 1 : t - 1;
          const Array dgt = dg[t], gout = g_out[t];
          Array direct;  // GRU: the part of h_prev's gradient that skips the matmul (z * dh)
          if (lstm) {
            const Array at = acts[t], c_prev = first ? saved[5] : extra[prev];
            if (r.proj) {
              const Array dpt = d_proj[t];
              (void)sum_of.out({dpt}, gout, dh);
              (void)lstm_step_backward.out({dgt[0], dgt[1], dgt[2], dgt[3], dc}, matmul(dpt, w_hr), 0.0, dc, at[0],
                                           at[1], at[2], at[3], extra[t], c_prev);
            } else {
              (void)lstm_step_backward.out({dgt[0], dgt[1], dgt[2], dgt[3], dc}, gout, dh, dc, at[0], at[1], at[2],
                                           at[3], extra[t], c_prev);
            }
          } else if (gru) {
            const Array at = acts[t], dght = dgh[t], h_prev = first ? h_init : out[prev];
            direct = std::get<6>(gru_step_backward.out({dgt[0], dgt[1], dgt[2], dght[0], dght[1], dght[2], Array()},
                                                       gout, dh, at[0], at[1], at[2], extra[t], h_prev));
          } else if (r.mode == Mode::RNNTanh) {
            (void)rnn_tanh_step_backward.out({dgt[0]}, gout, dh, out[t]);
          } else {
            (void)rnn_relu_step_backward.out({dgt[0]}, gout, dh, out[t]);
          }
          dh = matmul(dgh[t], w_gates).sum({0});
          if (gru) dh = dh + direct;
        }
        const size_t w_at = lstm ? 3 : 2;
        std::vector<Array> grads(w_at + (gru_bias ? 2 : 1) + (r.proj ? 1 : 0));
        if (needs[0]) grads[0] = dg.permute({0, 2, 1, 3}).reshape(steps, n, gates * hs);
        grads[1] = dh;
        if (lstm) grads[2] = dc;
        if (needs[w_at]) {
          // weight_hh's gate k block: the sum over steps and rows of dgh_k^T h_prev, one batched matmul.
          const Array h_prev = previous_states(out, h_init, steps, r.reverse).reshape(steps * n, ps);
          const Array per_gate = dgh.permute({1, 0, 2, 3}).reshape(gates, steps * n, hs);
          grads[w_at] = matmul(swapaxes(per_gate, 1, 2), h_prev).reshape(gates * hs, ps);
        }
        if (gru_bias && needs[w_at + 1]) grads[w_at + 1] = dgh.index({Slice(), 2}).sum({0, 1});
        if (r.proj && needs.back())
          grads.back() = matmul(d_proj.reshape(steps * n, ps).T(), raw.reshape(steps * n, hs));
        return grads;
      }};
  return fn.apply(inputs);
}

/// One layer and direction over the sequence x (T, N, in): the outputs (T, N, H), the final h and (LSTM) c.
std::tuple<Array, Array, Array> run_direction(const Recurrence& r, const Array& x, const Array& w_ih, const Array& w_hh,
                                              const Array& b_ih, const Array& b_hh, const Array& w_hr, const Array& h0,
                                              const Array& c0) {
  const int64_t steps = x.shape(0), n = x.shape(1), gh = w_ih.shape(0);
  Array xp = matmul(x.reshape(steps * n, x.shape(2)), w_ih.T());
  Array b_hn;
  if (r.bias) {
    // b_hh adds to the gates as b_ih does, except GRU's n part, which r multiplies: that one goes to the recurrence.
    const int64_t to = r.mode == Mode::GRU ? 2 * r.hidden : gh;
    Array b = b_ih.slice(0, 0, to) + b_hh.slice(0, 0, to);
    if (to < gh) b = concatenate({b, b_ih.slice(0, to, gh)}, 0);
    xp = xp + b;
    if (r.mode == Mode::GRU) b_hn = b_hh.slice(0, to, gh);
  }
  const Array out = recurrence(r, xp.reshape(steps, n, gh), h0, c0, w_hh, b_hn, w_hr);
  const int64_t ps = r.proj ? r.proj : r.hidden;
  const Array hidden = out.slice(0, 0, steps * n * ps).reshape(steps, n, ps);
  const Array h_n = hidden[r.reverse ? 0 : steps - 1];
  if (r.mode != Mode::LSTM) return {hidden, h_n, Array()};
  return {hidden, h_n, out.slice(0, steps * n * ps, std::nullopt).reshape(n, r.hidden)};
}

RnnMode engine_mode(Mode mode) {
  switch (mode) {
    case Mode::LSTM:
      return RnnMode::Lstm;
    case Mode::GRU:
      return RnnMode::Gru;
    case Mode::RNNRelu:
      return RnnMode::RnnRelu;
    default:
      return RnnMode::RnnTanh;
  }
}

/// What run_engine needs of a layer.
struct RNNParamsView {
  int64_t hidden = 0, layers = 1;
  bool bidirectional = false, bias = true;
  std::vector<Array> weights;  ///< PyTorch's order
  Array space;                 ///< the flat array the weights are views of (flatten_parameters), or undefined
};

/// The whole stack through the backend's engine (kiln/rnn.hpp), as one autograd node over x (T, N, in), the
/// initial states and every weight in PyTorch's order: its result is the one array the engine wrote the output,
/// h_n and c_n into (a node has one result), viewed apart. nullopt when no engine runs the problem.
std::optional<std::tuple<Array, Array, Array>> run_engine(Mode mode, const RNNParamsView& v, const Array& x,
                                                          const Array& h0, const Array& c0) {
  const bool lstm = mode == Mode::LSTM;
  const RnnMode engine = engine_mode(mode);
  const RnnParams params{engine, v.hidden, v.layers, v.bidirectional, v.bias};
  std::vector<Array> inputs{x, h0};
  if (lstm) inputs.push_back(c0);
  const size_t first_weight = inputs.size();
  for (const Array& w : v.weights) inputs.push_back(w);
  bool record = false;
  if (is_grad_enabled())
    for (const Array& a : inputs) record = record || a.requires_grad();
  std::optional<RnnForwardOutput> out;
  {
    NoGradGuard no_grad;
    std::vector<Array> weights;
    for (const Array& w : v.weights) weights.push_back(w.detach());
    out = rnn_forward(x.detach(), h0.detach(), lstm ? c0.detach() : Array(), weights, params, record, v.space);
  }
  if (!out) return std::nullopt;
  const Shape yshape = out->y.shape(), hshape = out->hy.shape();
  const int64_t ny = out->y.size(), nh = out->hy.size();
  if (!record) return std::make_tuple(out->y, out->hy, out->cy);
  Array packed = out->packed;
  {
    const Array y_saved = out->y, reserve = out->reserve, space = v.space;
    const AutogradFunction node{
        lstm ? "CudnnLstmBackward" : mode == Mode::GRU ? "CudnnGruBackward" : "CudnnRnnBackward",
        [packed, y_saved, reserve](const std::vector<Array>& in, std::vector<Array>& saved) {
          saved = in;
          saved.push_back(y_saved);
          saved.push_back(reserve);
          return packed;
        },
        [params, lstm, first_weight, yshape, hshape, ny, nh, space](const Array& g, const std::vector<Array>& saved,
                                                                    const std::vector<bool>&) {
          const Array dy = g.slice(0, 0, ny).reshape(yshape), dhy = g.slice(0, ny, ny + nh).reshape(hshape);
          const Array dcy = lstm ? g.slice(0, ny + nh, ny + 2 * nh).reshape(hshape) : Array();
          const size_t n = saved.size();
          const std::vector<Array> weights(saved.begin() + static_cast<std::ptrdiff_t>(first_weight),
                                           saved.begin() + static_cast<std::ptrdiff_t>(n - 2));
          auto grads = rnn_backward(saved[0], saved[1], lstm ? saved[2] : Array(), weights, saved[n - 2], dy, dhy, dcy,
                                    saved[n - 1], params, space);
          if (!grads)
            throw DeviceError("LSTM/GRU/RNN backward: the engine that ran the forward declined the backward (" +
                              rnn_stats().refusal + ")");
          std::vector<Array> out{grads->dx, grads->dhx};
          if (lstm) out.push_back(grads->dcx);
          for (Array& dw : grads->dweights) out.push_back(dw);
          return out;
        }};
    packed = node.apply(inputs);
  }
  Array y = packed.slice(0, 0, ny).reshape(yshape), hy = packed.slice(0, ny, ny + nh).reshape(hshape);
  Array cy = lstm ? packed.slice(0, ny + nh, ny + 2 * nh).reshape(hshape) : Array();
  return std::make_tuple(y, hy, cy);
}

void check_dtype_device(const std::string& who, const char* what, const Array& a, const Array& weight) {
  if (a.dtype() != weight.dtype())
    throw DTypeError(who + ": " + what + " is " + std::string(dtype_name(a.dtype())) + " but the parameters are " +
                     std::string(dtype_name(weight.dtype())) + "; convert it with .astype() or the module with to()");
  if (a.device() != weight.device())
    throw DeviceError(who + ": " + what + " is on " + a.device().str() + " but the parameters are on " +
                      weight.device().str() + "; move it with .to() or the module with to()");
}

/// Inside an autocast scope the recurrence runs in float32 (as normalisations do: its states accumulate over
/// the steps), so a low-precision input or state is cast up, differentiably, to float32 parameters.
Array autocast_input(const Array& a, const Array& weight) {
  return a.defined() && weight.dtype() == float32 && autocast_dtype() ? autocast_float32(a) : a;
}

void init_uniform(Module& m, int64_t hidden) {
  const double k = 1.0 / std::sqrt(static_cast<double>(hidden));
  for (auto& [name, p] : m.named_parameters(false)) init::uniform(m.parameter(name), -k, k);
}

Mode rnn_mode(const std::string& nonlinearity, const char* who) {
  if (nonlinearity == "tanh") return Mode::RNNTanh;
  if (nonlinearity == "relu") return Mode::RNNRelu;
  throw ValueError(std::string(who) + ": nonlinearity must be \"tanh\" or \"relu\", got \"" + nonlinearity + "\"");
}

}  // namespace

// ---------------------------------------------------------------- layers
RNNBase::RNNBase(Mode mode, int64_t input_size, int64_t hidden_size, RNNOptions options)
    : mode_(mode), input_(input_size), hidden_(hidden_size), o_(std::move(options)) {
  const std::string who = mode_name(mode);
  if (input_size <= 0 || hidden_size <= 0)
    throw ValueError(who + ": input_size and hidden_size must be positive, got " + std::to_string(input_size) +
                     " and " + std::to_string(hidden_size));
  if (o_.num_layers <= 0) throw ValueError(who + ": num_layers must be positive, got " + std::to_string(o_.num_layers));
  if (!(o_.dropout >= 0.0 && o_.dropout <= 1.0))
    throw ValueError(who + ": dropout must be in [0, 1], got " + std::to_string(o_.dropout));
  if (o_.proj_size != 0 && mode != Mode::LSTM)
    throw ValueError(who + ": proj_size is an LSTM option; pass proj_size=0");
  if (o_.proj_size < 0 || o_.proj_size >= hidden_size)
    throw ValueError(who + ": proj_size must be in [0, hidden_size) (as PyTorch), got " + std::to_string(o_.proj_size) +
                     " with hidden_size " + std::to_string(hidden_size));
  const int64_t gates = gates_of(mode), dirs = o_.bidirectional ? 2 : 1;
  for (int64_t k = 0; k < o_.num_layers; ++k) {
    const int64_t real = o_.proj_size ? o_.proj_size : hidden_size;  // h's size
    const int64_t in = k == 0 ? input_size : real * dirs;
    for (int64_t d = 0; d < dirs; ++d) {
      const std::string suffix = "_l" + std::to_string(k) + (d == 1 ? "_reverse" : "");
      register_parameter("weight_ih" + suffix, empty({gates * hidden_size, in}, o_.dtype, o_.device));
      register_parameter("weight_hh" + suffix, empty({gates * hidden_size, real}, o_.dtype, o_.device));
      if (o_.bias) {
        register_parameter("bias_ih" + suffix, empty({gates * hidden_size}, o_.dtype, o_.device));
        register_parameter("bias_hh" + suffix, empty({gates * hidden_size}, o_.dtype, o_.device));
      }
      if (o_.proj_size)
        register_parameter("weight_hr" + suffix, empty({o_.proj_size, hidden_size}, o_.dtype, o_.device));
    }
  }
  init_uniform(*this, hidden_size);
  flatten_parameters();
}

struct RNNBase::FlatWeights {
  Array space;
  std::vector<int64_t> offsets;  ///< per weight_names() entry
};

std::vector<std::string> RNNBase::weight_names() const {
  std::vector<std::string> names;
  const int64_t dirs = o_.bidirectional ? 2 : 1;
  for (int64_t k = 0; k < o_.num_layers; ++k)
    for (int64_t d = 0; d < dirs; ++d) {
      const std::string suffix = "_l" + std::to_string(k) + (d == 1 ? "_reverse" : "");
      names.push_back("weight_ih" + suffix);
      names.push_back("weight_hh" + suffix);
      if (o_.bias) {
        names.push_back("bias_ih" + suffix);
        names.push_back("bias_hh" + suffix);
      }
      if (o_.proj_size) names.push_back("weight_hr" + suffix);
    }
  return names;
}

const Array& RNNBase::flat_weights() const {
  static const Array none;
  return flat_ ? flat_->space : none;
}

void RNNBase::flatten_parameters() {
  const std::vector<std::string> names = weight_names();
  std::vector<Array*> params;
  for (const std::string& name : names) params.push_back(&parameter(name));
  const DType dtype = params[0]->dtype();
  const Device device = params[0]->device();
  const size_t elem = static_cast<size_t>(itemsize(dtype));
  // Already laid out: every parameter the contiguous view of the space at its offset.
  auto in_place = [&] {
    if (!flat_ || flat_->space.dtype() != dtype || flat_->space.device() != device) return false;
    const auto* base = static_cast<const char*>(flat_->space.data_ptr());
    for (size_t i = 0; i < params.size(); ++i)
      if (!params[i]->shares_storage(flat_->space) || !params[i]->is_contiguous() ||
          params[i]->data_ptr() != base + static_cast<size_t>(flat_->offsets[i]) * elem)
        return false;
    return true;
  };
  if (in_place()) return;
  for (const Array* p : params)
    if (p->dtype() != dtype || p->device() != device) {
      flat_.reset();  // mixed parameters: each call reports the mismatch as it does without a layout
      return;
    }
  // The engine's layout (cuDNN's weight space) where the device has one; else PyTorch's order, packed.
  RnnWeightLayout layout;
  std::optional<RnnWeightLayout> wanted;
  if (o_.proj_size == 0) {
    const RnnParams params{engine_mode(mode_), hidden_, o_.num_layers, o_.bidirectional, o_.bias};
    wanted = rnn_weight_layout(input_, params, dtype, device);
  }
  if (wanted && wanted->offsets.size() == params.size()) {
    layout = std::move(*wanted);
  } else {
    layout.offsets.clear();
    for (const Array* p : params) {
      layout.offsets.push_back(layout.size);
      layout.size += p->size();
    }
  }
  NoGradGuard no_grad;
  auto flat = std::make_shared<FlatWeights>();
  flat->space = zeros({layout.size}, dtype, device);  // zeros: what lies between the weights is defined
  flat->offsets = layout.offsets;
  for (size_t i = 0; i < params.size(); ++i) {
    Array& p = *params[i];
    const int64_t at = layout.offsets[i];
    Array view = flat->space.slice(0, at, at + p.size()).reshape(p.shape());
    view.assign(p.detach());
    view.set_requires_grad(p.requires_grad());
    if (p.grad().defined()) view.set_grad(p.grad());
    retire(p, "parameter \"" + names[i] + "\" was replaced by " + name() +
                  ".flatten_parameters() (its parameters are views of one weight space); use the module's entry "
                  "(module.parameter(name) or named_parameters()), and make optimizers after moving the model");
    p = view;
  }
  flat_ = std::move(flat);
}

std::string RNNBase::name() const {
  std::string s = std::string(mode_name(mode_)) + "(" + std::to_string(input_) + ", " + std::to_string(hidden_);
  if (o_.num_layers != 1) s += ", num_layers=" + std::to_string(o_.num_layers);
  if (mode_ == Mode::RNNRelu) s += ", nonlinearity=relu";
  if (!o_.bias) s += ", bias=false";
  if (o_.batch_first) s += ", batch_first=true";
  if (o_.dropout != 0.0) {
    std::ostringstream p;  // shortest form: 0.5, not 0.500000
    p << o_.dropout;
    s += ", dropout=" + p.str();
  }
  if (o_.bidirectional) s += ", bidirectional=true";
  if (o_.proj_size) s += ", proj_size=" + std::to_string(o_.proj_size);
  return s + ")";
}

Array RNNBase::forward(const Array& input) { return std::get<0>(run(input, Array(), Array())); }

std::tuple<Array, Array, Array> RNNBase::run(const Array& input_arg, const Array& h0_arg, const Array& c0_arg) {
  const std::string who = mode_name(mode_);
  const bool lstm = mode_ == Mode::LSTM;
  const int64_t dirs = o_.bidirectional ? 2 : 1, layers = o_.num_layers, states = layers * dirs;
  Array& w0 = parameter("weight_ih_l0");
  const Array input = autocast_input(input_arg, w0), h0 = autocast_input(h0_arg, w0), c0 = autocast_input(c0_arg, w0);
  if (!input.defined())
    throw ValueError(who + ": the input is undefined; pass a (T, N, " + std::to_string(input_) + ") array");
  if (input.ndim() != 2 && input.ndim() != 3)
    throw ShapeError(who + ": the input has shape " + shape_str(input.shape()) + "; it must be " +
                     (o_.batch_first ? "(N, T, " : "(T, N, ") + std::to_string(input_) + ") or unbatched (T, " +
                     std::to_string(input_) + ")");
  if (input.shape(-1) != input_)
    throw ShapeError(who + ": the input has shape " + shape_str(input.shape()) + " but input_size is " +
                     std::to_string(input_) + "; its last axis must be " + std::to_string(input_));
  check_dtype_device(who, "the input", input, w0);
  const bool batched = input.ndim() == 3;
  Array x = !batched ? input.expand_dims(1) : o_.batch_first ? swapaxes(input, 0, 1) : input;
  const int64_t steps = x.shape(0), n = x.shape(1);
  if (steps == 0) throw ShapeError(who + ": the input sequence is empty (T = 0); pass at least one step");
  // h's size is proj_size when LSTM projects, c's hidden_size
  auto state = [&](const Array& s, const char* what, int64_t size) {
    const Shape want = batched ? Shape{states, n, size} : Shape{states, size};
    if (!s.defined()) return zeros({states, n, size}, x.dtype(), x.device());
    if (s.shape() != want)
      throw ShapeError(who + ": " + what + " has shape " + shape_str(s.shape()) + "; it must be " + shape_str(want) +
                       " (num_layers * num_directions, " + (batched ? "N, " : "") +
                       (size == hidden_ ? "hidden_size" : "proj_size") + ") for an input of shape " +
                       shape_str(input.shape()));
    check_dtype_device(who, what, s, w0);
    return batched ? s : s.expand_dims(1);
  };
  const Array h_init = state(h0, "h0", o_.proj_size ? o_.proj_size : hidden_);
  const Array c_init = lstm ? state(c0, "c0", hidden_) : Array();
  if (!lstm && c0.defined()) throw ValueError(who + ": only LSTM takes c0");

  // The backend's engine for the whole stack where it has one (not for proj_size, nor dropout between layers).
  if (o_.proj_size == 0 && !(is_training() && o_.dropout > 0.0 && layers > 1)) {
    RNNParamsView view{hidden_, layers, o_.bidirectional, o_.bias, {}, flat_weights()};
    for (const std::string& name : weight_names()) view.weights.push_back(parameter(name));
    if (auto r = run_engine(mode_, view, x.contiguous(), h_init.contiguous(), lstm ? c_init.contiguous() : Array())) {
      auto [y, h_last, c_last] = *r;
      Array output = !batched ? y.squeeze({1}) : o_.batch_first ? swapaxes(y, 0, 1) : y;
      if (!batched) {
        h_last = h_last.squeeze({1});
        if (lstm) c_last = c_last.squeeze({1});
      }
      return {output, h_last, c_last};
    }
  }
  std::vector<Array> h_n, c_n;
  for (int64_t k = 0; k < layers; ++k) {
    std::vector<Array> outs;
    for (int64_t d = 0; d < dirs; ++d) {
      const std::string suffix = "_l" + std::to_string(k) + (d == 1 ? "_reverse" : "");
      const int64_t i = k * dirs + d;
      const Recurrence r{mode_, hidden_, d == 1, o_.bias, o_.proj_size};
      auto [y, h, c] = run_direction(
          r, x, parameter("weight_ih" + suffix), parameter("weight_hh" + suffix),
          o_.bias ? parameter("bias_ih" + suffix) : Array(), o_.bias ? parameter("bias_hh" + suffix) : Array(),
          o_.proj_size ? parameter("weight_hr" + suffix) : Array(), h_init[i], lstm ? c_init[i] : Array());
      outs.push_back(y);
      h_n.push_back(h);
      if (lstm) c_n.push_back(c);
    }
    x = dirs == 1 ? outs[0] : concatenate(outs, -1);
    if (k + 1 < layers && is_training() && o_.dropout > 0.0) {
      Dropout drop(o_.dropout);
      x = drop(x);
    }
  }
  Array output = !batched ? x.squeeze({1}) : o_.batch_first ? swapaxes(x, 0, 1) : x;
  Array h_last = stack(h_n, 0), c_last = lstm ? stack(c_n, 0) : Array();
  if (!batched) {
    h_last = h_last.squeeze({1});
    if (lstm) c_last = c_last.squeeze({1});
  }
  return {output, h_last, c_last};
}

RNN::RNN(int64_t input_size, int64_t hidden_size, RNNOptions options)
    : RNNBase(rnn_mode(options.nonlinearity, "RNN"), input_size, hidden_size, options) {}

std::pair<Array, Array> RNN::forward(const Array& input, const Array& h0) {
  auto [y, h, c] = run(input, h0, Array());
  return {y, h};
}

LSTM::LSTM(int64_t input_size, int64_t hidden_size, RNNOptions options)
    : RNNBase(Mode::LSTM, input_size, hidden_size, std::move(options)) {}

std::tuple<Array, Array, Array> LSTM::forward(const Array& input, const Array& h0, const Array& c0) {
  return run(input, h0, c0);
}

GRU::GRU(int64_t input_size, int64_t hidden_size, RNNOptions options)
    : RNNBase(Mode::GRU, input_size, hidden_size, std::move(options)) {}

std::pair<Array, Array> GRU::forward(const Array& input, const Array& h0) {
  auto [y, h, c] = run(input, h0, Array());
  return {y, h};
}

// ---------------------------------------------------------------- cells
RNNCellBase::RNNCellBase(Mode mode, int64_t input_size, int64_t hidden_size, bool bias, DType dtype,
                         std::optional<Device> device)
    : mode_(mode), input_(input_size), hidden_(hidden_size), bias_(bias) {
  if (input_size <= 0 || hidden_size <= 0)
    throw ValueError(std::string(mode_name(mode)) + "Cell: input_size and hidden_size must be positive, got " +
                     std::to_string(input_size) + " and " + std::to_string(hidden_size));
  const int64_t gh = gates_of(mode) * hidden_size;
  register_parameter("weight_ih", empty({gh, input_size}, dtype, device));
  register_parameter("weight_hh", empty({gh, hidden_size}, dtype, device));
  if (bias) {
    register_parameter("bias_ih", empty({gh}, dtype, device));
    register_parameter("bias_hh", empty({gh}, dtype, device));
  }
  init_uniform(*this, hidden_size);
}

std::string RNNCellBase::name() const {
  std::string s = std::string(mode_name(mode_)) + "Cell(" + std::to_string(input_) + ", " + std::to_string(hidden_);
  if (!bias_) s += ", bias=false";
  if (mode_ == Mode::RNNRelu) s += ", nonlinearity=relu";
  return s + ")";
}

std::pair<Array, Array> RNNCellBase::step(const Array& input_arg, const Array& h_arg, const Array& c_arg) {
  const std::string who = std::string(mode_name(mode_)) + "Cell";
  const Array& w_ih = parameter("weight_ih");
  const Array input = autocast_input(input_arg, w_ih), h = autocast_input(h_arg, w_ih), c = autocast_input(c_arg, w_ih);
  if (!input.defined() || (input.ndim() != 1 && input.ndim() != 2) || input.shape(-1) != input_)
    throw ShapeError(who + ": the input has shape " + (input.defined() ? shape_str(input.shape()) : "(undefined)") +
                     "; it must be (N, " + std::to_string(input_) + ") or unbatched (" + std::to_string(input_) + ",)");
  check_dtype_device(who, "the input", input, w_ih);
  const bool batched = input.ndim() == 2;
  const Array x = batched ? input : input.expand_dims(0);
  const int64_t n = x.shape(0);
  const Shape want = batched ? Shape{n, hidden_} : Shape{hidden_};
  auto state = [&](const Array& s, const char* what) {
    if (!s.defined()) return zeros({n, hidden_}, x.dtype(), x.device());
    if (s.shape() != want)
      throw ShapeError(who + ": " + what + " has shape " + shape_str(s.shape()) + "; it must be " + shape_str(want) +
                       " for an input of shape " + shape_str(input.shape()));
    check_dtype_device(who, what, s, w_ih);
    return batched ? s : s.expand_dims(0);
  };
  const bool lstm = mode_ == Mode::LSTM;
  const Recurrence r{mode_, hidden_, false, bias_, 0};
  auto [y, h1, c1] =
      run_direction(r, x.expand_dims(0), w_ih, parameter("weight_hh"), bias_ ? parameter("bias_ih") : Array(),
                    bias_ ? parameter("bias_hh") : Array(), Array(), state(h, "h"), lstm ? state(c, "c") : Array());
  if (!batched) return {h1.squeeze({0}), lstm ? c1.squeeze({0}) : Array()};
  return {h1, c1};
}

RNNCell::RNNCell(int64_t input_size, int64_t hidden_size, bool bias, std::string nonlinearity, DType dtype,
                 std::optional<Device> device)
    : RNNCellBase(rnn_mode(nonlinearity, "RNNCell"), input_size, hidden_size, bias, dtype, device) {}

Array RNNCell::forward(const Array& input, const Array& h) { return step(input, h, Array()).first; }

LSTMCell::LSTMCell(int64_t input_size, int64_t hidden_size, bool bias, DType dtype, std::optional<Device> device)
    : RNNCellBase(Mode::LSTM, input_size, hidden_size, bias, dtype, device) {}

std::pair<Array, Array> LSTMCell::forward(const Array& input, const Array& h, const Array& c) {
  return step(input, h, c);
}

GRUCell::GRUCell(int64_t input_size, int64_t hidden_size, bool bias, DType dtype, std::optional<Device> device)
    : RNNCellBase(Mode::GRU, input_size, hidden_size, bias, dtype, device) {}

Array GRUCell::forward(const Array& input, const Array& h) { return step(input, h, Array()).first; }

}  // namespace kiln::nn
