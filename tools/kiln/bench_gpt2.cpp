// `kiln bench gpt2`: one GPT-2 training step as the PyTorch and llm.c anchors run it — GPT-2 124M (12 layers,
// 12 heads, 768 wide, 1024 positions, the vocabulary padded to 50304 as nanoGPT and llm.c pad it, tied head,
// dropout 0), batch 16 x 1024 random tokens, bfloat16 autocast, AdamW (lr 6e-4, betas 0.9/0.95, eps 1e-8,
// weight decay 0.1 on the matrices, 0 on biases and LayerNorms: two optimizers, as torch's two parameter
// groups), gradient clipping at 1.0; one step = zero_grad, forward, cross entropy, backward, clip, step.
// Cases: gpt2_124m_step (eager), gpt2_124m_step_compiled (kiln::compile: traced, then replayed) and
// gpt2_124m_step_graph (the step captured once in a CUDA graph and replayed),
// metrics seconds (per step), tokens_per_s, mfu (model FLOPs, llm.c's count 6 N + 12 L C T per token, against
// kiln::peak_bf16_tflops), peak_gib (peak GPU memory allocated, eager) and first_fast_s (from building the model
// to the end of the first step within 10% of the median; the compiled case: from kiln::compile() to the end of its
// first replay); --recompute gelu|block runs them with
// GPT2Config::recompute (cases named ..._recompute_gelu/block). The CPU case cpu_gpt2_d6_step (llm.c's d6, batch 4 x
// 128, float32) keeps the workload runnable without a GPU. Peers: bench/peers/torch_bench.py --workloads gpt2
// (eager, and torch.compile with --compile), scripts/llmc-bench (llm.c).
// --nproc N: the same step data parallel (bench/gpt2_step.hpp in DistributedDataParallel, each rank its own batch
// of the same size): `kiln launch` starts this kiln as 1 rank, then as N ranks (one GPU each over NCCL, or CPU
// ranks over MPI), each timed with events on rank 0's stream after a barrier; cases gpt2_124m_step_ddp1 and
// ..._ddpN (cpu_gpt2_d6_step_ddp1/N on the CPU), metrics seconds, tokens_per_s (over all ranks), mfu (per GPU)
// and, for N ranks, scaling (tokens/s against the one rank's of the same invocation).
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "../../bench/gpt2_step.hpp"
#include "bench_common.hpp"
#include "kiln/compile.hpp"
#include "kiln/cuda.hpp"
#include "kiln/dist.hpp"
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
    kiln_bench::Gpt2StepOptions o;
    o.config = kiln_bench::gpt2_bench_config(c.config, c.seq);
    o.config.recompute = ctx.recompute;
    o.bf16 = c.bf16;
    kiln_bench::Gpt2Step gpt(o, d);  // seeded 0; capturable AdamW: the graphed and compiled variants replay the step
    const auto [x, y] = kiln_bench::gpt2_random_batch(o.config.vocab_size, c.batch, c.seq, 1, d);
    Array loss;
    auto step_on = [&](const Array& xs, const Array& ys) { loss = gpt(xs, ys); };
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
    const double flops_per_token = gpt.flops_per_token(c.seq);
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
    // A replayed variant's records and row (its peak memory is the eager step's; `first`: its own wait, when measured).
    auto variant = [&](const std::string& suffix, double vs, const std::string& vcheck, double first = -1) {
      const double vmfu = peak > 0 ? tokens * flops_per_token / vs / (peak * 1e12) : 0.0;
      ctx.record("gpt2", c.name + suffix, "seconds", "s", vs, false, vcheck);
      ctx.record("gpt2", c.name + suffix, "tokens_per_s", "tokens/s", tokens / vs, true, vcheck);
      if (peak > 0) ctx.record("gpt2", c.name + suffix, "mfu", "fraction", vmfu, true, vcheck);
      table.row({c.name + suffix, d.str(), format_seconds(vs), format_number(tokens / vs, 0),
                 peak > 0 ? format_number(100 * vmfu, 1) + "%" : "-", "-", first >= 0 ? format_seconds(first) : "-",
                 vcheck});
    };
    {  // the same step through kiln::compile: traced twice, then its recorded backend calls replayed
      const double c0 = now_s();
      CompiledStep compiled = compile([&](const std::vector<Array>& in) {
        step_on(in[0], in[1]);
        return std::vector<Array>{loss};
      });
      // The compile wait: from compile() to the end of the first replay (the warm-up call, the two traced ones,
      // then a replay), each ended by a synchronisation (torch.compile's first_fast_s counts from building the
      // model, which is a fraction of a second here).
      for (int i = 0; i < 4; ++i) {
        compiled({x, y});
        synchronize(d);
      }
      const double compile_wait = now_s() - c0;
      const BenchResult k = bench(
          c.name + "_compiled", [&] { compiled({x, y}); }, ctx.options(3, smoke ? 2 : 20, 30));
      const double kl = compiled({x, y})[0].item<double>();
      const std::string kcheck = !compiled.compiled() ? "not compiled" : finite(kl);
      variant("_compiled", ctx.seconds(k), kcheck, compile_wait);
      if (!ctx.profile.empty() && d == ctx.device) {  // one replay under the profiler: what the compiler changed
        profiler::start();
        {
          profiler::Range range("gpt2 compiled replay");
          compiled({x, y});
        }
        const profiler::Profile prof = profiler::stop();
        fmt::print("  profile of one {}_compiled replay on {}:\n{}\n", c.name, d.str(), prof.summary());
        const std::string path = ctx.profile.ends_with(".json")
                                     ? ctx.profile.substr(0, ctx.profile.size() - 5) + "-compiled.json"
                                     : ctx.profile + "-compiled";
        prof.save_chrome_trace(path);
        fmt::print("  wrote the compiled replay's Chrome trace to {}\n", path);
      }
      // What the compiler made of the step: its calls, those the fusion pass merged away, and the memory the
      // record's arrays hold (the step's own arrays; parameters and optimizer state are not in it).
      const double record_gib = static_cast<double>(compiled.memory_bytes()) / (1 << 30);
      ctx.record("gpt2", c.name + "_compiled", "fused_ops", "calls", static_cast<double>(compiled.fused_ops()), true,
                 kcheck);
      ctx.record("gpt2", c.name + "_compiled", "record_gib", "GiB", record_gib, false, kcheck);
      ctx.record("gpt2", c.name + "_compiled", "first_fast_s", "s", compile_wait, false, kcheck);
      fmt::print("  {}_compiled: {} recorded calls after fusion merged {}; the step's arrays hold {:.2f} GiB; "
                 "{:.2f} s from compile() to the end of the first replay\n",
                 c.name, compiled.recorded_ops(), compiled.fused_ops(), record_gib, compile_wait);
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

namespace {

/// The data-parallel case's name: the GPU's step or the CPU's.
std::string ddp_case(bool gpu, int ranks) {
  return std::string(gpu ? "gpt2_124m_step" : "cpu_gpt2_d6_step") + "_ddp" + std::to_string(ranks);
}

/// Runs argv (a program and its arguments) and waits for it: its exit status (128 + the signal when killed).
int run_and_wait(const std::vector<std::string>& argv) {
  std::vector<std::string> args = argv;
  std::vector<char*> c;
  for (std::string& a : args) c.push_back(a.data());
  c.push_back(nullptr);
  std::fflush(stdout);
  const pid_t pid = fork();
  if (pid < 0) throw Error(std::string("kiln bench gpt2 --nproc: fork failed: ") + std::strerror(errno));
  if (pid == 0) {
    execv(c[0], c.data());
    std::fprintf(stderr, "kiln bench gpt2 --nproc: cannot run %s: %s\n", c[0], std::strerror(errno));
    std::_Exit(127);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) throw Error(std::string("kiln bench gpt2 --nproc: waitpid: ") + std::strerror(errno));
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : 1;
}

}  // namespace

int gpt2_rank(const std::string& record_file, const std::string& device_name, bool quick) {
  const Device want = device_name.empty() ? try_gpu() : parse_device(device_name);
  dist::InitOptions init;
  if (want.is_cpu() || num_gpus() < dist::launch_environment().world_size) init.device = cpu();
  dist::init_process_group(init);
  const Device d = dist::default_group().device();
  if (d.is_cuda()) set_current_device(d);
  const bool gpu = d.is_cuda();
  const int64_t batch = gpu ? (quick ? 4 : 16) : (quick ? 2 : 4), seq = gpu ? 1024 : 128;
  kiln_bench::Gpt2DdpRun run(gpu ? "124m" : "d6", batch, seq, gpu, dist::DdpOptions{}, d);
  Array loss;
  const int warmup = gpu ? (quick ? 5 : 20) : 1, steps = gpu ? (quick ? 10 : 50) : (quick ? 3 : 10);
  for (int i = 0; i < warmup; ++i) loss = run();
  synchronize(d);
  dist::barrier();  // every rank starts the timed steps together: rank 0's events time the slowest's pace
  Event start = Event::create(d), stop = Event::create(d);
  start.record();
  for (int i = 0; i < steps; ++i) loss = run();
  stop.record();
  stop.synchronize();
  const double seconds = start.elapsed_ms(stop) / 1000.0 / steps;
  const double loss_value = loss.item<double>();
  const int ranks = dist::world_size();
  if (dist::rank() == 0) {
    const double tokens = static_cast<double>(batch * seq);
    const double peak = gpu ? peak_bf16_tflops(device_properties(d)) : 0.0;
    std::ofstream f(record_file);
    f.precision(10);
    // Figures only (a NaN loss is written as its finiteness: streams do not read "nan" back).
    f << "ranks " << ranks << "\nseconds " << seconds << "\ntokens_per_s " << tokens * ranks / seconds << "\nmfu "
      << (peak > 0 ? tokens * run.step.flops_per_token(seq) / seconds / (peak * 1e12) : 0.0) << "\nfinite_loss "
      << (std::isfinite(loss_value) ? 1 : 0) << "\n";
    if (!f) throw Error("kiln bench gpt2 --nproc: could not write " + record_file);
  }
  dist::destroy_process_group();
  return 0;
}

int bench_gpt2_nproc(int nproc, const std::string& device_name, bool quick, const std::string& json) {
  if (nproc < 2)
    throw ValueError("kiln bench gpt2 --nproc: give 2 or more ranks (one rank is the plain gpt2 workload)");
  BenchContext ctx;
  ctx.quick = quick;
  ctx.device = device_name.empty() ? try_gpu() : parse_device(device_name);
  const bool gpu = ctx.device.is_cuda() && num_gpus() >= nproc;
  if (ctx.device.is_cuda() && !gpu)
    throw ValueError("kiln bench gpt2 --nproc " + std::to_string(nproc) + ": the machine has " +
                     std::to_string(num_gpus()) + " GPU(s), one per rank is needed; give --nproc " +
                     std::to_string(num_gpus()) + " or --device cpu (CPU ranks over MPI)");
  title("gpt2 --nproc", fmt::format("the GPT-2 step in DistributedDataParallel, 1 rank then {} ({}), each rank {}",
                                    nproc, gpu ? "a GPU each, NCCL" : "CPU ranks, MPI",
                                    gpu ? fmt::format("batch {} x 1024, bfloat16 autocast", quick ? 4 : 16)
                                        : fmt::format("d6, batch {} x 128, float32", quick ? 2 : 4)));
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  std::map<int, std::map<std::string, double>> runs;
  for (const int n : {1, nproc}) {
    const std::string file = (std::filesystem::temp_directory_path() /
                              fmt::format("kiln-bench-gpt2-{}-{}ranks.txt", static_cast<long>(getpid()), n))
                                 .string();
    std::filesystem::remove(file);
    // Through `kiln launch` (this kiln again): NCCL ranks find each other through the environment, CPU ranks
    // are mpirun's.
    std::vector<std::string> argv{self, "launch", "--nproc", std::to_string(n), "--backend", gpu ? "env" : "mpi",
                                  self, "bench",  "gpt2",    "--rank-record",   file};
    if (!gpu) argv.insert(argv.end(), {"--device", "cpu"});
    if (quick) argv.push_back("--quick");
    const int status = run_and_wait(argv);
    std::ifstream in(file);
    if (status != 0 || !in)
      throw Error(
          fmt::format("kiln bench gpt2 --nproc: the {}-rank run {} (its ranks' messages are above)", n,
                      status != 0 ? fmt::format("failed with exit status {}", status) : "wrote no record to " + file));
    std::string key;
    double value = 0;
    while (in >> key >> value) runs[n][key] = value;
    for (const char* k : {"ranks", "seconds", "tokens_per_s", "mfu", "finite_loss"})
      if (!runs[n].count(k))
        throw Error(fmt::format("kiln bench gpt2 --nproc: the {}-rank run's record {} has no {}", n, file, k));
    if (runs[n]["ranks"] != n)
      throw Error(fmt::format("kiln bench gpt2 --nproc: asked for {} rank(s), the run had {}", n, runs[n]["ranks"]));
    std::filesystem::remove(file);
  }
  Table table({"case", "device", "ranks", "step", "tokens/s", "MFU", "scaling", "check"});
  const double one = runs[1]["tokens_per_s"];
  for (const int n : {1, nproc}) {
    auto& r = runs[n];
    const std::string name = ddp_case(gpu, n);
    const std::string check = r["finite_loss"] == 1 ? "ok" : "the loss is not finite";
    const double scaling = r["tokens_per_s"] / one;
    ctx.record("gpt2", name, "seconds", "s", r["seconds"], false, check);
    ctx.record("gpt2", name, "tokens_per_s", "tokens/s", r["tokens_per_s"], true, check);
    if (r["mfu"] > 0) ctx.record("gpt2", name, "mfu", "fraction", r["mfu"], true, check);
    if (n > 1) ctx.record("gpt2", name, "scaling", "x", scaling, true, check);
    table.row({name, gpu ? "cuda" : "cpu", std::to_string(n), format_seconds(r["seconds"]),
               format_number(r["tokens_per_s"], 0), r["mfu"] > 0 ? format_number(100 * r["mfu"], 1) + "%" : "-",
               n > 1 ? format_number(scaling, 2) + "x" : "-", check});
  }
  table.print();
  verdict(
      fmt::format("gpt2 --nproc {}: {} tokens/s over {} ranks, {:.2f}x one rank's {} (ideal {}x); PyTorch's: "
                  "bench/peers/torch_ddp.py --workloads ddp_gpt2 under torchrun",
                  nproc, format_number(runs[nproc]["tokens_per_s"], 0), nproc, runs[nproc]["tokens_per_s"] / one,
                  format_number(one, 0), nproc));
  if (!json.empty()) {
    write_json(ctx, json);
    fmt::print("wrote {}\n", json);
  }
  return 0;
}

}  // namespace kiln_cli
