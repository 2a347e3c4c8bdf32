#!/usr/bin/env python3
"""Writes the seed corpus of every fuzz harness into fuzz/corpus/<harness>/seed-*.

Small valid inputs of each format (so the fuzzer starts deep inside the parsers) and the crafted
files of the loader bugs that were fixed (deep JSON nesting, absurd sizes), kept as regression
inputs. Deterministic: running it again rewrites the same bytes. Inputs the fuzzer found later are
added beside these under their own names (crash-*, found-*), never by this script.

    /usr/bin/python3 fuzz/make_seeds.py
"""
import json
import os
import struct

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")


def write(harness, name, data):
    folder = os.path.join(ROOT, harness)
    os.makedirs(folder, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(folder, "seed-" + name), "wb") as f:
        f.write(data)


# ---- GGUF -------------------------------------------------------------------------------------
U32, I32, F32, BOOL, STR, ARR, U64 = 4, 5, 6, 7, 8, 9, 10


def gguf_str(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def gguf_value(vtype, value):
    if vtype == U32:
        return struct.pack("<I", value)
    if vtype == I32:
        return struct.pack("<i", value)
    if vtype == F32:
        return struct.pack("<f", value)
    if vtype == BOOL:
        return struct.pack("<B", 1 if value else 0)
    if vtype == STR:
        return gguf_str(value)
    if vtype == U64:
        return struct.pack("<Q", value)
    if vtype == ARR:
        etype, items = value
        out = struct.pack("<IQ", etype, len(items))
        for item in items:
            out += gguf_value(etype, item)
        return out
    raise ValueError(vtype)


def gguf_file(metadata, tensors):
    """metadata: [(key, type, value)]; tensors: [(name, ne (innermost first), f32 values)]."""
    out = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(metadata))
    for key, vtype, value in metadata:
        out += gguf_str(key) + struct.pack("<I", vtype) + gguf_value(vtype, value)
    offset = 0
    blobs = []
    for name, ne, values in tensors:
        out += gguf_str(name) + struct.pack("<I", len(ne))
        out += b"".join(struct.pack("<Q", n) for n in ne)
        out += struct.pack("<IQ", 0, offset)  # F32
        blob = struct.pack("<%df" % len(values), *values)
        blob += b"\0" * (-len(blob) % 32)
        blobs.append(blob)
        offset += len(blob)
    out += b"\0" * (-len(out) % 32)
    return out + b"".join(blobs)


def llama_metadata(arch="llama", layers=1):
    return [
        ("general.architecture", STR, arch),
        ("general.alignment", U32, 32),
        (arch + ".block_count", U32, layers),
        (arch + ".context_length", U32, 64),
        (arch + ".embedding_length", U32, 8),
        (arch + ".feed_forward_length", U32, 16),
        (arch + ".attention.head_count", U32, 2),
        (arch + ".attention.head_count_kv", U32, 1),
        (arch + ".attention.layer_norm_rms_epsilon", F32, 1e-5),
        (arch + ".rope.freq_base", F32, 10000.0),
    ]


SPM_TOKENS = ["<unk>", "<s>", "</s>", "\u2581", "a", "b", "\u2581a", "<0x41>", "<0xFF>"]


def spm_tokenizer():
    return [
        ("tokenizer.ggml.model", STR, "llama"),
        ("tokenizer.ggml.tokens", ARR, (STR, SPM_TOKENS)),
        ("tokenizer.ggml.scores", ARR, (F32, [0.0, 0.0, 0.0, -1.0, -2.0, -2.0, -0.5, 0.0, 0.0])),
        ("tokenizer.ggml.token_type", ARR, (I32, [2, 3, 3, 1, 1, 1, 1, 6, 6])),
        ("tokenizer.ggml.bos_token_id", U32, 1),
        ("tokenizer.ggml.eos_token_id", U32, 2),
        ("tokenizer.chat_template", STR,
         "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}{% endfor %}"),
    ]


def bpe_tokenizer():
    tokens = ["a", "b", "\u0120", "\u0120a", "ab", "<|endoftext|>", "<|im_start|>"]
    return [
        ("tokenizer.ggml.model", STR, "gpt2"),
        ("tokenizer.ggml.pre", STR, "gpt-2"),
        ("tokenizer.ggml.tokens", ARR, (STR, tokens)),
        ("tokenizer.ggml.token_type", ARR, (I32, [1, 1, 1, 1, 1, 3, 3])),
        ("tokenizer.ggml.merges", ARR, (STR, ["\u0120 a", "a b"])),
        ("tokenizer.ggml.bos_token_id", U32, 5),
        ("tokenizer.ggml.eos_token_id", U32, 5),
    ]


