// text::BpeTokenizer: loading and saving Hugging Face's vocab.json + merges.txt, encode and decode.
#include "text/bpe.hpp"

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <queue>
#include <sstream>
#include <tuple>

#include "kiln/error.hpp"
#include "kiln/io.hpp"
#include "text/unicode.hpp"

namespace kiln::text {

namespace {

std::string read_file(const std::string& path, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw ValueError("text::BpeTokenizer::load: cannot open the " + what + " file '" + path +
                     "'; pass the path of the file Hugging Face ships (or BpeTokenizer::save wrote)");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

void append_json_string(std::string& out, const std::string& s) {
  out += '"';
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '"')
      out += "\\\"";
    else if (c == '\\')
      out += "\\\\";
    else if (c == '\n')
      out += "\\n";
    else if (c == '\r')
      out += "\\r";
    else if (c == '\t')
      out += "\\t";
    else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += ch;
    }
  }
  out += '"';
}

}  // namespace

void BpeTokenizer::Impl::index(const std::string& source, const std::vector<std::string>& special_tokens) {
  bytes.assign(tokens.size(), std::string());
  for (size_t id = 0; id < tokens.size(); ++id) bytes[id] = detail::token_bytes(tokens[id]);
  for (int b = 0; b < 256; ++b) {
    std::string t;
    detail::append_utf8(t, detail::byte_map().to_char[static_cast<size_t>(b)]);
    auto it = ids.find(t);
    if (it == ids.end())
      throw ValueError("text::BpeTokenizer: " + source + " has no token for byte " + std::to_string(b) + " ('" + t +
                       "'); a byte-level vocabulary holds all 256 (train with tokenizers' ByteLevelBPETokenizer "
                       "or text::BpeTokenizer::train)");
    byte_id[static_cast<size_t>(b)] = it->second;
  }
  merge_of.clear();
  for (size_t r = 0; r < merges.size(); ++r) {
    const auto [a, b] = merges[r];
    auto it = ids.find(tokens[static_cast<size_t>(a)] + tokens[static_cast<size_t>(b)]);
    if (it == ids.end())
      throw ValueError("text::BpeTokenizer: " + source + ": the merge of rank " + std::to_string(r) + ", '" +
                       tokens[static_cast<size_t>(a)] + " " + tokens[static_cast<size_t>(b)] +
                       "' makes a token the vocabulary lacks; vocab.json and merges.txt must come from one model");
    // The first (lowest) rank of a pair wins, as a map built in rank order keeps it.
    merge_of.emplace(merges[r], Merge{static_cast<int32_t>(r), it->second});
  }
  specials.clear();
  for (const std::string& s : special_tokens) {
    auto it = ids.find(s);
    if (it != ids.end() && !s.empty()) specials.emplace_back(s, it->second);
  }
  std::stable_sort(specials.begin(), specials.end(),
                   [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
}

void BpeTokenizer::Impl::encode_piece(std::string_view piece, std::vector<int32_t>& out) const {
  {
    std::lock_guard lock(cache_mutex);
    auto it = cache.find(std::string(piece));
    if (it != cache.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  struct Symbol {
    int32_t id;
    int32_t prev, next;
    bool live;
  };
  const int32_t n = static_cast<int32_t>(piece.size());
  std::vector<Symbol> sym(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i)
    sym[static_cast<size_t>(i)] = {byte_id[static_cast<uint8_t>(piece[static_cast<size_t>(i)])], i - 1,
                                   i + 1 < n ? i + 1 : -1, true};
  // (rank, position, result), smallest first: the lowest rank, then the leftmost pair, as tokenizers' word merge.
  using Entry = std::tuple<int32_t, int32_t, int32_t>;
  std::priority_queue<Entry, std::vector<Entry>, std::greater<>> queue;
  auto push = [&](int32_t pos) {
    if (pos < 0) return;
    const Symbol& s = sym[static_cast<size_t>(pos)];
    if (s.next < 0) return;
    auto it = merge_of.find({s.id, sym[static_cast<size_t>(s.next)].id});
    if (it != merge_of.end()) queue.emplace(it->second.rank, pos, it->second.result);
  };
  for (int32_t i = 0; i + 1 < n; ++i) push(i);
  while (!queue.empty()) {
    const auto [rank, pos, result] = queue.top();
    queue.pop();
    Symbol& s = sym[static_cast<size_t>(pos)];
    if (!s.live || s.next < 0) continue;
    Symbol& right = sym[static_cast<size_t>(s.next)];
    auto it = merge_of.find({s.id, right.id});
    if (it == merge_of.end() || it->second.result != result) continue;  // stale: a neighbour merged first
    s.id = result;
    right.live = false;
    s.next = right.next;
    if (s.next >= 0) sym[static_cast<size_t>(s.next)].prev = pos;
    push(s.prev);
    push(pos);
  }
  std::vector<int32_t> ids_out;
  for (int32_t i = 0; i >= 0 && i < n; i = sym[static_cast<size_t>(i)].next)
    ids_out.push_back(sym[static_cast<size_t>(i)].id);
  out.insert(out.end(), ids_out.begin(), ids_out.end());
  std::lock_guard lock(cache_mutex);
  if (cache.size() >= kCacheCapacity) cache.clear();
  cache.emplace(std::string(piece), std::move(ids_out));
}

BpeTokenizer::BpeTokenizer(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}

BpeTokenizer BpeTokenizer::load(const std::string& vocab_json, const std::string& merges_txt,
                                const std::vector<std::string>& special_tokens) {
  auto impl = std::make_shared<Impl>();
  nlohmann::json vocab;
  try {
    vocab = nlohmann::json::parse(read_file(vocab_json, "vocab.json"));
  } catch (const nlohmann::json::exception& e) {
    throw ValueError("text::BpeTokenizer::load: '" + vocab_json + "' is not valid JSON (" + e.what() +
                     "); pass Hugging Face's vocab.json, a JSON object from token to id");
  }
  if (!vocab.is_object())
    throw ValueError("text::BpeTokenizer::load: '" + vocab_json +
                     "' holds JSON that is not an object; vocab.json maps each token to its id: {\"!\": 0, ...}");
  // The ids of n tokens are 0..n-1 (as every Hugging Face vocab.json numbers them): an id past that is refused
  // before anything is sized by it, so a file naming id 999999999 cannot ask for gigabytes.
  const auto count = static_cast<int64_t>(vocab.size());
  impl->tokens.resize(vocab.size());
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    if (!it.value().is_number_integer() || it.value().get<int64_t>() < 0)
      throw ValueError("text::BpeTokenizer::load: '" + vocab_json + "': the token '" + it.key() + "' has the id " +
                       it.value().dump() + "; ids are non-negative integers");
    if (it.value().get<int64_t>() >= count)
      throw ValueError("text::BpeTokenizer::load: '" + vocab_json + "': the token '" + it.key() + "' has the id " +
                       it.value().dump() + " but the file holds " + std::to_string(count) +
                       " tokens; the ids of n tokens are 0..n-1, each used once");
    const auto id = static_cast<size_t>(it.value().get<int64_t>());
    if (!impl->tokens[id].empty())
      throw ValueError("text::BpeTokenizer::load: '" + vocab_json + "': the tokens '" + impl->tokens[id] + "' and '" +
                       it.key() + "' share the id " + std::to_string(id) + "; each id names one token");
    impl->tokens[id] = it.key();
    impl->ids.emplace(it.key(), static_cast<int32_t>(id));
  }
  const std::string merges = read_file(merges_txt, "merges.txt");
  std::istringstream lines(merges);
  std::string line;
  for (size_t number = 1; std::getline(lines, line); ++number) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || (number == 1 && line.rfind("#version", 0) == 0)) continue;
    const size_t space = line.find(' ');
    if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos || space == 0 ||
        space + 1 == line.size())
      throw ValueError("text::BpeTokenizer::load: '" + merges_txt + "' line " + std::to_string(number) + " is '" +
                       line + "'; each merge is two tokens separated by one space");
    const std::string a = line.substr(0, space), b = line.substr(space + 1);
    for (const std::string* t : {&a, &b})
      if (!impl->ids.count(*t))
        throw ValueError("text::BpeTokenizer::load: '" + merges_txt + "' line " + std::to_string(number) +
                         ": the merge names the token '" + *t + "', which '" + vocab_json +
                         "' lacks; vocab.json and merges.txt must come from one model");
    if (!impl->ids.count(a + b))
      throw ValueError("text::BpeTokenizer::load: '" + merges_txt + "' line " + std::to_string(number) +
                       ": the merge makes the token '" + a + b + "', which '" + vocab_json +
                       "' lacks; vocab.json and merges.txt must come from one model");
    impl->merges.emplace_back(impl->ids.at(a), impl->ids.at(b));
  }
  impl->index("'" + merges_txt + "'", special_tokens);
  return BpeTokenizer(std::move(impl));
}

