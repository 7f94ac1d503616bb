// The step compiler's fusion pass (core/step_trace.hpp, fuse_step_trace): elementwise work merged into the
// elementwise or fused call whose result it reads, over a finished trace of kiln::compile.
//
// A pair (P, E) merges when
//   - E is an elementwise call of array operands only (no scalar operand, not a nullary op) over the shape of
//     one of P's full results X, reading X as that very view;
//   - P is an elementwise call of array operands, or a fused call whose X is a full (not reduced) result;
//   - X's storage was made by the step, only P and E use it, and nothing outside the record holds it (the step's
//     own storage of it has expired: not an output of the step, not an array the user's code or a Python object
//     keeps);
//   - no call between P and E uses the memory of E's other operands or of its result (E's work moves up to P's
//     place), or none writes what P reads nor uses P's other results (P's moves down to E's), and E's
//     result overlaps none of the merged call's inputs unless it is the very view of one of them in a graph
//     without reductions (an in-place accumulation, as the unfused kernels allow).
// The merged call runs one FusionGraph: P's graph (or P's op as a one-node graph) with E's op appended, E's
// result in X's place among the outputs. Each node keeps its dtype, so the values round where the unfused
// results were stored and the replays give the unfused calls' bits. A backend that declines the merged graph
// (Backend::fused returns false) runs the two recorded calls instead.
#include <algorithm>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/backend.hpp"
#include "core/fusion.hpp"
#include "core/op_table.hpp"
#include "core/step_trace.hpp"

