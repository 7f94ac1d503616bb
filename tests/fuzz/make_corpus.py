#!/usr/bin/env python3
"""Writes the seed corpus of every fuzz target into tests/fuzz/corpus/<target>/ (checked in).

Usage: python3 tests/fuzz/make_corpus.py [--checkpoint-writer build/fuzz/tests/fuzz/fuzz_checkpoint]

Seeds are small valid files and edge cases of each format, written with NumPy, zlib and the formats' own
specifications (not with kiln, except the checkpoints: kiln's save_checkpoint defines that layout, so the
fuzz_checkpoint program writes the valid one, KILN_FUZZ_WRITE_SEED). Re-running rewrites the same bytes.
"""
import argparse
import gzip
import io
import json
import os
import struct
import subprocess
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(HERE, "corpus")


def put(target, name, data):
    folder = os.path.join(CORPUS, target)
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, name), "wb") as f:
        f.write(data)


# ---------------------------------------------------------------- .npy
def npy_bytes(array, version=None):
    buffer = io.BytesIO()
    if version is None:
        np.save(buffer, array)
    else:
        np.lib.format.write_array(buffer, array, version=version)
    return buffer.getvalue()


def npy_with_header(dict_text, data=b"", version=1):
    """A .npy file around a hand-written header dict (for cases np.save cannot write)."""
    text = dict_text.encode("latin1")
    length_bytes = 2 if version == 1 else 4
    pad = 64 - (6 + 2 + length_bytes + len(text) + 1) % 64
    text += b" " * pad + b"\n"
    length = struct.pack("<H" if version == 1 else "<I", len(text))
    return b"\x93NUMPY" + bytes([version, 0]) + length + text + data


def npy_seeds():
    put("npy", "f4_2x3", npy_bytes(np.arange(6, dtype="<f4").reshape(2, 3)))
    put("npy", "f8_scalar", npy_bytes(np.array(2.5)))
    put("npy", "bool", npy_bytes(np.array([True, False, True])))
    put("npy", "i1_fortran", npy_bytes(np.asfortranarray(np.arange(6, dtype="i1").reshape(3, 2))))
    put("npy", "i4_big_endian", npy_bytes(np.arange(4, dtype=">i4")))
    put("npy", "u1_empty", npy_bytes(np.zeros((0, 3), dtype="u1")))
    put("npy", "f2_3d", npy_bytes(np.ones((2, 1, 2), dtype="<f2")))
    put("npy", "i8_v2", npy_bytes(np.arange(3, dtype="<i8"), version=(2, 0)))
    put("npy", "i2_v3", npy_bytes(np.arange(3, dtype="<i2"), version=(3, 0)))
    put("npy", "truncated_data", npy_bytes(np.arange(8, dtype="<f8"))[:-5])
    put("npy", "huge_shape", npy_with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (1000000000, 1000000000), }"))
    put("npy", "huge_header_length", b"\x93NUMPY\x02\x00\xff\xff\xff\x7f{'descr'")
    put("npy", "complex", npy_with_header("{'descr': '<c8', 'fortran_order': False, 'shape': (1,), }", b"\0" * 8))
    put("npy", "structured", npy_with_header("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,), }"))
    put("npy", "python2_long", npy_with_header("{'descr': '<i4', 'fortran_order': False, 'shape': (2L,), }", b"\1\0\0\0\2\0\0\0"))
    put("npy", "bad_magic", b"\x93NUMPZ\x01\x00")


# ---------------------------------------------------------------- safetensors
def safetensors_bytes(header, data=b"", pad=True):
    text = json.dumps(header, separators=(",", ":")).encode()
    if pad:
        text += b" " * ((8 - (8 + len(text)) % 8) % 8)
    return struct.pack("<Q", len(text)) + text + data


