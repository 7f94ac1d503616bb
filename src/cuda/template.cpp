// fill_template: one pass over the template, each `${name}` looked up among the values (a handful per
// template, so a linear search), the errors collected so one message names every bad placeholder.
#include "cuda/template.hpp"

#include <algorithm>
#include <mutex>
#include <set>

#include "kiln/error.hpp"

namespace kiln::cuda_impl {
namespace {

bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

std::mutex& filled_mutex() {
  static std::mutex mutex;
  return mutex;
}
std::set<std::string, std::less<>>& filled_files() {
  static std::set<std::string, std::less<>> files;
  return files;
}

std::string join(const std::vector<std::string>& names) {
  std::string s;
  for (const std::string& name : names) s += (s.empty() ? "" : ", ") + ("${" + name + "}");
  return s;
}

template <class Values>
std::string fill(std::string_view file, std::string_view text, const Values& values) {
  const auto fail = [&](const std::string& what) {
    throw Error("internal error: kernel template " + std::string(file) + ": " + what + " (src/cuda/kernels/" +
                std::string(file) + " and its generator disagree)");
  };
  std::vector<const TemplateValue*> list;
  for (const TemplateValue& v : values) {
    for (const TemplateValue* seen : list)
      if (seen->name == v.name) fail("placeholder ${" + std::string(v.name) + "} is given twice");
    list.push_back(&v);
  }
  std::vector<bool> used(list.size(), false);
  std::vector<std::string> unfilled;
  std::string out;
  out.reserve(text.size() + 256);
  size_t at = 0;
  while (at < text.size()) {
    const size_t open = text.find("${", at);
    if (open == std::string_view::npos) {
      out.append(text.substr(at));
      break;
    }
    out.append(text.substr(at, open - at));
    size_t end = open + 2;
    while (end < text.size() && is_name_char(text[end])) ++end;
    if (end == open + 2 || end >= text.size() || text[end] != '}')
      fail("a '${' at byte " + std::to_string(open) + " does not open a ${name} placeholder");
    const std::string_view name = text.substr(open + 2, end - open - 2);
    size_t k = 0;
    while (k < list.size() && list[k]->name != name) ++k;
    if (k == list.size()) {
      if (std::find(unfilled.begin(), unfilled.end(), name) == unfilled.end()) unfilled.emplace_back(name);
    } else {
      used[k] = true;
      out += list[k]->value;
    }
    at = end + 1;
  }
  if (!unfilled.empty()) fail("no value for placeholder(s) " + join(unfilled));
  std::vector<std::string> unknown;
  for (size_t k = 0; k < list.size(); ++k)
    if (!used[k]) unknown.emplace_back(list[k]->name);
  if (!unknown.empty()) fail("value(s) for unknown placeholder(s) " + join(unknown));
  {
    std::lock_guard<std::mutex> lock(filled_mutex());
    if (filled_files().find(file) == filled_files().end()) filled_files().emplace(file);
  }
  return out;
}

}  // namespace

std::string fill_template(std::string_view file, std::string_view text, std::initializer_list<TemplateValue> values) {
  return fill(file, text, values);
}

std::string fill_template(std::string_view file, std::string_view text, const std::vector<TemplateValue>& values) {
  return fill(file, text, values);
}

std::vector<std::string> filled_template_files() {
  std::lock_guard<std::mutex> lock(filled_mutex());
  return {filled_files().begin(), filled_files().end()};
}

}  // namespace kiln::cuda_impl
