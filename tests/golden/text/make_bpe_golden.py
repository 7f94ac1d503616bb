#!/usr/bin/env python3
"""Golden data for kiln's GPT-2 tokenizer (tests/text), from Hugging Face's `tokenizers` package.

Run by hand (pip install tokenizers), never by the build or CI: its outputs are checked in under tests/text/data.

    python3 tests/golden/text/make_bpe_golden.py [CORPUS_SOURCE]

1. corpus.txt: 600 lines of the Jargon File (public domain; Debian's jargon-text,
   /usr/share/doc/jargon-text/jargon.txt.gz, the default source) followed by the hard texts below, one per line,
   so that the merges learn a little of every script.
2. vocab.json + merges.txt: ByteLevelBPETokenizer trained on corpus.txt (vocab_size 1000, min_frequency 2,
   special token <|endoftext|>), as save_model writes them. kiln's own training must give the same merges.
3. cases.json: the ids of each hard text, encoded by a tokenizer loaded from those two files with <|endoftext|>
   added as a special token ("ids"), and without it ("ids_as_text": the special token encoded as text); the
   decode of each prefix of the ids that cuts a character ("prefix_decodes"); Python's decode(errors="replace")
   of invalid UTF-8 byte strings ("invalid_utf8").
"""
import gzip
import json
import os
import sys

from tokenizers import ByteLevelBPETokenizer

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "..", "text", "data")
EOT = "<|endoftext|>"

HARD_TEXTS = [
    "Hello world",
    "",
    "  leading spaces and trailing   ",
    "tabs\tand\nnewlines\n\n\nend",
    "CRLF line one\r\nline two\r\n",
    "numbers 12345 3.14159 1,000,000 \u0663\u0664\u0665 \u216b \u00bd 2nd",
    "contractions: I'm you're he's we've they'll I'd don't CAN'T it'S",
    "'s's'S ''' 'll' 're've",
    "Unicode: na\u00efve caf\u00e9 Stra\u00dfe \u0395\u03bb\u03bb\u03b7\u03bd\u03b9\u03ba\u03ac \u0440\u0443\u0441\u0441\u043a\u0438\u0439 "
    "\u65e5\u672c\u8a9e \u4e2d\u6587 \ud55c\uad6d\uc5b4 \u05e2\u05d1\u05e8\u05d9\u05ea \u0627\u0644\u0639\u0631\u0628\u064a\u0629 "
    "\u0939\u093f\u0928\u094d\u0926\u0940",
    "emoji: \U0001f44d\U0001f3fd \U0001f468\u200d\U0001f469\u200d\U0001f467\u200d\U0001f466 \U0001f1eb\U0001f1f7 \u2764\ufe0f",
    "whitespace runs:     \u00a0\u2003\u3000 x \u00a0y",
    "end of text" + EOT + "next document",
    EOT,
    "a" + EOT + EOT + "b",
    "before " + EOT + " after",
    "mixed   \n  \t indent\n    code()",
    "punctuation!!! ... ??? --- (brackets) [x] {y} @#$%^&* \u2018quoted\u2019 \u201cdouble\u201d",
    "combining: e\u0301 a\u0308 \u1100\u1161",
    "controls \x00\x01\x1f\x7f and \u2028 line sep \u0085 nel \x0b\x0c",
    "A very long word: supercalifragilisticexpialidocious-antidisestablishmentarianism",
    "The hacker's kluge (see {kludge}) was elegant enough.",
]

INVALID_UTF8 = [
    b"abc\xffdef",
    b"\xc3",
    b"\xe2\x82",
    b"\xe2\x82x",
    b"\xf0\x9f\x98",
    b"\xed\xa0\x80",
    b"\xc0\xaf",
    b"\xf4\x90\x80\x80",
    b"\x80\x80",
    b"ok \xe6\x97\xa5\xe6\x9c",
]


def main():
    source = sys.argv[1] if len(sys.argv) > 1 else "/usr/share/doc/jargon-text/jargon.txt.gz"
    os.makedirs(OUT, exist_ok=True)
    with gzip.open(source, "rt", encoding="utf-8") as f:
        lines = f.read().split("\n")[200:800]
    corpus_path = os.path.join(OUT, "corpus.txt")
    # Newlines only (no CRLF inside the corpus): tokenizers reads a file line by line with its line ending, and
    # so does kiln's train_files; the CRLF cases are in cases.json.
    with open(corpus_path, "w", encoding="utf-8", newline="") as f:
        f.write("\n".join(lines) + "\n")
        for t in HARD_TEXTS:
            f.write(t.replace("\r", "").replace("\n", " ").replace("\x0b", " ").replace("\x0c", " ")
                    .replace("\u2028", " ").replace("\u0085", " ") + "\n")

    trainer = ByteLevelBPETokenizer()
    trainer.train([corpus_path], vocab_size=1000, min_frequency=2, special_tokens=[EOT], show_progress=False)
    trainer.save_model(OUT)

    vocab, merges = os.path.join(OUT, "vocab.json"), os.path.join(OUT, "merges.txt")
    with_special = ByteLevelBPETokenizer(vocab, merges)
    with_special.add_special_tokens([EOT])
    plain = ByteLevelBPETokenizer(vocab, merges)
    cases = []
    for t in HARD_TEXTS:
        ids = with_special.encode(t).ids
        prefix = []
        for k in range(1, len(ids)):
            text = with_special.decode(ids[:k], skip_special_tokens=False)
            if "\ufffd" in text:
                prefix.append({"count": k, "text": text})
        cases.append({"text": t, "ids": ids, "ids_as_text": plain.encode(t).ids,
                      "decode": with_special.decode(ids, skip_special_tokens=False), "prefix_decodes": prefix[:4]})
    invalid = [{"hex": b.hex(), "text": b.decode("utf-8", errors="replace")} for b in INVALID_UTF8]
    with open(os.path.join(OUT, "cases.json"), "w", encoding="utf-8") as f:
        json.dump({"source": "tokenizers " + __import__("tokenizers").__version__, "vocab_size": 1000,
                   "min_frequency": 2, "special_tokens": [EOT], "cases": cases, "invalid_utf8": invalid},
                  f, ensure_ascii=True, indent=1)
    print("wrote", OUT)


if __name__ == "__main__":
    main()