def safetensors_seeds():
    a = np.arange(4, dtype="<f4").tobytes()
    put("safetensors", "f32_2x2", safetensors_bytes({"w": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]}}, a))
    many = {
        "__metadata__": {"format": "pt"},
        "b": {"dtype": "BF16", "shape": [2], "data_offsets": [0, 4]},
        "i": {"dtype": "I64", "shape": [1], "data_offsets": [4, 12]},
        "m": {"dtype": "BOOL", "shape": [3], "data_offsets": [12, 15]},
        "s": {"dtype": "F64", "shape": [], "data_offsets": [15, 23]},
        "z": {"dtype": "U8", "shape": [0, 3], "data_offsets": [23, 23]},
    }
    put("safetensors", "many_dtypes", safetensors_bytes(many, bytes(range(23))))
    put("safetensors", "empty_header", safetensors_bytes({}))
    put("safetensors", "header_past_end", struct.pack("<Q", 1 << 40) + b"{}")
    put("safetensors", "offsets_past_end",
        safetensors_bytes({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}, a[:8]))
    put("safetensors", "shape_offsets_disagree",
        safetensors_bytes({"w": {"dtype": "F32", "shape": [3], "data_offsets": [0, 16]}}, a))
    put("safetensors", "huge_shape",
        safetensors_bytes({"w": {"dtype": "F16", "shape": [4294967296, 4294967296, 4], "data_offsets": [0, 16]}}, a))
    put("safetensors", "unknown_dtype", safetensors_bytes({"w": {"dtype": "C64", "shape": [1], "data_offsets": [0, 8]}}, a))
    put("safetensors", "not_json", struct.pack("<Q", 5) + b"{\"a\":")


# ---------------------------------------------------------------- JSON (safetensors headers as text)
def json_seeds():
    put("json", "entry", b'{"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}}')
    put("json", "metadata", b'{"__metadata__":{"format":"pt","k":"v"},"x":{"dtype":"U8","shape":[64],"data_offsets":[0,64]}}')
    put("json", "escapes", b'{"a\\u00e9\\n\\"\\\\b":{"dtype":"I8","shape":[1],"data_offsets":[63,64]}}')
    put("json", "numbers", b'[0, -0, 1.5e300, -2E-300, 18446744073709551615, 18446744073709551616, 1e999]')
    put("json", "literals", b'{"t":true,"f":false,"n":null,"s":"","a":[],"o":{}}')
    put("json", "deep", b"[" * 200 + b"]" * 200)
    put("json", "utf8", "{\"\u00e9\u4e2d\U0001F600\":{}}".encode())
    put("json", "surrogates", b'"\\ud83d\\ude00 \\udc00"')
    put("json", "trailing", b'{"a":1} x')
    put("json", "duplicate_keys", b'{"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"w":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}}')


# ---------------------------------------------------------------- IDX (first byte: 0 plain, 1 .gz as is, 2 gzipped)
def idx_bytes(array, code):
    header = bytes([0, 0, code, array.ndim]) + b"".join(struct.pack(">I", e) for e in array.shape)
    return header + array.astype(array.dtype.newbyteorder(">")).tobytes()


def idx_seeds():
    images = idx_bytes(np.arange(18, dtype="u1").reshape(2, 3, 3), 0x08)
    put("idx", "u8_images", b"\0" + images)
    put("idx", "i32_labels", b"\0" + idx_bytes(np.array([1, -2, 3], dtype="i4"), 0x0C))
    put("idx", "i8", b"\0" + idx_bytes(np.array([-1, 2], dtype="i1"), 0x09))
    put("idx", "i16", b"\0" + idx_bytes(np.array([[-1, 2]], dtype="i2"), 0x0B))
    put("idx", "f32", b"\0" + idx_bytes(np.array([1.5, -2.0], dtype="f4"), 0x0D))
    put("idx", "f64_rank0", b"\0" + idx_bytes(np.array(3.25, dtype="f8"), 0x0E))
    put("idx", "zero_extent", b"\0" + idx_bytes(np.zeros((0, 5), dtype="u1"), 0x08))
    put("idx", "truncated", b"\0" + images[:-4])
    put("idx", "huge_dims", b"\0" + bytes([0, 0, 0x08, 3]) + b"\xff\xff\xff\xff" * 3)
    put("idx", "wrapping_dims", b"\0" + bytes([0, 0, 0x08, 4]) + struct.pack(">IIII", 65536, 65536, 65536, 65536))
    put("idx", "bad_code", b"\0" + bytes([0, 0, 0x0A, 1, 0, 0, 0, 1, 7]))
    put("idx", "gz_file", b"\1" + gzip.compress(images, mtime=0))
    put("idx", "gz_truncated", b"\1" + gzip.compress(images, mtime=0)[:-6])
    put("idx", "gz_of_plain", b"\2" + images)


