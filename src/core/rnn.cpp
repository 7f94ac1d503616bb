// Recurrent-network primitives (kiln/rnn.hpp): the operands' checks and the backend's engine (Backend::rnn:
// cuDNN's RNN on a GPU). No reference here: the layers (nn::RNN/LSTM/GRU) run theirs, made of kiln's ops, when no
// engine runs a problem.
#include "kiln/rnn.hpp"

#include <mutex>
#include <string>

#include "core/autograd.hpp"
#include "core/backend.hpp"
#include "kiln/ops.hpp"

namespace kiln {

namespace {

std::mutex g_mutex;
RnnStats g_stats;

void count(bool ran, bool forward, const detail::RnnCall& call) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (!ran) {
    ++g_stats.declined;
    g_stats.refusal = call.refusal;
  } else {
    ++(forward ? g_stats.forward : g_stats.backward);
    if (call.packed) ++g_stats.packed;
  }
}

detail::RnnCall make_call(detail::RnnKind kind, const RnnParams& p, Device device, DType dtype) {
  detail::RnnCall call;
  call.kind = kind, call.mode = p.mode, call.hidden = p.hidden_size, call.layers = p.num_layers;
  call.bidirectional = p.bidirectional, call.bias = p.bias, call.device = device, call.dtype = dtype;
  return call;
}

/// The weight space passed in, when it is one: a contiguous array of the weights' dtype and device.
const Array* space_of(const Array& space, const Array& x) {
  return space.defined() && space.is_contiguous() && space.dtype() == x.dtype() && space.device() == x.device()
             ? &space
             : nullptr;
}

void require(bool ok, const char* op, const std::string& what) {
  if (!ok) throw ShapeError(std::string(op) + ": " + what);
}

/// Checks x, the states and the weights against the parameters (PyTorch's layout, kiln/rnn.hpp).
void check(const char* op, const Array& x, const Array& hx, const Array& cx, const std::vector<Array>& weights,
           const RnnParams& p) {
  require(p.hidden_size > 0 && p.num_layers > 0, op, "hidden_size and num_layers must be positive");
  require(x.defined() && x.ndim() == 3, op,
          "x must be 3-d (sequence, batch, features), got " + (x.defined() ? shape_str(x.shape()) : "undefined"));
  if (!is_floating(x.dtype()))
    throw DTypeError(std::string(op) + ": x must be floating, got " + std::string(dtype_name(x.dtype())));
  const int64_t dirs = p.bidirectional ? 2 : 1, g = rnn_gates(p.mode), h = p.hidden_size;
  const Shape state{p.num_layers * dirs, x.shape(1), h};
  require(hx.defined() && hx.shape() == state, op,
          "hx must have shape " + shape_str(state) + " (layers * directions, batch, hidden), got " +
              (hx.defined() ? shape_str(hx.shape()) : "undefined"));
  if (p.mode == RnnMode::Lstm)
    require(cx.defined() && cx.shape() == state, op,
            "cx must have shape " + shape_str(state) + ", got " + (cx.defined() ? shape_str(cx.shape()) : "undefined"));
  const size_t per = p.bias ? 4 : 2;
  require(weights.size() == per * static_cast<size_t>(p.num_layers * dirs), op,
          "expected " + std::to_string(per * static_cast<size_t>(p.num_layers * dirs)) +
              " weights (weight_ih, weight_hh" + (p.bias ? ", bias_ih, bias_hh" : "") +
              " per layer and direction), got " + std::to_string(weights.size()));
  for (int64_t layer = 0; layer < p.num_layers; ++layer) {
    const int64_t in = layer == 0 ? x.shape(2) : h * dirs;
    for (int64_t d = 0; d < dirs; ++d) {
      const size_t base = per * static_cast<size_t>(layer * dirs + d);
      const std::string name = "layer " + std::to_string(layer) + (d ? " reverse" : "");
      const std::vector<Shape> want = p.bias ? std::vector<Shape>{{g * h, in}, {g * h, h}, {g * h}, {g * h}}
                                             : std::vector<Shape>{{g * h, in}, {g * h, h}};
      for (size_t i = 0; i < want.size(); ++i) {
        const Array& w = weights[base + i];
        require(w.defined() && w.shape() == want[i], op,
                name + " weight " + std::to_string(i) + " must have shape " + shape_str(want[i]) + ", got " +
                    (w.defined() ? shape_str(w.shape()) : "undefined"));
        if (w.dtype() != x.dtype())
          throw DTypeError(std::string(op) + ": " + name + " weight " + std::to_string(i) + " is " +
                           std::string(dtype_name(w.dtype())) + " but x is " + std::string(dtype_name(x.dtype())));
        if (w.device() != x.device())
          throw DeviceError(std::string(op) + ": " + name + " weight " + std::to_string(i) + " is on " +
                            w.device().str() + " but x on " + x.device().str());
      }
    }
  }
  for (const Array* s : {&hx, &cx}) {
    if (!s->defined()) continue;
    if (s->dtype() != x.dtype())
      throw DTypeError(std::string(op) + ": the states must have x's dtype " + std::string(dtype_name(x.dtype())));
    if (s->device() != x.device())
      throw DeviceError(std::string(op) + ": the states are on " + s->device().str() + " but x on " + x.device().str());
  }
}

}  // namespace

int64_t rnn_gates(RnnMode mode) {
  switch (mode) {
    case RnnMode::Lstm:
      return 4;
    case RnnMode::Gru:
      return 3;
    default:
      return 1;
  }
}

