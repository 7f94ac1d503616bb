"""safetensors files written by the Python `safetensors` package, for kiln's reader (tests/core/test_safetensors.cpp).

Run as `python3 safetensors_golden.py OUTDIR`; writes into OUTDIR/safetensors/ and finally
OUTDIR/safetensors_golden.stamp.
  python.safetensors: safetensors.numpy.save_file of the arrays below (metadata {"format": "np"}),
  <name>.npy: each array, the reference the test compares kiln's reading with.
  Broken files the reader must refuse with a clear error: truncated.safetensors (data cut short),
  short.safetensors (5 bytes), huge_header.safetensors (a header size past the end),
  bad_json.safetensors, outside.safetensors (offsets past the data), mismatch.safetensors (offsets that
  do not match the shape), bad_dtype.safetensors.
"""

import json
import os
import struct
import sys

import numpy as np
from safetensors.numpy import save_file

OUT = os.path.join(sys.argv[1], "safetensors")
os.makedirs(OUT, exist_ok=True)

arrays = {
    "layer.weight": np.arange(6, dtype=np.float32).reshape(2, 3) / 7,
    "layer.bias": np.array([1.5, -2.25, 1e-300, 3e300], dtype=np.float64),
    "half": np.array([0.5, -1.0, 65504.0], dtype=np.float16),
    "steps": np.array([[1, -2], [2**40, 7]], dtype=np.int64),
    "i32": np.arange(-2, 3, dtype=np.int32),
    "i16": np.array([-300, 300], dtype=np.int16),
    "i8": np.array([-5, 5, 127], dtype=np.int8),
    "u8": np.array([0, 200, 255], dtype=np.uint8),
    "mask": np.array([True, False, True, True]),
    "empty": np.zeros((0, 3), dtype=np.float32),
    "scalar": np.array(2.5, dtype=np.float64),
}
save_file(arrays, os.path.join(OUT, "python.safetensors"), metadata={"format": "np"})
for name, a in arrays.items():
    np.save(os.path.join(OUT, name + ".npy"), a)


def raw(header, data):
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + data


good = open(os.path.join(OUT, "python.safetensors"), "rb").read()
with open(os.path.join(OUT, "truncated.safetensors"), "wb") as f:
    f.write(good[:-10])
with open(os.path.join(OUT, "short.safetensors"), "wb") as f:
    f.write(b"\x05\x00\x00\x00\x00")
with open(os.path.join(OUT, "huge_header.safetensors"), "wb") as f:
    f.write(struct.pack("<Q", 1 << 60) + b"{}")
with open(os.path.join(OUT, "bad_json.safetensors"), "wb") as f:
    f.write(struct.pack("<Q", 9) + b'{"a": [1,' + b"\x00" * 8)
entry = {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}
with open(os.path.join(OUT, "outside.safetensors"), "wb") as f:
    f.write(raw({"x": entry}, b"\x00" * 4))
with open(os.path.join(OUT, "mismatch.safetensors"), "wb") as f:
    f.write(raw({"x": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}}, b"\x00" * 8))
with open(os.path.join(OUT, "bad_dtype.safetensors"), "wb") as f:
    f.write(raw({"x": {"dtype": "F8_E4M3", "shape": [1], "data_offsets": [0, 1]}}, b"\x00"))

open(os.path.join(sys.argv[1], "safetensors_golden.stamp"), "w").write("ok\n")