# ---------------------------------------------------------------- kernel cache (see fuzz_kernel_cache.cpp)
MASK = (1 << 64) - 1
P1, P2, P3, P4, P5 = (0x9E3779B185EBCA87, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9, 0x85EBCA77C2B2AE63,
                      0x27D4EB2F165667C5)


def rotl(x, r):
    return ((x << r) | (x >> (64 - r))) & MASK


def xxh64(data, seed=0):
    """The XXH64 specification (github.com/Cyan4973/xxHash, doc/xxhash_spec.md), in Python."""
    def round_(acc, lane):
        return rotl((acc + lane * P2) & MASK, 31) * P1 & MASK

    def merge(acc, v):
        return ((acc ^ round_(0, v)) * P1 + P4) & MASK

    n, p = len(data), 0
    if n >= 32:
        v = [(seed + P1 + P2) & MASK, (seed + P2) & MASK, seed, (seed - P1) & MASK]
        while p + 32 <= n:
            for i in range(4):
                v[i] = round_(v[i], struct.unpack_from("<Q", data, p + 8 * i)[0])
            p += 32
        h = (rotl(v[0], 1) + rotl(v[1], 7) + rotl(v[2], 12) + rotl(v[3], 18)) & MASK
        for x in v:
            h = merge(h, x)
    else:
        h = (seed + P5) & MASK
    h = (h + n) & MASK
    while p + 8 <= n:
        h = (rotl(h ^ round_(0, struct.unpack_from("<Q", data, p)[0]), 27) * P1 + P4) & MASK
        p += 8
    if p + 4 <= n:
        h = (rotl(h ^ (struct.unpack_from("<I", data, p)[0] * P1 & MASK), 23) * P2 + P3) & MASK
        p += 4
    while p < n:
        h = rotl(h ^ (data[p] * P5 & MASK), 11) * P1 & MASK
        p += 1
    h ^= h >> 33
    h = h * P2 & MASK
    h ^= h >> 29
    h = h * P3 & MASK
    return h ^ (h >> 32)


MATERIAL = b"kiln fuzz: kernel cache key material"  # fuzz_kernel_cache.cpp's kMaterial
FORMAT_VERSION = 2  # kKernelCacheFormatVersion


def names_and_image(names, image):
    out = struct.pack("<I", len(names))
    for expression, lowered in names:
        out += struct.pack("<I", len(expression)) + expression + struct.pack("<I", len(lowered)) + lowered
    return out + image


def cache_file(tail, cubin=False):
    payload = struct.pack("<Q", len(MATERIAL)) + MATERIAL + tail
    header = b"KILNKERN" + struct.pack("<II", FORMAT_VERSION, int(cubin))
    header += struct.pack("<QQ", xxh64(MATERIAL, 0x6B696C6E2D6B6579), xxh64(MATERIAL, 0x9E3779B97F4A7C15))
    header += struct.pack("<QQ", len(payload), xxh64(payload))
    return header + struct.pack("<Q", xxh64(header)) + payload


def kernel_cache_seeds():
    ptx = b".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry k() { ret; }\n\0"
    tail = names_and_image([(b"k<float>", b"_Z1kIfEvv"), (b"add", b"_Z3addv")], ptx)
    put("kernel_cache", "whole_ptx", b"\0" + cache_file(tail))
    put("kernel_cache", "whole_cubin", b"\3" + cache_file(names_and_image([], b"\x7fELF\2\1\1"), cubin=True))
    put("kernel_cache", "whole_truncated", b"\0" + cache_file(tail)[:-9])
    put("kernel_cache", "payload", b"\1" + struct.pack("<Q", len(MATERIAL)) + MATERIAL + tail)
    put("kernel_cache", "tail", b"\2" + tail)
    put("kernel_cache", "tail_huge_count", b"\2" + struct.pack("<II", 0xFFFFFFFF, 0xFFFFFFF0) + b"x")
    put("kernel_cache", "tail_no_image", b"\2" + names_and_image([(b"a", b"b")], b""))