def gguf_seeds():
    embd = ("token_embd.weight", [8, len(SPM_TOKENS)], [0.01 * i for i in range(8 * len(SPM_TOKENS))])
    norm = ("output_norm.weight", [8], [1.0] * 8)
    write("gguf", "llama-spm.gguf", gguf_file(llama_metadata() + spm_tokenizer(), [embd, norm]))
    write("gguf", "qwen2-bpe.gguf", gguf_file(llama_metadata("qwen2") + bpe_tokenizer(), [norm]))
    gpt2 = [
        ("general.architecture", STR, "gpt2"),
        ("gpt2.block_count", U32, 1),
        ("gpt2.context_length", U32, 32),
        ("gpt2.embedding_length", U32, 8),
        ("gpt2.feed_forward_length", U32, 32),
        ("gpt2.attention.head_count", U32, 2),
        ("gpt2.attention.layer_norm_epsilon", F32, 1e-5),
    ]
    write("gguf", "gpt2-bpe.gguf", gguf_file(gpt2 + bpe_tokenizer(), []))
    # Regression: a block count of 10^9 (the config must be refused before anything is sized by
    # it) and an array that claims 2^40 strings in a few bytes.
    write("gguf", "billion-layers.gguf",
          gguf_file(llama_metadata(layers=1_000_000_000) + spm_tokenizer(), [norm]))
    huge = gguf_file([("general.architecture", STR, "llama")], [])
    huge = huge[:24 - 8] + struct.pack("<Q", 2) + huge[24:]  # n_kv = 2 ...
    huge += gguf_str("tokenizer.ggml.tokens") + struct.pack("<IIQ", ARR, STR, 1 << 40)
    write("gguf", "array-count-past-end.gguf", huge)


# ---- safetensors ------------------------------------------------------------------------------
def safetensors_file(header, data):
    h = json.dumps(header, separators=(",", ":")).encode()
    return struct.pack("<Q", len(h)) + h + data


def safetensors_seeds():
    data = struct.pack("<8f", *range(8)) + struct.pack("<4e", 1.0, 2.0, 3.0, 4.0)
    header = {
        "__metadata__": {"format": "pt"},
        "model.embed_tokens.weight": {"dtype": "F32", "shape": [2, 4], "data_offsets": [0, 32]},
        "model.norm.weight": {"dtype": "F16", "shape": [4], "data_offsets": [32, 40]},
    }
    write("safetensors", "two-tensors.safetensors", safetensors_file(header, data))
    bf16 = {"lm_head.weight": {"dtype": "BF16", "shape": [2, 2], "data_offsets": [0, 8]}}
    write("safetensors", "bf16.safetensors", safetensors_file(bf16, b"\x80\x3f" * 4))
    # Regression: a header nested 30,000 deep (the loader once copied it recursively).
    deep = b"[" * 30000 + b"]" * 30000
    write("safetensors", "nested-30000.safetensors", struct.pack("<Q", len(deep)) + deep)


# ---- llama2.c ---------------------------------------------------------------------------------
def llama2c_seeds():
    dim, hidden, layers, heads, kv_heads, vocab, seq = 8, 16, 1, 2, 2, 4, 4
    head = dim // heads
    floats = (vocab * dim + layers * dim + layers * dim * dim * 2 + layers * dim * dim * 2
              + layers * dim + layers * hidden * dim * 3 + dim + seq * head)
    header = struct.pack("<7i", dim, hidden, layers, heads, kv_heads, vocab, seq)
    write("llama2c", "tiny.bin", header + struct.pack("<%df" % floats, *([0.5] * floats)))
    write("llama2c", "header-only.bin", header)
    write("llama2c", "huge-dims.bin", struct.pack("<7i", 1 << 30, 1 << 30, 1 << 20, 2, 2, 32000, 2048))


