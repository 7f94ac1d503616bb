// Backward formulas of the factorisations (real matrices), as torch.linalg defines them, written with the
// public array ops so they run on any device. Notation: X^T is swapaxes(X, -1, -2); <G, dX> = sum(G * dX)
// is the first-order change of the loss; each formula is the G with <G_A, dA> = sum over outputs of
// <G_out, d out>.
//   inv:      X = A^-1, dX = -X dA X                       => G_A = -X^T G_X X^T
//   det:      d(det) = det tr(A^-1 dA)                      => G_A = g det A^-T
//   slogdet:  d(log|det|) = tr(A^-1 dA); sign is constant   => G_A = g A^-T
//   cholesky: A = L L^T; L^-1 dA L^-T = L^-1 dL + (L^-1 dL)^T, whose lower part gives L^-1 dL = Phi(.) with
//             Phi the lower triangle, diagonal halved      => G_A = sym(L^-T Phi(L^T G_L) L^-1)
//   qr (m >= n): with C = Q^T dA R^-1, dR R^-1 is C's upper part plus the transposed strict lower part
//             and dQ = dA R^-1 - Q dR R^-1                 => G_A = (G_Q + Q copyu(N)) R^-T,
//             N = G_R R^T - Q^T G_Q, copyu(N) = triu(N) + triu(N, 1)^T
//   svd:      torch's formula for distinct singular values, E_ij = s_j^2 - s_i^2:
//             G_A = U [skew(U^T G_U)/E S + S skew(V^T G_V)/E + diag(G_S)] V^T
//                   + (I - U U^T) G_U S^-1 V^T + U S^-1 G_V^T (I - V V^T)
//   eigh:     dw_i = v_i^T dA v_i, dV = V (F o V^T dA V), F_ij = 1/(w_j - w_i) off the diagonal
//             => G_A = sym(V (diag(G_w) + F o V^T G_V) V^T)
// sym(X) = (X + X^T) / 2: the input is read as a symmetric matrix, so only the symmetric part of the
// gradient is determined. The vectors' terms are skipped when their gradients are zero (svdvals, eigvalsh):
// then repeated or zero singular values / eigenvalues give finite gradients, as in PyTorch.
#include "cpu/linalg_grad.hpp"

#include <memory>
#include <string>

#include "kiln/kiln.hpp"

