"""The Array API's linear algebra extension (2023.12), `xp.linalg` of kiln.array_api: kiln.linalg's LAPACK and
cuSOLVER functions under the standard's signatures, results as named tuples with the standard's field names.
Every function is batched over leading axes and runs on every device kiln has."""

from collections import namedtuple as _namedtuple

from . import _kiln as _k
from . import _array_api_functions as _f

_la = _k.linalg

EighResult = _namedtuple("EighResult", ["eigenvalues", "eigenvectors"])
QRResult = _namedtuple("QRResult", ["Q", "R"])
SlogdetResult = _namedtuple("SlogdetResult", ["sign", "logabsdet"])
SVDResult = _namedtuple("SVDResult", ["U", "S", "Vh"])


def _eps(dtype):
    return 2.0 ** -52 if dtype in (_k.float64, _k.complex128) else 2.0 ** -23


_COMPLEX = (_k.complex64, _k.complex128)


def _is_complex(x):
    return isinstance(x, _k.Array) and x.dtype in _COMPLEX


# kiln.linalg's LAPACK/cuSOLVER routines take real matrices. A complex matrix A = B + iC is the real matrix
# M = [[B, -C], [C, B]] of twice the size (an embedding that keeps products, inverses, pseudo-inverses and
# solutions: solve(M, [re; im]) is [re; im] of the complex solution, inv(M) and pinv(M) are [[P, -Q], [Q, P]]
# for P + iQ, and M's singular values, and a Hermitian A's eigenvalues, are A's, each twice).
def _embed(x):
    re, im = _k.real(x), _k.imag(x)
    return _k.concatenate([_k.concatenate([re, -im], -1), _k.concatenate([im, re], -1)], -2)


def _interleaved(x):
    """The embedding with each element's 2x2 block [[re, -im], [im, re]] in place: element (i, j) of x is rows
    2i, 2i+1 and columns 2j, 2j+1. It keeps triangles: a triangular complex matrix with a real diagonal maps to a
    triangular real one."""
    re, im = _k.real(x), _k.imag(x)
    blocks = _k.stack([_k.stack([re, -im], -1), _k.stack([im, re], -1)], -2)  # (..., i, j, a, b)
    n, m = x.shape[-2], x.shape[-1]
    axes = tuple(range(x.ndim - 2)) + (x.ndim - 2, x.ndim, x.ndim - 1, x.ndim + 1)  # (..., i, a, j, b)
    return _k.reshape(_k.permute_dims(blocks, axes), x.shape[:-2] + (2 * n, 2 * m))


def _uninterleaved(m):
    return _k.make_complex(m[..., ::2, ::2], m[..., 1::2, ::2])


def _unembed(m, rows):
    """P + iQ from the embedding [[P, -Q], [Q, P]] of a complex matrix with `rows` rows."""
    return _k.make_complex(m[..., :rows, :], m[..., rows:, :])


def cholesky(x, /, *, upper=False):
    if _is_complex(x):
        # A = L L^H maps to E(A) = E(L) E(L)^T with E(L) lower triangular and a positive diagonal: the real
        # Cholesky factor of E(A), which is unique (and E(L^H) = E(L)^T for upper=True). The diagonal's imaginary
        # parts (0 for a Hermitian A, rounding errors else) are dropped, as LAPACK's zpotrf reads the real parts.
        diagonal = _k.eye(x.shape[-1], None, 0, dtype=_k.bool, device=x.device)
        x = _k.make_complex(_k.real(x), _k.where(diagonal, 0.0, _k.imag(x)))
        return _uninterleaved(_la.cholesky(_interleaved(x), upper=upper))
    return _la.cholesky(x, upper=upper)


def cross(x1, x2, /, *, axis=-1):
    if axis >= 0:
        raise ValueError(f"linalg.cross: axis={axis}; the standard takes a negative axis (counted from the end), "
                         "which names the same axis of both operands after broadcasting")
    return _la.cross(x1, x2, axis=axis)


def det(x, /):
    if _is_complex(x):
        return _k.prod(_la.eigvals(x), axis=-1)  # the product of the eigenvalues (LAPACK's complex geev)
    return _la.det(x)


def diagonal(x, /, *, offset=0):
    return _k.diagonal(x, offset=offset, axis1=-2, axis2=-1)


def eigh(x, /):
    r = _la.eigh(x)
    return EighResult(r.eigenvalues, r.eigenvectors)


def eigvalsh(x, /):
    if _is_complex(x):
        return _la.eigvalsh(_embed(x))[..., ::2]  # ascending, each twice
    return _la.eigvalsh(x)


def inv(x, /):
    if _is_complex(x):
        n = x.shape[-1]
        return _unembed(_la.inv(_embed(x))[..., :n], n)
    return _la.inv(x)