std::optional<RnnWeightLayout> rnn_weight_layout(int64_t input_size, const RnnParams& params, DType dtype,
                                                 Device device) {
  if (input_size <= 0 || params.hidden_size <= 0 || params.num_layers <= 0)
    throw ValueError("rnn_weight_layout: input_size, hidden_size and num_layers must be positive, got " +
                     std::to_string(input_size) + ", " + std::to_string(params.hidden_size) + " and " +
                     std::to_string(params.num_layers));
  detail::RnnCall call = make_call(detail::RnnKind::Layout, params, device, dtype);
  call.input = input_size;
  if (!detail::backend_for(device).rnn(call)) return std::nullopt;
  return RnnWeightLayout{call.layout_size, std::move(call.layout_offsets)};
}

std::optional<RnnForwardOutput> rnn_forward(const Array& x, const Array& hx, const Array& cx,
                                            const std::vector<Array>& weights, const RnnParams& params, bool training,
                                            const Array& weight_space) {
  constexpr const char* op = "rnn_forward";
  check(op, x, hx, cx, weights, params);
  for (const Array* a : {&x, &hx, &cx})
    if (a->defined()) detail::reject_grad({a}, op, "use nn::RNN / nn::LSTM / nn::GRU, which record the gradients");
  for (const Array& w : weights) detail::reject_grad({&w}, op, "use nn::RNN / nn::LSTM / nn::GRU, which record the gradients");
  std::vector<Array> ws;
  for (const Array& w : weights) ws.push_back(w.contiguous());
  const Array xc = x.contiguous(), hc = hx.contiguous(), cc = cx.defined() ? cx.contiguous() : cx;
  detail::RnnCall call = make_call(detail::RnnKind::Forward, params, x.device(), x.dtype());
  call.training = training, call.input = x.shape(2);
  call.x = &xc, call.hx = &hc, call.cx = &cc, call.weights = &ws, call.weight_space = space_of(weight_space, x);
  // y, hy and cy as views of one array: the layers return it as their autograd node's one result without a copy.
  const int64_t dirs = params.bidirectional ? 2 : 1, ny = x.shape(0) * x.shape(1) * params.hidden_size * dirs;
  const int64_t nh = hx.size(), states = params.mode == RnnMode::Lstm ? 2 : 1;
  const Array packed = empty({ny + states * nh}, x.dtype(), x.device());
  call.y = packed.slice(0, 0, ny).reshape({x.shape(0), x.shape(1), params.hidden_size * dirs});
  call.hy = packed.slice(0, ny, ny + nh).reshape(hx.shape());
  if (params.mode == RnnMode::Lstm) call.cy = packed.slice(0, ny + nh, ny + 2 * nh).reshape(hx.shape());
  const bool ran = x.size() > 0 && detail::backend_for(x.device()).rnn(call);
  if (!ran && call.refusal.empty()) call.refusal = "no recurrent-network engine on " + x.device().str();
  count(ran, true, call);
  if (!ran) return std::nullopt;
  return RnnForwardOutput{call.y, call.hy, call.cy, call.reserve, packed};
}

std::optional<RnnGrads> rnn_backward(const Array& x, const Array& hx, const Array& cx,
                                     const std::vector<Array>& weights, const Array& y, const Array& dy,
                                     const Array& dhy, const Array& dcy, const Array& reserve, const RnnParams& params,
                                     const Array& weight_space) {
  constexpr const char* op = "rnn_backward";
  check(op, x, hx, cx, weights, params);
  const int64_t dirs = params.bidirectional ? 2 : 1;
  const Shape yshape{x.shape(0), x.shape(1), params.hidden_size * dirs};
  require(y.defined() && y.shape() == yshape && dy.defined() && dy.shape() == yshape, op,
          "y and dy must have shape " + shape_str(yshape));
  require(reserve.defined(), op, "reserve must be a training rnn_forward's reserve");
  for (const Array* s : {&dhy, &dcy})
    require(!s->defined() || s->shape() == hx.shape(), op, "dhy and dcy must have hx's shape " + shape_str(hx.shape()));
  std::vector<Array> ws;
  for (const Array& w : weights) ws.push_back(w.contiguous());
  const Array xc = x.contiguous(), hc = hx.contiguous(), cc = cx.defined() ? cx.contiguous() : cx;
  const Array yc = y.contiguous(), dyc = dy.astype(x.dtype()).contiguous();
  const Array dhc = dhy.defined() ? dhy.astype(x.dtype()).contiguous() : dhy;
  const Array dcc = dcy.defined() ? dcy.astype(x.dtype()).contiguous() : dcy;
  detail::RnnCall call = make_call(detail::RnnKind::Backward, params, x.device(), x.dtype());
  call.training = true, call.input = x.shape(2);
  call.x = &xc, call.hx = &hc, call.cx = &cc, call.weights = &ws, call.weight_space = space_of(weight_space, x);
  call.y = yc, call.reserve = reserve, call.dy = &dyc, call.dhy = &dhc, call.dcy = &dcc;
  call.dx = empty(x.shape(), x.dtype(), x.device());
  call.dhx = empty(hx.shape(), x.dtype(), x.device());
  if (params.mode == RnnMode::Lstm) call.dcx = empty(hx.shape(), x.dtype(), x.device());
  const bool ran = detail::backend_for(x.device()).rnn(call);
  if (!ran && call.refusal.empty()) call.refusal = "no recurrent-network engine on " + x.device().str();
  count(ran, false, call);
  if (!ran) return std::nullopt;
  if (call.dweights.size() != ws.size())
    throw DeviceError("rnn_backward: the engine returned " + std::to_string(call.dweights.size()) +
                      " weight gradients for " + std::to_string(ws.size()) + " weights; please report it");
  return RnnGrads{call.dx, call.dhx, call.dcx, call.dweights};
}

RnnStats rnn_stats() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_stats;
}

}  // namespace kiln
