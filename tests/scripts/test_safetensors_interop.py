"""kiln writes a safetensors file and the Python `safetensors` package reads it back (the other direction,
kiln reading the package's files, is tests/golden/safetensors_golden.py with tests/core/test_safetensors.cpp).

Run as `python3 test_safetensors_interop.py path/to/kiln_tests`: the GoogleTest case
Safetensors.WritesWhatThePythonPackageReads writes its file where KILN_SAFETENSORS_OUT says.
"""

import os
import subprocess
import sys
import tempfile

import numpy as np
from safetensors.numpy import load_file
from safetensors import safe_open


def main():
    kiln_tests = sys.argv[1]
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "kiln.safetensors")
        env = dict(os.environ, KILN_SAFETENSORS_OUT=path)
        subprocess.run([kiln_tests, "--gtest_filter=Safetensors.WritesWhatThePythonPackageReads"], env=env,
                       check=True, stdout=subprocess.DEVNULL)
        tensors = load_file(path)
        expected = {
            "w": np.arange(12, dtype=np.float32).reshape(3, 4) * 0.5,
            "b": np.array([1.0, -2.0], dtype=np.float64),
            "h": np.array([0.25, -8.0], dtype=np.float16),
            "step": np.array(7, dtype=np.int64),
            "mask": np.array([True, False]),
            "u8": np.array([1, 255], dtype=np.uint8),
        }
        assert set(tensors) == set(expected), sorted(tensors)
        for name, want in expected.items():
            got = tensors[name]
            assert got.dtype == want.dtype, (name, got.dtype, want.dtype)
            assert got.shape == want.shape, (name, got.shape, want.shape)
            assert np.array_equal(got, want), (name, got, want)
        with safe_open(path, framework="np") as f:
            assert f.metadata() == {"written_by": "kiln"}, f.metadata()
    print("ok: the safetensors package reads kiln's file")


if __name__ == "__main__":
    main()
