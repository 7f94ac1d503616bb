"""kiln.text from Python: the BPE tokenizer against the ids Hugging Face's tokenizers gave on the same files
(tests/text/data, written by tests/golden/text/make_bpe_golden.py), training against a hand-worked corpus, token
files against their bytes written here with NumPy, and kiln.random.Generator's independence."""

import json
import pathlib

import numpy as np
import pytest

import kiln

DATA = pathlib.Path(__file__).resolve().parents[2] / "tests" / "text" / "data"
T = kiln.text


def _has_icu():
    try:
        T.pretokenize("\u00e9t\u00e9")
        return True
    except ValueError as e:
        assert "ICU" in str(e), e  # the only reason non-ASCII text is refused
        return False


# Without ICU (libicu-dev) the pre-tokenizer takes ASCII text only; the golden texts and corpus are Unicode.
needs_icu = pytest.mark.skipif(not _has_icu(), reason="built without ICU (libicu-dev): ASCII text only")


@pytest.fixture(scope="module")
def golden():
    return T.BpeTokenizer.load(str(DATA / "vocab.json"), str(DATA / "merges.txt"))


@pytest.fixture(scope="module")
def cases():
    return json.loads((DATA / "cases.json").read_text())


@needs_icu
def test_encode_and_decode_equal_tokenizers(golden, cases):
    assert golden.vocab_size == cases["vocab_size"] == len(golden)
    for case in cases["cases"]:
        assert golden.encode(case["text"]) == case["ids"], case["text"]
        assert golden.encode(case["text"], special="as_text") == case["ids_as_text"], case["text"]
        assert golden.decode(case["ids"]) == case["decode"]
        assert golden.decode(np.array(case["ids"], dtype=np.int64)) == case["decode"]  # arrays of ids too
        assert golden.decode_bytes(case["ids"]) == case["text"].encode()


def test_special_tokens(golden):
    eot = golden.special_id()
    assert eot is not None and golden.id_to_token(eot) == T.END_OF_TEXT
    assert golden.token_to_id(T.END_OF_TEXT) == eot
    assert golden.encode("a<|endoftext|>b").count(eot) == 1
    assert eot not in golden.encode("a<|endoftext|>b", special="as_text")
    with pytest.raises(ValueError, match="endoftext"):
        golden.encode("a<|endoftext|>b", special="refuse")
    with pytest.raises(ValueError, match="'allow'"):
        golden.encode("a", special="sometimes")


def test_training_takes_the_most_frequent_pair_first():
    # "aaab" x3, "ab": pairs (a,a) 6, (a,b) 4 -> merge "a a"; then (aa,a) 3, (a,b) 4 -> "a b"; then "aa ab" 3.
    texts = ["aaab", "aaab", "aaab", "ab"]
    t = T.BpeTokenizer.train(texts, vocab_size=300, min_frequency=1, special_tokens=[])
    assert t.merges() == [("a", "a"), ("a", "b"), ("aa", "ab")]
    assert t.vocab_size == 256 + 3
    assert t.encode("aaab") == [t.token_to_id("aaab")]
    assert T.BpeTokenizer.train(texts, vocab_size=300, min_frequency=4, special_tokens=[]).merges() == [
        ("a", "a"), ("a", "b")]


@needs_icu
def test_training_on_the_corpus_equals_tokenizers(golden, tmp_path):
    trained = T.BpeTokenizer.train_files([str(DATA / "corpus.txt")], vocab_size=1000, min_frequency=2)
    assert trained.merges() == golden.merges()
    trained.save(str(tmp_path / "vocab.json"), str(tmp_path / "merges.txt"))
    assert json.loads((tmp_path / "vocab.json").read_text()) == json.loads((DATA / "vocab.json").read_text())


def test_load_errors_name_the_file(tmp_path):
    with pytest.raises(ValueError, match="nowhere.json"):
        T.BpeTokenizer.load(str(tmp_path / "nowhere.json"), str(DATA / "merges.txt"))


def test_token_files_read_what_numpy_wrote(tmp_path):
    tokens = np.arange(1000, dtype=np.uint16) * 7 % 5000
    header = np.zeros(256, np.int32)
    header[:3] = (20240520, 1, len(tokens))
    (tmp_path / "t.bin").write_bytes(header.tobytes() + tokens.tobytes())
    tokens.tofile(tmp_path / "t.raw")
    for name in ("t.bin", "t.raw"):
        f = T.TokenFile(str(tmp_path / name))
        assert len(f) == 1000
        np.testing.assert_array_equal(f.window(10, 5).numpy(), tokens[10:15].astype(np.int64))
        x, y = f.batch(4, 8, kiln.random.Generator(3))
        assert x.shape == (4, 8) and y.shape == (4, 8) and x.dtype == kiln.int64
        xs, ys = x.numpy(), y.numpy()
        for row in range(4):  # each row a window of the file, y the next tokens
            start = int(np.flatnonzero(tokens == xs[row, 0])[0])
            np.testing.assert_array_equal(xs[row], tokens[start:start + 8])
            np.testing.assert_array_equal(ys[row], tokens[start + 1:start + 9])
    with pytest.raises(ValueError, match="raw"):
        T.TokenFile(str(tmp_path / "t.bin"), format="json")
    with pytest.raises(ValueError, match="t.bin"):
        T.TokenFile(str(tmp_path / "t.bin"), format="llmc").window(999, 5)


def test_write_tokens_and_tokenize_to_file(golden, tmp_path):
    T.write_tokens(str(tmp_path / "w.bin"), [1, 2, 65535])
    raw = np.frombuffer((tmp_path / "w.bin").read_bytes(), dtype=np.uint8)
    header = raw[:1024].view(np.int32)
    assert list(header[:3]) == [20240520, 1, 3]
    assert list(raw[1024:].view(np.uint16)) == [1, 2, 65535]
    n = T.tokenize_to_file(golden, "Hello world", str(tmp_path / "h.bin"))
    f = T.TokenFile(str(tmp_path / "h.bin"))
    assert len(f) == n == 1 + len(golden.encode("Hello world"))
    assert f.window(0, n).tolist() == [golden.special_id()] + golden.encode("Hello world")


def test_generators_are_independent_streams():
    a, b = kiln.random.Generator(5), kiln.random.default_rng(5)
    kiln.random.seed(1)
    first = a.normal(size=(6,)).numpy()
    kiln.random.normal(size=(100,))  # the global stream moves; the generators do not notice
    np.testing.assert_array_equal(b.normal(size=(6,)).numpy(), first)
    state = a.get_state()
    again = a.integers(0, 10, size=(20,)).numpy()
    assert again.min() >= 0 and again.max() < 10 and again.dtype == np.int64
    a.set_state(state)
    np.testing.assert_array_equal(a.integers(0, 10, size=(20,)).numpy(), again)
    u = a.uniform(2.0, 3.0, size=(1000,)).numpy()
    assert u.min() >= 2.0 and u.max() < 3.0
    assert not np.array_equal(kiln.random.Generator(6).normal(size=(6,)).numpy(), first)
