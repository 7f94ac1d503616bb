// The layers of kiln::nn beyond the basic ones of nn.cpp, as torch.nn names them: convolution, pooling, batch
// and RMS normalisation, attention and transformer layers, recurrent layers and cells, ModuleList / ModuleDict,
// and their functional forms (kiln.nn.conv2d, scaled_dot_product_attention...). Layers with several inputs or
// outputs take PyTorch's arguments and return PyTorch's tuples; with one input they are Sequential steps too.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <memory>
#include <string>
#include <type_traits>
#include <utility>

#include "bindings.hpp"
#include "convert.hpp"
#include "typed.hpp"

namespace kiln::python {
namespace {

using Pair = std::pair<int64_t, int64_t>;

// torch's _pair: an int stands for (n, n).
Pair to_pair(nb::handle obj, const char* what) {
  const Shape s = to_shape(obj);
  if (s.size() == 1) return {s[0], s[0]};
  if (s.size() == 2) return {s[0], s[1]};
  throw nb::value_error((std::string("kiln.nn: ") + what + " is an int or a pair of ints, got " +
                         nb::cast<std::string>(nb::repr(obj)))
                            .c_str());
}

// An optional array argument: None is C++'s undefined Array (no mask, zero initial state).
Array optional_array(nb::handle obj) { return obj.is_none() ? Array() : to_array(obj); }

nb::object array_or_none(const Array& a) { return a.defined() ? nb::cast(a) : nb::none(); }

DType dtype_or_default(DTypeLike dtype) {
  auto t = to_optional_dtype(dtype);
  return t ? *t : kDefaultFloat;
}

// Conv2d's padding: an int, a pair, or torch's "valid" (none) / "same" (the output keeps the input's size; stride
// 1 and an even total padding, which kiln's symmetric padding can give).
Pair conv_padding(nb::handle padding, Pair kernel, Pair stride, Pair dilation) {
  if (!nb::isinstance<nb::str>(padding)) return to_pair(padding, "padding");
  const std::string mode = nb::cast<std::string>(padding);
  if (mode == "valid") return {0, 0};
  if (mode != "same")
    throw nb::value_error(("kiln.nn.Conv2d: padding '" + mode + "' is none of 'valid', 'same', an int, a pair").c_str());
  if (stride != Pair{1, 1})
    throw nb::value_error("kiln.nn.Conv2d: padding='same' needs stride=1 (as PyTorch); pass the padding as numbers");
  const int64_t total_h = dilation.first * (kernel.first - 1), total_w = dilation.second * (kernel.second - 1);
  if (total_h % 2 || total_w % 2)
    throw nb::value_error("kiln.nn.Conv2d: padding='same' with an even kernel pads one side more, which kiln's "
                          "symmetric padding cannot; use an odd kernel or pad the input with kiln.pad");
  return {total_h / 2, total_w / 2};
}

// torch.nn.TransformerEncoderLayer's constructor arguments, shared by the two layer kinds.
nn::TransformerLayerOptions layer_options(int64_t d_model, int64_t nhead, int64_t dim_feedforward, double dropout,
                                          const std::string& activation, double eps, bool batch_first,
                                          bool norm_first, bool bias, DTypeLike dtype, DeviceLike device) {
  return {d_model, nhead, dim_feedforward, dropout, activation, eps, batch_first, norm_first, bias,
          dtype_or_default(dtype), to_optional_device(device)};
}

// The layers keep their options, so that TransformerEncoder(layer, n) can make n layers like it (PyTorch
// deep-copies the given layer n times).
struct EncoderLayer : nn::TransformerEncoderLayer {
  explicit EncoderLayer(const nn::TransformerLayerOptions& o) : nn::TransformerEncoderLayer(o), options(o) {}
  nn::TransformerLayerOptions options;
};
struct DecoderLayer : nn::TransformerDecoderLayer {
  explicit DecoderLayer(const nn::TransformerLayerOptions& o) : nn::TransformerDecoderLayer(o), options(o) {}
  nn::TransformerLayerOptions options;
};

// The stack starts with copies of `layer`'s parameters in every layer, and `norm`'s in the final norm, as
// PyTorch's deep copies do.
void copy_into_stack(nn::Module& stack, const nn::Module& layer, int64_t num_layers, const nn::LayerNorm* norm) {
  nn::StateDict state;
  for (int64_t i = 0; i < num_layers; ++i)
    for (const auto& [name, value] : layer.state_dict()) state.insert("layers." + std::to_string(i) + "." + name, value);
  if (norm)
    for (const auto& [name, value] : norm->state_dict()) state.insert("norm." + name, value);
  stack.load_state_dict(state, true);
}

std::shared_ptr<nn::Module> child(const nn::Module& m, size_t i) { return m.named_children().at(i).second; }

int64_t list_index(const nn::ModuleList& list, int64_t i) {
  const auto n = static_cast<int64_t>(list.size());
  if (i < -n || i >= n)
    throw nb::index_error(("kiln.nn.ModuleList: index " + std::to_string(i) + " out of range for " +
                           std::to_string(n) + " modules")
                              .c_str());
  return i < 0 ? i + n : i;
}

void bind_containers(nb::module_& nn) {
  nb::class_<nn::ModuleList, nn::Module>(nn, "ModuleList", "Modules held in order as '0', '1', ... (no forward).")
      .def("__init__", [](nn::ModuleList* self, nb::handle modules) {
        new (self) nn::ModuleList();
        if (!modules.is_none())
          for (nb::handle m : modules) self->push_back(nb::cast<std::shared_ptr<nn::Module>>(m));
      }, "modules"_a = nb::none())
      .def("append", [](nn::ModuleList& self, std::shared_ptr<nn::Module> m) -> nn::ModuleList& {
        self.push_back(std::move(m));
        return self;
      }, "module"_a, nb::rv_policy::reference)
      .def("extend", [](nn::ModuleList& self, nb::handle modules) -> nn::ModuleList& {
        for (nb::handle m : modules) self.push_back(nb::cast<std::shared_ptr<nn::Module>>(m));
        return self;
      }, "modules"_a, nb::rv_policy::reference)
      .def("__len__", &nn::ModuleList::size)
      .def("__getitem__", [](const nn::ModuleList& self, int64_t i) {
        return child(self, static_cast<size_t>(list_index(self, i)));
      }, "index"_a)
      .def("__iter__", [](const nn::ModuleList& self) {
        nb::list out;
        for (const auto& [key, m] : self.named_children()) out.append(nb::cast(m));
        return nb::iter(out);
      });
  nb::class_<nn::ModuleDict, nn::Module>(nn, "ModuleDict", "Modules by name in insertion order (no forward).")
      .def("__init__", [](nn::ModuleDict* self, nb::handle modules) {
        new (self) nn::ModuleDict();
        if (modules.is_none()) return;
        nb::object items = nb::hasattr(modules, "items") ? modules.attr("items")() : nb::borrow(modules);
        for (nb::handle kv : items)
          self->insert(nb::cast<std::string>(kv[0]), nb::cast<std::shared_ptr<nn::Module>>(kv[1]));
      }, "modules"_a = nb::none())
      .def("__getitem__", [](const nn::ModuleDict& self, const std::string& key) {
        if (!self.contains(key)) throw nb::key_error(key.c_str());
        for (const auto& [name, m] : self.named_children())
          if (name == key) return m;
        return std::shared_ptr<nn::Module>();
      }, "key"_a)
      .def("__setitem__", &nn::ModuleDict::insert, "key"_a, "module"_a)
      .def("__contains__", &nn::ModuleDict::contains, "key"_a)
      .def("__len__", &nn::ModuleDict::size)
      .def("__iter__", [](const nn::ModuleDict& self) { return nb::iter(nb::cast(self.keys())); })
      .def("keys", &nn::ModuleDict::keys)
      .def("values", [](const nn::ModuleDict& self) {
        nb::list out;
        for (const auto& [key, m] : self.named_children()) out.append(nb::cast(m));
        return out;
      })
      .def("items", [](const nn::ModuleDict& self) { return self.named_children(); });
}

void bind_conv_layers(nb::module_& nn) {
  nb::class_<nn::Conv2d, nn::Module>(nn, "Conv2d", "torch.nn.Conv2d over (N, C, H, W) inputs.")
      .def("__init__", [](nn::Conv2d* self, int64_t in, int64_t out, nb::handle kernel_size, nb::handle stride,
                          nb::handle padding, nb::handle dilation, int64_t groups, bool bias, DTypeLike dtype,
                          DeviceLike device) {
        nn::Conv2dOptions o;
        const Pair kernel = to_pair(kernel_size, "kernel_size");
        o.stride = to_pair(stride, "stride");
        o.dilation = to_pair(dilation, "dilation");
        o.padding = conv_padding(padding, kernel, o.stride, o.dilation);
        o.groups = groups;
        o.bias = bias;
        new (self) nn::Conv2d(in, out, kernel, o, dtype_or_default(dtype), to_optional_device(device));
      }, "in_channels"_a, "out_channels"_a, "kernel_size"_a, "stride"_a = 1, "padding"_a = 0, "dilation"_a = 1,
         "groups"_a = 1, "bias"_a = true, "dtype"_a = nb::none(), "device"_a = nb::none())
      .def_prop_ro("in_channels", &nn::Conv2d::in_channels)
      .def_prop_ro("out_channels", &nn::Conv2d::out_channels)
      .def_prop_ro("kernel_size", &nn::Conv2d::kernel_size)
      .def_prop_ro("stride", [](const nn::Conv2d& c) { return c.options().stride; })
      .def_prop_ro("padding", [](const nn::Conv2d& c) { return c.options().padding; })
      .def_prop_ro("dilation", [](const nn::Conv2d& c) { return c.options().dilation; })
      .def_prop_ro("groups", [](const nn::Conv2d& c) { return c.options().groups; });
  nb::class_<nn::MaxPool2d, nn::Module>(nn, "MaxPool2d")
      .def("__init__", [](nn::MaxPool2d* self, nb::handle kernel, nb::handle stride, nb::handle padding) {
        std::optional<Pair> s;
        if (!stride.is_none()) s = to_pair(stride, "stride");
        new (self) nn::MaxPool2d(to_pair(kernel, "kernel_size"), s, to_pair(padding, "padding"));
      }, "kernel_size"_a, "stride"_a = nb::none(), "padding"_a = 0);
  nb::class_<nn::AvgPool2d, nn::Module>(nn, "AvgPool2d", "Average pooling; padding counts as zeros.")
      .def("__init__", [](nn::AvgPool2d* self, nb::handle kernel, nb::handle stride, nb::handle padding) {
        std::optional<Pair> s;
        if (!stride.is_none()) s = to_pair(stride, "stride");
        new (self) nn::AvgPool2d(to_pair(kernel, "kernel_size"), s, to_pair(padding, "padding"));
      }, "kernel_size"_a, "stride"_a = nb::none(), "padding"_a = 0);
  nb::class_<nn::AdaptiveAvgPool2d, nn::Module>(nn, "AdaptiveAvgPool2d")
      .def("__init__", [](nn::AdaptiveAvgPool2d* self, nb::handle size) {
        new (self) nn::AdaptiveAvgPool2d(to_pair(size, "output_size"));
      }, "output_size"_a);
  nb::class_<nn::BatchNorm2d, nn::Module>(nn, "BatchNorm2d",
                                          "torch.nn.BatchNorm2d: buffers running_mean, running_var, "
                                          "num_batches_tracked; batch statistics in train(), running ones in eval().")
      .def("__init__", [](nn::BatchNorm2d* self, int64_t features, double eps, double momentum, bool affine,
                          DTypeLike dtype, DeviceLike device) {
        new (self) nn::BatchNorm2d(features, eps, momentum, affine, dtype_or_default(dtype), to_optional_device(device));
      }, "num_features"_a, "eps"_a = 1e-5, "momentum"_a = 0.1, "affine"_a = true, "dtype"_a = nb::none(),
         "device"_a = nb::none())
      .def_prop_ro("num_features", &nn::BatchNorm2d::num_features)
      .def_prop_ro("eps", &nn::BatchNorm2d::eps);
  nb::class_<nn::RMSNorm, nn::Module>(nn, "RMSNorm")
      .def("__init__", [](nn::RMSNorm* self, ShapeLike shape, std::optional<double> eps, bool affine, DTypeLike dtype,
                          DeviceLike device) {
        new (self) nn::RMSNorm(to_shape(shape), eps, affine, dtype_or_default(dtype), to_optional_device(device));
      }, "normalized_shape"_a, "eps"_a = nb::none(), "elementwise_affine"_a = true, "dtype"_a = nb::none(),
         "device"_a = nb::none());
  nb::class_<nn::Unflatten, nn::Module>(nn, "Unflatten")
      .def("__init__", [](nn::Unflatten* self, int64_t dim, ShapeLike sizes) {
        new (self) nn::Unflatten(dim, to_shape(sizes));
      }, "dim"_a, "unflattened_size"_a);
  nb::class_<nn::RotaryEmbedding, nn::Module>(nn, "RotaryEmbedding",
                                              "LLaMA's rotary position embedding of the last axis (rotate_half).")
      .def(nb::init<int64_t, double>(), "dim"_a, "base"_a = 10000.0)
      .def("rotate", [](const nn::RotaryEmbedding& r, const Array& x, int64_t offset) { return r.rotate(x, offset); },
           "x"_a, "offset"_a = 0);
}

void bind_attention(nb::module_& nn) {
  nb::class_<nn::MultiheadAttention, nn::Module>(nn, "MultiheadAttention",
                                                 "torch.nn.MultiheadAttention; m(query, key, value, ...) returns "
                                                 "(output, weights or None). Boolean masks: True = not allowed.")
      .def("__init__", [](nn::MultiheadAttention* self, int64_t embed_dim, int64_t num_heads, double dropout, bool bias,
                          bool batch_first, DTypeLike dtype, DeviceLike device) {
        new (self) nn::MultiheadAttention(embed_dim, num_heads, dropout, bias, batch_first, dtype_or_default(dtype),
                                          to_optional_device(device));
      }, "embed_dim"_a, "num_heads"_a, "dropout"_a = 0.0, "bias"_a = true, "batch_first"_a = false,
         "dtype"_a = nb::none(), "device"_a = nb::none());
  auto mha = [](nn::MultiheadAttention& self, const Array& q, ArrayLike k, ArrayLike v, ArrayLike key_padding_mask,
                bool need_weights, ArrayLike attn_mask, bool average, bool is_causal) {
    auto [out, weights] = nn::call(self, q, to_array(k), to_array(v), optional_array(key_padding_mask), need_weights,
                                   optional_array(attn_mask), average, is_causal);
    return nb::make_tuple(out, array_or_none(weights));
  };
  for (const char* name : {"forward", "__call__"})
    nb::type<nn::MultiheadAttention>().attr(name) = nb::cpp_function(
        mha, nb::is_method(), nb::name(name), "query"_a, "key"_a, "value"_a, "key_padding_mask"_a = nb::none(),
        "need_weights"_a = true, "attn_mask"_a = nb::none(), "average_attn_weights"_a = true, "is_causal"_a = false);

  auto encoder_forward = [](nn::Module& self, const Array& src, ArrayLike mask, ArrayLike padding, bool is_causal) {
    if (auto* layer = dynamic_cast<nn::TransformerEncoderLayer*>(&self))
      return nn::call(*layer, src, optional_array(mask), optional_array(padding), is_causal);
    return nn::call(dynamic_cast<nn::TransformerEncoder&>(self), src, optional_array(mask), optional_array(padding),
                    is_causal);
  };
  auto decoder_forward = [](nn::Module& self, const Array& tgt, ArrayLike memory, ArrayLike tgt_mask,
                            ArrayLike memory_mask, ArrayLike tgt_padding, ArrayLike memory_padding, bool tgt_is_causal) {
    const Array m = to_array(memory);
    if (auto* layer = dynamic_cast<nn::TransformerDecoderLayer*>(&self))
      return nn::call(*layer, tgt, m, optional_array(tgt_mask), optional_array(memory_mask),
                      optional_array(tgt_padding), optional_array(memory_padding), tgt_is_causal);
    return nn::call(dynamic_cast<nn::TransformerDecoder&>(self), tgt, m, optional_array(tgt_mask),
                    optional_array(memory_mask), optional_array(tgt_padding), optional_array(memory_padding),
                    tgt_is_causal);
  };
  auto layer_init = [](auto* self, int64_t d_model, int64_t nhead, int64_t dim_feedforward, double dropout,
                       const std::string& activation, double eps, bool batch_first, bool norm_first, bool bias,
                       DTypeLike dtype, DeviceLike device) {
    using Layer = std::remove_pointer_t<decltype(self)>;
    new (self) Layer(layer_options(d_model, nhead, dim_feedforward, dropout, activation, eps, batch_first, norm_first,
                                   bias, dtype, device));
  };
  nb::class_<nn::TransformerEncoderLayer, nn::Module>(nn, "_TransformerEncoderLayerBase");
  nb::class_<EncoderLayer, nn::TransformerEncoderLayer>(nn, "TransformerEncoderLayer",
                                                        "torch.nn.TransformerEncoderLayer (its children and defaults).")
      .def("__init__", [layer_init](EncoderLayer* self, int64_t d, int64_t h, int64_t ff, double p, const std::string& a,
                                    double eps, bool bf, bool nf, bool bias, DTypeLike dt, DeviceLike dev) {
        layer_init(self, d, h, ff, p, a, eps, bf, nf, bias, dt, dev);
      }, "d_model"_a, "nhead"_a, "dim_feedforward"_a = 2048, "dropout"_a = 0.1, "activation"_a = "relu",
         "layer_norm_eps"_a = 1e-5, "batch_first"_a = false, "norm_first"_a = false, "bias"_a = true,
         "dtype"_a = nb::none(), "device"_a = nb::none());
  nb::class_<nn::TransformerDecoderLayer, nn::Module>(nn, "_TransformerDecoderLayerBase");
  nb::class_<DecoderLayer, nn::TransformerDecoderLayer>(nn, "TransformerDecoderLayer",
                                                        "torch.nn.TransformerDecoderLayer (its children and defaults).")
      .def("__init__", [layer_init](DecoderLayer* self, int64_t d, int64_t h, int64_t ff, double p, const std::string& a,
                                    double eps, bool bf, bool nf, bool bias, DTypeLike dt, DeviceLike dev) {
        layer_init(self, d, h, ff, p, a, eps, bf, nf, bias, dt, dev);
      }, "d_model"_a, "nhead"_a, "dim_feedforward"_a = 2048, "dropout"_a = 0.1, "activation"_a = "relu",
         "layer_norm_eps"_a = 1e-5, "batch_first"_a = false, "norm_first"_a = false, "bias"_a = true,
         "dtype"_a = nb::none(), "device"_a = nb::none());
  nb::class_<nn::TransformerEncoder, nn::Module>(nn, "TransformerEncoder",
                                                 "num_layers copies of encoder_layer ('layers.0', ...) and an optional "
                                                 "final LayerNorm, as torch.nn.TransformerEncoder.")
      .def("__init__", [](nn::TransformerEncoder* self, const EncoderLayer& layer, int64_t num_layers,
                          const nn::LayerNorm* norm) {
        new (self) nn::TransformerEncoder(layer.options, num_layers, norm != nullptr);
        copy_into_stack(*self, layer, num_layers, norm);
      }, "encoder_layer"_a, "num_layers"_a, "norm"_a.none() = nb::none());
  nb::class_<nn::TransformerDecoder, nn::Module>(nn, "TransformerDecoder",
                                                 "num_layers copies of decoder_layer and an optional final LayerNorm, "
                                                 "as torch.nn.TransformerDecoder.")
      .def("__init__", [](nn::TransformerDecoder* self, const DecoderLayer& layer, int64_t num_layers,
                          const nn::LayerNorm* norm) {
        new (self) nn::TransformerDecoder(layer.options, num_layers, norm != nullptr);
        copy_into_stack(*self, layer, num_layers, norm);
      }, "decoder_layer"_a, "num_layers"_a, "norm"_a.none() = nb::none());
  for (nb::handle cls : {nb::type<nn::TransformerEncoderLayer>(), nb::type<nn::TransformerEncoder>()}) {
    const bool layer = cls.is(nb::type<nn::TransformerEncoderLayer>());
    for (const char* name : {"forward", "__call__"})
      cls.attr(name) = nb::cpp_function(encoder_forward, nb::is_method(), nb::name(name), "src"_a,
                                        layer ? "src_mask"_a = nb::none() : "mask"_a = nb::none(),
                                        "src_key_padding_mask"_a = nb::none(), "is_causal"_a = false);
  }
  for (nb::handle cls : {nb::type<nn::TransformerDecoderLayer>(), nb::type<nn::TransformerDecoder>()})
    for (const char* name : {"forward", "__call__"})
      cls.attr(name) = nb::cpp_function(decoder_forward, nb::is_method(), nb::name(name), "tgt"_a, "memory"_a,
                                        "tgt_mask"_a = nb::none(), "memory_mask"_a = nb::none(),
                                        "tgt_key_padding_mask"_a = nb::none(),
                                        "memory_key_padding_mask"_a = nb::none(), "tgt_is_causal"_a = false);
}

nn::RNNOptions rnn_options(int64_t num_layers, const std::string& nonlinearity, bool bias, bool batch_first,
                           double dropout, bool bidirectional, int64_t proj_size, DTypeLike dtype, DeviceLike device) {
  return {num_layers, nonlinearity, bias, batch_first, dropout, bidirectional, proj_size, dtype_or_default(dtype),
          to_optional_device(device)};
}

void bind_recurrent(nb::module_& nn) {
  nb::class_<nn::RNNBase, nn::Module>(nn, "RNNBase")
      .def_prop_ro("input_size", &nn::RNNBase::input_size)
      .def_prop_ro("hidden_size", &nn::RNNBase::hidden_size)
      .def_prop_ro("num_layers", [](const nn::RNNBase& r) { return r.options().num_layers; })
      .def_prop_ro("bidirectional", [](const nn::RNNBase& r) { return r.options().bidirectional; })
      .def_prop_ro("batch_first", [](const nn::RNNBase& r) { return r.options().batch_first; });
  nb::class_<nn::RNN, nn::RNNBase>(nn, "RNN", "torch.nn.RNN: rnn(input, hx=None) -> (output, h_n).")
      .def("__init__", [](nn::RNN* self, int64_t in, int64_t hidden, int64_t layers, const std::string& nonlinearity,
                          bool bias, bool batch_first, double dropout, bool bidirectional, DTypeLike dtype,
                          DeviceLike device) {
        new (self) nn::RNN(in, hidden, rnn_options(layers, nonlinearity, bias, batch_first, dropout, bidirectional, 0,
                                                   dtype, device));
      }, "input_size"_a, "hidden_size"_a, "num_layers"_a = 1, "nonlinearity"_a = "tanh", "bias"_a = true,
         "batch_first"_a = false, "dropout"_a = 0.0, "bidirectional"_a = false, "dtype"_a = nb::none(),
         "device"_a = nb::none());
  nb::class_<nn::GRU, nn::RNNBase>(nn, "GRU", "torch.nn.GRU: gru(input, hx=None) -> (output, h_n).")
      .def("__init__", [](nn::GRU* self, int64_t in, int64_t hidden, int64_t layers, bool bias, bool batch_first,
                          double dropout, bool bidirectional, DTypeLike dtype, DeviceLike device) {
        new (self) nn::GRU(in, hidden, rnn_options(layers, "tanh", bias, batch_first, dropout, bidirectional, 0, dtype,
                                                   device));
      }, "input_size"_a, "hidden_size"_a, "num_layers"_a = 1, "bias"_a = true, "batch_first"_a = false,
         "dropout"_a = 0.0, "bidirectional"_a = false, "dtype"_a = nb::none(), "device"_a = nb::none());
  nb::class_<nn::LSTM, nn::RNNBase>(nn, "LSTM", "torch.nn.LSTM: lstm(input, (h0, c0)=None) -> (output, (h_n, c_n)).")
      .def("__init__", [](nn::LSTM* self, int64_t in, int64_t hidden, int64_t layers, bool bias, bool batch_first,
                          double dropout, bool bidirectional, int64_t proj_size, DTypeLike dtype, DeviceLike device) {
        new (self) nn::LSTM(in, hidden, rnn_options(layers, "tanh", bias, batch_first, dropout, bidirectional,
                                                    proj_size, dtype, device));
      }, "input_size"_a, "hidden_size"_a, "num_layers"_a = 1, "bias"_a = true, "batch_first"_a = false,
         "dropout"_a = 0.0, "bidirectional"_a = false, "proj_size"_a = 0, "dtype"_a = nb::none(),
         "device"_a = nb::none());
  auto one_state = [](nn::RNNBase& self, const Array& input, ArrayLike hx) {
    const Array h0 = optional_array(hx);
    std::pair<Array, Array> r = dynamic_cast<nn::RNN*>(&self)
                                    ? nn::call(static_cast<nn::RNN&>(self), input, h0)
                                    : nn::call(dynamic_cast<nn::GRU&>(self), input, h0);
    return nb::make_tuple(r.first, r.second);
  };
  auto lstm = [](nn::LSTM& self, const Array& input, nb::handle hx) {
    Array h0, c0;
    if (!hx.is_none()) {
      if (!nb::isinstance<nb::sequence>(hx) || nb::len(hx) != 2)
        throw nb::type_error("kiln.nn.LSTM: hx is None or a pair (h_0, c_0), as PyTorch's");
      h0 = to_array(hx[0]);
      c0 = to_array(hx[1]);
    }
    auto [out, h, c] = nn::call(self, input, h0, c0);
    return nb::make_tuple(out, nb::make_tuple(h, c));
  };
  for (const char* name : {"forward", "__call__"}) {
    for (nb::handle cls : {nb::type<nn::RNN>(), nb::type<nn::GRU>()})
      cls.attr(name) = nb::cpp_function(one_state, nb::is_method(), nb::name(name), "input"_a, "hx"_a = nb::none());
    nb::type<nn::LSTM>().attr(name) =
        nb::cpp_function(lstm, nb::is_method(), nb::name(name), "input"_a, "hx"_a = nb::none());
  }

  nb::class_<nn::RNNCellBase, nn::Module>(nn, "RNNCellBase");
  nb::class_<nn::RNNCell, nn::RNNCellBase>(nn, "RNNCell", "torch.nn.RNNCell: cell(input, hx=None) -> h'.")
      .def("__init__", [](nn::RNNCell* self, int64_t in, int64_t hidden, bool bias, const std::string& nonlinearity,
                          DTypeLike dtype, DeviceLike device) {
        new (self) nn::RNNCell(in, hidden, bias, nonlinearity, dtype_or_default(dtype), to_optional_device(device));
      }, "input_size"_a, "hidden_size"_a, "bias"_a = true, "nonlinearity"_a = "tanh", "dtype"_a = nb::none(),
         "device"_a = nb::none());
  nb::class_<nn::GRUCell, nn::RNNCellBase>(nn, "GRUCell", "torch.nn.GRUCell: cell(input, hx=None) -> h'.")
      .def("__init__", [](nn::GRUCell* self, int64_t in, int64_t hidden, bool bias, DTypeLike dtype, DeviceLike device) {
        new (self) nn::GRUCell(in, hidden, bias, dtype_or_default(dtype), to_optional_device(device));
      }, "input_size"_a, "hidden_size"_a, "bias"_a = true, "dtype"_a = nb::none(), "device"_a = nb::none());
  nb::class_<nn::LSTMCell, nn::RNNCellBase>(nn, "LSTMCell", "torch.nn.LSTMCell: cell(input, (h, c)=None) -> (h', c').")
      .def("__init__", [](nn::LSTMCell* self, int64_t in, int64_t hidden, bool bias, DTypeLike dtype,
                          DeviceLike device) {
        new (self) nn::LSTMCell(in, hidden, bias, dtype_or_default(dtype), to_optional_device(device));
      }, "input_size"_a, "hidden_size"_a, "bias"_a = true, "dtype"_a = nb::none(), "device"_a = nb::none());
  auto cell = [](nn::RNNCellBase& self, const Array& input, ArrayLike hx) {
    const Array h = optional_array(hx);
    if (auto* rnn = dynamic_cast<nn::RNNCell*>(&self)) return nn::call(*rnn, input, h);
    return nn::call(dynamic_cast<nn::GRUCell&>(self), input, h);
  };
  auto lstm_cell = [](nn::LSTMCell& self, const Array& input, nb::handle hx) {
    Array h, c;
    if (!hx.is_none()) {
      if (!nb::isinstance<nb::sequence>(hx) || nb::len(hx) != 2)
        throw nb::type_error("kiln.nn.LSTMCell: hx is None or a pair (h, c), as PyTorch's");
      h = to_array(hx[0]);
      c = to_array(hx[1]);
    }
    auto [h1, c1] = nn::call(self, input, h, c);
    return nb::make_tuple(h1, c1);
  };
  for (const char* name : {"forward", "__call__"}) {
    for (nb::handle cls : {nb::type<nn::RNNCell>(), nb::type<nn::GRUCell>()})
      cls.attr(name) = nb::cpp_function(cell, nb::is_method(), nb::name(name), "input"_a, "hx"_a = nb::none());
    nb::type<nn::LSTMCell>().attr(name) =
        nb::cpp_function(lstm_cell, nb::is_method(), nb::name(name), "input"_a, "hx"_a = nb::none());
  }
}

void bind_functional(nb::module_& nn) {
  nn.def("fuse_conv_bn_eval", &nn::fuse_conv_bn_eval, "conv"_a, "bn"_a,
         "A new Conv2d computing bn(conv(x)) as bn evaluates (its running statistics folded into the weights), as "
         "torch.nn.utils.fusion.fuse_conv_bn_eval.");
  nb::type<nn::Module>().attr("to_channels_last") = nb::cpp_function(
      [](nn::Module& self) -> nn::Module& { return self.to_channels_last(); }, nb::is_method(),
      nb::name("to_channels_last"), nb::rv_policy::reference,
      "Lays every 4-d parameter out channels-last (model.to(memory_format=torch.channels_last)); make the optimizer "
      "after it.");
  nn.def("conv2d", [](const Array& x, ArrayLike weight, ArrayLike bias, nb::handle stride, nb::handle padding,
                      nb::handle dilation, int64_t groups) {
    return nn::conv2d(x, to_array(weight), optional_array(bias), to_pair(stride, "stride"), to_pair(padding, "padding"),
                      to_pair(dilation, "dilation"), groups);
  }, "input"_a, "weight"_a, "bias"_a = nb::none(), "stride"_a = 1, "padding"_a = 0, "dilation"_a = 1, "groups"_a = 1,
     "torch.nn.functional.conv2d: (N, C, H, W) input, weight (O, C / groups, KH, KW).");
  nn.def("max_pool2d", [](const Array& x, nb::handle kernel, nb::handle stride, nb::handle padding,
                          nb::handle dilation) {
    std::optional<Pair> s;
    if (!stride.is_none()) s = to_pair(stride, "stride");
    return nn::max_pool2d(x, to_pair(kernel, "kernel_size"), s, to_pair(padding, "padding"),
                          to_pair(dilation, "dilation"));
  }, "input"_a, "kernel_size"_a, "stride"_a = nb::none(), "padding"_a = 0, "dilation"_a = 1);
  nn.def("avg_pool2d", [](const Array& x, nb::handle kernel, nb::handle stride, nb::handle padding) {
    std::optional<Pair> s;
    if (!stride.is_none()) s = to_pair(stride, "stride");
    return nn::avg_pool2d(x, to_pair(kernel, "kernel_size"), s, to_pair(padding, "padding"));
  }, "input"_a, "kernel_size"_a, "stride"_a = nb::none(), "padding"_a = 0);
  nn.def("adaptive_avg_pool2d", [](const Array& x, nb::handle size) {
    return nn::adaptive_avg_pool2d(x, to_pair(size, "output_size"));
  }, "input"_a, "output_size"_a);
  nn.def("batch_norm", [](const Array& x, nb::handle running_mean, nb::handle running_var, ArrayLike weight,
                          ArrayLike bias, bool training, double momentum, double eps) {
    // The running statistics are updated in place: the caller's arrays, not copies.
    Array none_mean, none_var;
    Array& mean = running_mean.is_none() ? none_mean : nb::cast<Array&>(running_mean);
    Array& var = running_var.is_none() ? none_var : nb::cast<Array&>(running_var);
    return nn::batch_norm2d(x, mean, var, optional_array(weight), optional_array(bias), training, momentum, eps);
  }, "input"_a, "running_mean"_a.none(), "running_var"_a.none(), "weight"_a = nb::none(), "bias"_a = nb::none(),
     "training"_a = false, "momentum"_a = 0.1, "eps"_a = 1e-5,
     "torch.nn.functional.batch_norm over (N, C, H, W); running_mean / running_var (kiln arrays or None) are updated "
     "in place when training.");
  nn.def("scaled_dot_product_attention", [](const Array& q, ArrayLike k, ArrayLike v, ArrayLike attn_mask,
                                            double dropout_p, bool is_causal, std::optional<double> scale,
                                            bool enable_gqa) {
    return nn::scaled_dot_product_attention(q, to_array(k), to_array(v), optional_array(attn_mask), dropout_p, is_causal,
                                            scale, enable_gqa);
  }, "query"_a, "key"_a, "value"_a, "attn_mask"_a = nb::none(), "dropout_p"_a = 0.0, "is_causal"_a = false,
     "scale"_a = nb::none(), "enable_gqa"_a = false,
     "softmax(q k^T * scale + mask) v, as torch.nn.functional.scaled_dot_product_attention (a boolean attn_mask is "
     "True where attention IS allowed).");
}

}  // namespace

void bind_nn_layers(nb::module_& m) {
  nb::module_ nn = nb::borrow<nb::module_>(m.attr("nn"));
  bind_containers(nn);
  bind_conv_layers(nn);
  bind_attention(nn);
  bind_recurrent(nn);
  bind_functional(nn);
}

}  // namespace kiln::python
