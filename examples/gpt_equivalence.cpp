// kiln's half of the GPT-2 equivalence check with PyTorch (bench/peers/gpt_equivalence.py runs the other half):
// a GPT-2 from kiln's initialisation, a batch, and what kiln computes from them, written as files the peer
// script reads (it builds the same model in plain PyTorch from weights.safetensors and compares):
//   meta.json            the configuration, batch, sequence, optimiser and generation settings
//   weights.safetensors  the initial weights with Hugging Face's names (GPT2LMHeadModel's, lm_head included)
//   tokens.npy           (batch, seq + 1) int64: inputs are [:, :-1], targets [:, 1:]
//   logits.npy           (batch, seq, vocab) float32 of the initial model
//   grads.safetensors    the gradient of the mean cross entropy for every parameter (the tied wte's is the sum)
//   losses.npy           the loss before each of `steps` AdamW steps on the batch (float64)
//   greedy.npy           greedy tokens of the initial model: prompt = tokens[0, :prompt], KV-cache generation
//
//   example_gpt_equivalence [OUTDIR] [--config 124m|d6|...] [--vocab N] [--device cuda:0] [--batch B] [--seq T]
//                           [--steps N] [--lr X]
// At the default lr 1e-3 memorising the batch is chaotic after a few steps (float32's summation orders part the
// runs); at --lr 1e-4 the 50 steps stay comparable to the end.
// The defaults (a d2 model with a 512-token vocabulary, on the CPU) take seconds; on the device run
// `--config 124m --device cuda:0 --batch 4 --seq 128`.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <kiln/kiln.hpp>
#include <kiln/models.hpp>
#include <string>
#include <vector>

using namespace kiln;

int main(int argc, char** argv) {
  std::string out = "gpt_equivalence_out", config_name = "d2", device_name = "cpu";
  int64_t vocab = 512, batch = 2, seq = 32, steps = 50, prompt = 8, new_tokens = 24;
  double lr = 1e-3;
  const double weight_decay = 0.01;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) throw ValueError("gpt_equivalence: " + a + " needs a value");
      return argv[++i];
    };
    if (a == "--config")
      config_name = next();
    else if (a == "--vocab")
      vocab = std::stoll(next());
    else if (a == "--device")
      device_name = next();
    else if (a == "--batch")
      batch = std::stoll(next());
    else if (a == "--seq")
      seq = std::stoll(next());
    else if (a == "--steps")
      steps = std::stoll(next());
    else if (a == "--lr")
      lr = std::stod(next());
    else
      out = a;
  }
  std::filesystem::create_directories(out);
  const Device device = parse_device(device_name);
  models::GPT2Config config = models::GPT2Config::from_name(config_name);
  if (config_name[0] == 'd') config.vocab_size = vocab;              // the presets keep GPT-2's 50257
  config.embd_pdrop = config.attn_pdrop = config.resid_pdrop = 0.0;  // dropout masks differ between libraries

  random::seed(1234);
  models::GPT2 model(config, float32, device);
  nn::save_safetensors(out + "/weights.safetensors", model.hf_state_dict());
  const Array tokens = random::randint(0, config.vocab_size, {batch, seq + 1}, int64);
  save(out + "/tokens.npy", tokens);
  const Array x = tokens.slice(1, 0, seq).to(device), y = tokens.slice(1, 1, seq + 1).to(device);

  // Greedy tokens of the initial model (a trained one's depend on every step's rounding).
  const std::vector<int64_t> start = tokens[0].slice(0, 0, prompt).to_vector<int64_t>();
  const std::vector<int64_t> greedy =
      models::generate(model, start, {.max_new_tokens = new_tokens, .temperature = 0.0});
  save(out + "/greedy.npy", from_data(greedy));
  optim::AdamW opt(model.parameters(), {.lr = lr, .weight_decay = weight_decay});
  std::vector<double> losses;
  for (int64_t step = 0; step < steps; ++step) {
    const Array logits = model.forward(x);
    const Array loss = models::lm_loss(logits, y);
    opt.zero_grad();
    loss.backward();
    if (step == 0) {
      save(out + "/logits.npy", logits.detach().to(cpu()));
      nn::StateDict grads;
      for (const auto& [name, p] : model.named_parameters()) grads.insert(name, p.grad().to(cpu()));
      nn::save_safetensors(out + "/grads.safetensors", grads);
    }
    losses.push_back(loss.item<double>());
    opt.step();
  }
  save(out + "/losses.npy", from_data(losses));

  std::ofstream meta(out + "/meta.json");
  meta << "{\"vocab_size\": " << config.vocab_size << ", \"n_positions\": " << config.n_positions
       << ", \"n_embd\": " << config.n_embd << ", \"n_layer\": " << config.n_layer << ", \"n_head\": " << config.n_head
       << ", \"layer_norm_epsilon\": " << config.layer_norm_epsilon << ", \"batch\": " << batch << ", \"seq\": " << seq
       << ", \"steps\": " << steps << ", \"lr\": " << lr << ", \"weight_decay\": " << weight_decay
       << ", \"betas\": [0.9, 0.999], \"eps\": 1e-08, \"prompt\": " << prompt << ", \"new_tokens\": " << new_tokens
       << ", \"device\": \"" << device.str() << "\"}\n";
  std::printf("gpt_equivalence: %s on %s: loss %.4f -> %.4f over %lld AdamW steps; files in %s\n", model.name().c_str(),
              device.str().c_str(), losses.front(), losses.back(), static_cast<long long>(steps), out.c_str());
  if (!(losses.back() < losses.front())) {
    std::printf("gpt_equivalence: the loss did not fall\n");
    return 1;
  }
  return 0;
}