void BpeTokenizer::save(const std::string& vocab_json, const std::string& merges_txt) const {
  std::string v = "{";
  bool first = true;
  for (size_t id = 0; id < impl_->tokens.size(); ++id) {
    if (impl_->tokens[id].empty()) continue;
    if (!first) v += ',';
    first = false;
    append_json_string(v, impl_->tokens[id]);
    v += ':' + std::to_string(id);
  }
  v += '}';
  std::string m = "#version: 0.2\n";
  for (const auto& [a, b] : impl_->merges)
    m += impl_->tokens[static_cast<size_t>(a)] + ' ' + impl_->tokens[static_cast<size_t>(b)] + '\n';
  write_file_atomically(vocab_json, {{v.data(), v.size()}}, "text::BpeTokenizer::save");
  write_file_atomically(merges_txt, {{m.data(), m.size()}}, "text::BpeTokenizer::save");
}

std::vector<int32_t> BpeTokenizer::encode(std::string_view text, Special special) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 1);
  auto encode_segment = [&](std::string_view segment) {
    for (const std::string& piece : pretokenize(segment)) impl_->encode_piece(piece, out);
  };
  if (special == Special::as_text || impl_->specials.empty()) {
    encode_segment(text);
    return out;
  }
  size_t start = 0;
  while (start < text.size()) {
    // The earliest special token from `start` (the longest of those starting there).
    size_t best = std::string_view::npos;
    const std::pair<std::string, int32_t>* found = nullptr;
    for (const auto& s : impl_->specials) {
      const size_t at = text.find(s.first, start);
      if (at < best) best = at, found = &s;
    }
    if (!found) break;
    if (special == Special::refuse)
      throw ValueError("text::BpeTokenizer::encode: the text holds the special token '" + found->first + "' at byte " +
                       std::to_string(best) +
                       "; pass Special::allow to encode it as its id, or Special::as_text to encode it as text");
    encode_segment(text.substr(start, best - start));
    out.push_back(found->second);
    start = best + found->first.size();
  }
  if (start < text.size()) encode_segment(text.substr(start));
  return out;
}

