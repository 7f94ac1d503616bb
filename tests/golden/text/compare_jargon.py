#!/usr/bin/env python3
"""kiln's tokenizer training and encoding against Hugging Face's `tokenizers` on the whole Jargon File.

Run by hand (pip install tokenizers numpy; Debian's jargon-text), never by the build or CI:

    python3 tests/golden/text/compare_jargon.py build/cpu/tools/kiln/kiln [VOCAB_SIZE]

It runs `kiln tokenize` (which trains a tokenizer on the text and writes the tokens), trains ByteLevelBPETokenizer
on the same text with the same options (min_frequency 2, <|endoftext|> first), and checks that vocab.json,
merges.txt and every token id are equal. Exit status 0 when they are.
"""
import gzip
import os
import subprocess
import sys
import tempfile

import numpy as np
from tokenizers import ByteLevelBPETokenizer

EOT = "<|endoftext|>"
JARGON = "/usr/share/doc/jargon-text/jargon.txt.gz"


def main():
    kiln = sys.argv[1]
    vocab_size = int(sys.argv[2]) if len(sys.argv) > 2 else 4096
    with tempfile.TemporaryDirectory() as tmp:
        text_path = os.path.join(tmp, "jargon.txt")
        with gzip.open(JARGON, "rb") as f, open(text_path, "wb") as out:
            out.write(f.read())
        out_bin = os.path.join(tmp, "jargon.bin")
        subprocess.run([kiln, "tokenize", "--input", text_path, "-o", out_bin, "--train-vocab", str(vocab_size)],
                       check=True)
        hf = ByteLevelBPETokenizer()
        hf.train([text_path], vocab_size=vocab_size, min_frequency=2, special_tokens=[EOT], show_progress=False)
        hf_dir = os.path.join(tmp, "hf")
        os.makedirs(hf_dir)
        hf.save_model(hf_dir)
        same = {}
        for name in ("vocab.json", "merges.txt"):
            with open(os.path.join(hf_dir, name), "rb") as a, open(os.path.join(tmp, "jargon." + name), "rb") as b:
                same[name] = a.read() == b.read()
        tok = ByteLevelBPETokenizer(os.path.join(hf_dir, "vocab.json"), os.path.join(hf_dir, "merges.txt"))
        tok.add_special_tokens([EOT])
        with open(text_path, encoding="utf-8") as f:
            ids = [tok.token_to_id(EOT)] + tok.encode(f.read()).ids
        kiln_ids = np.fromfile(out_bin, dtype=np.uint16)[512:].tolist()  # after llm.c's 1024-byte header
        same["token ids"] = kiln_ids == ids
        for what, ok in same.items():
            print(f"{what}: {'equal' if ok else 'DIFFERENT'}")
        print(f"{len(ids)} tokens")
        return 0 if all(same.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
