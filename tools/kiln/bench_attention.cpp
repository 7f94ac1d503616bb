// `kiln bench attention`: scaled dot-product attention forward and forward+backward in TFLOP/s (FlashAttention's
// counting: 4 B H T^2 D per forward, 2.5x that with the backward, half of each when causal), at the sizes PyTorch's
// F.scaled_dot_product_attention is compared at (records sdpa_t<T>_d<D>_<causal|full>_fwd|fwdbwd_TFLOPs): on a
// GPU bfloat16 (8, 16, T, 64|128), T = 1024, 4096, 8192, causal and not; on the CPU float32 at one small size.
#include <cmath>

#include "bench_common.hpp"

namespace kiln_cli {

using namespace kiln;

namespace {

double attention_flops(int64_t b, int64_t h, int64_t t, int64_t d, bool causal, bool backward) {
  const double f = 4.0 * double(b) * double(h) * double(t) * double(t) * double(d) * (backward ? 2.5 : 1.0);
  return causal ? f / 2 : f;
}

}  // namespace

void run_attention(BenchContext& ctx) {
  const bool gpu = ctx.gpu();
  const DType dtype = gpu ? bfloat16 : float32;
  const int64_t b = gpu ? 8 : 1, h = gpu ? 16 : 4;
  const std::vector<int64_t> lengths = gpu ? (ctx.quick ? std::vector<int64_t>{1024, 4096}
                                                        : std::vector<int64_t>{1024, 4096, 8192})
                                           : std::vector<int64_t>{ctx.quick ? int64_t{256} : int64_t{1024}};
  const std::vector<int64_t> heads = gpu ? std::vector<int64_t>{64, 128} : std::vector<int64_t>{64};
  title("attention", fmt::format("nn::scaled_dot_product_attention, {} ({}, {}, T, D) on {}{}", dtype_name(dtype), b,
                                 h, ctx.device.str(),
                                 gpu ? "" : " (the blocked computation; the GPU runs cuDNN's fused kernel)"));
  Table table({"T", "D", "mask", "forward", "TFLOP/s", "fwd+bwd", "TFLOP/s", "engine"});
  double best_fwd = 0, best_fb = 0;
  for (int64_t t : lengths) {
    for (int64_t d : heads) {
      for (bool causal : {true, false}) {
        const std::string key = fmt::format("sdpa_t{}_d{}_{}", t, d, causal ? "causal" : "full");
        Array q = random::normal({b, h, t, d}, dtype, ctx.device), k = random::normal({b, h, t, d}, dtype, ctx.device),
              v = random::normal({b, h, t, d}, dtype, ctx.device);
        const FlashAttentionStats before = flash_attention_stats();
        Array out;
        BenchResult fwd = bench(
            key + "_fwd",
            [&] {
              NoGradGuard no_grad;
              out = nn::scaled_dot_product_attention(q, k, v, {}, 0.0, causal);
            },
            ctx.options(2, 10, 10));
        const FlashAttentionStats after = flash_attention_stats();
        const bool fused = after.forward > before.forward;
        // What was timed is checked: finite, and each output row a convex combination of v's rows (|o| <= max |v|).
        const double vmax = abs(v).max().astype(float32).item<float>();
        const double omax = abs(out).max().astype(float32).item<float>();
        const std::string check = std::isfinite(omax) && omax <= vmax * 1.01
                                      ? "ok"
                                      : fmt::format("output magnitude {} beyond max |v| {}", omax, vmax);
        q.set_requires_grad(), k.set_requires_grad(), v.set_requires_grad();
        const Array go = random::normal({b, h, t, d}, dtype, ctx.device);
        BenchResult fb = bench(
            key + "_fwdbwd",
            [&] {
              nn::scaled_dot_product_attention(q, k, v, {}, 0.0, causal).backward(go);
            },
            ctx.options(2, 10, 10));
        const double fwd_tflops = attention_flops(b, h, t, d, causal, false) / ctx.seconds(fwd) / 1e12;
        const double fb_tflops = attention_flops(b, h, t, d, causal, true) / ctx.seconds(fb) / 1e12;
        const std::string engine = fused ? "fused" : "blocked";
        ctx.record("attention", key, "fwd_TFLOPs", "TFLOP/s", fwd_tflops, true, check);
        ctx.record("attention", key, "fwdbwd_TFLOPs", "TFLOP/s", fb_tflops, true);
        best_fwd = std::max(best_fwd, fwd_tflops);
        best_fb = std::max(best_fb, fb_tflops);
        table.row({std::to_string(t), std::to_string(d), causal ? "causal" : "full", format_seconds(ctx.seconds(fwd)),
                   format_number(fwd_tflops, gpu ? 1 : 3), format_seconds(ctx.seconds(fb)), format_number(fb_tflops, gpu ? 1 : 3),
                   engine});
        if (!fused && gpu) ctx.skip("attention fused " + key, after.refusal);
      }
    }
  }
  table.print();
  verdict(fmt::format("best {:.1f} TFLOP/s forward, {:.1f} forward+backward on {}", best_fwd, best_fb,
                      ctx.device.str()));
}

}  // namespace kiln_cli
