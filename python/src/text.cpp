// kiln.text: GPT-2's byte-level BPE tokenizer (load, train, encode, decode), token files (llm.c's .bin and raw
// uint16, memory-mapped) with random-window batches for language modelling (kiln/text.hpp).
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>
#include <nanobind/stl/vector.h>

#include <kiln/text.hpp>
#include <string>
#include <vector>

#include "bindings.hpp"
#include "convert.hpp"
#include "typed.hpp"

namespace kiln::python {
namespace {

text::Special to_special(const std::string& special) {
  if (special == "allow" || special == "all") return text::Special::allow;
  if (special == "as_text" || special == "none") return text::Special::as_text;
  if (special == "refuse" || special == "raise") return text::Special::refuse;
  throw nb::value_error(("BpeTokenizer.encode: special='" + special +
                         "' is not one of 'allow' (each special token its own id), 'as_text' (encoded as "
                         "ordinary text) or 'refuse' (ValueError)").c_str());
}

std::optional<text::TokenFormat> to_format(const std::optional<std::string>& format) {
  if (!format) return std::nullopt;
  if (*format == "llmc") return text::TokenFormat::llmc;
  if (*format == "raw") return text::TokenFormat::raw;
  throw nb::value_error(("TokenFile: format='" + *format +
                         "' is not 'llmc' (llm.c's .bin with its header) or 'raw' (uint16 tokens only)").c_str());
}

std::vector<int32_t> to_ids(nb::handle ids) {
  nb::object list = nb::borrow(ids);
  if (!nb::isinstance<nb::list>(ids) && !nb::isinstance<nb::tuple>(ids))
    list = nb::module_::import_("numpy").attr("asarray")(ids).attr("tolist")();
  std::vector<int32_t> out;
  if (!nb::try_cast(list, out))
    throw nb::type_error("BpeTokenizer.decode: ids must be a sequence of ints or a 1-d integer array");
  return out;
}

text::BpeTrainOptions train_options(int64_t vocab_size, int64_t min_frequency,
                                    std::optional<std::vector<std::string>> special_tokens) {
  text::BpeTrainOptions o;
  o.vocab_size = vocab_size;
  o.min_frequency = min_frequency;
  if (special_tokens) o.special_tokens = *special_tokens;
  return o;
}

}  // namespace

void bind_text(nb::module_& m) {
  nb::module_ t = m.def_submodule("text", "GPT-2's byte-level BPE tokenizer and token files (kiln::text).");
  t.attr("END_OF_TEXT") = text::kEndOfText;
  t.def("pretokenize", &text::pretokenize, "text"_a, "GPT-2's pre-tokenizer: the pieces each encoded on its own.");
  t.def("read_text", &text::read_text, "path"_a, "A text file's contents, gunzipped when the name ends in .gz.");
  t.attr("JARGON_FILE") = text::kJargonFile;

  nb::class_<text::BpeTokenizer>(t, "BpeTokenizer",
                                 "GPT-2's byte-level BPE as Hugging Face ships it (vocab.json + merges.txt); the "
                                 "same ids as the tokenizers package.")
      .def_static("load", &text::BpeTokenizer::load, "vocab_json"_a, "merges_txt"_a,
                  "special_tokens"_a = std::vector<std::string>{text::kEndOfText},
                  "Reads vocab.json and merges.txt (ValueError naming the file and line).")
      .def_static("train", [](const std::vector<std::string>& texts, int64_t vocab_size, int64_t min_frequency,
                              std::optional<std::vector<std::string>> special_tokens) {
        return text::BpeTokenizer::train(texts, train_options(vocab_size, min_frequency, special_tokens));
      }, "texts"_a, "vocab_size"_a = 50257, "min_frequency"_a = 2, "special_tokens"_a = nb::none(),
         "Learns merges on texts as tokenizers' BpeTrainer (the most frequent pair first).")
      .def_static("train_files", [](const std::vector<std::string>& paths, int64_t vocab_size, int64_t min_frequency,
                                    std::optional<std::vector<std::string>> special_tokens) {
        return text::BpeTokenizer::train_files(paths, train_options(vocab_size, min_frequency, special_tokens));
      }, "paths"_a, "vocab_size"_a = 50257, "min_frequency"_a = 2, "special_tokens"_a = nb::none(),
         "train() over the lines of files.")
      .def("save", &text::BpeTokenizer::save, "vocab_json"_a, "merges_txt"_a,
           "Writes vocab.json and merges.txt as tokenizers' save_model.")
      .def("encode", [](const text::BpeTokenizer& self, std::string_view s, const std::string& special) {
        return self.encode(s, to_special(special));
      }, "text"_a, "special"_a = "allow",
         "Token ids of text; special: 'allow' (default), 'as_text' or 'refuse'.")
      .def("decode", [](const text::BpeTokenizer& self, nb::handle ids) {
        const std::vector<int32_t> v = to_ids(ids);
        return self.decode(v);
      }, "ids"_a, "The text of ids (a character cut between tokens becomes U+FFFD).")
      .def("decode_bytes", [](const text::BpeTokenizer& self, nb::handle ids) {
        const std::vector<int32_t> v = to_ids(ids);
        const std::string b = self.decode_bytes(v);
        return nb::bytes(b.data(), b.size());
      }, "ids"_a, "The raw bytes of ids.")
      .def_prop_ro("vocab_size", &text::BpeTokenizer::vocab_size)
      .def("__len__", &text::BpeTokenizer::vocab_size)
      .def("token_to_id", &text::BpeTokenizer::token_to_id, "token"_a, "The id of a token as vocab.json spells it.")
      .def("id_to_token", &text::BpeTokenizer::id_to_token, "id"_a, "The token of an id as vocab.json spells it.")
      .def("merges", &text::BpeTokenizer::merges, "The merges in rank order.")
      .def("special_id", &text::BpeTokenizer::special_id, "token"_a = text::kEndOfText,
           "The id of a special token, or None.");

  t.def("write_tokens", [](const std::string& path, nb::handle tokens, const std::string& format) {
    const std::vector<int32_t> v = to_ids(tokens);
    text::write_tokens(path, v, *to_format(format));
  }, "path"_a, "tokens"_a, "format"_a = "llmc", "Writes uint16 tokens (llm.c's .bin by default; atomically).");
  t.def("tokenize_to_file", [](const text::BpeTokenizer& tok, std::string_view s, const std::string& path,
                               const std::string& format) {
    return text::tokenize_to_file(tok, s, path, *to_format(format));
  }, "tokenizer"_a, "text"_a, "path"_a, "format"_a = "llmc",
     "Encodes text (after one end-of-text token) into a token file; returns the number of tokens.");

  nb::class_<text::TokenFile>(t, "TokenFile", "A token file mapped read-only (llm.c's .bin or raw uint16).")
      .def("__init__", [](text::TokenFile* self, const std::string& path, std::optional<std::string> format) {
        new (self) text::TokenFile(path, to_format(format));
      }, "path"_a, "format"_a = nb::none(), "format: 'llmc' or 'raw'; by default .bin is llm.c's, else raw.")
      .def("__len__", &text::TokenFile::size)
      .def_prop_ro("path", &text::TokenFile::path)
      .def("window", &text::TokenFile::window, "start"_a, "length"_a,
           "Tokens [start, start + length) as an int64 array.")
      .def("batch", &text::TokenFile::batch, "batch"_a, "seq"_a, "generator"_a,
           "(x, y): batch random windows of seq tokens and their next tokens, offsets drawn from generator "
           "(a kiln.random.Generator).");
}

}  // namespace kiln::python