# ---- config.json ------------------------------------------------------------------------------
def config_seeds():
    base = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
            "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 100,
            "max_position_embeddings": 128, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
            "tie_word_embeddings": False}
    configs = {
        "llama": dict(base, architectures=["LlamaForCausalLM"], model_type="llama",
                      rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                    "high_freq_factor": 4.0,
                                    "original_max_position_embeddings": 64}),
        "mistral": dict(base, architectures=["MistralForCausalLM"], model_type="mistral",
                        sliding_window=32),
        "qwen2": dict(base, architectures=["Qwen2ForCausalLM"], model_type="qwen2"),
        "qwen3": dict(base, architectures=["Qwen3ForCausalLM"], model_type="qwen3", head_dim=32),
        "gemma2": dict(base, architectures=["Gemma2ForCausalLM"], model_type="gemma2", head_dim=16,
                       query_pre_attn_scalar=16, attn_logit_softcapping=50.0,
                       final_logit_softcapping=30.0, sliding_window=16),
        "gemma3": dict(base, architectures=["Gemma3ForCausalLM"], model_type="gemma3_text",
                       head_dim=16, sliding_window=16, sliding_window_pattern=6,
                       rope_local_base_freq=10000.0),
        "phi3": dict(base, architectures=["Phi3ForCausalLM"], model_type="phi3",
                     rope_scaling={"type": "longrope", "short_factor": [1.0] * 8,
                                   "long_factor": [2.0] * 8},
                     original_max_position_embeddings=64),
        "gpt2": {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_embd": 64,
                 "n_layer": 2, "n_head": 4, "n_positions": 128, "vocab_size": 100,
                 "layer_norm_epsilon": 1e-5},
        "mixtral": dict(base, architectures=["MixtralForCausalLM"], model_type="mixtral",
                        num_local_experts=4, num_experts_per_tok=2),
        "qwen2-moe": dict(base, architectures=["Qwen2MoeForCausalLM"], model_type="qwen2_moe",
                          num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
                          shared_expert_intermediate_size=64, norm_topk_prob=False),
        "olmoe": dict(base, architectures=["OlmoeForCausalLM"], model_type="olmoe",
                      num_experts=8, num_experts_per_tok=2),
    }
    for name, config in configs.items():
        write("hf_config", name + ".json", json.dumps(config, indent=1))
    # Regression: 10^9 layers must be refused before anything is sized by the count.
    write("hf_config", "billion-layers.json",
          json.dumps(dict(configs["llama"], num_hidden_layers=1_000_000_000)))
    write("hf_config", "nested-30000.json", "[" * 30000 + "]" * 30000)


# ---- tokenizer.json ---------------------------------------------------------------------------
def tokenizer_seeds():
    bpe = {
        "version": "1.0",
        "added_tokens": [{"id": 6, "content": "<|im_start|>", "single_word": False,
                          "lstrip": False, "rstrip": False, "normalized": False, "special": True}],
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                          "use_regex": True},
        "post_processor": None,
        "decoder": {"type": "ByteLevel"},
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": False, "byte_fallback": False,
                  "vocab": {"a": 0, "b": 1, "\u0120": 2, "\u0120a": 3, "ab": 4, "H": 5,
                            "<|im_start|>": 6},
                  "merges": ["\u0120 a", "a b"]},
    }
    write("tokenizer_json", "bpe-byte-level.json", json.dumps(bpe, indent=1))
    spm = {
        "version": "1.0",
        "added_tokens": [{"id": 0, "content": "<unk>", "special": True},
                         {"id": 1, "content": "<s>", "special": True},
                         {"id": 2, "content": "</s>", "special": True}],
        "normalizer": {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": "\u2581"},
            {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]},
        "pre_tokenizer": None,
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
            {"type": "ByteFallback"}, {"type": "Fuse"}, {"type": "Strip", "content": " ",
                                                           "start": 1, "stop": 0}]},
        "model": {"type": "BPE", "unk_token": "<unk>", "byte_fallback": True, "fuse_unk": True,
                  "vocab": {"<unk>": 0, "<s>": 1, "</s>": 2, "<0x41>": 3, "\u2581": 4, "a": 5,
                            "\u2581a": 6},
                  "merges": ["\u2581 a"]},
    }
    write("tokenizer_json", "bpe-byte-fallback.json", json.dumps(spm, indent=1))
    unigram = {
        "version": "1.0", "added_tokens": [], "normalizer": None,
        "pre_tokenizer": {"type": "Metaspace", "replacement": "\u2581", "add_prefix_space": True},
        "decoder": {"type": "Metaspace", "replacement": "\u2581", "add_prefix_space": True},
        "model": {"type": "Unigram", "unk_id": 0, "vocab": [["<unk>", 0.0], ["\u2581", -1.0],
                                                            ["a", -2.0], ["\u2581a", -1.5]]},
    }
    write("tokenizer_json", "unigram.json", json.dumps(unigram, indent=1))
    write("tokenizer_json", "nested-30000.json",
          '{"model":' + "[" * 30000 + "]" * 30000 + "}")


