// The `kiln` command: `kiln info` lists devices, memory pools, the kernel cache
// and the build; `kiln bench` runs the workloads of bench_*.cpp (tables, one-line
// verdicts, --json records); `kiln demo` shows the library at work.
#include <fmt/core.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <system_error>

#include "bench_common.hpp"
#include "kiln/kiln.hpp"
#include "launch.hpp"
#include "gpt.hpp"
#include "tokenize.hpp"
#include "train.hpp"
#ifdef KILN_WITH_CUDA
#include "kiln/cuda.hpp"
#endif

namespace {

std::string bytes_str(double b) {
  if (b >= 1e9) return fmt::format("{:.2f} GB", b / 1e9);
  if (b >= 1e6) return fmt::format("{:.1f} MB", b / 1e6);
  if (b >= 1e3) return fmt::format("{:.1f} kB", b / 1e3);
  return fmt::format("{:.0f} B", b);
}

// The CPU's model name from /proc/cpuinfo ("unknown" elsewhere).
std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) {
      auto colon = line.find(':');
      if (colon != std::string::npos && colon + 2 <= line.size()) return line.substr(colon + 2);
    }
  return "unknown";
}

int info() {
  using namespace kiln;
  fmt::print("{}\n", build_info());
  fmt::print("features: cpu ({}, OpenMP, {} threads), cuda backend: {}\n", kiln_cli::cpu_blas(),
             kiln_cli::host_threads(), built_with_cuda() ? "yes (NVRTC kernels, cuBLAS)" : "no (CPU-only build)");
  const DeviceProperties host = device_properties(cpu());
  fmt::print("cpu: {} ({} hardware threads)\n", cpu_model(), host.multiprocessors);
  const int n = num_gpus();
  fmt::print("GPUs: {}\n", n);
  for (int i = 0; i < n; ++i) {
    const DeviceProperties p = device_properties(gpu(i));
    fmt::print("  cuda:{}: {} (compute capability {}.{}, {} SMs)\n", i, p.name, p.major, p.minor, p.multiprocessors);
    fmt::print("    memory: {} total, {} free; L2 {}; {} shared memory per block",
               bytes_str(static_cast<double>(p.total_memory)), bytes_str(static_cast<double>(p.free_memory)),
               bytes_str(static_cast<double>(p.l2_cache_bytes)),
               bytes_str(static_cast<double>(p.shared_memory_per_block)));
    if (p.memory_bandwidth_gbs > 0) fmt::print("; {:.0f} GB/s theoretical bandwidth", p.memory_bandwidth_gbs);
    fmt::print("\n");
#ifdef KILN_WITH_CUDA
    const cuda::MemoryStats m = cuda::memory_stats(gpu(i));
    fmt::print("    kiln pool: {} allocated in {} blocks, {} reserved in {} segments, {} cached blocks\n",
               bytes_str(static_cast<double>(m.allocated)), m.active_blocks, bytes_str(static_cast<double>(m.reserved)),
               m.segments, m.cached_blocks);
#endif
  }
#ifdef KILN_WITH_CUDA
  if (n > 0) {
    const cuda::HostMemoryStats h = cuda::host_memory_stats();
    fmt::print("pinned host pool: {} allocated, {} reserved\n", bytes_str(static_cast<double>(h.allocated)),
               bytes_str(static_cast<double>(h.reserved)));
  }
  const std::string dir = cuda::kernel_cache_directory();
  if (dir.empty()) {
    fmt::print("kernel cache: in memory only (KILN_CACHE_IN_MEMORY set, or no HOME/KILN_CACHE_DIR)\n");
  } else {
    namespace fs = std::filesystem;
    std::error_code ec;
    uintmax_t total = 0, files = 0;
    if (fs::is_directory(dir, ec)) {
      for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::recursive_directory_iterator();
           it.increment(ec)) {
        if (it->is_regular_file(ec)) {
          total += it->file_size(ec);
          ++files;
        }
      }
    }
    fmt::print("kernel cache: {} ({} files, {}; KILN_CACHE_DIR overrides)\n", dir, files,
               bytes_str(static_cast<double>(total)));
  }
