// `kiln bench gpt2`: one GPT-2 training step as the PyTorch and llm.c anchors run it — GPT-2 124M (12 layers,
// 12 heads, 768 wide, 1024 positions, the vocabulary padded to 50304 as nanoGPT and llm.c pad it, tied head,
// dropout 0), batch 16 x 1024 random tokens, bfloat16 autocast, AdamW (lr 6e-4, betas 0.9/0.95, eps 1e-8,
// weight decay 0.1 on the matrices, 0 on biases and LayerNorms: two optimizers, as torch's two parameter
// groups), gradient clipping at 1.0; one step = zero_grad, forward, cross entropy, backward, clip, step.
// Cases: gpt2_124m_step (eager), gpt2_124m_step_compiled (kiln::compile: traced, then replayed) and
// gpt2_124m_step_graph (the step captured once in a CUDA graph and replayed),
// metrics seconds (per step), tokens_per_s, mfu (model FLOPs, llm.c's count 6 N + 12 L C T per token, against
// kiln::peak_bf16_tflops), peak_gib (peak GPU memory allocated, eager) and first_fast_s (from building the model
// to the end of the first step within 10% of the median); --recompute gelu|block runs them with
// GPT2Config::recompute (cases named ..._recompute_gelu/block). The CPU case cpu_gpt2_d6_step (llm.c's d6, batch 4 x
// 128, float32) keeps the workload runnable without a GPU. Peers: bench/peers/torch_bench.py --workloads gpt2
// (eager, and torch.compile with --compile), scripts/llmc-bench (llm.c).
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench_common.hpp"
#include "kiln/compile.hpp"
#include "kiln/cuda.hpp"
#include "kiln/models.hpp"
#include "kiln/profiler.hpp"