# ---- chat templates ---------------------------------------------------------------------------
def template_seeds():
    write("chat_template", "chatml.jinja",
          "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
          "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}"
          "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
    write("chat_template", "llama3.jinja",
          "{% set loop_messages = messages %}{% for message in loop_messages %}"
          "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'"
          " + message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}"
          "{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}"
          "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"
          "{% endif %}")
    write("chat_template", "gemma-raise.jinja",
          "{{ bos_token }}{% if messages[0]['role'] == 'system' %}"
          "{{ raise_exception('System role not supported') }}{% endif %}"
          "{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
          "{{ raise_exception('Conversation roles must alternate') }}{% endif %}"
          "{{ '<start_of_turn>' + message['role'] + '\\n' + message['content'] | trim + "
          "'<end_of_turn>\\n' }}{% endfor %}")
    write("chat_template", "tools-macros.jinja",
          "{%- macro render(t) -%}{{ t.function.name }}({{ t.function.parameters | tojson }})"
          "{%- endmacro -%}{%- if tools %}{% for t in tools %}{{ render(t) }}{% endfor %}{% endif %}"
          "{%- for m in messages | selectattr('role', 'equalto', 'user') | list %}"
          "{{ m.content | upper | replace('2', 'two') }}{{ '%d' % loop.length }}{% endfor %}"
          "{% set ns = namespace(n=0) %}{% for i in range(3) %}{% set ns.n = ns.n + i %}{% endfor %}"
          "{{ ns.n }}{{ x | default('none') }}{{ messages[-1]['content'][:3] }}"
          "{{ {'k': [1, 2.5, none, true]} | items | list | length }}")


# ---- OpenAI request bodies (first byte: bit 0 chat, bit 1 strict) ------------------------------
def request_seeds():
    completions = {"model": "m", "prompt": "Once upon a time", "max_tokens": 16,
                   "temperature": 0.7, "top_p": 0.9, "top_k": 40, "min_p": 0.05, "seed": 7,
                   "stop": ["\n", "The end"], "presence_penalty": 0.5, "frequency_penalty": 0.1,
                   "logprobs": 2, "echo": True, "n": 2, "stream": True,
                   "stream_options": {"include_usage": True}, "logit_bias": {"5": -100}}
    write("request_json", "completions.json", b"\0" + json.dumps(completions).encode())
    write("request_json", "completions-ids.json",
          b"\2" + json.dumps({"prompt": [1, 2, 3], "max_tokens": 0, "echo": True}).encode())
    chat = {"model": "m", "messages": [{"role": "system", "content": "Be brief."},
                                       {"role": "user", "content": [{"type": "text", "text": "Hi"}]},
                                       {"role": "assistant", "content": None, "tool_calls": [
                                           {"id": "c1", "type": "function", "function": {
                                               "name": "add", "arguments": "{\"a\": 1}"}}]},
                                       {"role": "tool", "tool_call_id": "c1", "content": "2"}],
            "tools": [{"type": "function", "function": {
                "name": "add", "parameters": {"type": "object", "properties": {
                    "a": {"type": "integer"}}, "required": ["a"]}}}],
            "tool_choice": "auto", "logprobs": True, "top_logprobs": 3,
            "response_format": {"type": "json_schema", "json_schema": {
                "name": "x", "schema": {"type": "object", "properties": {
                    "n": {"type": "number"}}}}},
            "chat_template_kwargs": {"enable_thinking": False}, "max_completion_tokens": 8}
    write("request_json", "chat.json", b"\1" + json.dumps(chat).encode())
    write("request_json", "chat-grammar.json",
          b"\3" + json.dumps({"messages": [{"role": "user", "content": "x"}],
                              "grammar": "root ::= [a-z]+ \"!\""}).encode())
    write("request_json", "max-tokens-2-63.json",
          b"\0" + b'{"prompt": "x", "max_tokens": 9223372036854775807}')


# ---- raw HTTP ---------------------------------------------------------------------------------
def http_seeds():
    def post(path, body, extra=""):
        body = json.dumps(body) if not isinstance(body, str) else body
        return ("POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n%s"
                "Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (path, extra, len(body), body))

    write("http", "health.txt", "GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n")
    write("http", "models-metrics.txt",
          "GET /v1/models HTTP/1.1\r\nHost: localhost\r\n\r\n"
          "GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
    write("http", "completion.txt",
          post("/v1/completions", {"prompt": "Once upon a time", "max_tokens": 4,
                                   "temperature": 0}))
    write("http", "chat-stream.txt",
          post("/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}],
                                        "max_tokens": 4, "stream": True, "n": 2}))
    write("http", "tokenize.txt", post("/tokenize", {"content": "Once upon", "with_pieces": True}))
    write("http", "detokenize.txt", post("/detokenize", {"tokens": [1, 2, 300]}))
    write("http", "embeddings.txt", post("/v1/embeddings", {"input": ["a b", [1, 2]]}))
    write("http", "cross-origin.txt",
          post("/v1/completions", {"prompt": "x", "max_tokens": 1},
               "Origin: http://evil.example\r\n"))
    write("http", "chunked.txt",
          "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n"
          "Content-Type: application/json\r\n\r\n10\r\n{\"prompt\": \"x\",\r\n"
          "12\r\n \"max_tokens\": 2}  \r\n0\r\n\r\n")
    write("http", "bad-length.txt",
          "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 99999999999\r\n\r\n{")


if __name__ == "__main__":
    gguf_seeds()
    safetensors_seeds()
    llama2c_seeds()
    config_seeds()
    tokenizer_seeds()
    template_seeds()
    request_seeds()
    http_seeds()
