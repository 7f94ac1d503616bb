// The kiln side of bench/peers/rnn_equivalence.py: runs nn::LSTM, GRU and RNN (2 layers, bidirectional, given
// initial states; an LSTM with proj_size, GRU batch_first, RNN relu) and an LSTMCell on a device, and writes per case
// one safetensors file with the parameters ("param.<PyTorch name>"), the inputs ("input.x", "input.h0", "input.c0"),
// the loss weights
// ("loss.gy", "loss.gh", "loss.gc": L = sum(y gy) + sum(h_n gh) + sum(c_n gc)), the outputs ("out.y", "out.hn",
// "out.cn") and the gradients of L ("grad.x", "grad.h0", "grad.c0", "grad.<param>"); the metadata holds the
// layer's options. The script loads the parameters into torch.nn's layer and compares outputs and gradients.
//
//   build/cuda/bench/rnn_equivalence OUTDIR [cpu|cuda:0] [float32|float64]
//   python3 bench/peers/rnn_equivalence.py OUTDIR
#include <fmt/core.h>

#include <exception>
#include <filesystem>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "kiln/kiln.hpp"

using namespace kiln;

namespace {

struct Case {
  std::string name, mode;  // mode: lstm, gru, rnn_tanh, rnn_relu, lstm_cell
  bool batch_first = false;
  int64_t proj_size = 0;
};

void write_case(const std::string& dir, const Case& c, Device d, DType dt) {
  const int64_t input = 8, hidden = 16, layers = 2, steps = 10, batch = 4;
  const bool cell = c.mode == "lstm_cell", lstm = c.mode == "lstm" || cell;
  random::seed(1234);
  std::shared_ptr<nn::Module> m;
  const nn::RNNOptions o{.num_layers = layers,
                         .nonlinearity = c.mode == "rnn_relu" ? "relu" : "tanh",
                         .batch_first = c.batch_first,
                         .bidirectional = true,
                         .proj_size = c.proj_size,
                         .dtype = dt,
                         .device = d};
  if (c.mode == "lstm") m = std::make_shared<nn::LSTM>(input, hidden, o);
  if (c.mode == "gru") m = std::make_shared<nn::GRU>(input, hidden, o);
  if (c.mode == "rnn_tanh" || c.mode == "rnn_relu") m = std::make_shared<nn::RNN>(input, hidden, o);
  if (cell) m = std::make_shared<nn::LSTMCell>(input, hidden, true, dt, d);
  const Shape x_shape = cell            ? Shape{batch, input}
                        : c.batch_first ? Shape{batch, steps, input}
                                        : Shape{steps, batch, input};
  const Shape s_shape = cell ? Shape{batch, hidden} : Shape{layers * 2, batch, hidden};
  const Shape h_shape = c.proj_size ? Shape{layers * 2, batch, c.proj_size} : s_shape;
  Array x = random::normal(x_shape, 0.0, 1.0, dt, d).set_requires_grad();
  Array h0 = random::normal(h_shape, 0.0, 1.0, dt, d).set_requires_grad();
  Array c0 = lstm ? random::normal(s_shape, 0.0, 1.0, dt, d).set_requires_grad() : Array();
  Array y, hn, cn;
  if (c.mode == "lstm") std::tie(y, hn, cn) = nn::call(dynamic_cast<nn::LSTM&>(*m), x, h0, c0);
  if (c.mode == "gru") std::tie(y, hn) = nn::call(dynamic_cast<nn::GRU&>(*m), x, h0);
  if (c.mode == "rnn_tanh" || c.mode == "rnn_relu") std::tie(y, hn) = nn::call(dynamic_cast<nn::RNN&>(*m), x, h0);
  if (cell) {
    std::tie(hn, cn) = nn::call(dynamic_cast<nn::LSTMCell&>(*m), x, h0, c0);
    y = hn;
  }
  const Array gy = random::normal(y.shape(), 0.0, 1.0, dt, d), gh = random::normal(hn.shape(), 0.0, 1.0, dt, d);
  const Array gc = lstm ? random::normal(cn.shape(), 0.0, 1.0, dt, d) : Array();
  Array loss = sum(y * gy) + sum(hn * gh);
  if (lstm) loss = loss + sum(cn * gc);
  loss.backward();

  nn::StateDict out;
  for (const auto& [name, p] : m->named_parameters()) {
    out.insert("param." + name, p);
    out.insert("grad." + name, p.grad());
  }
  out.insert("input.x", x.detach());
  out.insert("input.h0", h0.detach());
  out.insert("loss.gy", gy);
  out.insert("loss.gh", gh);
  out.insert("out.y", y.detach());
  out.insert("out.hn", hn.detach());
  out.insert("grad.x", x.grad());
  out.insert("grad.h0", h0.grad());
  if (lstm) {
    out.insert("input.c0", c0.detach());
    out.insert("loss.gc", gc);
    out.insert("out.cn", cn.detach());
    out.insert("grad.c0", c0.grad());
  }
  const std::string path = dir + "/" + c.name + ".safetensors";
  nn::save_safetensors(path, out,
                       {{"mode", c.mode},
                        {"input_size", std::to_string(input)},
                        {"hidden_size", std::to_string(hidden)},
                        {"num_layers", std::to_string(layers)},
                        {"bidirectional", "1"},
                        {"batch_first", c.batch_first ? "1" : "0"},
                        {"proj_size", std::to_string(c.proj_size)},
                        {"device", d.str()},
                        {"dtype", std::string(dtype_name(dt))}});
  fmt::print("wrote {} ({} on {}, {})\n", path, m->name(), d.str(), dtype_name(dt));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    fmt::print(stderr, "usage: {} OUTDIR [cpu|cuda:N] [float32|float64]\n", argv[0]);
    return 2;
  }
  try {
    // The peer turns TF32 off in PyTorch (cuDNN's RNN would use it in float32, as both libraries allow by default).
    kiln::cudnn::set_allow_tf32(false);
    const std::string dir = argv[1];
    std::filesystem::create_directories(dir);
    const Device d = argc > 2 ? parse_device(argv[2]) : try_gpu();
    const DType dt = argc > 3 ? parse_dtype(argv[3]) : float32;
    for (const Case& c : {Case{"lstm", "lstm"}, Case{"lstm_proj", "lstm", false, 6}, Case{"gru", "gru", true},
                          Case{"rnn_tanh", "rnn_tanh"}, Case{"rnn_relu", "rnn_relu"}, Case{"lstm_cell", "lstm_cell"}})
      write_case(dir, c, d, dt);
  } catch (const std::exception& e) {
    fmt::print(stderr, "rnn_equivalence: {}\n", e.what());
    return 1;
  }
  return 0;
}