# ---------------------------------------------------------------- checkpoints
def checkpoint_seeds(writer):
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "seed.safetensors")
        subprocess.run([writer], env=dict(os.environ, KILN_FUZZ_WRITE_SEED=path), check=True)
        with open(path, "rb") as f:
            valid = f.read()
    put("checkpoint", "valid", valid)
    n = struct.unpack_from("<Q", valid)[0]
    header = json.loads(valid[8:8 + n])
    data = valid[8 + n:]
    # The same file without one section, and with "random" of the wrong shape: refused by load_checkpoint's checks.
    for key in ("position", "scheduler.count" if "scheduler.count" in header else next(k for k in header if k.startswith("scheduler."))):
        cut = {k: v for k, v in header.items() if k != key}
        put("checkpoint", "without_" + key.replace(".", "_"), safetensors_bytes(cut, data))
    wrong = dict(header)
    begin = header["random"]["data_offsets"][0]
    wrong["random"] = {"dtype": "I64", "shape": [1], "data_offsets": [begin, begin + 8]}
    put("checkpoint", "random_wrong_shape", safetensors_bytes(wrong, data))
    put("checkpoint", "truncated", valid[: len(valid) - 7])


# ---------------------------------------------------------------- tokenizer (vocab.json \0 merges.txt \0 text)
def byte_tokens():
    """GPT-2's byte-to-character map (printable bytes stand for themselves, the others for 256 + n)."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    chars, extra = {}, 0
    for b in range(256):
        if b in keep:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return [chars[b] for b in range(256)]


def tokenizer_seeds():
    tokens = byte_tokens()
    vocab = {"<|endoftext|>": 0}
    for t in tokens:
        vocab[t] = len(vocab)
    space = tokens[ord(" ")]
    merges = [("h", "e"), (space, "he"), ("l", "l"), ("he", "ll")]
    for a, b in merges:
        vocab[a + b] = len(vocab)
    vocab_json = json.dumps(vocab, ensure_ascii=False).encode()
    merges_txt = ("#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges)).encode()
    text = "hello he hell\u00e9 \U0001F600 <|endoftext|> 123  \r\n".encode()
    put("tokenizer", "valid", vocab_json + b"\0" + merges_txt + b"\0" + text)
    put("tokenizer", "invalid_utf8_text", vocab_json + b"\0" + merges_txt + b"\0" + b"he\xff\xc3(ll")
    put("tokenizer", "unknown_merge", vocab_json + b"\0" + b"#version: 0.2\nzz qq\n" + b"\0" + b"he")
    put("tokenizer", "missing_byte", json.dumps({"a": 0}).encode() + b"\0\0a")
    put("tokenizer", "duplicate_id", b'{"a": 0, "b": 0}\0\0')
    put("tokenizer", "huge_id", b'{"a": 0, "b": 999999999}\0\0')  # once sized a vector by the id
    put("tokenizer", "number_overflow", b'{"a": 0, "b": 9e999}\0\0')  # nlohmann's out_of_range, not parse_error
    put("tokenizer", "bad_json", vocab_json[:-9] + b"\0" + merges_txt)


# ---------------------------------------------------------------- token files (format byte, then the file)
def token_file_seeds():
    tokens = np.array([50256, 1, 2, 3, 65535, 7, 8], dtype="<u2").tobytes()
    header = np.zeros(256, dtype="<i4")
    header[0], header[1], header[2] = 20240520, 1, 7
    llmc = header.tobytes() + tokens
    put("token_file", "llmc", b"\0" + llmc)
    put("token_file", "llmc_truncated", b"\0" + llmc[:-3])
    put("token_file", "llmc_count_past_end", b"\0" + header.tobytes()[:8] + struct.pack("<i", 1 << 30) +
        header.tobytes()[12:] + tokens)
    put("token_file", "llmc_negative_count", b"\0" + header.tobytes()[:8] + struct.pack("<i", -5) +
        header.tobytes()[12:] + tokens)
    put("token_file", "bad_magic", b"\0" + struct.pack("<i", 1234) + llmc[4:])
    put("token_file", "raw", b"\1" + tokens)
    put("token_file", "raw_odd", b"\1" + tokens[:-1])
    put("token_file", "deduced", b"\2" + llmc)
    put("token_file", "empty_raw", b"\1")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint-writer", help="the fuzz_checkpoint program (writes the valid checkpoint)")
    args = parser.parse_args()
    npy_seeds()
    safetensors_seeds()
    json_seeds()
    idx_seeds()
    kernel_cache_seeds()
    tokenizer_seeds()
    token_file_seeds()
    if args.checkpoint_writer:
        checkpoint_seeds(args.checkpoint_writer)


if __name__ == "__main__":
    main()
