// `kiln tokenize`: see tokenize.hpp.
#include "tokenize.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <optional>
#include <vector>

#include "kiln/text.hpp"

namespace kiln_cli {

CLI::App* add_tokenize_command(CLI::App& app, TokenizeArgs& args) {
  auto* cmd = app.add_subcommand(
      "tokenize", "a text to a token file (llm.c's .bin) with a GPT-2 byte-level BPE tokenizer, loaded or trained");
  cmd->add_option("--input", args.input,
                  std::string("the text, gzip when it ends in .gz (default: the Jargon File, ") +
                      kiln::text::kJargonFile + ", from Debian's jargon-text)");
  cmd->add_option("--output,-o", args.output, "the token file to write (.bin: llm.c's format)")->required();
  cmd->add_option("--vocab", args.vocab, "vocab.json of the tokenizer (with --merges; default: train one)");
  cmd->add_option("--merges", args.merges, "merges.txt of the tokenizer");
  cmd->add_option("--train-vocab", args.train_vocab,
                  "without --vocab: train a tokenizer of this many ids on the text (4096), saved beside the output "
                  "as NAME.vocab.json and NAME.merges.txt");
  cmd->add_flag("--raw", args.raw, "write bare uint16 tokens (no llm.c header)");
  return cmd;
}

int tokenize(const TokenizeArgs& args) {
  using namespace kiln;
  using clock = std::chrono::steady_clock;
  const std::string input = args.input.empty() ? text::kJargonFile : args.input;
  if (args.vocab.empty() != args.merges.empty())
    throw ValueError("kiln tokenize: pass --vocab and --merges together (or neither, to train a tokenizer)");
  const std::string corpus = text::read_text(input);
  auto start = clock::now();
  std::optional<text::BpeTokenizer> tok;
  if (!args.vocab.empty()) {
    tok = text::BpeTokenizer::load(args.vocab, args.merges);
  } else {
    // Each line with its ending is one training text, as tokenizers reads files.
    std::vector<std::string> lines;
    for (size_t at = 0; at < corpus.size();) {
      const size_t end = corpus.find('\n', at);
      const size_t stop = end == std::string::npos ? corpus.size() : end + 1;
      lines.push_back(corpus.substr(at, stop - at));
      at = stop;
    }
    tok = text::BpeTokenizer::train(lines, {.vocab_size = args.train_vocab});
    const std::filesystem::path out(args.output);
    const std::string stem = (out.parent_path() / out.stem()).string();
    tok->save(stem + ".vocab.json", stem + ".merges.txt");
    fmt::print("trained a tokenizer of {} ids on {} in {:.1f} s: {}.vocab.json, {}.merges.txt\n", tok->vocab_size(),
               input, std::chrono::duration<double>(clock::now() - start).count(), stem, stem);
  }
  start = clock::now();
  const int64_t n =
      text::tokenize_to_file(*tok, corpus, args.output, args.raw ? text::TokenFormat::raw : text::TokenFormat::llmc);
  const double s = std::chrono::duration<double>(clock::now() - start).count();
  fmt::print("{}: {} tokens from {} bytes ({:.2f} bytes a token) in {:.2f} s\n", args.output, n, corpus.size(),
             static_cast<double>(corpus.size()) / static_cast<double>(std::max<int64_t>(n, 1)), s);
  return 0;
}

}  // namespace kiln_cli