#else
  fmt::print("kernel cache: none (CPU-only build: no run-time GPU kernels)\n");
#endif
  if (n == 0) fmt::print("no GPU: everything runs on the CPU (try_gpu() returns cpu)\n");
  return 0;
}

int demo() {
  using namespace kiln;
  Device d = try_gpu();
  fmt::print("== kiln demo on {}\n", d.str());
  random::seed(0);
  Array x = arange(0, 6, 1, float32, d).reshape({2, 3});
  std::cout << "x = " << x << "\n";
  std::cout << "x * 2 + 1 = " << (x * 2 + 1) << "\n";
  std::cout << "exp(x).sum(axis=1) = " << exp(x).sum(1) << "\n";
  std::cout << "x.T() @ x = " << matmul(x.T(), x) << "\n";
  Array r = random::normal({4}, 0.0, 1.0, float32, d);
  std::cout << "random::normal({4}) = " << r << "\n";
  // Timed right: warm-up, then the median of several runs (events on a GPU).
  const int64_t n = 1024;
  Array a = random::uniform({n, n}, float32, d), b = random::uniform({n, n}, float32, d);
  BenchResult t = bench("matmul 1024", [&] { (void)matmul(a, b); }, {.warmup = 2, .repeat = 10});
  fmt::print("{}\nmatmul {}x{} float32 on {}: median {:.3f} ms = {:.1f} GFLOP/s\n", t.str(), n, n, d.str(),
             t.seconds() * 1e3, 2.0 * n * n * n / t.seconds() / 1e9);
  return 0;
}