def matmul(x1, x2, /):
    return _f.matmul(x1, x2)


def matrix_norm(x, /, *, keepdims=False, ord="fro"):  # noqa: A002  (the standard's name)
    if x.ndim >= 2 and (x.shape[-2] == 0 or x.shape[-1] == 0):
        # Every norm of an empty matrix is 0 (the orders that take a max or a min have no identity to reduce to).
        shape = x.shape[:-2] + ((1, 1) if keepdims else ())
        real = {_k.float64: _k.float64, _k.complex64: _k.float32, _k.complex128: _k.float64}
        return _k.zeros(shape, dtype=real.get(x.dtype, _k.float32), device=x.device)
    if _is_complex(x) and ord in (2, -2, "nuc"):
        # the largest, the smallest and the sum of the singular values (svdvals: through the real embedding)
        s = svdvals(x)
        out = _k.max(s, axis=-1) if ord == 2 else _k.min(s, axis=-1) if ord == -2 else _k.sum(s, axis=-1)
        return _k.reshape(out, out.shape + (1, 1)) if keepdims else out
    if _is_complex(x):
        x = _k.abs(x)  # "fro", 1, -1, inf, -inf: sums and extremes of the moduli
    return _la.norm(x, ord=ord, axis=(-2, -1), keepdims=keepdims)


def matrix_power(x, n, /):
    if _is_complex(x) and n < 0:
        return _la.matrix_power(inv(x), -n)  # kiln's takes the inverse of real matrices only
    return _la.matrix_power(x, n)


def _relative_cutoff(x, s, rtol):
    """rtol (default max(m, n) * eps) times the largest singular value of each matrix, shaped to compare with s."""
    if rtol is None:
        rtol = max(x.shape[-2], x.shape[-1]) * _eps(x.dtype)
    largest = _k.max(s, axis=-1, keepdims=True) if s.shape[-1] > 0 else _k.zeros_like(s[..., :1])
    if isinstance(rtol, _k.Array):
        return largest * _k.expand_dims(rtol.astype(s.dtype), axis=-1)
    return largest * rtol


def matrix_rank(x, /, *, rtol=None):
    s = svdvals(x)
    return _k.sum((s > _relative_cutoff(x, s, rtol)).astype(_k.int64), axis=-1)


def matrix_transpose(x, /):
    return _f.matrix_transpose(x)


def outer(x1, x2, /):
    if x1.ndim != 1 or x2.ndim != 1:
        raise ValueError(f"linalg.outer: x1 and x2 must be 1-d, got {x1.ndim} and {x2.ndim} axes")
    return _k.outer(x1, x2)


def pinv(x, /, *, rtol=None):
    if rtol is None:
        rtol = max(x.shape[-2], x.shape[-1]) * _eps(x.dtype)
    if _is_complex(x):
        # the embedding's singular values are x's (each twice): the same cutoff; rtol per matrix broadcasts as is
        rows = x.shape[-1]
        return _unembed(pinv(_embed(x), rtol=rtol)[..., :x.shape[-2]], rows)
    if isinstance(rtol, _k.Array):
        # one cutoff per matrix: through the SVD here
        u, s, vh = _la.svd(x, full_matrices=False)
        keep = s > _relative_cutoff(x, s, rtol)
        inv_s = _k.where(keep, 1.0 / _k.where(keep, s, _k.ones_like(s)), _k.zeros_like(s))
        return _f.matmul(_f.matrix_transpose(vh) * _k.expand_dims(inv_s, axis=-2), _f.matrix_transpose(u))
    return _la.pinv(x, rcond=float(rtol))


def _complex_qr(x, mode):
    """Householder QR of complex matrices, batched, in kiln ops: at step k the reflector I - tau v v^H maps column
    k's part x below the diagonal to beta e1, beta = -x0/|x0| * |x| (so that v's first entry x0 - beta does not
    cancel); R is updated in place and Q accumulates the reflectors. R's diagonal is complex (LAPACK's zgeqrf
    makes it real): QR is unique up to those phases only."""
    m, n = x.shape[-2], x.shape[-1]
    batch = x.shape[:-2]
    r = _k.copy(x)
    q = _k.copy(_k.broadcast_to(_k.eye(m, None, 0, dtype=x.dtype, device=x.device), batch + (m, m)))
    for k in range(min(m, n)):
        column = r[..., k:, k]
        alpha = column[..., 0]
        size = _k.sqrt(_k.sum(_k.square(_k.abs(column)), axis=-1))
        modulus = _k.abs(alpha)
        phase = _k.where(modulus == 0, _k.ones_like(alpha), alpha / _k.where(modulus == 0, 1.0, modulus))
        v = _k.copy(column)
        v[..., 0] = alpha + phase * size
        norm2 = _k.sum(_k.square(_k.abs(v)), axis=-1)
        tau = _k.where(norm2 == 0, 0.0, 2.0 / _k.where(norm2 == 0, 1.0, norm2))  # a zero column: no reflection
        tau, vc = _k.expand_dims(_k.expand_dims(tau, -1), -1), _k.expand_dims(v, -1)
        vh = _k.conj(_k.expand_dims(v, -2))
        r[..., k:, :] = r[..., k:, :] - tau * _k.matmul(vc, _k.matmul(vh, r[..., k:, :]))
        q[..., :, k:] = q[..., :, k:] - tau * _k.matmul(_k.matmul(q[..., :, k:], vc), vh)
    r = _k.triu(r, 0)  # below the diagonal: rounding errors of zeros
    if mode == "reduced":
        k = min(m, n)
        return QRResult(_k.copy(q[..., :, :k]), _k.copy(r[..., :k, :]))
    return QRResult(q, r)


