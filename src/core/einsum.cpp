// kiln::einsum (kiln/numpy_extra.hpp), NumPy's notation composed of differentiable ops: a label repeated in
// one operand becomes a diagonal view, a label no one else needs is summed away at once, and operands are
// contracted two at a time with one matmul each (batch labels, then the free labels of each side, the summed
// labels in between: the layout of a batched GEMM). With 3 or more operands the pair contracted next is the
// one that removes the most elements (result size less both operands' sizes), as opt_einsum's 'greedy'.
#include <algorithm>
#include <string>

#include "kiln/error.hpp"
#include "kiln/numpy_extra.hpp"
#include "kiln/ops.hpp"

namespace kiln {
namespace {

/// Letters are labels 'A'..'z' by their character code; broadcast (ellipsis) axes get labels from kEllipsis,
/// right-aligned across the operands so that they broadcast as NumPy's do.
constexpr int kEllipsis = 256;

using Labels = std::vector<int>;

struct Term {
  Array array;
  Labels labels;
};

struct Parsed {
  std::vector<Labels> inputs;  // with ellipsis axes expanded to their labels
  Labels output;
};

std::string label_str(int label) {
  if (label >= kEllipsis) return "... axis " + std::to_string(label - kEllipsis);
  return std::string("'") + static_cast<char>(label) + "'";
}

bool is_letter(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

/// One term's labels with -1 where "..." stands; ValueError for other characters or two ellipses.
Labels parse_term(const std::string& term, const std::string& subscripts) {
  Labels out;
  bool ellipsis = false;
  for (size_t i = 0; i < term.size(); ++i) {
    const char c = term[i];
    if (c == '.') {
      if (term.compare(i, 3, "...") != 0 || ellipsis)
        throw ValueError("einsum: '" + subscripts + "' has a '.' that is not one '...' in the term '" + term +
                         "'; write at most one '...' per operand");
      ellipsis = true;
      out.push_back(-1);
      i += 2;
    } else if (is_letter(c)) {
      out.push_back(c);
    } else {
      throw ValueError("einsum: '" + subscripts + "' has the character '" + std::string(1, c) +
                       "'; subscripts are letters a-z, A-Z, '...', ',' and '->'");
    }
  }
  return out;
}

std::vector<std::string> split_terms(const std::string& s) {
  std::vector<std::string> out(1);
  for (char c : s) {
    if (c == ',') out.emplace_back();
    else out.back() += c;
  }
  return out;
}

Parsed parse(std::string_view text, const std::vector<Array>& operands) {
  std::string subscripts;
  for (char c : text)
    if (c != ' ') subscripts += c;
  const size_t arrow = subscripts.find("->");
  const std::string lhs = subscripts.substr(0, arrow);
  const std::vector<std::string> terms = split_terms(lhs);
  if (terms.size() != operands.size())
    throw ValueError("einsum: '" + subscripts + "' names " + std::to_string(terms.size()) + " operand(s) but " +
                     std::to_string(operands.size()) + " were given; write one comma-separated term per operand");
  Parsed p;
  int ellipsis_rank = 0;
  std::vector<Labels> raw;
  for (size_t i = 0; i < terms.size(); ++i) {
    if (!operands[i].defined()) throw ValueError("einsum: operand " + std::to_string(i) + " is undefined");
    raw.push_back(parse_term(terms[i], subscripts));
    const int64_t named = static_cast<int64_t>(std::count_if(raw[i].begin(), raw[i].end(), [](int l) { return l >= 0; }));
    const bool has_ellipsis = named != static_cast<int64_t>(raw[i].size());
    const int64_t ndim = operands[i].ndim();
    if (ndim < named || (!has_ellipsis && ndim != named))
      throw ShapeError("einsum: operand " + std::to_string(i) + " has shape " + shape_str(operands[i].shape()) +
                       " but its subscripts '" + terms[i] + "' name " + std::to_string(named) + " axes" +
                       (has_ellipsis ? " and more" : "") + "; give one label per axis (or '...' for the rest)");
    if (has_ellipsis) ellipsis_rank = std::max(ellipsis_rank, static_cast<int>(ndim - named));
  }
  for (size_t i = 0; i < raw.size(); ++i) {
    Labels labels;
    const int count = static_cast<int>(operands[i].ndim() - static_cast<int64_t>(raw[i].size()) + 1);
    for (int l : raw[i]) {
      if (l >= 0) {
        labels.push_back(l);
      } else {
        for (int k = 0; k < count; ++k) labels.push_back(kEllipsis + ellipsis_rank - count + k);
      }
    }
    p.inputs.push_back(std::move(labels));
  }
  if (arrow != std::string::npos) {
    const std::string rhs = subscripts.substr(arrow + 2);
    const Labels out = parse_term(rhs, subscripts);
    bool out_ellipsis = false;
    for (int l : out) {
      if (l < 0) {
        out_ellipsis = true;
        for (int k = 0; k < ellipsis_rank; ++k) p.output.push_back(kEllipsis + k);
        continue;
      }
      if (std::find(p.output.begin(), p.output.end(), l) != p.output.end())
        throw ValueError("einsum: the output '" + rhs + "' of '" + subscripts + "' repeats " + label_str(l) +
                         "; name each output axis once");
      bool seen = false;
      for (const Labels& in : p.inputs) seen = seen || std::find(in.begin(), in.end(), l) != in.end();
      if (!seen)
        throw ValueError("einsum: the output '" + rhs + "' of '" + subscripts + "' names " + label_str(l) +
                         ", which no operand has; output labels must appear in the inputs");
      p.output.push_back(l);
    }
    if (ellipsis_rank > 0 && !out_ellipsis)
      throw ValueError("einsum: the operands of '" + subscripts + "' have " + std::to_string(ellipsis_rank) +
                       " broadcast ('...') axes but the output has no '...'; add '...' to the output");
  } else {
    // Implicit output: the broadcast axes, then the labels used once, in ASCII order.
    for (int k = 0; k < ellipsis_rank; ++k) p.output.push_back(kEllipsis + k);
    for (int l = 'A'; l <= 'z'; ++l) {
      int uses = 0;
      for (const Labels& in : p.inputs) uses += static_cast<int>(std::count(in.begin(), in.end(), l));
      if (uses == 1) p.output.push_back(l);
    }
  }
  return p;
}

int64_t term_size(const Labels& labels, const std::vector<int64_t>& extent) {
  int64_t n = 1;
  for (int l : labels) n *= extent[static_cast<size_t>(l)];
  return n;
}

bool contains(const Labels& labels, int l) { return std::find(labels.begin(), labels.end(), l) != labels.end(); }

/// Sums the axes of t whose labels `keep` does not list.
void sum_unneeded(Term& t, const Labels& keep) {
  Shape axes;
  Labels left;
  for (size_t d = 0; d < t.labels.size(); ++d) {
    if (contains(keep, t.labels[d])) left.push_back(t.labels[d]);
    else axes.push_back(static_cast<int64_t>(d));
  }
  if (axes.empty()) return;
  t.array = sum(t.array, axes);
  t.labels = left;
}

/// Labels that the output or any term other than i and j still needs.
Labels needed(const std::vector<Term>& terms, size_t i, size_t j, const Labels& output) {
  Labels keep = output;
  for (size_t k = 0; k < terms.size(); ++k)
    if (k != i && k != j) keep.insert(keep.end(), terms[k].labels.begin(), terms[k].labels.end());
  return keep;
}

/// The labels of the product of a and b: batch labels (in both, still needed), then a's and b's own.
Labels product_labels(const Labels& a, const Labels& b, const Labels& keep, Labels* batch, Labels* own_a,
                      Labels* own_b, Labels* summed) {
  Labels out;
  for (int l : a) {
    if (contains(b, l)) (contains(keep, l) ? *batch : *summed).push_back(l);
    else if (contains(keep, l)) own_a->push_back(l);
  }
  for (int l : b)
    if (!contains(a, l) && contains(keep, l)) own_b->push_back(l);
  out = *batch;
  out.insert(out.end(), own_a->begin(), own_a->end());
  out.insert(out.end(), own_b->begin(), own_b->end());
  return out;
}

/// t's axes permuted to `order` and merged into `merged` (batch, rows, columns) for one matmul.
Array arrange(const Term& t, const Labels& order, const Shape& merged) {
  Shape perm;
  for (int l : order)
    perm.push_back(static_cast<int64_t>(std::find(t.labels.begin(), t.labels.end(), l) - t.labels.begin()));
  return reshape(permute(t.array, perm), merged);
}

Term contract(Term a, Term b, const Labels& keep, const std::vector<int64_t>& extent) {
  Labels keep_a = keep, keep_b = keep;
  keep_a.insert(keep_a.end(), b.labels.begin(), b.labels.end());
  keep_b.insert(keep_b.end(), a.labels.begin(), a.labels.end());
  sum_unneeded(a, keep_a);
  sum_unneeded(b, keep_b);
  Labels batch, own_a, own_b, summed;
  const Labels labels = product_labels(a.labels, b.labels, keep, &batch, &own_a, &own_b, &summed);
  const int64_t nb = term_size(batch, extent), na = term_size(own_a, extent), nbb = term_size(own_b, extent),
                ns = term_size(summed, extent);
  Labels order_a = batch, order_b = batch;
  order_a.insert(order_a.end(), own_a.begin(), own_a.end());
  order_a.insert(order_a.end(), summed.begin(), summed.end());
  order_b.insert(order_b.end(), summed.begin(), summed.end());
  order_b.insert(order_b.end(), own_b.begin(), own_b.end());
  const Array left = arrange(a, order_a, {nb, na, ns});
  const Array right = arrange(b, order_b, {nb, ns, nbb});
  Shape shape;
  for (int l : labels) shape.push_back(extent[static_cast<size_t>(l)]);
  return {matmul(left, right).reshape(shape), labels};
}

}  // namespace

Array einsum(std::string_view subscripts, const std::vector<Array>& operands) {
  if (operands.empty()) throw ValueError("einsum: no operands; pass at least one array");
  const Parsed p = parse(subscripts, operands);
  const std::string text(subscripts);
  DType result_type = operands[0].dtype();
  for (const Array& a : operands) result_type = promote_types(result_type, a.dtype());

  // Each label's extent: equal in every use, or 1 (broadcast).
  std::vector<int64_t> extent(kEllipsis + 64, 1);
  std::vector<int> first_use(extent.size(), -1);
  for (size_t i = 0; i < operands.size(); ++i)
    for (size_t d = 0; d < p.inputs[i].size(); ++d) {
      const int l = p.inputs[i][d];
      const int64_t e = operands[i].shape()[d];
      int64_t& known = extent[static_cast<size_t>(l)];
      int& owner = first_use[static_cast<size_t>(l)];
      if (owner == static_cast<int>(i) && e != known)
        throw ShapeError("einsum: " + label_str(l) + " repeats in operand " + std::to_string(i) + " (shape " +
                         shape_str(operands[i].shape()) + ") over axes of extents " + std::to_string(known) +
                         " and " + std::to_string(e) + "; a diagonal needs equal extents");
      if (owner >= 0 && e != known && e != 1 && known != 1)
        throw ShapeError("einsum: " + label_str(l) + " of '" + text + "' has extent " + std::to_string(known) +
                         " in operand " + std::to_string(owner) + " (shape " +
                         shape_str(operands[static_cast<size_t>(owner)].shape()) + ") but " + std::to_string(e) +
                         " in operand " + std::to_string(i) + " (shape " + shape_str(operands[i].shape()) +
                         "); a label's axes must have one extent (or 1, to broadcast)");
      if (owner < 0 || known == 1) {
        known = e;
        owner = static_cast<int>(i);
      }
    }

  std::vector<Term> terms;
  for (size_t i = 0; i < operands.size(); ++i) {
    Term t{operands[i], p.inputs[i]};
    // A label repeated within one operand: its diagonal (a view), moved last.
    for (size_t d = 0; d < t.labels.size(); ++d) {
      for (size_t e = d + 1; e < t.labels.size(); ++e) {
        if (t.labels[e] != t.labels[d]) continue;
        const int l = t.labels[d];
        if (t.array.shape()[d] != t.array.shape()[e])
          throw ShapeError("einsum: " + label_str(l) + " repeats in operand " + std::to_string(i) + " (shape " +
                           shape_str(operands[i].shape()) + ") over axes of extents " +
                           std::to_string(t.array.shape()[d]) + " and " + std::to_string(t.array.shape()[e]) +
                           "; a diagonal needs equal extents");
        t.array = diagonal(t.array, 0, static_cast<int64_t>(d), static_cast<int64_t>(e));
        t.labels.erase(t.labels.begin() + static_cast<int64_t>(e));
        t.labels.erase(t.labels.begin() + static_cast<int64_t>(d));
        t.labels.push_back(l);
        d = static_cast<size_t>(-1);  // rescan from the start
        break;
      }
    }
    // Size-1 axes of a broadcast label stretched to its extent.
    Shape full_shape;
    for (int l : t.labels) full_shape.push_back(extent[static_cast<size_t>(l)]);
    if (!(full_shape == t.array.shape())) t.array = broadcast_to(t.array, full_shape);
    terms.push_back(std::move(t));
  }
  for (size_t i = 0; i < terms.size(); ++i) sum_unneeded(terms[i], needed(terms, i, i, p.output));

  while (terms.size() > 1) {
    size_t best_i = 0, best_j = 1;
    int64_t best_cost = 0, best_size = 0;
    bool found = false;
    for (size_t i = 0; i < terms.size(); ++i)
      for (size_t j = i + 1; j < terms.size(); ++j) {
        Labels batch, own_a, own_b, summed;
        const Labels keep = needed(terms, i, j, p.output);
        const int64_t size = term_size(
            product_labels(terms[i].labels, terms[j].labels, keep, &batch, &own_a, &own_b, &summed), extent);
        const int64_t cost = size - term_size(terms[i].labels, extent) - term_size(terms[j].labels, extent);
        if (!found || cost < best_cost || (cost == best_cost && size < best_size)) {
          found = true;
          best_i = i;
          best_j = j;
          best_cost = cost;
          best_size = size;
        }
      }
    const Labels keep = needed(terms, best_i, best_j, p.output);
    Term product = contract(terms[best_i], terms[best_j], keep, extent);
    terms.erase(terms.begin() + static_cast<int64_t>(best_j));
    terms.erase(terms.begin() + static_cast<int64_t>(best_i));
    terms.push_back(std::move(product));
  }

  Term& t = terms[0];
  sum_unneeded(t, p.output);
  Shape perm;
  for (int l : p.output)
    perm.push_back(static_cast<int64_t>(std::find(t.labels.begin(), t.labels.end(), l) - t.labels.begin()));
  Array out = permute(t.array, perm);
  return out.dtype() == result_type ? out : out.astype(result_type);
}

}  // namespace kiln
