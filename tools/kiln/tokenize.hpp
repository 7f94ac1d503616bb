// `kiln tokenize`: a text (by default the Jargon File of Debian's jargon-text) to a token file, with a GPT-2
// byte-level BPE tokenizer loaded from vocab.json + merges.txt or trained on the text itself.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

namespace kiln_cli {

struct TokenizeArgs {
  std::string input;          ///< the text (.gz read as gzip); default text::kJargonFile
  std::string output;         ///< the token file (.bin: llm.c's format; anything else with --raw)
  std::string vocab, merges;  ///< a tokenizer to load; else one is trained and saved beside the output
  int64_t train_vocab = 4096;
  bool raw = false;
};

/// Adds the subcommand to `app`; its arguments go to `args`.
CLI::App* add_tokenize_command(CLI::App& app, TokenizeArgs& args);
int tokenize(const TokenizeArgs& args);

}  // namespace kiln_cli