def qr(x, /, *, mode="reduced"):
    if mode not in ("reduced", "complete"):
        raise ValueError(f"linalg.qr: mode={mode!r} is not 'reduced' or 'complete'")
    if _is_complex(x):
        return _complex_qr(x, mode)
    r = _la.qr(x, mode=mode)
    return QRResult(r.Q, r.R)


def slogdet(x, /):
    if _is_complex(x):
        # from the eigenvalues (LAPACK's complex geev): sign the product of their signs z/|z| (0 for a singular
        # matrix), log|det| the sum of their log-moduli
        eigenvalues = _la.eigvals(x)
        return SlogdetResult(_k.prod(_f.sign(eigenvalues), axis=-1), _k.sum(_k.log(_k.abs(eigenvalues)), axis=-1))
    r = _la.slogdet(x)
    return SlogdetResult(r.sign, r.logabsdet)


def solve(x1, x2, /):
    if _is_complex(x1) or _is_complex(x2):
        dtype = _k.promote_types(x1.dtype, x2.dtype)
        x1, x2 = x1.astype(dtype), x2.astype(dtype)
        n = x1.shape[-1]
        stacked = -1 if x2.ndim == 1 else -2  # a vector b, or the columns of a matrix B
        out = _la.solve(_embed(x1), _k.concatenate([_k.real(x2), _k.imag(x2)], stacked))
        return _k.make_complex(out[..., :n], out[..., n:]) if x2.ndim == 1 else _unembed(out, n)
    return _la.solve(x1, x2)


def svd(x, /, *, full_matrices=True):
    r = _la.svd(x, full_matrices=full_matrices)
    return SVDResult(r.U, r.S, r.Vh)


def svdvals(x, /):
    if _is_complex(x):
        return _la.svdvals(_embed(x))[..., ::2]  # descending, each twice
    return _la.svdvals(x)


def tensordot(x1, x2, /, *, axes=2):
    return _f.tensordot(x1, x2, axes=axes)


def trace(x, /, *, offset=0, dtype=None):
    return _f.sum(_k.diagonal(x, offset=offset, axis1=-2, axis2=-1), axis=-1, dtype=dtype)


def vecdot(x1, x2, /, *, axis=-1):
    return _f.vecdot(x1, x2, axis=axis)


def vector_norm(x, /, *, axis=None, keepdims=False, ord=2):  # noqa: A002
    if x.dtype in (_k.complex64, _k.complex128):
        x = _k.abs(x)  # every vector norm is that of the moduli (real: float32 for complex64)
    if axis is None and x.ndim != 1:
        flat = _k.reshape(x, (-1,))
        out = _la.norm(flat, ord=ord, axis=0)
        return _k.reshape(out, (1,) * x.ndim) if keepdims else out
    if isinstance(axis, tuple) and len(axis) != 1:
        # several axes: move them last, flatten them, and take the vector norm of the rows
        axes = tuple(a % x.ndim for a in axis)
        rest = [a for a in range(x.ndim) if a not in axes]
        moved = _f.permute_dims(x, tuple(rest) + axes)
        flat = _k.reshape(moved, tuple(x.shape[a] for a in rest) + (-1,))
        out = _la.norm(flat, ord=ord, axis=-1)
        if keepdims:
            out = _k.reshape(out, tuple(1 if a in axes else x.shape[a] for a in range(x.ndim)))
        return out
    return _la.norm(x, ord=ord, axis=axis, keepdims=keepdims)


__all__ = [
    "cholesky", "cross", "det", "diagonal", "eigh", "eigvalsh", "inv", "matmul", "matrix_norm", "matrix_power",
    "matrix_rank", "matrix_transpose", "outer", "pinv", "qr", "slogdet", "solve", "svd", "svdvals", "tensordot",
    "trace", "vecdot", "vector_norm",
]