std::string BpeTokenizer::decode_bytes(std::span<const int32_t> ids) const {
  std::string out;
  for (int32_t id : ids) {
    if (id < 0 || static_cast<size_t>(id) >= impl_->tokens.size() || impl_->tokens[static_cast<size_t>(id)].empty())
      throw ValueError("text::BpeTokenizer::decode: the id " + std::to_string(id) + " is not in the vocabulary of " +
                       std::to_string(vocab_size()) + " ids; decode ids this tokenizer's encode gave");
    out += impl_->bytes[static_cast<size_t>(id)];
  }
  return out;
}

std::string BpeTokenizer::decode(std::span<const int32_t> ids) const { return utf8_replace_invalid(decode_bytes(ids)); }

int64_t BpeTokenizer::vocab_size() const { return static_cast<int64_t>(impl_->tokens.size()); }

std::optional<int32_t> BpeTokenizer::token_to_id(std::string_view token) const {
  auto it = impl_->ids.find(std::string(token));
  if (it == impl_->ids.end()) return std::nullopt;
  return it->second;
}

const std::string& BpeTokenizer::id_to_token(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= impl_->tokens.size() || impl_->tokens[static_cast<size_t>(id)].empty())
    throw ValueError("text::BpeTokenizer::id_to_token: the id " + std::to_string(id) + " is not in the vocabulary of " +
                     std::to_string(vocab_size()) + " ids");
  return impl_->tokens[static_cast<size_t>(id)];
}

std::vector<std::pair<std::string, std::string>> BpeTokenizer::merges() const {
  std::vector<std::pair<std::string, std::string>> out;
  out.reserve(impl_->merges.size());
  for (const auto& [a, b] : impl_->merges)
    out.emplace_back(impl_->tokens[static_cast<size_t>(a)], impl_->tokens[static_cast<size_t>(b)]);
  return out;
}

std::optional<int32_t> BpeTokenizer::special_id(std::string_view token) const {
  for (const auto& [text, id] : impl_->specials)
    if (text == token) return id;
  return std::nullopt;
}

}  // namespace kiln::text