namespace kiln_cli {

using namespace kiln;

namespace {

struct Gpt2Case {
  std::string name, config;
  int64_t batch, seq;
  bool bf16;
};

}  // namespace

void run_gpt2(BenchContext& ctx) {
  const bool smoke = std::getenv("KILN_BENCH_SMOKE") != nullptr;
  title("gpt2", "GPT-2 training step (zero_grad, forward, cross entropy, backward, clip 1.0, AdamW): 124M, batch "
                "16 x 1024, bfloat16 autocast (GPU); d6, batch 4 x 128, float32 (CPU)");
  Table table({"case", "device", "step", "tokens/s", "MFU", "peak memory", "first fast step", "check"});
  auto run = [&](Gpt2Case c, Device d) {
    if (ctx.recompute != "none") c.name += "_recompute_" + ctx.recompute;  // not the default step's records
    const double t_start = now_s();
    random::seed(0);
    models::GPT2Config config = models::GPT2Config::from_name(c.config);
    config.vocab_size = 50304;  // 50257 padded to a multiple of 64 (aligned classifier products)
    config.embd_pdrop = config.attn_pdrop = config.resid_pdrop = 0.0;
    config.n_positions = std::max<int64_t>(c.seq, 64);
    config.recompute = ctx.recompute;
    models::GPT2 model(config, float32, d);
    std::vector<Array> decay, other;
    for (const Array& p : model.parameters()) (p.ndim() >= 2 ? decay : other).push_back(p);
    // Capturable (the step count on the device): the graphed and compiled variants replay the step.
    optim::AdamW opt_decay(decay, {.lr = 6e-4, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1, .capturable = true});
    optim::AdamW opt_other(other, {.lr = 6e-4, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.0, .capturable = true});
    random::Generator gen(1);
    const Array x = gen.randint(0, 50257, {c.batch, c.seq}, int64, d);
    const Array y = gen.randint(0, 50257, {c.batch, c.seq}, int64, d);
    const std::vector<Array> params = model.parameters();
    Array loss;
    auto step_on = [&](const Array& xs, const Array& ys) {
      opt_decay.zero_grad();
      opt_other.zero_grad();
      {
        AutocastGuard amp(c.bf16 ? std::optional<DType>(bfloat16) : std::nullopt);
        loss = models::lm_loss(model.forward(xs), ys);
      }
      loss.backward();
      optim::clip_grad_norm(params, 1.0);
      opt_decay.step();
      opt_other.step();
    };
    auto step = [&] { step_on(x, y); };
#ifdef KILN_WITH_CUDA
    if (d.is_cuda()) cuda::reset_peak_memory_stats(d);
#endif
    // The first steps one by one, each ended by a synchronisation: when does the step become fast?
    std::vector<double> ends, times;
    for (int i = 0; i < (smoke ? 2 : 6); ++i) {
      const double t0 = now_s();
      step();
      synchronize(d);
      ends.push_back(now_s() - t_start);
      times.push_back(now_s() - t0);
    }
    const BenchResult r = bench(c.name, step, ctx.options(1, smoke ? 2 : 20, 30));
    const double seconds = ctx.seconds(r);
    double first_fast = ends.back();
    for (size_t i = 0; i < times.size(); ++i)
      if (times[i] <= 1.1 * seconds) {
        first_fast = ends[i];
        break;
      }
    double peak_gib = 0;
#ifdef KILN_WITH_CUDA
    if (d.is_cuda()) peak_gib = static_cast<double>(cuda::memory_stats(d).peak_allocated) / (1 << 30);
#endif
    const double tokens = static_cast<double>(c.batch * c.seq);
    const double flops_per_token = 6.0 * static_cast<double>(model.num_parameters()) +
                                   12.0 * static_cast<double>(config.n_layer * config.n_embd * c.seq);
    const double peak = d.is_cuda() ? peak_bf16_tflops(device_properties(d)) : 0.0;
    const double mfu = peak > 0 ? tokens * flops_per_token / seconds / (peak * 1e12) : 0.0;
    auto finite = [](double l) { return std::string(std::isfinite(l) ? "ok" : "the loss is not finite"); };
    const std::string check = finite(loss.item<double>());
    ctx.record("gpt2", c.name, "seconds", "s", seconds, false, check);
    ctx.record("gpt2", c.name, "tokens_per_s", "tokens/s", tokens / seconds, true, check);
    if (peak > 0) ctx.record("gpt2", c.name, "mfu", "fraction", mfu, true, check);
    if (d.is_cuda()) ctx.record("gpt2", c.name, "peak_gib", "GiB", peak_gib, false, check);
    ctx.record("gpt2", c.name, "first_fast_s", "s", first_fast, false, check);
    table.row({c.name, d.str(), format_seconds(seconds), format_number(tokens / seconds, 0),
               peak > 0 ? format_number(100 * mfu, 1) + "%" : "-",
               d.is_cuda() ? format_number(peak_gib, 2) + " GiB" : "-", format_seconds(first_fast), check});
    if (!ctx.profile.empty() && d == ctx.device) {  // one step under the profiler: where the time goes
      profiler::start();
      {
        profiler::Range range("gpt2 step");
        step();
      }
      const profiler::Profile prof = profiler::stop();
      fmt::print("  profile of one {} step on {}:\n{}\n", c.name, d.str(), prof.summary());
      prof.save_chrome_trace(ctx.profile);
      fmt::print("  wrote the step's Chrome trace to {}\n", ctx.profile);
    }
    // A replayed variant's records and row (its peak memory and first fast step are the eager step's).
    auto variant = [&](const std::string& suffix, double vs, const std::string& vcheck) {
      const double vmfu = peak > 0 ? tokens * flops_per_token / vs / (peak * 1e12) : 0.0;
      ctx.record("gpt2", c.name + suffix, "seconds", "s", vs, false, vcheck);
      ctx.record("gpt2", c.name + suffix, "tokens_per_s", "tokens/s", tokens / vs, true, vcheck);
      if (peak > 0) ctx.record("gpt2", c.name + suffix, "mfu", "fraction", vmfu, true, vcheck);
      table.row({c.name + suffix, d.str(), format_seconds(vs), format_number(tokens / vs, 0),
                 peak > 0 ? format_number(100 * vmfu, 1) + "%" : "-", "-", "-", vcheck});
    };
    {  // the same step through kiln::compile: traced twice, then its recorded backend calls replayed
      CompiledStep compiled = compile([&](const std::vector<Array>& in) {
        step_on(in[0], in[1]);
        return std::vector<Array>{loss};
      });
      const BenchResult k = bench(
          c.name + "_compiled", [&] { compiled({x, y}); }, ctx.options(3, smoke ? 2 : 20, 30));
      const double kl = compiled({x, y})[0].item<double>();
      variant("_compiled", ctx.seconds(k), !compiled.compiled() ? "not compiled" : finite(kl));
    }
#ifdef KILN_WITH_CUDA
    if (d.is_cuda()) {  // the same step captured once in a CUDA graph and replayed: the host drops out
      cuda::Graph graph;
      const Stream side = Stream::create(d);
      {
        cuda::GraphCapture capture(graph, side);
        step();
      }
      const BenchResult g = bench(
          c.name + "_graph", [&] { graph.replay(Stream::current(d)); }, ctx.options(2, smoke ? 2 : 20, 30));
      variant("_graph", ctx.seconds(g), finite(loss.item<double>()));
    }
#endif
  };
  if (ctx.gpu()) {
    const int64_t batch = smoke ? 2 : ctx.quick ? 4 : 16, seq = smoke ? 128 : 1024;
    run({"gpt2_124m_step", "124m", batch, seq, true}, ctx.device);
  } else {
    ctx.skip("gpt2 gpt2_124m_step", ctx.no_gpu_reason());
  }
  run({"cpu_gpt2_d6_step", "d6", smoke || ctx.quick ? 2 : 4, smoke ? 64 : 128, false}, cpu());
  table.print();
  verdict("compare with bench/peers/torch_bench.py --workloads gpt2 (PyTorch eager; --compile: torch.compile) and "
          "scripts/llmc-bench (llm.c)");
}

}  // namespace kiln_cli
