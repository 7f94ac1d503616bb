// Transformer encoder/decoder layers and stacks: PyTorch's parameter names, the post-norm and pre-norm formulas
// written out from the layer's own children (float64, eval mode) on every backend, relu and gelu, masks passed
// through, gradients (gradcheck), option errors.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "harness/op_harness.hpp"
#include "kiln/kiln.hpp"
#include "test_util.hpp"

namespace kiln {
namespace {

void expect_close(const Array& got, const Array& want, double tol, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  const std::vector<double> g = got.to(cpu()).to_vector<double>(), w = want.to(cpu()).to_vector<double>();
  for (size_t i = 0; i < g.size(); ++i) ASSERT_NEAR(g[i], w[i], tol * (1 + std::abs(w[i]))) << what << " element " << i;
}

nn::Module& child(nn::Module& m, const std::string& name) {
  for (const auto& [key, c] : m.named_children())
    if (key == name) return *c;
  throw ValueError("no child " + name);
}

/// LayerNorm over the last axis with the module's weight and bias, written out.
Array layer_norm(nn::Module& norm, const Array& x) {
  const Array mu = x.mean({-1}, true);
  const Array var = square(x - mu).mean({-1}, true);
  return (x - mu) / sqrt(var + 1e-5) * norm.parameter("weight") + norm.parameter("bias");
}

Array linear(nn::Module& l, const Array& x) { return matmul(x, l.parameter("weight").T()) + l.parameter("bias"); }

Array ffn(nn::Module& layer, const Array& x, bool gelu_act) {
  const Array h = linear(child(layer, "linear1"), x);
  return linear(child(layer, "linear2"), gelu_act ? gelu(h) : relu(h));
}

Array mha(nn::Module& layer, const std::string& name, const Array& q, const Array& kv, const Array& mask) {
  return dynamic_cast<nn::MultiheadAttention&>(child(layer, name)).forward(q, kv, kv, {}, false, mask).first;
}

nn::TransformerLayerOptions options(bool norm_first, bool batch_first, Device d) {
  return {.d_model = 8, .nhead = 2, .dim_feedforward = 12, .dropout = 0.1, .activation = norm_first ? "gelu" : "relu",
          .batch_first = batch_first, .norm_first = norm_first, .dtype = float64, .device = d};
}

TEST(Transformer, LayersHavePyTorchsParameterNames) {
  nn::TransformerEncoderLayer enc(options(false, true, cpu()));
  std::vector<std::string> names;
  for (const auto& [n, p] : enc.named_parameters()) names.push_back(n);
  EXPECT_EQ(names, (std::vector<std::string>{"self_attn.in_proj_weight", "self_attn.in_proj_bias",
                                             "self_attn.out_proj.weight", "self_attn.out_proj.bias", "linear1.weight",
                                             "linear1.bias", "linear2.weight", "linear2.bias", "norm1.weight",
                                             "norm1.bias", "norm2.weight", "norm2.bias"}));
  nn::TransformerDecoder dec(options(true, true, cpu()), 2, true);
  const auto params = dec.named_parameters();
  EXPECT_EQ(params.front().first, "layers.0.self_attn.in_proj_weight");
  EXPECT_EQ(params[4].first, "layers.0.multihead_attn.in_proj_weight");
  EXPECT_EQ(params.back().first, "norm.bias");
  EXPECT_EQ(params.size(), 2 * 18 + 2u);
}

TEST(Transformer, EncoderAndDecoderLayersFollowThePostAndPreNormFormulasOnEveryBackend) {
  random::seed(7);
  for (Device d : harness::backends()) {
    for (bool norm_first : {false, true}) {
      for (bool batch_first : {false, true}) {
        const std::string what = d.str() + (norm_first ? " pre-norm" : " post-norm") + (batch_first ? " bf" : "");
        const Array x = random::normal(batch_first ? Shape{2, 5, 8} : Shape{5, 2, 8}, float64, d);
        const Array mem = random::normal(batch_first ? Shape{2, 3, 8} : Shape{3, 2, 8}, float64, d);
        const Array mask = random::normal({5, 5}, float64, d);
        nn::TransformerEncoderLayer enc(options(norm_first, batch_first, d));
        enc.eval();
        nn::Module& e = enc;
        Array want;
        if (norm_first) {
          const Array h = x + mha(e, "self_attn", layer_norm(child(e, "norm1"), x), layer_norm(child(e, "norm1"), x), mask);
          want = h + ffn(e, layer_norm(child(e, "norm2"), h), true);
        } else {
          const Array h = layer_norm(child(e, "norm1"), x + mha(e, "self_attn", x, x, mask));
          want = layer_norm(child(e, "norm2"), h + ffn(e, h, false));
        }
        expect_close(enc.forward(x, mask), want, 1e-12, "encoder " + what);

        nn::TransformerDecoderLayer dec(options(norm_first, batch_first, d));
        dec.eval();
        nn::Module& m = dec;
        if (norm_first) {
          const Array n1 = layer_norm(child(m, "norm1"), x);
          const Array h1 = x + mha(m, "self_attn", n1, n1, mask);
          const Array h2 = h1 + mha(m, "multihead_attn", layer_norm(child(m, "norm2"), h1), mem, {});
          want = h2 + ffn(m, layer_norm(child(m, "norm3"), h2), true);
        } else {
          const Array h1 = layer_norm(child(m, "norm1"), x + mha(m, "self_attn", x, x, mask));
          const Array h2 = layer_norm(child(m, "norm2"), h1 + mha(m, "multihead_attn", h1, mem, {}));
          want = layer_norm(child(m, "norm3"), h2 + ffn(m, h2, false));
        }
        expect_close(dec.forward(x, mem, mask), want, 1e-12, "decoder " + what);
      }
    }
  }
}

TEST(Transformer, AStackAppliesItsLayersThenTheNormAndTrains) {
  random::seed(8);
  auto o = options(false, true, cpu());
  o.dropout = 0.0;
  nn::TransformerEncoder stack(o, 2, true);
  const Array x = random::normal({2, 4, 8}, float64, cpu());
  Array want = x;
  for (const auto& [name, layers] : stack.named_children())
    if (name == "layers")
      for (const auto& [i, layer] : layers->named_children())
        want = dynamic_cast<nn::TransformerEncoderLayer&>(*layer).forward(want, Array(), Array(), true);
  want = dynamic_cast<nn::LayerNorm&>(child(stack, "norm"))(want);
  expect_close(stack.forward(x, Array(), Array(), true), want, 1e-12, "stack");
  const GradcheckResult r =
      gradcheck([&](const std::vector<Array>& in) { return stack.forward(in[0], Array(), Array(), true); }, {x});
  EXPECT_TRUE(r.passed) << r.report;
  kiln_test::expect_error<ValueError>(
      [] { nn::TransformerEncoderLayer({.d_model = 8, .nhead = 2, .activation = "swish"}); }, {"activation"});
}

}  // namespace
}  // namespace kiln
