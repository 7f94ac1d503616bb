// `kiln bench generate`: GPT-2 124M (models::GPT2, float32, weights as initialised from seed 0) continuing a
// prompt of 16 tokens with greedy decoding and the KV cache, batch 1, as its PyTorch peer
// bench/peers/torch_bench.py --workloads generate runs the same model written in plain PyTorch with a KV cache
// (cases in bench/peers/common.py, GENERATE_CASES): gpt2_124m_token (GPU, 256 new tokens) and cpu_d6_token (the
// CPU, llm.c's d6: 6 layers of 384, 64 new tokens), each the seconds per generated token (the whole generation
// divided by its tokens; every token is read back to the host before the next is computed, so the time ends
// after a synchronisation). --quick: 32 new tokens.
#include <cstdlib>
#include <string>
#include <vector>

#include "bench_common.hpp"
#include "kiln/models.hpp"

namespace kiln_cli {

using namespace kiln;

void run_generate(BenchContext& ctx) {
  const bool smoke = std::getenv("KILN_BENCH_SMOKE") != nullptr;
  const int64_t gpu_tokens = smoke ? 4 : ctx.quick ? 32 : 256, cpu_tokens = smoke ? 4 : ctx.quick ? 16 : 64;
  title("generate", fmt::format("GPT-2 124M greedy with the KV cache, batch 1, prompt 16, {} new tokens (GPU); "
                                "d6 on the CPU, {} new tokens; seconds per token",
                                gpu_tokens, cpu_tokens));
  Table table({"case", "device", "model", "new tokens", "per token", "tokens/s", "check"});
  auto run = [&](const std::string& name, const std::string& config, Device d, int64_t new_tokens, bool graph) {
    random::seed(0);
    models::GPT2Config c = models::GPT2Config::from_name(config);
    c.embd_pdrop = c.attn_pdrop = c.resid_pdrop = 0.0;
    models::GPT2 model(c, float32, d);
    const std::vector<int64_t> prompt = random::randint(0, c.vocab_size, {16}, int64, cpu()).to_vector<int64_t>();
    std::vector<int64_t> out;
    auto step = [&] {
      out = models::generate(model, prompt, {.max_new_tokens = new_tokens, .temperature = 0.0, .cuda_graph = graph});
    };
    const BenchResult r = bench(name, step, ctx.options(1, 5, 60));
    const double per_token = ctx.seconds(r) / static_cast<double>(new_tokens);
    std::string check = static_cast<int64_t>(out.size()) == new_tokens ? "ok" : "fewer tokens than asked for";
    for (int64_t t : out)
      if (t < 0 || t >= c.vocab_size) check = "a token outside the vocabulary";
    ctx.record("generate", name, "seconds", "s", per_token, false, check);
    table.row({name, d.str(), config, std::to_string(new_tokens), format_seconds(per_token),
               format_number(1.0 / per_token, 0), check});
  };
  if (ctx.gpu()) {
    run("gpt2_124m_token", "124m", ctx.device, gpu_tokens, true);  // the default: decode steps replay a CUDA graph
    run("gpt2_124m_token_eager", "124m", ctx.device, gpu_tokens, false);  // op by op, as PyTorch eager
  } else {
    ctx.skip("generate gpt2_124m_token", ctx.no_gpu_reason());
  }
  run("cpu_d6_token", "d6", cpu(), cpu_tokens, false);
  table.print();
  verdict("compare with bench/peers/torch_bench.py --workloads generate (the same GPT-2 in PyTorch, eager)");
}

}  // namespace kiln_cli
