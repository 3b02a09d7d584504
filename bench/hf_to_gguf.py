#!/usr/bin/env python3
"""Convert a Hugging Face layout Llama, Qwen3, Gemma 2, Gemma 3 or Phi-3 folder to a GGUF file llama.cpp can load.

Input folder: config.json, model.safetensors (F32/F16/BF16 tensors), tokenizer.json
(SentencePiece-style BPE with byte fallback), optionally tokenizer_config.json.
Output: GGUF v3, architecture "llama" (LlamaForCausalLM), "gemma3" (Gemma3ForCausalLM: its
norm weights stored as they multiply, 1 + w, its q/k rows kept, its sandwich and q/k norms, the
sliding window, local RoPE base and window pattern written as keys) or "gemma2" (the same without
q/k norms or local RoPE base, with its two logit caps) or "phi3" (Phi3ForCausalLM: qkv_proj as attn_qkv,
gate_up_proj as ffn_up, the rotated dimensions, LongRoPE's factors as rope_factors_long / rope_factors_short
with the attention factor and pretrained context, the window as attention.sliding_window) or "qwen3" (q/k norms,
rows as HF has them), "qwen3moe", "qwen2moe" (q/k/v biases, a shared expert) and Mixtral (as "llama") with each projection's experts stacked
(ffn_gate_exps / ffn_up_exps / ffn_down_exps, [experts, rows, cols]) and the router as ffn_gate_inp; a YaRN
rope_scaling as rope.scaling.{type, factor, original_context_length}; tokenizer
embedded as a "llama" (SPM) vocab, or a byte-level BPE (Qwen's, Llama 3's) as a "gpt2" vocab with its merges.

The GGUF writer here is written from the format description (magic, version,
tensor/kv counts, typed key/values, tensor infos, 32-byte aligned data section);
it does not use llama.cpp's gguf-py.

Usage: python3 bench/hf_to_gguf.py MODEL_DIR OUT.gguf [--outtype f16|f32]
       python3 bench/hf_to_gguf.py MODEL_DIR OUT.gguf --lora ADAPTER_DIR [--outtype f16|f32]
Requires numpy.

--lora writes a llama.cpp LoRA adapter GGUF instead, for a PEFT LoRA folder (adapter_config.json,
adapter_model.safetensors) trained on the Llama-architecture (dense) base MODEL_DIR: general.type "adapter",
adapter.type "lora", adapter.lora.alpha, and per adapted projection blk.L.<base name>.lora_a = A [r, in] and
.lora_b = B [out, r] (numpy order; GGUF dims reversed), base names attn_q/attn_k/attn_v/attn_output/ffn_gate/
ffn_up/ffn_down.weight. llama.cpp adds scale * B (A x) with scale = alpha / r (r read from lora_b), so with
use_rslora the alpha written is lora_alpha * sqrt(r). The q/k lora_b rows get the same permutation as the
q/k weights (HF rotate-half back to Meta's interleaved order); lora_a is unchanged. Refused: tensors other
than these projections' lora_A / lora_B, DoRA, fan_in_fan_out, bias, modules_to_save, rank/alpha patterns.
"""
import argparse
import json
import math
import os
import re
import struct
import sys

import numpy as np

GGUF_MAGIC = 0x46554747  # b"GGUF" little endian
GGUF_VERSION = 3
ALIGNMENT = 32

# GGUF metadata value types
T_UINT8, T_INT8, T_UINT16, T_INT16, T_UINT32, T_INT32, T_FLOAT32, T_BOOL, T_STRING, T_ARRAY, \
    T_UINT64, T_INT64, T_FLOAT64 = range(13)

# ggml tensor types
GGML_F32, GGML_F16 = 0, 1

# llama file types
FTYPE_ALL_F32, FTYPE_MOSTLY_F16 = 0, 1

# tokenizer token types
TOK_NORMAL, TOK_UNKNOWN, TOK_CONTROL, TOK_USER_DEFINED, TOK_UNUSED, TOK_BYTE = 1, 2, 3, 4, 5, 6