int bench_command(const std::vector<std::string>& names, const std::string& device_name, const std::string& json,
                  bool quick, const std::string& profile, const std::string& recompute, int nproc,
                  const std::string& rank_record) {
  using namespace kiln;
  if (nproc > 1 || !rank_record.empty()) {
    if (names != std::vector<std::string>{"gpt2"})
      throw ValueError("bench --nproc: only the gpt2 workload runs data parallel; use `kiln bench gpt2 --nproc N`");
    if (!profile.empty() || recompute != "none")
      throw ValueError("bench gpt2 --nproc: --profile and --recompute are the one-process step's; leave them out");
    return rank_record.empty() ? kiln_cli::bench_gpt2_nproc(nproc, device_name, quick, json)
                               : kiln_cli::gpt2_rank(rank_record, device_name, quick);
  }
  kiln_cli::BenchContext ctx;
  ctx.quick = quick;
  ctx.profile = profile;
  ctx.recompute = recompute;
  ctx.device = device_name.empty() ? try_gpu() : parse_device(device_name);
  if (ctx.device.is_cuda()) (void)gpu(ctx.device.index);  // DeviceError naming a missing GPU
  const auto& all = kiln_cli::workloads();
  std::vector<const kiln_cli::Workload*> chosen;
  for (const std::string& name : names) {
    auto it = std::find_if(all.begin(), all.end(), [&](const kiln_cli::Workload& w) { return name == w.name; });
    if (it == all.end()) {
      std::string known;
      for (const auto& w : all) known += std::string(known.empty() ? "" : ", ") + w.name;
      throw ValueError("bench: no workload named '" + name + "'; choose from " + known);
    }
    chosen.push_back(&*it);
  }
  if (chosen.empty())
    for (const auto& w : all) chosen.push_back(&w);
  const std::string device = ctx.device.is_cuda() ? device_properties(ctx.device).name : "cpu";
  fmt::print("kiln bench on {} ({}){}; CPU side: {} threads\n\n", ctx.device.str(), device, quick ? ", quick" : "",
             kiln_cli::host_threads());
  const auto start = std::chrono::steady_clock::now();
  int failures = 0;
  for (const kiln_cli::Workload* w : chosen) {
    try {
      w->run(ctx);
    } catch (const std::exception& e) {  // kiln::Error, and std::bad_alloc or fmt's errors: the others still run
      ++failures;
      fmt::print("  FAILED: {}: {}\n\n", w->name, e.what());
      ctx.skipped.emplace_back(w->name, std::string("failed: ") + e.what());
    }
  }
  fmt::print("{} records from {} workloads in {:.1f} s{}\n", ctx.records.size(), chosen.size(),
             std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
             failures ? fmt::format(", {} FAILED", failures) : "");
  if (!json.empty()) {
    kiln_cli::write_json(ctx, json);
    fmt::print("wrote {}\n", json);
  }
  return failures ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"kiln: arrays on CPUs and NVIDIA GPUs"};
  app.require_subcommand(1);
  auto* info_cmd = app.add_subcommand("info", "devices, memory pools, the kernel cache and the build's features");
  auto* demo_cmd = app.add_subcommand("demo", "a short tour on the best device present");
  auto* bench_cmd = app.add_subcommand("bench", "benchmark workloads, each with a table and a verdict");
  std::vector<std::string> names;
  std::string device, json;
  bool quick = false;
  std::string names_help = "workloads to run (default: all):";
  for (const auto& w : kiln_cli::workloads()) names_help += std::string(" ") + w.name;
  bench_cmd->add_option("NAME", names, names_help);
  bench_cmd->add_option("--device", device, "cpu or cuda:N (default: the best device present)");
  bench_cmd->add_option("--json", json, "write the records to this file");
  bench_cmd->add_flag("--quick", quick, "smaller sizes and fewer repeats (about a minute)");
  std::string profile;
  bench_cmd->add_option("--profile", profile,
                        "gpt2: profile one eager step and one compiled replay (time per kernel class and kernel) and "
                        "write their Chrome traces (chrome://tracing, Perfetto) to this file and to its name with "
                        "-compiled before .json");
  std::string recompute = "none";
  bench_cmd
      ->add_option("--recompute", recompute,
                   "gpt2: activation recomputation (GPT2Config::recompute): none (default), gelu (the MLP's "
                   "activations), block (every block's)")
      ->check(CLI::IsMember({"none", "gelu", "block"}));
  int bench_nproc = 1;
  bench_cmd->add_option("--nproc", bench_nproc,
                        "gpt2: the step data parallel (DistributedDataParallel) with 1 rank, then N, started by kiln "
                        "launch (a GPU each over NCCL, or CPU ranks over MPI): tokens/s and the scaling");
  std::string rank_record;  // a rank of --nproc's runs: rank 0 writes its figures here (kiln starts these itself)
  bench_cmd->add_option("--rank-record", rank_record)->group("");
  auto* train_cmd = app.add_subcommand(
      "train", "train a walkthrough's model on Fashion-MNIST (mlp, cnn), or a GPT-2 on a token file or text (gpt)");
  kiln_cli::TrainArgs train;
  std::string hidden;
  train_cmd
      ->add_option("MODEL", train.model,
                   "mlp: the Chainer MNIST walkthrough's MLP; cnn: two conv/batch-norm/pool blocks and an MLP head; "
                   "gpt: GPT-2 from scratch (--config, --seq, --steps; --data a .bin token file or a text)")
      ->check(CLI::IsMember({"mlp", "cnn", "gpt"}));
  kiln_cli::GptTrainArgs gpt_args;
  kiln_cli::add_gpt_train_options(*train_cmd, gpt_args);
  train_cmd->add_option("--device", train.device, "cpu or cuda:N (default: the best device present)");
  train_cmd->add_option("--data", train.data,
                        "fashion-mnist (Debian's dataset-fashion-mnist) or a folder of Fashion-MNIST/MNIST IDX files");
  train_cmd->add_option("--epochs", train.epochs, "epochs (20)");
  train_cmd->add_option("--batch", train.batch, "batch size (100)");
  train_cmd->add_option("--hidden", hidden, "hidden layer widths, e.g. 100,100 (the default) or 1000,1000");
  train_cmd->add_option("--units", train.units, "width of both hidden layers (same as --hidden N,N)");
  train_cmd->add_option("--dropout", train.dropout, "dropout after each hidden layer (0.5)");
  train_cmd->add_option("--opt,--optimizer", train.optimizer, "sgd or adam (sgd)");
  train_cmd->add_option("--lr", train.lr, "learning rate (sgd: 0.01, adam: 0.001)");
  train_cmd->add_option("--momentum", train.momentum, "SGD momentum (0)");
  train_cmd->add_option("--seed", train.seed, "seed of the initialisation, dropout and shuffles (0)");
  train_cmd->add_option("--log", train.log,
                        "append one JSON line per epoch to this file (scripts/plot-training draws it)");
  train_cmd->add_option("--save,--checkpoint", train.checkpoint, "save the trained model here (safetensors)");
  train_cmd->add_option("--resume", train.resume,
                        "the run's state (model, optimizer, generator, position: safetensors), written crash-safely at "
                        "each epoch's end; when the file exists, training goes on from it, ending with the "
                        "parameters of a run never stopped");
  train_cmd->add_option("--save-every", train.save_every, "also save the --resume state every N steps (0)");
  train_cmd->add_option("--max-grad-norm", train.max_grad_norm, "clip the gradients' 2-norm to this (0: no clipping)");
  train_cmd->add_flag("--graph", train.graph,
                      "capture each training step in a CUDA graph after 3 eager steps and replay it (GPU only; with "
                      "--nproc, the gradient all-reduces too)");
  train_cmd->add_flag("--compile", train.compile,
                      "trace each training step with kiln::compile after 3 eager steps and replay it (any device; not "
                      "with --graph or --nproc)");
  train_cmd->add_option("--nproc", train.nproc,
                        "data-parallel ranks (1): kiln launch starts them, one GPU each (NCCL) or CPU ranks (MPI)");
  auto* launch_cmd =
      app.add_subcommand("launch", "start N ranks of a program (as torchrun): kiln launch --nproc 2 ./train args...");
  kiln_cli::LaunchArgs launch_args;
  launch_cmd->add_option("--nproc", launch_args.nproc, "ranks to start on this machine (1)");
  launch_cmd
      ->add_option("--backend", launch_args.backend,
                   "auto (default), env (RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT, for NCCL), or mpi (mpirun)")
      ->check(CLI::IsMember({"auto", "env", "mpi"}));
  launch_cmd->add_option("--nnodes", launch_args.nnodes, "machines, one launcher each (1; env backend)");
  launch_cmd->add_option("--node-rank", launch_args.node_rank, "this machine's index in [0, nnodes) (0)");
  launch_cmd->add_option("--master-addr", launch_args.master_addr, "rank 0's address (127.0.0.1)");
  launch_cmd->add_option("--master-port", launch_args.master_port, "rank 0's port (default: a free one)");
  launch_cmd->prefix_command();
  kiln_cli::TokenizeArgs tokenize_args;
  auto* tokenize_cmd = kiln_cli::add_tokenize_command(app, tokenize_args);  // the first positional argument and everything after it: the program
  kiln_cli::GenerateArgs generate_args;
  auto* generate_cmd = kiln_cli::add_generate_command(app, generate_args);
  train.argv.assign(argv, argv + argc);
  CLI11_PARSE(app, argc, argv);
  try {
    if (info_cmd->parsed()) return info();
    if (demo_cmd->parsed()) return demo();
    if (bench_cmd->parsed())
      return bench_command(names, device, json, quick, profile, recompute, bench_nproc, rank_record);
    if (tokenize_cmd->parsed()) return kiln_cli::tokenize(tokenize_args);
    if (generate_cmd->parsed()) return kiln_cli::generate(generate_args);
    if (launch_cmd->parsed()) {
      launch_args.command = launch_cmd->remaining();
      return kiln_cli::launch(launch_args);
    }
    if (train_cmd->parsed()) {
      if (!hidden.empty()) train.hidden = kiln_cli::parse_widths(hidden);
      if (train.data == "fashion-mnist") train.data = kiln_cli::TrainArgs{}.data;
      if (train.model == "gpt") {
        if (train_cmd->count("--batch") == 0) train.batch = 8;
        return kiln_cli::train_gpt(train, gpt_args);
      }
      return kiln_cli::train_mlp(train);
    }
  } catch (const std::exception& e) {  // kiln::Error and anything else: a message, not a crash
    std::cerr << (std::string("kiln: ") + e.what() + "\n");
    return 1;
  }
  return 0;
}
