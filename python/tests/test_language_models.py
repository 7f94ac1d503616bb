"""kiln.models' GPT-2 and LLaMA-style decoders, generate() and safetensors from Python: greedy generation against
the argmax of full forwards recomputed here, batched generation against one prompt at a time, and the
safetensors file against its format read with struct and json."""

import json
import struct

import numpy as np
import pytest

import kiln

M = kiln.models


def tiny_gpt2(seed=5):
    kiln.random.seed(seed)
    config = M.GPT2Config(vocab_size=40, n_positions=32, n_embd=16, n_layer=2, n_head=2, embd_pdrop=0.0,
                          attn_pdrop=0.0, resid_pdrop=0.0)
    return M.GPT2(config)


def tiny_llama(seed=6):
    kiln.random.seed(seed)
    config = M.LlamaConfig(vocab_size=30, hidden_size=16, intermediate_size=24, num_hidden_layers=2,
                           num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32)
    return M.Llama(config)


def greedy_by_full_forwards(model, prompt, steps):
    """The reference: each token the argmax of the last position of a forward over the whole sequence so far."""
    tokens = list(prompt)
    model.eval()
    with kiln.no_grad():
        for _ in range(steps):
            logits = model(kiln.asarray(np.array([tokens], dtype=np.int64))).numpy()
            tokens.append(int(np.argmax(logits[0, -1])))
    return tokens[len(prompt):]


def test_config_fields_and_names():
    c = M.GPT2Config(n_layer=3)
    assert (c.n_layer, c.n_embd, c.vocab_size) == (3, 768, 50257)
    c.n_head = 4
    assert c.n_head == 4
    medium = M.GPT2Config.from_name("gpt2-medium")
    assert (medium.n_embd, medium.n_layer, medium.n_head) == (1024, 24, 16)
    with pytest.raises(ValueError):
        M.GPT2Config.from_name("gpt5")
    assert M.LlamaConfig(num_attention_heads=8).num_key_value_heads == 8


def test_gpt2_forward_shape_and_parameter_count():
    model = tiny_gpt2()
    assert isinstance(model, kiln.nn.Module) and isinstance(model, M.CausalLM)
    logits = model(kiln.asarray(np.array([[1, 2, 3], [4, 5, 6]], dtype=np.int64)))
    assert logits.shape == (2, 3, 40)
    # wte 40x16 + wpe 32x16 + per layer (ln 2*16, c_attn 16*48+48, c_proj 16*16+16, ln 2*16, fc 16*64+64,
    # proj 64*16+16) + ln_f 2*16; lm_head is tied to wte
    per_layer = 32 + 16 * 48 + 48 + 16 * 16 + 16 + 32 + 16 * 64 + 64 + 64 * 16 + 16
    assert sum(p.size for p in model.parameters()) == 40 * 16 + 32 * 16 + 2 * per_layer + 32
    assert model.max_positions == 32


@pytest.mark.parametrize("make", [tiny_gpt2, tiny_llama])
def test_greedy_generate_equals_argmax_of_full_forwards(make):
    model = make()
    prompt = [3, 1, 4, 1, 5]
    want = greedy_by_full_forwards(model, prompt, 8)
    streamed = []
    got = M.generate(model, prompt, max_new_tokens=8, temperature=0.0, on_token=streamed.append)
    assert got == want and streamed == want
    # top_k=1 keeps only the most likely token: sampling it is greedy
    assert M.generate(model, np.array(prompt), max_new_tokens=8, top_k=1, seed=9) == want


def test_stop_token_and_seeded_sampling():
    model = tiny_gpt2()
    first = M.generate(model, [7, 8], max_new_tokens=1, temperature=0.0)[0]
    assert M.generate(model, [7, 8], max_new_tokens=10, temperature=0.0, stop_token=first) == [first]
    a = M.generate(model, [7, 8], max_new_tokens=12, temperature=1.5, top_p=0.9, seed=123)
    b = M.generate(model, [7, 8], max_new_tokens=12, temperature=1.5, top_p=0.9, seed=123)
    assert a == b and len(a) == 12 and all(0 <= t < 40 for t in a)
    with pytest.raises(ValueError):
        M.generate(model, [], max_new_tokens=2)
    with pytest.raises(ValueError):
        M.generate(model, [1] * 30, max_new_tokens=5)  # past n_positions
    with pytest.raises(TypeError, match="token ids"):
        M.generate(model, [1.5, 2.0], max_new_tokens=2)
    with pytest.raises(TypeError, match="token ids"):
        M.generate_batch(model, [[1, 2], np.ones((2, 2), dtype=np.int64)], max_new_tokens=2)


def test_on_token_errors_reach_the_caller():
    def boom(token):
        raise RuntimeError("stop here")

    with pytest.raises(RuntimeError, match="stop here"):
        M.generate(tiny_gpt2(), [1, 2], max_new_tokens=3, on_token=boom)


@pytest.mark.parametrize("make", [tiny_gpt2, tiny_llama])
def test_generate_batch_equals_generate_per_prompt(make):
    model = make()
    prompts = [[1, 2, 3, 4, 5, 6], [9], [2, 7, 11]]
    want = [M.generate(model, p, max_new_tokens=6, temperature=0.0) for p in prompts]
    assert M.generate_batch(model, prompts, max_new_tokens=6, temperature=0.0) == want


