// A small GPT-2 trained from scratch on the Jargon File (Debian's jargon-text): a byte-level BPE tokenizer trained
// on the text, random windows of its tokens, AdamW with warm-up, a sample from the model before and after. On a
// GPU the default run (a d6 model, 1500 steps of 32 x 256 tokens) takes minutes and writes recognisable
// Jargon-File English; on the CPU it runs seconds on a slice of the text (a d2 model, 20 steps of 4 x 64), enough to
// see the loss fall. Exit 1 when the loss does not fall; without the package it says so and exits 0.
//
//   example_gpt_jargon [--steps N] [--device cpu|cuda:0]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <kiln/kiln.hpp>
#include <kiln/models.hpp>
#include <string>
#include <vector>

using namespace kiln;

int main(int argc, char** argv) {
  if (!std::filesystem::exists(text::kJargonFile)) {
    std::printf("gpt_jargon: %s is missing (apt-get install jargon-text, or make deps); nothing to do\n",
                text::kJargonFile);
    return 0;
  }
  Device device = try_gpu();
  int64_t steps = -1;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--steps") steps = std::stoll(argv[i + 1]);
    if (a == "--device") device = parse_device(argv[i + 1]);
  }
  const bool gpu_run = !device.is_cpu();
  std::string corpus = text::read_text(text::kJargonFile);
  if (!gpu_run) corpus.resize(200000);  // a slice: the tokenizer and the steps take seconds on the CPU
  if (steps < 0) steps = gpu_run ? 1500 : 20;
  const int64_t batch = gpu_run ? 32 : 4, seq = gpu_run ? 256 : 64;

  const auto start = std::chrono::steady_clock::now();
  std::vector<std::string> lines;  // each line with its ending one training text, as tokenizers reads files
  for (size_t at = 0; at < corpus.size();) {
    const size_t end = std::min(corpus.find('\n', at), corpus.size() - 1) + 1;
    lines.push_back(corpus.substr(at, end - at));
    at = end;
  }
  const auto tok = text::BpeTokenizer::train(lines, {.vocab_size = gpu_run ? 4096 : 1024});
  std::vector<int32_t> ids = tok.encode(corpus);
  std::printf("gpt_jargon: %zu tokens of %zu bytes (a tokenizer of %lld ids) in %.1f s\n", ids.size(), corpus.size(),
              static_cast<long long>(tok.vocab_size()),
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());

  random::seed(0);
  models::GPT2Config config = models::GPT2Config::depth(gpu_run ? 6 : 2);
  config.vocab_size = tok.vocab_size();
  config.n_positions = seq;
  models::GPT2 model(config, float32, device);
  optim::AdamW opt(model.parameters(), {.lr = gpu_run ? 1e-3 : 3e-3, .beta2 = 0.95, .weight_decay = 0.1});
  optim::LinearWarmupLR warmup(opt, std::min<int64_t>(50, steps / 4 + 1), 0.1);
  const std::vector<int64_t> prompt{tok.encode("The")[0]};
  auto sample = [&](const char* when) {
    const auto out =
        models::generate(model, prompt, {.max_new_tokens = gpu_run ? 120 : 40, .temperature = 0.8, .top_k = 40});
    std::vector<int32_t> v(out.begin(), out.end());
    std::printf("--- %s ---\n%s\n", when, tok.decode(v).c_str());
  };
  sample("before training");

  std::vector<int64_t> x(static_cast<size_t>(batch * seq)), y(x.size());
  double first = 0, last = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t step = 0; step < steps; ++step) {
    const auto offsets = random::randint(0, static_cast<int64_t>(ids.size()) - seq - 1, {batch}).to_vector<int64_t>();
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t i = 0; i < seq; ++i) {
        const size_t at = static_cast<size_t>(offsets[static_cast<size_t>(b)] + i);
        x[static_cast<size_t>(b * seq + i)] = ids[at];
        y[static_cast<size_t>(b * seq + i)] = ids[at + 1];
      }
    const Array loss = models::lm_loss(model.forward(from_data(x, Shape{batch, seq}, device)),
                                       from_data(y, Shape{batch, seq}, device));
    opt.zero_grad();
    loss.backward();
    optim::clip_grad_norm(model.parameters(), 1.0);
    opt.step();
    warmup.step();
    if (step == 0 || step + 1 == steps || (step + 1) % 100 == 0) {
      const double l = loss.item<double>();
      (step == 0 ? first : last) = l;
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::printf("step %5lld  loss %.3f  %.0f tokens/s\n", static_cast<long long>(step + 1), l,
                  static_cast<double>((step + 1) * batch * seq) / s);
    }
  }
  sample("after training");
  if (!(last < first)) {
    std::printf("gpt_jargon: the loss did not fall (%.3f -> %.3f)\n", first, last);
    return 1;
  }
  return 0;
}