namespace kiln::linalg::detail_linalg {
namespace {

Array mT(const Array& x) { return swapaxes(x, -1, -2); }

Array identity(int64_t n, const Array& like) { return eye(n, {}, 0, like.dtype(), like.device()); }

Array sym(const Array& x) { return multiply(add(x, mT(x)), 0.5); }

/// The diagonal matrices of a batch of vectors (..., n).
Array diag_matrix(const Array& v) { return multiply(expand_dims(v, -1), identity(v.shape(-1), v)); }

bool nonzero(const Array& g) { return g.size() > 0 && any(not_equal(g, 0.0)).item<bool>(); }

/// g (...) as (..., 1, 1), to scale a batch of matrices.
Array per_matrix(const Array& g) { return expand_dims(expand_dims(g, -1), -1); }

}  // namespace

std::vector<Array> with_grad(const char* name, const Array& a, const std::function<std::vector<Array>()>& forward,
                             Backward backward) {
  if (!a.defined() || !a.requires_grad() || !is_grad_enabled()) return forward();
  auto shapes = std::make_shared<std::vector<Shape>>();
  AutogradFunction fn{name,
                      [&forward, shapes](const std::vector<Array>& inputs, std::vector<Array>& saved) {
                        const std::vector<Array> outputs = forward();
                        std::vector<Array> flat;
                        saved = {inputs[0]};
                        for (const Array& o : outputs) {
                          shapes->push_back(o.shape());
                          flat.push_back(o.reshape({-1}));
                          saved.push_back(o);
                        }
                        return concatenate(flat, 0);
                      },
                      [backward, shapes](const Array& g, const std::vector<Array>& saved, const std::vector<bool>&) {
                        std::vector<Array> grads, outputs;
                        int64_t offset = 0;
                        for (size_t i = 0; i < shapes->size(); ++i) {
                          int64_t count = 1;
                          for (int64_t d : (*shapes)[i]) count *= d;
                          grads.push_back(g.index({Slice(offset, offset + count)}).reshape((*shapes)[i]));
                          outputs.push_back(saved[i + 1].astype(g.dtype()));
                          offset += count;
                        }
                        return std::vector<Array>{backward(grads, outputs, saved[0].astype(g.dtype()))};
                      }};
  const Array packed = fn.apply({a});
  std::vector<Array> outputs;
  int64_t offset = 0;
  for (const Shape& s : *shapes) {
    int64_t count = 1;
    for (int64_t d : s) count *= d;
    outputs.push_back(packed.index({Slice(offset, offset + count)}).reshape(s));
    offset += count;
  }
  return outputs;
}

Array inv_backward(const std::vector<Array>& grads, const std::vector<Array>& outputs, const Array&) {
  const Array xt = mT(outputs[0]);
  return negative(matmul(matmul(xt, grads[0]), xt));
}

Array det_backward(const std::vector<Array>& grads, const std::vector<Array>& outputs, const Array& a) {
  return multiply(per_matrix(multiply(grads[0], outputs[0])), mT(inv(a)));
}

Array slogdet_backward(const std::vector<Array>& grads, const std::vector<Array>&, const Array& a) {
  return multiply(per_matrix(grads[1]), mT(inv(a)));
}

Array cholesky_backward(const std::vector<Array>& grads, const std::vector<Array>& outputs, const Array&) {
  const Array& l = outputs[0];
  const Array p = matmul(mT(l), tril(grads[0]));
  const Array phi = subtract(tril(p), multiply(multiply(p, identity(l.shape(-1), l)), 0.5));
  const Array l_inv = inv(l);
  return sym(matmul(matmul(mT(l_inv), phi), l_inv));
}

Array cholesky_upper_backward(const std::vector<Array>& grads, const std::vector<Array>& outputs, const Array& a) {
  return cholesky_backward({mT(grads[0])}, {mT(outputs[0])}, a);
}

Array qr_backward(const std::vector<Array>& grads, const std::vector<Array>& outputs, const Array& a) {
  if (a.shape(-2) < a.shape(-1))
    throw ValueError("linalg::qr: the gradient of the reduced QR of a " + shape_str(a.shape()) +
                     " needs m >= n (rows >= columns); differentiate qr of the transpose, or of the first m columns");
  const Array &q = outputs[0], &r = outputs[1], &gq = grads[0], &gr = grads[1];
  const Array n = subtract(matmul(gr, mT(r)), matmul(mT(q), gq));
  const Array copied = add(triu(n), mT(triu(n, 1)));
  return matmul(add(gq, matmul(q, copied)), mT(inv(r)));
}

Array svd_backward(const std::vector<Array>& grads, const std::vector<Array>& outputs, const Array&) {
  const Array &u = outputs[0], &s = outputs[1], &vh = outputs[2];
  const Array &gu = grads[0], &gs = grads[1], &gvh = grads[2];
  Array inner = diag_matrix(gs);
  if (!nonzero(gu) && !nonzero(gvh)) return matmul(matmul(u, inner), vh);
  const int64_t k = s.shape(-1);
  const Array s2 = multiply(s, s), eye_k = identity(k, s);
  const Array e = where(greater(eye_k, 0.0), 1.0, subtract(expand_dims(s2, -2), expand_dims(s2, -1)));
  const Array s_row = expand_dims(s, -2), s_col = expand_dims(s, -1);
  const Array v = mT(vh), gv = mT(gvh);
  const Array utgu = matmul(mT(u), gu), vtgv = matmul(mT(v), gv);
  const Array j = divide(subtract(utgu, mT(utgu)), e), kk = divide(subtract(vtgv, mT(vtgv)), e);
  inner = add(inner, add(multiply(j, s_row), multiply(s_col, kk)));
  Array ga = matmul(matmul(u, inner), vh);
  const Array inv_s = divide(1.0, s);
  // The projections are zero for a square matrix (U and V complete): skipped then.
  if (u.shape(-2) > k) ga = add(ga, matmul(multiply(subtract(gu, matmul(u, utgu)), expand_dims(inv_s, -2)), vh));
  if (vh.shape(-1) > k) ga = add(ga, matmul(u, multiply(expand_dims(inv_s, -1), subtract(gvh, matmul(mT(vtgv), vh)))));
  return ga;
}

Array eigh_backward(const std::vector<Array>& grads, const std::vector<Array>& outputs, const Array&) {
  const Array &w = outputs[0], &v = outputs[1], &gw = grads[0], &gv = grads[1];
  Array inner = diag_matrix(gw);
  if (nonzero(gv)) {
    const Array eye_n = identity(w.shape(-1), w);
    const Array off = equal(eye_n, 0.0);
    const Array e = where(off, subtract(expand_dims(w, -2), expand_dims(w, -1)), 1.0);
    inner = add(inner, where(off, divide(matmul(mT(v), gv), e), 0.0));
  }
  return sym(matmul(matmul(v, inner), mT(v)));
}

}  // namespace kiln::linalg::detail_linalg
