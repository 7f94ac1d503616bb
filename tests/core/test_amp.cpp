// Mixed precision: AutocastGuard's op lists (low precision for convolutions and products, float32 for losses),
// float32 gradients for float32 parameters, nesting; GradScaler's unscaling, skipped steps and scale updates;
// a channels-last bfloat16 network end to end. Every backend.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "harness/op_harness.hpp"
#include "kiln/kiln.hpp"
#include "test_util.hpp"

namespace kiln {
namespace {

TEST(Amp, AutocastRunsConvolutionsLowAndLossesInFloat32) {
  for (Device d : harness::backends())
    for (DType low : {bfloat16, float16}) {
      random::seed(1);
      nn::Conv2d conv(3, 4, {3, 3}, {.padding = {1, 1}}, float32, d);
      nn::Linear fc(4, 5, true, float32, d);
      const Array x = random::normal({2, 3, 6, 6}, 0.0, 1.0, float32, d);
      const Array labels = from_data(std::vector<int64_t>{1, 3}, Shape{2}, d);
      Array loss, y;
      {
        AutocastGuard amp(low);
        ASSERT_EQ(autocast_dtype(), low);
        y = conv(x);
        EXPECT_EQ(y.dtype(), low) << d.str();
        const Array logits = fc(mean(y, {2, 3}));
        EXPECT_EQ(logits.dtype(), low) << d.str();
        loss = nn::cross_entropy(logits, labels);
        EXPECT_EQ(loss.dtype(), float32) << d.str() << ": losses run in float32";
        {
          AutocastGuard off(std::nullopt);
          EXPECT_FALSE(autocast_dtype().has_value());
          EXPECT_EQ(conv(x).dtype(), float32);
        }
        EXPECT_EQ(autocast_dtype(), low);
      }
      EXPECT_FALSE(autocast_dtype().has_value());
      loss.backward();
      EXPECT_EQ(conv.weight().grad().dtype(), float32) << d.str() << ": float32 parameters get float32 gradients";
      EXPECT_EQ(fc.weight().grad().dtype(), float32);
      // the low-precision forward stays close to the float32 one
      const Array exact = conv(x);
      const double err = max(abs(y.astype(float32) - exact)).item<double>() / max(abs(exact)).item<double>();
      EXPECT_LT(err, low == bfloat16 ? 2e-2 : 2e-3) << d.str() << " " << dtype_name(low);
    }
  kiln_test::expect_error<ValueError>([] { AutocastGuard bad(float64); }, {"AutocastGuard", "float64"});
}

TEST(Amp, GradScalerUnscalesSkipsOverflowsAndAdaptsTheScale) {
  for (Device d : harness::backends()) {
    Array w = from_data(std::vector<float>{1.0f, -2.0f}, Shape{2}, d);
    w.set_requires_grad(true);
    optim::SGD opt({w}, {.lr = 0.5});
    optim::GradScaler scaler({.init_scale = 1024.0, .growth_interval = 2});
    // loss = sum(w^2): gradient 2w, scaled by 1024 in backward, unscaled before the step
    scaler.scale(sum(w * w)).backward();
    EXPECT_TRUE(allclose(w.grad(), from_data(std::vector<float>{2048.0f, -4096.0f}, Shape{2}, d)));
    EXPECT_TRUE(scaler.step(opt));
    EXPECT_TRUE(allclose(w.detach(), from_data(std::vector<float>{0.0f, 0.0f}, Shape{2}, d), 0, 1e-6)) << d.str();
    scaler.update();
    EXPECT_EQ(scaler.get_scale(), 1024.0);
    // an overflowed gradient: the step is skipped, the scale halves
    opt.zero_grad();
    scaler.scale(sum(w * std::numeric_limits<float>::infinity())).backward();
    const std::vector<float> before = w.to_vector<float>();
    EXPECT_FALSE(scaler.step(opt));
    EXPECT_TRUE(scaler.found_inf());
    EXPECT_EQ(w.to_vector<float>(), before) << d.str();
    scaler.update();
    EXPECT_EQ(scaler.get_scale(), 512.0);
    // two clean steps in a row: the scale doubles
    for (int i = 0; i < 2; ++i) {
      opt.zero_grad();
      scaler.scale(sum(w * w)).backward();
      EXPECT_TRUE(scaler.step(opt));
      scaler.update();
    }
    EXPECT_EQ(scaler.get_scale(), 1024.0) << d.str();
  }
  EXPECT_THROW(optim::GradScaler({.growth_factor = 0.5}), ValueError);
}

TEST(Amp, ChannelsLastBfloat16ResNetTrainsWithFloat32Master) {
  for (Device d : harness::backends()) {
    random::seed(2);
    auto net = models::resnet18(10, float32, d);
    net->to_channels_last();
    auto param = [&](const std::string& name) {
      for (const auto& [key, p] : net->named_parameters())
        if (key == name) return p;
      return Array();
    };
    EXPECT_TRUE(is_channels_last(param("conv1.weight")));
    EXPECT_FALSE(param("conv1.weight").is_contiguous());
    const Array x = to_channels_last(random::normal({2, 3, 32, 32}, 0.0, 1.0, float32, d));
    const Array labels = from_data(std::vector<int64_t>{4, 9}, Shape{2}, d);
    Array loss;
    {
      AutocastGuard amp(bfloat16);
      loss = nn::cross_entropy((*net)(x), labels);
    }
    ASSERT_TRUE(std::isfinite(loss.item<double>())) << d.str();
    loss.backward();
    const Array g = param("layer2.0.conv1.weight").grad();
    EXPECT_EQ(g.dtype(), float32) << d.str();
    EXPECT_TRUE(is_channels_last(g)) << d.str() << ": a channels-last weight gets a channels-last gradient";
  }
}

// torch.autocast's weight cache, without gradients: a parameter's low-precision copy is made once per outermost
// scope and made again when the parameter changes; nothing else is cached.
TEST(Amp, AutocastCachesParameterCastsWithoutGradients) {
  for (Device d : harness::backends()) {
    Array w = full({4, 3}, 1.5f, float32, d);
    w.set_requires_grad(true);
    const Array plain = full({4, 3}, 2.5f, float32, d);
    {
      AutocastGuard amp(bfloat16);
      NoGradGuard no_grad;
      const Array a = autocast_low(w), b = autocast_low(w);
      EXPECT_EQ(a.dtype(), bfloat16);
      EXPECT_EQ(a.data_ptr(), b.data_ptr()) << d.str() << ": the second cast reuses the first";
      {
        AutocastGuard inner(std::nullopt);  // an inner scope that turns casting off keeps the cache
        EXPECT_EQ(autocast_low(w).dtype(), float32);
      }
      EXPECT_EQ(autocast_low(w).data_ptr(), a.data_ptr());
      w.fill(3.0f);  // the parameter changes: a new cast with its new values
      const Array c = autocast_low(w);
      EXPECT_EQ(c.astype(float32).to(cpu()).to_vector<float>()[0], 3.0f) << d.str();
      EXPECT_NE(autocast_low(plain).data_ptr(), autocast_low(plain).data_ptr()) << d.str() << ": not a parameter";
    }
    {
      AutocastGuard amp(bfloat16);  // with gradients: every cast is new (it carries its own autograd history)
      const Array a = autocast_low(w), b = autocast_low(w);
      EXPECT_NE(a.data_ptr(), b.data_ptr()) << d.str();
      EXPECT_TRUE(a.requires_grad());
    }
  }
}


// autocast_cache: every parameter's copy in one multi-tensor pass, shared by its uses in the scope also with
// gradients. A parameter used once gets the gradient of casting at its use, bit for bit; one used twice gets its
// uses' gradients summed at the shared copy, in the low precision (as PyTorch's cached cast), before the float32
// conversion: within that rounding of the sum cast at each use.
TEST(Amp, AutocastCacheSharesRecordedCopiesWithGradients) {
  for (Device d : harness::backends()) {
    for (DType low : {bfloat16, float16}) {
      const std::string what = d.str() + " " + std::string(dtype_name(low));
      random::seed(5);
      const Array w0 = random::normal({7, 33}, 0.0, 1.0, float32, d), v0 = random::normal({33}, 0.0, 1.0, float32, d);
      const Array x = random::normal({5, 7}, 0.0, 1.0, float32, d);
      auto loss_of = [&](bool cache, Array& w, Array& v) {
        w = w0.copy().set_requires_grad();
        v = v0.copy().set_requires_grad();
        Array loss;
        {
          AutocastGuard amp(low);
          if (cache) autocast_cache({w, v, x, zeros({3}, float64, d)});  // x, float64: not parameters, left
          const Array a = autocast_low(w), b = autocast_low(w);
          if (cache) {
            EXPECT_EQ(a.data_ptr(), b.data_ptr()) << what << ": both uses share the cached copy";
            EXPECT_EQ(a.dtype(), low) << what;
            EXPECT_TRUE(a.requires_grad()) << what;
            EXPECT_TRUE(array_equal(a, w.astype(low))) << what << ": the copy has astype's bits";
            EXPECT_EQ(autocast_low(x).data_ptr() == autocast_low(x).data_ptr(), false) << what;
          }
          const Array h = matmul(autocast_low(x), a) * autocast_low(v) + sin(matmul(autocast_low(x), b));
          loss = sum(h.astype(float32));
        }
        loss.backward();
        return loss;
      };
      Array w_cached, v_cached, w_plain, v_plain;
      const Array l_cached = loss_of(true, w_cached, v_cached), l_plain = loss_of(false, w_plain, v_plain);
      EXPECT_EQ(l_cached.item<float>(), l_plain.item<float>()) << what;
      const double u = low == bfloat16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11);
      EXPECT_TRUE(allclose(w_cached.grad(), w_plain.grad(), 2 * u, 1e-6)) << what << ": w's gradient";
      EXPECT_TRUE(array_equal(v_cached.grad(), v_plain.grad())) << what << ": v's gradient";
      EXPECT_EQ(w_cached.grad().dtype(), float32) << what;
    }
    // A parameter changed after the cache (its version moved) is cast again, with its new values.
    Array w = full({4, 3}, 1.5f, float32, d);
    w.set_requires_grad(true);
    {
      AutocastGuard amp(bfloat16);
      autocast_cache({w});
      const Array a = autocast_low(w);
      {
        NoGradGuard no_grad;
        w.fill(3.0f);
      }
      const Array b = autocast_low(w);
      EXPECT_NE(a.data_ptr(), b.data_ptr()) << d.str();
      EXPECT_EQ(b.astype(float32).to(cpu()).to_vector<float>()[0], 3.0f) << d.str();
    }
    {
      // Two forwards and backwards in one scope without a step between (gradient accumulation): the second
      // backward goes through the same recorded copies, and the gradients add up.
      AutocastGuard amp(bfloat16);
      Array v = full({3}, 2.0f, float32, d).set_requires_grad();
      for (int i = 0; i < 2; ++i) {
        autocast_cache({v});
        sum(autocast_low(v).astype(float32) * 3.0f).backward();
      }
      EXPECT_EQ(v.grad().to(cpu()).to_vector<float>(), (std::vector<float>{6.0f, 6.0f, 6.0f})) << d.str();
    }
    {
      AutocastGuard amp(bfloat16);  // a new scope: the cache was dropped with the last
      EXPECT_NE(autocast_low(w).data_ptr(), autocast_low(w).data_ptr()) << d.str();
    }
    autocast_cache({w});  // outside any scope: nothing
    EXPECT_EQ(autocast_low(w).dtype(), float32);
  }
}

// Under autocast, cross entropy of low-precision logits with integer labels reads them as they are and widens
// them inside its kernels: the loss and the logits' gradient must be the bits of the float32 path (a cast first,
// the cast's backward rounding the float32 gradient), with and without label smoothing.
TEST(Amp, CrossEntropyOfLowPrecisionLogitsEqualsTheFloat32PathBitForBit) {
  for (Device d : harness::backends())
    for (DType low : {bfloat16, float16})
      for (double ls : {0.0, 0.1}) {
        const Array logits = (random::normal({37, 301}, 0.0, 3.0, float32, d)).astype(low);
        const Array labels = random::randint(0, 301, {37}, int64, d);
        Array widened = logits.copy(), cast = logits.copy();
        widened.set_requires_grad(true);
        cast.set_requires_grad(true);
        Array loss_widened, loss_cast;
        {
          AutocastGuard amp(low);
          loss_widened = nn::cross_entropy(widened, labels, nn::Reduction::Sum, ls);
          loss_cast = nn::cross_entropy(cast.astype(float32), labels, nn::Reduction::Sum, ls);
        }
        const std::string what = d.str() + " " + std::string(dtype_name(low)) + " ls " + std::to_string(ls);
        EXPECT_EQ(loss_widened.dtype(), float32) << what;
        EXPECT_EQ(loss_widened.item<float>(), loss_cast.item<float>()) << what;
        (loss_widened * 0.37).backward();
        (loss_cast * 0.37).backward();
        ASSERT_EQ(widened.grad().dtype(), low) << what;
        EXPECT_TRUE(all(widened.grad() == cast.grad()).item<bool>()) << what;
        EXPECT_GT(max(abs(widened.grad().astype(float32))).item<float>(), 0.0f) << what;
        // and against float64 on the same (rounded) logits: the loss within float32's rounding
        const Array x = logits.astype(float64);
        const Array lse = log(sum(exp(x - max(x, 1, true)), 1)) + max(x, 1);
        const Array picked = take_along_axis(x, labels.reshape({37, 1}), 1).reshape({37});
        const double ref = sum(lse - picked * (1.0 - ls) - mean(x, 1) * ls).item<double>();
        EXPECT_NEAR(loss_widened.item<float>(), ref, 1e-5 * std::abs(ref)) << what;
      }
}

}  // namespace
}  // namespace kiln