def test_sampling_probabilities_by_hand():
    p = M.sampling_probabilities([0.0, np.log(3.0)], 1.0)
    np.testing.assert_allclose(p, [0.25, 0.75], rtol=1e-12)
    assert M.sampling_probabilities([1.0, 2.0, 0.5], 0.0) == [0.0, 1.0, 0.0]
    np.testing.assert_allclose(M.sampling_probabilities([0.0, np.log(3.0), -5.0], 1.0, top_k=2), [0.25, 0.75, 0.0],
                               rtol=1e-12)


def read_safetensors_header(path):
    data = open(path, "rb").read()
    (size,) = struct.unpack("<Q", data[:8])
    return json.loads(data[8:8 + size]), data[8 + size:]


def test_safetensors_round_trip_and_format(tmp_path):
    path = str(tmp_path / "t.safetensors")
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = np.array([1, -2, 3], dtype=np.int64)
    kiln.nn.save_safetensors(path, {"a": kiln.asarray(a), "b": kiln.asarray(b)}, metadata={"format": "pt"})
    header, payload = read_safetensors_header(path)
    assert header["__metadata__"] == {"format": "pt"}
    assert header["a"]["dtype"] == "F32" and header["a"]["shape"] == [2, 3]
    assert header["b"]["dtype"] == "I64" and header["b"]["shape"] == [3]
    begin, end = header["a"]["data_offsets"]
    np.testing.assert_array_equal(np.frombuffer(payload[begin:end], dtype="<f4").reshape(2, 3), a)
    loaded = kiln.nn.load_safetensors(path)
    assert list(loaded) == ["a", "b"]
    np.testing.assert_array_equal(loaded["a"].numpy(), a)
    np.testing.assert_array_equal(loaded["b"].numpy(), b)
    assert loaded["b"].dtype == kiln.int64
    (tmp_path / "bad.safetensors").write_bytes(b"\xff" * 12)
    with pytest.raises(ValueError):
        kiln.nn.load_safetensors(str(tmp_path / "bad.safetensors"))


def test_load_gpt2_from_its_hf_state_dict(tmp_path):
    model = tiny_gpt2()
    state = model.hf_state_dict()
    assert "lm_head.weight" in state and "transformer.wte.weight" in state
    path = str(tmp_path / "model.safetensors")
    kiln.nn.save_safetensors(path, state)
    with pytest.raises(ValueError, match="config"):  # n_head is inferred as n_embd / 64 only
        M.load_gpt2(path)
    loaded = M.load_gpt2(path, config=model.config)
    assert (loaded.config.vocab_size, loaded.config.n_embd, loaded.config.n_layer) == (40, 16, 2)
    tokens = kiln.asarray(np.array([[5, 6, 7, 8]], dtype=np.int64))
    model.eval()
    loaded.eval()
    np.testing.assert_array_equal(loaded(tokens).numpy(), model(tokens).numpy())
    other = tiny_gpt2(seed=11)
    other.load_hf_state_dict(state)
    np.testing.assert_array_equal(other.eval()(tokens).numpy(), model(tokens).numpy())


def test_load_llama_from_a_folder(tmp_path):
    model = tiny_llama()
    kiln.nn.save_safetensors(str(tmp_path / "model.safetensors"), model.hf_state_dict())
    c = model.config
    (tmp_path / "config.json").write_text(json.dumps({
        "vocab_size": c.vocab_size, "hidden_size": c.hidden_size, "intermediate_size": c.intermediate_size,
        "num_hidden_layers": c.num_hidden_layers, "num_attention_heads": c.num_attention_heads,
        "num_key_value_heads": c.num_key_value_heads, "max_position_embeddings": c.max_position_embeddings,
    }))
    loaded = M.load_llama(str(tmp_path))
    assert loaded.config.num_key_value_heads == 2
    tokens = kiln.asarray(np.array([[1, 2, 3]], dtype=np.int64))
    np.testing.assert_array_equal(loaded.eval()(tokens).numpy(), model.eval()(tokens).numpy())


@pytest.mark.parametrize("make", [tiny_gpt2, tiny_llama], ids=["gpt2", "llama"])
def test_stepping_with_a_kv_cache_gives_the_full_forwards_logits(make):
    model = make()
    model.eval()
    tokens = np.array([[3, 14, 15, 9, 2, 6, 5]], dtype=np.int64)
    with kiln.no_grad():
        full = model(kiln.asarray(tokens)).numpy()
    cache = model.make_cache(1, 16)
    assert isinstance(cache, M.KVCache) and cache.max_length == 16 and cache.length == 0 and cache.batch == 1
    got = [model(kiln.asarray(tokens[:, :3]), cache).numpy()]  # the prompt, then one token at a time
    assert cache.length == 3
    for t in range(3, tokens.shape[1]):
        got.append(model.forward(kiln.asarray(tokens[:, t:t + 1]), cache=cache).numpy())
    assert len(cache) == tokens.shape[1] == cache.get_seq_length()
    np.testing.assert_allclose(np.concatenate(got, axis=1), full, rtol=1e-5, atol=1e-5)
    # crop forgets the last positions: recomputing them gives the same logits again
    cache.crop(5)
    again = model(kiln.asarray(tokens[:, 5:]), cache).numpy()
    np.testing.assert_allclose(again, full[:, 5:], rtol=1e-5, atol=1e-5)
    cache.reset()
    assert cache.length == 0
    with pytest.raises(ValueError):
        model(kiln.asarray(np.zeros((1, 17), dtype=np.int64)), cache)
