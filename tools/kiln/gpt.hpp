// `kiln train gpt` (a GPT-2 trained from scratch on a token file or a text) and `kiln generate` (text from a
// GPT-2 safetensors file with Hugging Face's names, streamed as it comes).
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

#include "train.hpp"

namespace kiln_cli {

/// The options of `kiln train gpt` beyond those `kiln train` shares (--device, --data, --batch, --lr, --seed,
/// --save, --resume, --save-every).
struct GptTrainArgs {
  std::string config = "d6";  ///< models::GPT2Config::from_name
  int64_t seq = 256;
  int64_t steps = 1000;
  int64_t warmup = 100;
  int64_t sample_every = 0;  ///< 0: no samples during training (one at the end)
  int64_t log_every = 10;
  bool bf16 = false;          ///< the step under AutocastGuard(bfloat16)
  double dropout = -1;        ///< embd/attn/resid dropout; negative: the configuration's (Hugging Face's 0.1)
  int64_t pad_vocab = 64;     ///< the vocabulary rounded up to a multiple of this (aligned products); 1: none
  std::string vocab, merges;  ///< the tokenizer: needed for a text, used to print samples
};

/// Adds --config, --seq, --steps, --warmup, --sample-every, --log-every, --vocab, --merges to `train_cmd`.
void add_gpt_train_options(CLI::App& train_cmd, GptTrainArgs& args);
/// Trains a GPT-2 from scratch: AdamW (betas 0.9, 0.95; weight decay 0.1), warm-up then cosine decay, random
/// windows of the tokens; prints the loss and tokens/s, samples; saves Hugging Face's names with --save.
int train_gpt(const TrainArgs& train, const GptTrainArgs& gpt);

struct GenerateArgs {
  std::string model;          ///< a safetensors file (Hugging Face's GPT-2 names)
  std::string vocab, merges;  ///< default: vocab.json and merges.txt beside the model
  std::string prompt;
  std::string device;
  int64_t max_tokens = 64;
  double temperature = 0.8;
  int64_t top_k = 40;
  double top_p = 1.0;
  uint64_t seed = 0;
};

CLI::App* add_generate_command(CLI::App& app, GenerateArgs& args);
int generate(const GenerateArgs& args);

}  // namespace kiln_cli