namespace kiln::detail {
namespace {

/// Whether `c` uses memory of `s` (the trace's arrays reuse the memory of those the step dropped: two storages
/// may share bytes at different times).
bool touches(const TracedCall& c, const Storage* s) {
  return std::any_of(c.storages.begin(), c.storages.end(), [&](const Storage* u) { return same_memory(u, s); });
}

/// Whether `c` may write memory of `s` (any it uses, where its recorder did not name its outputs).
bool writes(const TracedCall& c, const Storage* s) {
  if (!c.writes_known) return touches(c, s);
  return std::any_of(c.written.begin(), c.written.end(), [&](const Storage* w) { return same_memory(w, s); });
}

/// Whether `a` and `b` touch common bytes, whichever storages they are views of (the record's aliases of reused
/// memory are different storages over the same bytes).
bool bytes_overlap(const Array& a, const Array& b) {
  if (!a.defined() || !b.defined() || !(a.device() == b.device())) return false;
  const auto [alo, ahi] = byte_range(a);
  const auto [blo, bhi] = byte_range(b);
  return alo < bhi && blo < ahi;
}

/// `a` as a view of shape `shape`: itself, or the same C-contiguous elements seen in that shape; undefined
/// when neither (an array of another size or layout).
Array as_shape(const Array& a, const Shape& shape) {
  if (a.shape() == shape) return a;
  if (!a.is_contiguous() || a.size() != shape_numel(shape)) return Array();
  return Array(a.storage(), shape, contiguous_strides(shape), a.offset(), a.dtype());
}

/// `a` reads the very elements of `x` in the same order (the same view, or both C-contiguous from one place).
bool same_elements(const Array& a, const Array& x) {
  return same_view(a, x) || (a.storage() == x.storage() && a.offset() == x.offset() && a.dtype() == x.dtype() &&
                             a.size() == x.size() && a.is_contiguous() && x.is_contiguous());
}

/// P's results over its whole shape: (array, output index of the merged graph); for an elementwise P its out.
std::vector<std::pair<Array, int>> full_results(const TracedCall& p) {
  std::vector<std::pair<Array, int>> r;
  if (p.elementwise) {
    r.emplace_back(p.elementwise->call.out, 0);
  } else if (p.fused && p.fused->graph->reduce < 0) {
    const FusionCall& call = p.fused->call;
    for (size_t k = 0; k < call.outs.size(); ++k)
      if (!p.fused->graph->staged || (k < call.full.size() && call.full[k]))
        r.emplace_back(call.outs[k], static_cast<int>(k));
  }
  return r;
}

/// An Op node of `e`'s op reading `inputs`, typed as the recorded call was.
FusionNode op_node(const ElementwiseCall& e, const int* inputs, int ndim) {
  FusionNode n;
  n.kind = FusionNodeKind::Op;
  n.op = e.op;
  n.num_inputs = e.num_inputs;
  for (int k = 0; k < e.num_inputs; ++k) n.inputs[k] = inputs[k];
  n.compute = e.compute;
  n.dtype = e.out.dtype();
  n.ndim = ndim;
  return n;
}

int add_argument(FusionGraph& g, const Array& a, int ndim) {
  FusionNode n;
  n.kind = FusionNodeKind::Argument;
  n.argument = g.num_arguments++;
  n.dtype = a.dtype();
  n.ndim = ndim;
  g.argument_is_array.push_back(true);
  g.nodes.push_back(n);
  return static_cast<int>(g.nodes.size()) - 1;
}

bool only_arrays(const ElementwiseCall& e) {
  if (e.num_inputs < 1) return false;
  for (int k = 0; k < e.num_inputs; ++k)
    if (e.inputs[static_cast<size_t>(k)].is_scalar()) return false;
  return true;
}

/// P as a fused call: itself, or its elementwise op as a graph of one op over its arrays.
std::shared_ptr<RecordedFused> as_fused(const TracedCall& p) {
  if (p.fused) return p.fused;
  const ElementwiseCall& e = p.elementwise->call;
  auto g = std::make_shared<FusionGraph>();
  g->name = op_info(e.op).name;
  const Shape& shape = e.out.shape();
  const int ndim = static_cast<int>(shape.size());
  auto r = std::make_shared<RecordedFused>();
  int inputs[3] = {-1, -1, -1};
  for (int k = 0; k < e.num_inputs; ++k) {
    inputs[k] = add_argument(*g, *e.inputs[static_cast<size_t>(k)].array, ndim);
    r->arrays.push_back(e.inputs[static_cast<size_t>(k)].array->broadcast_to(shape));
  }
  g->nodes.push_back(op_node(e, inputs, ndim));
  g->outputs = {static_cast<int>(g->nodes.size()) - 1};
  finish_fusion_graph(*g);
  r->graph = g;
  r->call.graph = g.get();
  r->call.shape = shape;
  r->call.outs = {e.out};
  r->call.full.assign(1, true);  // not = {true}: g++ 13 warns (-Warray-bounds) on vector<bool> from a list
  for (const Array& a : r->arrays) {
    r->call.arrays.push_back(nullptr);
    r->call.aliased = r->call.aliased || same_view(a, e.out);
  }
  for (size_t i = 0; i < r->arrays.size(); ++i) r->call.arrays[i] = &r->arrays[i];
  return r;
}

/// Tries to merge calls[j] (E) into calls[i] (P), in i's place (E's work moves up) or, when `down`, in j's
/// (P's moves down); true when it did (the other place is then the caller's to drop).
/// `unused(a)`: a result of P that nothing reads and nothing outside the record holds, which the merged call
/// need not write (its memory may be E's result's by now).
bool merge(StepTrace& t, size_t i, size_t j, const Array& x, int output, bool down,
           const std::function<bool(const Array&)>& unused) {
  TracedCall& p = t.calls[i];
  const TracedCall& ecall = t.calls[j];
  const ElementwiseCall& e = ecall.elementwise->call;
  const std::shared_ptr<RecordedFused> base = as_fused(p);
  const FusionCall& pc = base->call;
  const Array e_out = as_shape(e.out, pc.shape);
  if (!e_out.defined()) return false;
  // E's operands: X (as P's result node) or new arguments; E's result must not overlap what the merged call
  // reads, except as the very view of an operand in a graph without reductions.
  const FusionGraph& pg = *base->graph;
  auto g = std::make_shared<FusionGraph>();
  g->name = pg.name + "+" + op_info(e.op).name;
  g->nodes = pg.nodes;
  g->slots = pg.slots;
  g->outputs = pg.outputs;
  g->num_arguments = pg.num_arguments;
  g->argument_is_array = pg.argument_is_array;
  auto r = std::make_shared<RecordedFused>();
  r->arrays = base->arrays;
  r->call = pc;
  const int x_node = pg.outputs[static_cast<size_t>(output)];
  // P's unused results leave the merged graph (a layer norm's mean and 1/std when no backward keeps them).
  const bool per_output = pc.full.size() == pc.outs.size();
  g->outputs.clear();
  r->call.outs.clear();
  r->call.full.clear();
  for (size_t k = 0; k < pc.outs.size(); ++k) {
    if (static_cast<int>(k) != output && unused(pc.outs[k])) continue;
    if (static_cast<int>(k) == output) output = static_cast<int>(g->outputs.size());
    g->outputs.push_back(pg.outputs[k]);
    r->call.outs.push_back(pc.outs[k]);
    if (per_output) r->call.full.push_back(pc.full[k]);
  }
  if (!per_output) r->call.full = pc.full;
  const int ndim = static_cast<int>(pc.shape.size());
  int inputs[3] = {-1, -1, -1};
  bool aliased = pc.aliased;
  for (int k = 0; k < e.num_inputs; ++k) {
    const Array& a = *e.inputs[static_cast<size_t>(k)].array;
    if (same_elements(a, x)) {
      inputs[k] = x_node;
      continue;
    }
    if (a.storage() == x.storage()) return false;  // another view of X: not the merged kernel's value
    // E's own shape, when it differs from P's, only as the same elements in the same order (a reshape).
    const Array in_shape = e.out.shape() == pc.shape ? a.broadcast_to(pc.shape) : as_shape(a, pc.shape);
    if (!in_shape.defined()) return false;
    inputs[k] = add_argument(*g, in_shape, ndim);
    r->arrays.push_back(in_shape);
  }
  for (const Array& a : r->arrays) {
    if (!a.defined() || !bytes_overlap(a, e_out)) continue;
    if (pg.reduce >= 0 || pg.staged || !same_view(a, e_out)) return false;
    aliased = true;
  }
  for (size_t k = 0; k < r->call.outs.size(); ++k)
    if (static_cast<int>(k) != output && bytes_overlap(r->call.outs[k], e_out)) return false;
  g->nodes.push_back(op_node(e, inputs, ndim));
  g->outputs[static_cast<size_t>(output)] = static_cast<int>(g->nodes.size()) - 1;
  finish_fusion_graph(*g);
  r->graph = g;
  r->call.graph = g.get();
  r->call.outs[static_cast<size_t>(output)] = e_out;
  r->call.aliased = aliased;
  r->call.arrays.assign(r->arrays.size(), nullptr);
  for (size_t k = 0; k < r->arrays.size(); ++k)
    if (r->arrays[k].defined()) r->call.arrays[k] = &r->arrays[k];

  // The merged call takes P's place; its replay falls back to the two calls where the backend declines it.
  TracedCall merged;
  merged.name = "fused " + g->name;
  merged.detail = p.detail + " |" + ecall.detail;
  merged.writes_known = true;
  for (const TracedCall* c : {static_cast<const TracedCall*>(&p), &ecall}) {
    for (const Storage* u : c->storages)
      if (u != x.storage().get()) merged.storages.push_back(u);
    for (const Storage* w : c->written)
      if (w != x.storage().get()) merged.written.push_back(w);
  }
  merged.fused = r;
  merged.backend = p.backend;
  auto parts = std::make_shared<std::vector<std::function<void()>>>(
      std::vector<std::function<void()>>{p.replay, ecall.replay});
  merged.replay = [r, backend = p.backend, parts] {
    if (!backend->fused(r->call))
      for (const auto& part : *parts) part();
  };
  t.calls[down ? j : i] = std::move(merged);
  return true;
}

/// Removes the calls marked `gone` (merged into others), keeping the order of the rest.
void drop_gone(StepTrace& t, const std::vector<bool>& gone) {
  size_t w = 0;
  for (size_t k = 0; k < t.calls.size(); ++k) {
    if (gone[k]) continue;
    if (w != k) t.calls[w] = std::move(t.calls[k]);
    ++w;
  }
  t.calls.resize(w);
}

/// The calls that use each storage, in order.
std::unordered_map<const Storage*, std::vector<size_t>> users_of_storages(const StepTrace& t) {
  std::unordered_map<const Storage*, std::vector<size_t>> users_of;
  for (size_t k = 0; k < t.calls.size(); ++k)
    for (const Storage* s : t.calls[k].storages) {
      std::vector<size_t>& u = users_of[s];
      if (u.empty() || u.back() != k) u.push_back(k);
    }
  return users_of;
}

/// Whether X's storage `s` is the step's own and nothing outside the record holds it (not an output of the step,
/// not an array the user's code or a Python object keeps): the step's own storage of it has expired.
bool dead_after_step(const StepTrace& t, const Storage* s) {
  if (!s || !t.created.count(s)) return false;
  const auto made = t.made.find(s);
  return made != t.made.end() && made->second.expired();
}

/// Where P (calls[i]) and E (calls[j]), which meet over P's result X (storage `s`), may run as one call: `up` (in
/// P's place) when no call between them uses E's storages but X; `down` (in E's) when none uses P's other results
/// or writes what P reads. Calls marked `gone` were merged away.
std::pair<bool, bool> placements(const StepTrace& t, const std::vector<bool>& gone, size_t i, size_t j,
                                 const Storage* s) {
  const TracedCall &p = t.calls[i], &e = t.calls[j];
  bool up = true, down = true;
  for (size_t k = i + 1; k < j && (up || down); ++k) {
    if (gone[k]) continue;
    for (const Storage* es : e.storages) up = up && (es == s || !touches(t.calls[k], es));
    for (const Storage* ps : p.storages) {
      const bool result = std::find(p.written.begin(), p.written.end(), ps) != p.written.end();
      if (ps != s) down = down && !(result ? touches(t.calls[k], ps) : writes(t.calls[k], ps));
    }
  }
  return {up, down};
}

/// Products whose result only gelu_tanh's gradient reads (AddmmGeluBackward's `g * gelu_tanh'(pre)` after the
/// product that makes g) become one product with that gradient as its epilogue (MatmulCall::gelu_grad_of), where
/// the backend folds it: the product's result is never written. The folded call takes the product's place when
/// no call between them uses the pre-activation or the gradient's memory; the gradient's place when none writes
/// the product's operands. Its replay runs the two recorded calls where the backend declines. Returns the number
/// of calls folded away.
int64_t fold_gelu_grads(StepTrace& t) {
  const size_t n = t.calls.size();
  std::vector<bool> gone(n, false);
  const auto users_of = users_of_storages(t);
  int64_t folded = 0;
  for (size_t i = 0; i < n; ++i) {
    const TracedCall& m = t.calls[i];
    if (!m.matmul || !m.backend || m.matmul->call.bias || m.matmul->call.pre_gelu) continue;
    const Array& x = m.matmul->call.out;
    const Storage* s = x.storage().get();
    if (!m.backend->folds_gelu_grad(x.dtype()) || !x.is_contiguous() || !dead_after_step(t, s)) continue;
    const auto u = users_of.find(s);
    if (u == users_of.end() || u->second.size() != 2 || u->second[0] != i) continue;
    const size_t j = u->second[1];
    const TracedCall& e = t.calls[j];
    if (!e.fused || e.backend != m.backend || e.fused->graph->name != "gelu_tanh_backward") continue;
    const FusionCall& ec = e.fused->call;
    if (ec.outs.size() != 1 || e.fused->arrays.size() != 2) continue;
    const Array &g = e.fused->arrays[0], &pre = e.fused->arrays[1], &out = ec.outs[0];
    if (!same_elements(g, x) || !pre.is_contiguous() || !out.is_contiguous() || pre.dtype() != x.dtype() ||
        out.dtype() != x.dtype() || pre.size() != x.size() || out.size() != x.size())
      continue;
    const RecordedMatmul& mm = *m.matmul;
    if (bytes_overlap(out, mm.a) || bytes_overlap(out, mm.b) || bytes_overlap(out, pre)) continue;
    const auto [up, down] = placements(t, gone, i, j, s);
    if (!up && !down) continue;
    auto r = std::make_shared<RecordedMatmul>(mm);
    r->call.a = &r->a;
    r->call.b = &r->b;
    r->gelu_grad_of = as_shape(pre, x.shape());
    r->call.gelu_grad_of = &r->gelu_grad_of;
    r->call.out = as_shape(out, x.shape());
    if (!r->gelu_grad_of.defined() || !r->call.out.defined()) continue;
    TracedCall f;
    f.name = "matmul+gelu_tanh_backward";
    f.detail = m.detail + " |" + e.detail;
    f.writes_known = e.writes_known;  // the product wrote only X, which the folded call does not
    for (const TracedCall* c : {&m, &e})
      for (const Storage* st : c->storages)
        if (st != s) f.storages.push_back(st);
    for (const Storage* w : e.written) f.written.push_back(w);
    f.matmul = r;
    f.backend = m.backend;
    auto parts = std::make_shared<std::vector<std::function<void()>>>(
        std::vector<std::function<void()>>{m.replay, e.replay});
    f.replay = [r, backend = m.backend, parts] {
      r->call.gelu_grad_applied = false;
      backend->matmul(r->call);
      if (!r->call.gelu_grad_applied)
        for (const auto& part : *parts) part();
    };
    t.calls[up ? i : j] = std::move(f);
    gone[up ? j : i] = true;
    ++folded;
  }
  drop_gone(t, gone);
  return folded;
}

}  // namespace

int64_t fuse_step_trace(StepTrace& t, bool epilogues) {
  const int64_t folded = epilogues ? fold_gelu_grads(t) : 0;
  const size_t n = t.calls.size();
  std::vector<bool> gone(n, false);
  // The calls that use each storage (in order).
  std::unordered_map<const Storage*, std::vector<size_t>> users_of = users_of_storages(t);
  // After a merge the surviving call `to` stands for the call at `from_at` among the users of its storages `from`
  // (but X's, which nothing uses any more).
  auto moved = [&](const std::vector<const Storage*>& from, size_t from_at, size_t to, const Storage* x) {
    for (const Storage* s : from) {
      if (s == x) continue;
      std::vector<size_t>& u = users_of[s];
      u.erase(std::remove(u.begin(), u.end(), from_at), u.end());
      if (std::find(u.begin(), u.end(), to) == u.end()) u.insert(std::upper_bound(u.begin(), u.end(), to), to);
    }
  };
  int64_t merged = 0;
  for (size_t i = 0; i < n; ++i) {
    for (bool again = true; again && !gone[i];) {
      again = false;
      const TracedCall& p = t.calls[i];
      if (!p.backend || !(p.fused || (p.elementwise && only_arrays(p.elementwise->call)))) break;
      for (const auto& [x, output] : full_results(p)) {
        const Storage* s = x.storage().get();
        if (!dead_after_step(t, s)) continue;
        // The one later call that uses X, and no other user anywhere.
        const std::vector<size_t>& u = users_of[s];
        if (u.size() != 2 || u[0] != i) continue;
        const size_t user = u[1];
        const TracedCall& e = t.calls[user];
        if (!e.elementwise || e.backend != p.backend || !only_arrays(e.elementwise->call)) continue;
        bool reads_x = false;
        for (int k = 0; k < e.elementwise->call.num_inputs; ++k)
          reads_x = reads_x || same_elements(*e.elementwise->call.inputs[static_cast<size_t>(k)].array, x);
        if (!reads_x || e.elementwise->call.out.storage().get() == s) continue;
        const auto [up, down] = placements(t, gone, i, user, s);
        if (!up && !down) continue;
        const std::vector<const Storage*> p_storages = p.storages, e_storages = e.storages;  // merge() replaces one
        auto unused = [&](const Array& a) {
          const Storage* r = a.storage().get();
          const auto m = t.made.find(r);
          const std::vector<size_t>& ru = users_of[r];
          return m != t.made.end() && m->second.expired() && ru.size() == 1 && ru[0] == i;
        };
        if (!merge(t, i, user, x, output, !up, unused)) continue;
        users_of.erase(s);
        if (up) {
          gone[user] = true;
          moved(e_storages, user, i, s);
          again = true;  // the merged call may take the next op of a chain
        } else {
          gone[i] = true;
          moved(p_storages, i, user, s);
        }
        ++merged;
        break;
      }
    }
  }
  drop_gone(t, gone);
  return folded + merged;
}

}  // namespace kiln::detail
