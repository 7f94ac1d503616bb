"""CuPy's and Chainer's get_array_module in Python: one function written for NumPy and kiln alike, the module
picked from its arguments; and the same with the Array API, where the array names its own namespace.

    PYTHONPATH=build/cpu/python python3 examples/python/generic_code.py

softplus(x) = log(1 + exp(x)) computed stably as max(x, 0) + log1p(exp(-|x|)), on a NumPy array, on a kiln
array of the CPU and, when there is one, of the GPU; the results agree with NumPy's float64 logaddexp(0, x).
"""

import sys

import numpy as np

import kiln


def softplus(x):
    xp = kiln.get_array_module(x)  # numpy for NumPy arrays, kiln for kiln arrays (any device)
    return xp.maximum(x, 0) + xp.log1p(xp.exp(-xp.abs(x)))


def logsumexp_rows(x):
    xp = x.__array_namespace__()  # the Array API: NumPy 2's namespace, or kiln.array_api
    m = xp.max(x, axis=1, keepdims=True)
    return xp.squeeze(m, axis=1) + xp.log(xp.sum(xp.exp(x - m), axis=1))


def main():
    host = np.linspace(-30.0, 30.0, 13, dtype=np.float32).reshape(1, 13) * np.array([[1.0], [0.5]], np.float32)
    want_softplus = np.logaddexp(0.0, host.astype(np.float64))
    want_lse = np.log(np.exp(host.astype(np.float64)).sum(axis=1))
    results = {"numpy": (softplus(host), logsumexp_rows(host))}
    for device in {kiln.cpu(), kiln.try_gpu()}:
        x = kiln.asarray(host, device=device)
        sp, lse = softplus(x), logsumexp_rows(x)
        assert sp.device == device and isinstance(sp, kiln.Array)
        results[str(device)] = (sp.to(kiln.cpu()).numpy(), lse.to(kiln.cpu()).numpy())
    for name, (sp, lse) in results.items():
        print(f"{name:7} softplus max error {np.abs(sp - want_softplus).max():.1e}, "
              f"logsumexp rows {np.round(lse, 4).tolist()}")
    return {"results": results, "want_softplus": want_softplus, "want_lse": want_lse}


if __name__ == "__main__":
    r = main()
    ok = all(np.allclose(sp, r["want_softplus"], rtol=1e-6, atol=1e-6) and np.allclose(lse, r["want_lse"], rtol=1e-6)
             for sp, lse in r["results"].values())
    sys.exit(0 if ok else 1)
