// `kiln train gpt` and `kiln generate`: see gpt.hpp.
#include "gpt.hpp"

#include <fmt/core.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "kiln/dist.hpp"
#include "kiln/kiln.hpp"
#include "kiln/models.hpp"
#include "train.hpp"

namespace kiln_cli {

using namespace kiln;

namespace {

/// Linear warm-up to the base lr over `warmup` steps, then a cosine decay to a tenth of it at `total` (llm.c's).
class WarmupCosine : public optim::LRScheduler {
 public:
  WarmupCosine(optim::Optimizer& opt, int64_t warmup, int64_t total)
      : LRScheduler(opt), warmup_(warmup), total_(total) {}
  double lr_at(int64_t count) const override {
    if (count < warmup_) return base_lr_ * static_cast<double>(count + 1) / static_cast<double>(warmup_);
    const double progress =
        static_cast<double>(count - warmup_) / static_cast<double>(std::max<int64_t>(1, total_ - warmup_));
    return base_lr_ * (0.1 + 0.45 * (1.0 + std::cos(M_PI * std::min(progress, 1.0))));
  }

 private:
  int64_t warmup_, total_;
};

std::optional<text::BpeTokenizer> tokenizer(const std::string& vocab, const std::string& merges) {
  if (vocab.empty() != merges.empty()) throw ValueError("kiln: pass --vocab and --merges together");
  if (vocab.empty()) return std::nullopt;
  return text::BpeTokenizer::load(vocab, merges);
}

std::string show(const std::optional<text::BpeTokenizer>& tok, const std::vector<int64_t>& ids) {
  if (!tok) {
    std::string s;
    for (int64_t id : ids) s += std::to_string(id) + " ";
    return s;
  }
  std::vector<int32_t> v;
  for (int64_t id : ids)  // a padded vocabulary's extra ids (never trained as targets) have no text
    if (id < tok->vocab_size()) v.push_back(static_cast<int32_t>(id));
  return tok->decode(v);
}

}  // namespace

void add_gpt_train_options(CLI::App& cmd, GptTrainArgs& a) {
  cmd.add_option("--config", a.config, "gpt: 124m, 355m, 774m, 1558m or d<depth> (llm.c's: 64 d wide, d layers) (d6)");
  cmd.add_option("--seq", a.seq, "gpt: tokens per sequence (256)");
  cmd.add_option("--steps", a.steps, "gpt: training steps (1000)");
  cmd.add_option("--warmup", a.warmup, "gpt: linear warm-up steps before the cosine decay (100)");
  cmd.add_option("--sample-every", a.sample_every, "gpt: print a sample every N steps (0: at the end only)");
  cmd.add_option("--log-every", a.log_every, "gpt: print the loss and tokens/s every N steps (10)");
  cmd.add_option("--pdrop", a.dropout,
                 "gpt: dropout of the embeddings, attention and residuals, Hugging Face's *_pdrop (default: the "
                 "configuration's 0.1; llm.c trains with 0, which lets a GPU's fused attention run the step)");
  cmd.add_option("--pad-vocab", a.pad_vocab,
                 "gpt: round the vocabulary up to a multiple of this, as nanoGPT's 50304 (64; 1: none): an odd "
                 "vocabulary makes the classifier's matrix products use slow unaligned kernels")
      ->check(CLI::PositiveNumber);
  cmd.add_flag("--bf16", a.bf16, "gpt: products and attention in bfloat16 (autocast), parameters float32");
  cmd.add_option("--vocab", a.vocab, "gpt: the tokenizer's vocab.json (needed for a text --data; prints samples)");
  cmd.add_option("--merges", a.merges, "gpt: the tokenizer's merges.txt");
}

int train_gpt(const TrainArgs& t, const GptTrainArgs& g) {
  using clock = std::chrono::steady_clock;
  const bool launched = dist::launch_environment().world_size > 1;
  if (auto status = start_ranks(t, launched)) return *status;
  const Device device = join_ranks(t, launched);
  const int ranks = launched ? dist::world_size() : 1;
  const bool chatty = !launched || dist::rank() == 0;
  const auto tok = tokenizer(g.vocab, g.merges);
  // Tokens: a token file (llm.c's .bin, or raw uint16 with --raw names), else a text encoded with the tokenizer.
  const std::string data = t.data == TrainArgs{}.data ? text::kJargonFile : t.data;
  std::optional<text::TokenFile> file;
  std::vector<uint16_t> encoded;
  const std::string ext = std::filesystem::path(data).extension().string();
  if (ext == ".bin" || ext == ".tokens") {
    file.emplace(data);
  } else {
    if (!tok)
      throw ValueError("kiln train gpt: " + data +
                       " is a text: give its tokenizer (--vocab, --merges), or make a "
                       "token file with `kiln tokenize --input " +
                       data + " -o FILE.bin`");
    for (int32_t id : tok->encode(text::read_text(data))) encoded.push_back(static_cast<uint16_t>(id));
  }
  const std::span<const uint16_t> tokens = file ? file->tokens() : std::span<const uint16_t>(encoded);
  if (static_cast<int64_t>(tokens.size()) <= g.seq + 1)
    throw ValueError("kiln train gpt: " + data + " holds " + std::to_string(tokens.size()) +
                     " tokens, fewer than --seq + 2");

  models::GPT2Config config = models::GPT2Config::from_name(g.config);
  if (g.dropout >= 0) config.embd_pdrop = config.attn_pdrop = config.resid_pdrop = g.dropout;
  if (g.config[0] == 'd' && tok) config.vocab_size = tok->vocab_size();
  // Extra classes no token uses: the model learns they never come, and the products are aligned.
  config.vocab_size = (config.vocab_size + g.pad_vocab - 1) / g.pad_vocab * g.pad_vocab;
  config.n_positions = std::min(config.n_positions, std::max<int64_t>(g.seq, 64));
  if (g.seq > config.n_positions) throw ValueError("kiln train gpt: --seq is past the model's 1024 positions");
  random::seed(t.seed);
  const auto gpt2 = std::make_shared<models::GPT2>(config, float32, device);
  models::GPT2& model = *gpt2;
  // Data parallel: each rank draws its own windows (a generator of its own per rank) and the gradients are
  // averaged in the backward (DistributedDataParallel, which also starts every rank from rank 0's weights).
  std::shared_ptr<nn::Module> trained = gpt2;
  std::optional<random::Generator> windows;
  if (launched) {
    trained = std::make_shared<dist::DistributedDataParallel>(gpt2);
    windows.emplace(t.seed + 1 + static_cast<uint64_t>(dist::rank()));
  }
  optim::AdamW opt(model.parameters(), {.lr = t.lr.value_or(6e-4), .beta2 = 0.95, .weight_decay = 0.1});
  WarmupCosine schedule(opt, g.warmup, g.steps);
  train::Checkpoint ckpt{.model = &model, .optimizer = &opt, .scheduler = &schedule};
  if (!t.resume.empty() && std::filesystem::exists(t.resume)) {
    train::load_checkpoint(t.resume, ckpt);
    fmt::print("resumed {} at step {}\n", t.resume, ckpt.step);
  }
  if (chatty)
    fmt::print("{} ({:.1f}M parameters) on {}{}: {} tokens of {}, batch {} x {}{}, {} steps\n", model.name(),
               static_cast<double>(model.num_parameters()) / 1e6, device.str(),
               launched ? fmt::format(" and {} more rank(s)", ranks - 1) : "", tokens.size(), data, t.batch, g.seq,
               launched ? " per rank (DistributedDataParallel)" : "", g.steps);

  auto sample = [&](int64_t n) {
    const std::vector<int64_t> prompt{tok && tok->special_id() ? *tok->special_id() : int64_t{tokens[0]}};
    const auto out = models::generate(
        model, prompt,
        {.max_new_tokens = std::min(n, config.n_positions - 1), .temperature = 0.8, .top_k = 40, .seed = 1});
    fmt::print("--- sample ---\n{}\n--------------\n", show(tok, out));
  };
  // llm.c's count: 6 per parameter and token (forward and backward), plus attention's 12 L C T.
  const double flops_per_token = 6.0 * static_cast<double>(model.num_parameters()) +
                                 12.0 * static_cast<double>(config.n_layer * config.n_embd * g.seq);
  // MFU: each rank's model FLOPs against its GPU's dense bfloat16 peak (llm.c's and nanoGPT's convention,
  // also for a float32 run); not printed on the CPU.
  const double peak_tflops = device.is_cuda() ? peak_bf16_tflops(device_properties(device)) : 0.0;
  std::vector<int64_t> x(static_cast<size_t>(t.batch * g.seq)), y(x.size());
  auto start = clock::now();
  int64_t since = 0;
  for (int64_t step = ckpt.step; step < g.steps; ++step) {
    // Random windows drawn from the default generator, which checkpoints save: a resumed run sees the same batches.
    const int64_t last = static_cast<int64_t>(tokens.size()) - g.seq - 1;
    const auto offsets = (windows ? windows->randint(0, last, {t.batch}, int64) : random::randint(0, last, {t.batch}))
                             .to_vector<int64_t>();
    for (int64_t b = 0; b < t.batch; ++b)
      for (int64_t i = 0; i < g.seq; ++i) {
        const size_t at = static_cast<size_t>(offsets[static_cast<size_t>(b)] + i);
        x[static_cast<size_t>(b * g.seq + i)] = tokens[at];
        y[static_cast<size_t>(b * g.seq + i)] = tokens[at + 1];
      }
    Array loss;
    {
      AutocastGuard amp(g.bf16 ? std::optional<DType>(bfloat16) : std::nullopt);
      loss = models::lm_loss(trained->forward(from_data(x, Shape{t.batch, g.seq}, device)),
                             from_data(y, Shape{t.batch, g.seq}, device));
    }
    opt.zero_grad();
    loss.backward();
    if (t.max_grad_norm > 0) optim::clip_grad_norm(model.parameters(), t.max_grad_norm);
    opt.step();
    schedule.step();
    ++since;
    ckpt.step = step + 1;
    if ((step + 1) % std::max<int64_t>(1, g.log_every) == 0 || step + 1 == g.steps) {
      Array mean_loss = loss.detach().astype(float64);
      if (launched) {  // the mean over the ranks' batches
        dist::all_reduce(mean_loss);
        mean_loss = mean_loss / static_cast<double>(ranks);
      }
      const double l = mean_loss.item<double>();  // synchronises: the time below is the device's
      const double s = std::chrono::duration<double>(clock::now() - start).count();
      const double tokens_per_s = static_cast<double>(since * t.batch * g.seq) / s;  // this rank's
      const double tflops = tokens_per_s * flops_per_token / 1e12;
      if (chatty) {
        fmt::print("step {:5d}/{}  loss {:.4f}  lr {:.2e}  {:.0f} tokens/s  {:.2f} TFLOP/s", step + 1, g.steps, l,
                   opt.lr(), tokens_per_s * ranks, tflops * ranks);
        if (peak_tflops > 0) fmt::print("  MFU {:.1f}%", 100.0 * tflops / peak_tflops);
        fmt::print("\n");
        std::fflush(stdout);
      }
      start = clock::now();
      since = 0;
    }
    if (chatty && g.sample_every > 0 && (step + 1) % g.sample_every == 0) sample(64);
    if (!t.resume.empty() && t.save_every > 0 && (step + 1) % t.save_every == 0) train::save_checkpoint(t.resume, ckpt);
  }
  if (!t.resume.empty()) train::save_checkpoint(t.resume, ckpt);
  if (chatty) {
    sample(64);
    if (!t.checkpoint.empty()) {
      nn::save_safetensors(t.checkpoint, model.hf_state_dict());
      fmt::print("saved {} (Hugging Face's GPT-2 names; kiln generate --model {})\n", t.checkpoint, t.checkpoint);
    }
  }
  if (launched) dist::destroy_process_group();
  return 0;
}

CLI::App* add_generate_command(CLI::App& app, GenerateArgs& a) {
  auto* cmd = app.add_subcommand("generate", "text from a GPT-2 safetensors file (Hugging Face's names), streamed");
  cmd->add_option("--model", a.model, "the model: a Hub model.safetensors or `kiln train gpt --save`'s file")
      ->required();
  cmd->add_option("--vocab", a.vocab, "the tokenizer's vocab.json (default: vocab.json beside the model)");
  cmd->add_option("--merges", a.merges, "the tokenizer's merges.txt (default: merges.txt beside the model)");
  cmd->add_option("--prompt", a.prompt, "the text to continue (default: the end-of-text token)");
  cmd->add_option("--max-tokens", a.max_tokens, "tokens to generate (64)");
  cmd->add_option("--temperature", a.temperature, "0: greedy (0.8)");
  cmd->add_option("--top-k", a.top_k, "sample among the k most likely tokens (40; 0: all)");
  cmd->add_option("--top-p", a.top_p, "sample among the most likely tokens holding this probability (1: all)");
  cmd->add_option("--seed", a.seed, "of the sampling (0)");
  cmd->add_option("--device", a.device, "cpu or cuda:N (default: the best device present)");
  return cmd;
}

int generate(const GenerateArgs& a) {
  using clock = std::chrono::steady_clock;
  const Device device = a.device.empty() ? try_gpu() : parse_device(a.device);
  const std::filesystem::path folder = std::filesystem::path(a.model).parent_path();
  const std::string vocab = a.vocab.empty() ? (folder / "vocab.json").string() : a.vocab;
  const std::string merges = a.merges.empty() ? (folder / "merges.txt").string() : a.merges;
  if (!std::filesystem::exists(vocab) || !std::filesystem::exists(merges))
    throw ValueError("kiln generate: no tokenizer (" + vocab + ", " + merges + "): pass --vocab and --merges");
  const auto tok = text::BpeTokenizer::load(vocab, merges);
  auto model = models::load_gpt2(a.model, {}, float32, device);
  std::vector<int64_t> prompt;
  for (int32_t id : tok.encode(a.prompt)) prompt.push_back(id);
  if (prompt.empty()) {
    if (!tok.special_id()) throw ValueError("kiln generate: an empty prompt needs the tokenizer's end-of-text token");
    prompt.push_back(*tok.special_id());
  }
  std::fputs(a.prompt.c_str(), stdout);
  std::fflush(stdout);
  const auto start = clock::now();
  const auto out = models::generate(
      *model, prompt,
      {.max_new_tokens = std::min(a.max_tokens, model->max_positions() - static_cast<int64_t>(prompt.size())),
       .temperature = a.temperature,
       .top_k = a.top_k,
       .top_p = a.top_p,
       .stop_token = tok.special_id(),
       .seed = a.seed,
       .on_token = [&](int64_t id) {
         const int32_t one = static_cast<int32_t>(id);
         const std::string piece = tok.decode_bytes(std::span<const int32_t>(&one, 1));
         std::fwrite(piece.data(), 1, piece.size(), stdout);
         std::fflush(stdout);
       }});
  const double s = std::chrono::duration<double>(clock::now() - start).count();
  fmt::print(stderr, "\n[{} tokens in {:.2f} s: {:.1f} ms a token, prompt included, on {}]\n", out.size(), s,
             1e3 * s / static_cast<double>(std::max<size_t>(out.size(), 1)), device.str());
  return 0;
}

}  // namespace kiln_cli