# ----------------------------------------------------------------------------- safetensors

def read_safetensors(path):
    """Return {name: numpy array (float32 view/copy)} lazily via memmap."""
    with open(path, "rb") as f:
        (hlen,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(hlen))
    base = 8 + hlen
    mm = np.memmap(path, dtype=np.uint8, mode="r")
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dt = info["dtype"]
        shape = tuple(info["shape"])
        b, e = info["data_offsets"]
        raw = mm[base + b: base + e]
        out[name] = (dt, shape, raw)
    return out


def to_f32(entry):
    dt, shape, raw = entry
    if dt == "F32":
        a = raw.view("<f4")
    elif dt == "F16":
        a = raw.view("<f2").astype(np.float32)
    elif dt == "BF16":
        a = (raw.view("<u2").astype(np.uint32) << 16).view(np.float32)
    else:
        raise SystemExit(f"unsupported safetensors dtype {dt}")
    return a.reshape(shape)


# ----------------------------------------------------------------------------- GGUF writer

class GGUFWriter:
    def __init__(self):
        self.kv = []        # (key, type, value[, elem_type])
        self.tensors = []   # (name, shape(numpy order), ggml_type, producer)

    def add(self, key, vtype, value, elem_type=None):
        self.kv.append((key, vtype, value, elem_type))

    def add_tensor(self, name, shape, ggml_type, producer):
        self.tensors.append((name, tuple(shape), ggml_type, producer))

    @staticmethod
    def _str(s):
        b = s.encode("utf-8")
        return struct.pack("<Q", len(b)) + b

    _scalar_fmt = {T_UINT8: "<B", T_INT8: "<b", T_UINT16: "<H", T_INT16: "<h", T_UINT32: "<I",
                   T_INT32: "<i", T_FLOAT32: "<f", T_BOOL: "<?", T_UINT64: "<Q", T_INT64: "<q",
                   T_FLOAT64: "<d"}
    _np_fmt = {T_UINT8: "<u1", T_INT8: "<i1", T_UINT16: "<u2", T_INT16: "<i2", T_UINT32: "<u4",
               T_INT32: "<i4", T_FLOAT32: "<f4", T_BOOL: "<u1", T_UINT64: "<u8", T_INT64: "<i8",
               T_FLOAT64: "<f8"}

    def _value(self, vtype, value, elem_type):
        if vtype == T_STRING:
            return self._str(value)
        if vtype == T_ARRAY:
            head = struct.pack("<IQ", elem_type, len(value))
            if elem_type == T_STRING:
                return head + b"".join(self._str(v) for v in value)
            return head + np.asarray(value, dtype=self._np_fmt[elem_type]).tobytes()
        return struct.pack(self._scalar_fmt[vtype], value)

    @staticmethod
    def _nbytes(shape, ggml_type):
        n = 1
        for d in shape:
            n *= d
        return n * (4 if ggml_type == GGML_F32 else 2)

    def write(self, path):
        with open(path, "wb") as f:
            f.write(struct.pack("<IIQQ", GGUF_MAGIC, GGUF_VERSION, len(self.tensors), len(self.kv)))
            for key, vtype, value, et in self.kv:
                f.write(self._str(key) + struct.pack("<I", vtype) + self._value(vtype, value, et))
            offset = 0
            offsets = []
            for name, shape, gt, _ in self.tensors:
                ne = list(reversed(shape))  # ggml ne[0] is the fastest-varying (last numpy) dim
                f.write(self._str(name) + struct.pack("<I", len(ne)))
                f.write(struct.pack(f"<{len(ne)}Q", *ne))
                f.write(struct.pack("<IQ", gt, offset))
                offsets.append(offset)
                offset += self._nbytes(shape, gt)
                offset = (offset + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT
            pad = (-f.tell()) % ALIGNMENT
            f.write(b"\0" * pad)
            data_start = f.tell()
            for (name, shape, gt, producer), off in zip(self.tensors, offsets):
                assert f.tell() == data_start + off
                a = producer()
                a = np.ascontiguousarray(a, dtype="<f4" if gt == GGML_F32 else "<f2")
                assert a.shape == shape, (name, a.shape, shape)
                a.tofile(f)
                f.write(b"\0" * ((-f.tell()) % ALIGNMENT))


# ----------------------------------------------------------------------------- conversion

def hf_to_meta_rows(w, n_head):
    """Undo HF's rotate-half row permutation of q/k projections (back to Meta's interleaved order).

    HF row (j * hd/2 + i) of a head holds Meta row (2*i + j)."""
    rows, cols = w.shape
    hd = rows // n_head
    return w.reshape(n_head, 2, hd // 2, cols).swapaxes(1, 2).reshape(rows, cols)


def load_tokenizer(model_dir, cfg):
    with open(os.path.join(model_dir, "tokenizer.json"), encoding="utf-8") as f:
        tj = json.load(f)
    tcfg = {}
    p = os.path.join(model_dir, "tokenizer_config.json")
    if os.path.exists(p):
        with open(p, encoding="utf-8") as f:
            tcfg = json.load(f)
    model = tj["model"]
    if model.get("type") != "BPE":
        raise SystemExit("only BPE tokenizer.json (SentencePiece-style or byte-level) is supported")
    vocab = dict(model["vocab"])
    added = {t["content"]: t for t in tj.get("added_tokens", [])}
    for content, t in added.items():
        vocab[content] = t["id"]
    n = max(max(vocab.values()) + 1, cfg["vocab_size"])
    tokens = [None] * n
    for tok, i in vocab.items():
        tokens[i] = tok
    unk = model.get("unk_token")
    scores, types = [], []
    for i, tok in enumerate(tokens):
        if tok is None:
            tokens[i] = f"[PAD{i}]"
            types.append(TOK_UNUSED)
            scores.append(-1e9)
            continue
        if tok == unk:
            types.append(TOK_UNKNOWN)
            scores.append(0.0)
        elif tok in added and added[tok].get("special", False):
            types.append(TOK_CONTROL)
            scores.append(0.0)
        elif tok in added:
            types.append(TOK_USER_DEFINED)
            scores.append(0.0)
        elif len(tok) == 6 and tok.startswith("<0x") and tok.endswith(">"):
            types.append(TOK_BYTE)
            scores.append(0.0)
        else:
            # SentencePiece BPE vocabularies are ordered by merge priority: a monotone score.
            types.append(TOK_NORMAL)
            scores.append(float(-i))

    def tok_id(key, fallback):
        v = tcfg.get(key)
        if isinstance(v, dict):
            v = v.get("content")
        if isinstance(v, str) and v in vocab:
            return vocab[v]
        return fallback

    def cfg_id(key):
        v = cfg.get(key)
        if isinstance(v, list):
            v = v[0] if v else None
        return v

    bos = tok_id("bos_token", cfg_id("bos_token_id"))
    eos = tok_id("eos_token", cfg_id("eos_token_id"))
    unk_id = vocab.get(unk) if unk is not None else None
    norm = json.dumps(tj.get("normalizer"))
    add_space_prefix = '"Prepend"' in norm
    # A byte-level BPE (GPT-2 style: Qwen, Llama 3) goes as llama.cpp's "gpt2" vocab with its merges; its
    # pre-tokenizer named as llama.cpp names Qwen's split pattern ("qwen2") or Llama 3's ("llama-bpe").
    pre_tok = json.dumps(tj.get("pre_tokenizer"))
    byte_level = '"ByteLevel"' in pre_tok
    merges = [m if isinstance(m, str) else " ".join(m) for m in model.get("merges", [])] if byte_level else []
    pre = "qwen2" if "\\p{N}" in pre_tok and "{1,3}" not in pre_tok else "llama-bpe"
    if byte_level:
        types = [TOK_UNUSED if t.startswith("[PAD") else TOK_CONTROL if (t in added and added[t].get("special", False))
                 else TOK_USER_DEFINED if t in added else TOK_NORMAL for t in tokens]
    return dict(tokens=tokens, scores=scores, types=types, bos=bos, eos=eos, unk=unk_id,
                add_bos=bool(tcfg.get("add_bos_token", not byte_level)) and bos is not None,
                add_eos=bool(tcfg.get("add_eos_token", False)),
                add_space_prefix=add_space_prefix, byte_level=byte_level, merges=merges, pre=pre)


LORA_PROJ = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
             "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
             "mlp.down_proj": "ffn_down"}


def convert_lora(args, cfg):
    """PEFT LoRA folder -> llama.cpp LoRA adapter GGUF for a dense Llama base (see the module docstring)."""
    arch0 = cfg.get("architectures", [""])[0]
    if arch0 not in ("LlamaForCausalLM", "MistralForCausalLM") or cfg.get("model_type", "llama") not in ("llama", "mistral"):
        raise SystemExit(f"--lora: only dense Llama-architecture bases (LlamaForCausalLM), not {arch0}")
    with open(os.path.join(args.lora, "adapter_config.json")) as f:
        ac = json.load(f)
    if ac.get("peft_type", "LORA") != "LORA":
        raise SystemExit(f"--lora: peft_type {ac.get('peft_type')!r}, expected LORA")
    for key in ("use_dora", "fan_in_fan_out", "modules_to_save", "rank_pattern", "alpha_pattern"):
        if ac.get(key):
            raise SystemExit(f"--lora: {key} {ac[key]!r} is not supported")
    if ac.get("bias", "none") != "none":
        raise SystemExit(f"--lora: bias {ac['bias']!r} is not supported")
    r, alpha = int(ac.get("r", 8)), float(ac.get("lora_alpha", 8))
    if alpha == 0:
        raise SystemExit("--lora: lora_alpha 0 (llama.cpp reads alpha 0 as scale 1)")
    if ac.get("use_rslora", False):
        alpha *= math.sqrt(r)  # llama.cpp scales by alpha / r; rsLoRA by lora_alpha / sqrt(r)

    hidden = cfg["hidden_size"]
    n_layer = cfg["num_hidden_layers"]
    n_head = cfg["num_attention_heads"]
    n_kv = cfg.get("num_key_value_heads", n_head)
    head_dim = cfg.get("head_dim") or hidden // n_head
    ffn = cfg["intermediate_size"]
    shapes = {"attn_q": (n_head * head_dim, hidden), "attn_k": (n_kv * head_dim, hidden),
              "attn_v": (n_kv * head_dim, hidden), "attn_output": (hidden, n_head * head_dim),
              "ffn_gate": (ffn, hidden), "ffn_up": (ffn, hidden), "ffn_down": (hidden, ffn)}

    st = read_safetensors(os.path.join(args.lora, "adapter_model.safetensors"))
    pairs = {}
    for name in st:
        m = re.fullmatch(r"base_model\.model\.model\.layers\.(\d+)\.(\w+\.\w+)\.lora_([AB])\.weight", name)
        if not m or m.group(2) not in LORA_PROJ or int(m.group(1)) >= n_layer:
            raise SystemExit(f"--lora: unexpected adapter tensor {name}")
        key = (int(m.group(1)), LORA_PROJ[m.group(2)])
        pairs.setdefault(key, {})[m.group(3)] = name
    if not pairs:
        raise SystemExit("--lora: no lora_A / lora_B tensors")

    wt = GGML_F16 if args.outtype == "f16" else GGML_F32
    w = GGUFWriter()
    w.add("general.architecture", T_STRING, "llama")
    w.add("general.type", T_STRING, "adapter")
    w.add("general.name", T_STRING, os.path.basename(os.path.normpath(args.lora)))
    w.add("general.alignment", T_UINT32, ALIGNMENT)
    w.add("general.file_type", T_UINT32, FTYPE_MOSTLY_F16 if args.outtype == "f16" else FTYPE_ALL_F32)
    w.add("adapter.type", T_STRING, "lora")
    w.add("adapter.lora.alpha", T_FLOAT32, alpha)
    for (layer, base), ab in sorted(pairs.items()):
        if set(ab) != {"A", "B"}:
            raise SystemExit(f"--lora: blk.{layer}.{base}: lora_{list(ab)[0]} without its pair")
        out_f, in_f = shapes[base]
        a_entry, b_entry = st[ab["A"]], st[ab["B"]]
        if a_entry[1] != (r, in_f) or b_entry[1] != (out_f, r):
            raise SystemExit(f"--lora: blk.{layer}.{base}: lora_A {a_entry[1]}, lora_B {b_entry[1]}, "
                             f"expected {(r, in_f)} and {(out_f, r)}")
        # Rows of B are the rows of the update B A: q/k's are permuted like their weights' rows.
        heads = {"attn_q": n_head, "attn_k": n_kv}.get(base)
        name = f"blk.{layer}.{base}.weight"
        w.add_tensor(name + ".lora_a", a_entry[1], wt, lambda e=a_entry: to_f32(e))
        w.add_tensor(name + ".lora_b", b_entry[1], wt,
                     lambda e=b_entry, h=heads: hf_to_meta_rows(to_f32(e), h) if h else to_f32(e))
    w.write(args.out)
    print(f"wrote {args.out}: LoRA adapter, {len(pairs)} projections, r {r}, alpha {alpha:g}, "
          f"outtype {args.outtype}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model_dir")
    ap.add_argument("out")
    ap.add_argument("--outtype", choices=["f16", "f32"], default="f16")
    ap.add_argument("--lora", metavar="ADAPTER_DIR", help="write a LoRA adapter GGUF for this PEFT folder")
    args = ap.parse_args()

    with open(os.path.join(args.model_dir, "config.json")) as f:
        cfg = json.load(f)
    if args.lora:
        convert_lora(args, cfg)
        return
    gemma2 = cfg.get("architectures", [""])[0] == "Gemma2ForCausalLM"
    gemma3 = cfg.get("architectures", [""])[0] == "Gemma3ForCausalLM"
    gemma = gemma2 or gemma3
    phi3 = cfg.get("architectures", [""])[0] == "Phi3ForCausalLM"
    qwen3moe = cfg.get("architectures", [""])[0] == "Qwen3MoeForCausalLM"
    qwen2moe = cfg.get("architectures", [""])[0] == "Qwen2MoeForCausalLM"
    mixtral = cfg.get("architectures", [""])[0] == "MixtralForCausalLM"
    qwen3 = cfg.get("architectures", [""])[0] == "Qwen3ForCausalLM" or qwen3moe
    arch = ("gemma3" if gemma3 else "gemma2" if gemma2 else "phi3" if phi3 else "qwen3moe" if qwen3moe
            else "qwen2moe" if qwen2moe else "qwen3" if qwen3 else "llama")
    if (qwen3moe or qwen2moe) and (cfg.get("mlp_only_layers") or cfg.get("decoder_sparse_step", 1) != 1):
        raise SystemExit(f"{arch}: every layer must be sparse (no mlp_only_layers, decoder_sparse_step 1)")
    if arch == "llama" and cfg.get("model_type", "llama") != "llama":
        print(f"warning: model_type {cfg.get('model_type')} treated as llama", file=sys.stderr)
    rope_scaling = cfg.get("rope_scaling")
    rope_type = rope_scaling.get("rope_type", rope_scaling.get("type")) if rope_scaling else None
    if rope_scaling and not (phi3 and rope_type in ("longrope", "su")) and rope_type != "yarn":
        raise SystemExit("rope_scaling is not supported by this converter (but Phi-3's longrope, and yarn)")
    if gemma and (cfg.get("layer_types") or cfg.get("query_pre_attn_scalar", 256) != cfg.get("head_dim", 256)):
        raise SystemExit(f"{arch}: layer_types and a query_pre_attn_scalar other than head_dim are not written")
    if (cfg.get("attention_bias") and not qwen2moe) or cfg.get("mlp_bias"):
        raise SystemExit("bias tensors are not supported by this converter (but Qwen2-MoE's q/k/v biases)")

    hidden = cfg["hidden_size"]
    n_layer = cfg["num_hidden_layers"]
    n_head = cfg["num_attention_heads"]
    n_kv = cfg.get("num_key_value_heads", n_head)
    head_dim = cfg.get("head_dim") or (256 if gemma else hidden // n_head)
    ffn = cfg["intermediate_size"]
    ctx = cfg.get("max_position_embeddings", 2048)
    eps = cfg.get("rms_norm_eps", 1e-6)
    theta = cfg.get("rope_theta", 1e6 if gemma3 else 10000.0)

    st_path = os.path.join(args.model_dir, "model.safetensors")
    st = read_safetensors(st_path)
    tied = cfg.get("tie_word_embeddings", gemma) or "lm_head.weight" not in st
    tok = load_tokenizer(args.model_dir, cfg)

    w = GGUFWriter()
    w.add("general.architecture", T_STRING, arch)
    w.add("general.name", T_STRING, os.path.basename(os.path.normpath(args.model_dir)))
    w.add("general.alignment", T_UINT32, ALIGNMENT)
    w.add("general.file_type", T_UINT32, FTYPE_MOSTLY_F16 if args.outtype == "f16" else FTYPE_ALL_F32)
    a = arch + "."
    w.add(a + "context_length", T_UINT32, ctx)
    w.add(a + "embedding_length", T_UINT32, hidden)
    w.add(a + "block_count", T_UINT32, n_layer)
    w.add(a + "feed_forward_length", T_UINT32, ffn)
    rot = int(head_dim * cfg.get("partial_rotary_factor", 1.0))
    w.add(a + "rope.dimension_count", T_UINT32, rot)
    w.add(a + "attention.head_count", T_UINT32, n_head)
    w.add(a + "attention.head_count_kv", T_UINT32, n_kv)
    w.add(a + "attention.layer_norm_rms_epsilon", T_FLOAT32, float(eps))
    w.add(a + "rope.freq_base", T_FLOAT32, float(theta))
    if head_dim * n_head != hidden or gemma or qwen3:
        w.add(a + "attention.key_length", T_UINT32, head_dim)
        w.add(a + "attention.value_length", T_UINT32, head_dim)
    if gemma:
        window = cfg.get("sliding_window", 4096)
        if window:
            w.add(a + "attention.sliding_window", T_UINT32, window)
            w.add(a + "attention.sliding_window_pattern", T_UINT32, cfg.get("sliding_window_pattern", 6 if gemma3 else 2))
        if gemma3:
            w.add(a + "rope.freq_base_swa", T_FLOAT32, float(cfg.get("rope_local_base_freq", 10000.0)))
        else:  # Gemma2Config's defaults; llama.cpp reads no "none", so a null cap cannot be written
            for key, default in (("attn_logit_softcapping", 50.0), ("final_logit_softcapping", 30.0)):
                if key in cfg and cfg[key] is None:
                    raise SystemExit(f"gemma2: {key} null is not written")
                w.add(a + key, T_FLOAT32, float(cfg.get(key, default)))
    if phi3:  # as llama.cpp's Phi3MiniModel writes them
        original = cfg.get("original_max_position_embeddings", 4096)
        w.add(a + "rope.scaling.original_context_length", T_UINT32, original)
        w.add(a + "attention.sliding_window", T_UINT32, cfg.get("sliding_window") or 0)
        if rope_scaling:
            scale = ctx / original
            attn_factor = math.sqrt(1 + math.log(scale) / math.log(original)) if scale > 1.0 else 1.0
            w.add(a + "rope.scaling.attn_factor", T_FLOAT32, float(attn_factor))
    n_experts = cfg.get("num_local_experts" if mixtral else "num_experts", 0) if (mixtral or qwen3moe or qwen2moe) else 0
    expert_ff = cfg.get("moe_intermediate_size", ffn) if (qwen3moe or qwen2moe) else ffn
    shared_ff = cfg.get("shared_expert_intermediate_size", 0) if qwen2moe else 0
    if n_experts:
        w.add(a + "expert_count", T_UINT32, n_experts)
        w.add(a + "expert_used_count", T_UINT32, cfg["num_experts_per_tok"])
        if qwen3moe or qwen2moe:
            w.add(a + "expert_feed_forward_length", T_UINT32, expert_ff)
        if shared_ff:
            w.add(a + "expert_shared_feed_forward_length", T_UINT32, shared_ff)
    if rope_type == "yarn":  # as llama.cpp's converter writes it
        w.add(a + "rope.scaling.type", T_STRING, "yarn")
        w.add(a + "rope.scaling.factor", T_FLOAT32, float(rope_scaling["factor"]))
        w.add(a + "rope.scaling.original_context_length", T_UINT32,
              rope_scaling.get("original_max_position_embeddings", ctx))
    w.add(a + "vocab_size", T_UINT32, len(tok["tokens"]))

    w.add("tokenizer.ggml.model", T_STRING, "gpt2" if tok["byte_level"] else "llama")
    if tok["byte_level"]:
        w.add("tokenizer.ggml.pre", T_STRING, tok["pre"])
        w.add("tokenizer.ggml.merges", T_ARRAY, tok["merges"], T_STRING)
    w.add("tokenizer.ggml.tokens", T_ARRAY, tok["tokens"], T_STRING)
    w.add("tokenizer.ggml.scores", T_ARRAY, tok["scores"], T_FLOAT32)
    w.add("tokenizer.ggml.token_type", T_ARRAY, tok["types"], T_INT32)
    for key, name in (("bos", "bos_token_id"), ("eos", "eos_token_id"), ("unk", "unknown_token_id")):
        if tok[key] is not None:
            w.add(f"tokenizer.ggml.{name}", T_UINT32, int(tok[key]))
    w.add("tokenizer.ggml.add_bos_token", T_BOOL, tok["add_bos"])
    w.add("tokenizer.ggml.add_eos_token", T_BOOL, tok["add_eos"])
    w.add("tokenizer.ggml.add_space_prefix", T_BOOL, tok["add_space_prefix"])

    wt = GGML_F16 if args.outtype == "f16" else GGML_F32

    def add(gguf_name, hf_name, ttype, transform=None):
        if hf_name not in st:
            raise SystemExit(f"missing tensor {hf_name}")
        entry = st[hf_name]

        def producer():
            a = to_f32(entry)
            return transform(a) if transform else a
        w.add_tensor(gguf_name, entry[1], ttype, producer)

    def plus_one(a):  # Gemma's norms multiply by 1 + w; llama.cpp's files store 1 + w
        return a + np.float32(1.0)

    norm = plus_one if gemma else None
    if phi3 and rope_scaling:
        for kind in ("long", "short"):
            factors = np.asarray(rope_scaling[kind + "_factor"], dtype=np.float32)
            w.add_tensor(f"rope_factors_{kind}.weight", [len(factors)], GGML_F32, lambda f=factors: f)
    add("token_embd.weight", "model.embed_tokens.weight", wt)
    add("output_norm.weight", "model.norm.weight", GGML_F32, norm)
    if not tied:
        add("output.weight", "lm_head.weight", wt)
    for i in range(n_layer):
        p = f"model.layers.{i}."
        b = f"blk.{i}."
        add(b + "attn_norm.weight", p + "input_layernorm.weight", GGML_F32, norm)
        if phi3:  # fused as HF has them; rotate-half RoPE (NEOX), rows unchanged
            add(b + "attn_qkv.weight", p + "self_attn.qkv_proj.weight", wt)
            add(b + "attn_output.weight", p + "self_attn.o_proj.weight", wt)
            add(b + "ffn_norm.weight", p + "post_attention_layernorm.weight", GGML_F32)
            add(b + "ffn_up.weight", p + "mlp.gate_up_proj.weight", wt)
            add(b + "ffn_down.weight", p + "mlp.down_proj.weight", wt)
            continue
        if gemma or qwen3 or qwen2moe:  # rotate-half RoPE (NEOX) in llama.cpp: rows as HF has them
            add(b + "attn_q.weight", p + "self_attn.q_proj.weight", wt)
            add(b + "attn_k.weight", p + "self_attn.k_proj.weight", wt)
        if qwen2moe:
            for x in "qkv":
                add(b + f"attn_{x}.bias", p + f"self_attn.{x}_proj.bias", GGML_F32)
        if qwen3:
            add(b + "attn_q_norm.weight", p + "self_attn.q_norm.weight", GGML_F32)
            add(b + "attn_k_norm.weight", p + "self_attn.k_norm.weight", GGML_F32)
        if gemma3:
            add(b + "attn_q_norm.weight", p + "self_attn.q_norm.weight", GGML_F32, norm)
            add(b + "attn_k_norm.weight", p + "self_attn.k_norm.weight", GGML_F32, norm)
        if arch == "llama":
            add(b + "attn_q.weight", p + "self_attn.q_proj.weight", wt, lambda a: hf_to_meta_rows(a, n_head))
            add(b + "attn_k.weight", p + "self_attn.k_proj.weight", wt, lambda a: hf_to_meta_rows(a, n_kv))
        add(b + "attn_v.weight", p + "self_attn.v_proj.weight", wt)
        add(b + "attn_output.weight", p + "self_attn.o_proj.weight", wt)
        if gemma:
            add(b + "post_attention_norm.weight", p + "post_attention_layernorm.weight", GGML_F32, norm)
            add(b + "ffn_norm.weight", p + "pre_feedforward_layernorm.weight", GGML_F32, norm)
            add(b + "post_ffw_norm.weight", p + "post_feedforward_layernorm.weight", GGML_F32, norm)
        else:
            add(b + "ffn_norm.weight", p + "post_attention_layernorm.weight", GGML_F32)
        if n_experts:  # the router in f32, each projection's experts stacked [experts, rows, cols]
            moe = p + ("block_sparse_moe." if mixtral else "mlp.")
            add(b + "ffn_gate_inp.weight", moe + "gate.weight", GGML_F32)
            if shared_ff:  # Qwen2-MoE's shared expert, its gate a vector
                add(b + "ffn_gate_shexp.weight", moe + "shared_expert.gate_proj.weight", wt)
                add(b + "ffn_up_shexp.weight", moe + "shared_expert.up_proj.weight", wt)
                add(b + "ffn_down_shexp.weight", moe + "shared_expert.down_proj.weight", wt)
                gate_entry = st[moe + "shared_expert_gate.weight"]
                w.add_tensor(b + "ffn_gate_inp_shexp.weight", (hidden,), GGML_F32,
                             lambda e=gate_entry: to_f32(e).reshape(hidden))
            names = ("w1", "w3", "w2") if mixtral else ("gate_proj", "up_proj", "down_proj")
            for gguf_part, part in zip(("ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"), names):
                hf = [moe + f"experts.{e}.{part}.weight" for e in range(n_experts)]
                for name in hf:
                    if name not in st:
                        raise SystemExit(f"missing tensor {name}")
                shape = (n_experts,) + tuple(st[hf[0]][1])
                w.add_tensor(b + gguf_part + ".weight", shape, wt,
                             lambda hf=hf: np.stack([to_f32(st[name]) for name in hf]))
            continue
        add(b + "ffn_gate.weight", p + "mlp.gate_proj.weight", wt)
        add(b + "ffn_up.weight", p + "mlp.up_proj.weight", wt)
        add(b + "ffn_down.weight", p + "mlp.down_proj.weight", wt)

    w.write(args.out)
    print(f"wrote {args.out}: {len(w.tensors)} tensors, {len(w.kv)} kv, outtype {args.outtype}, "
          f"tied={tied}, vocab={len(tok['tokens'])}")


if __name__ == "__main__":
    main()
