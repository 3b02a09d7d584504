#!/usr/bin/python3
"""Independent PyTorch reference for the forward pass of Hugging Face decoder models.

Standalone: python3 standard library + torch only (Debian's python3-torch, run with
/usr/bin/python3). No transformers, no safetensors package: the safetensors format is read and
written here with json + struct.

Supported architectures (config.json "model_type"): llama, mistral, qwen2, mixtral, qwen3, qwen3_moe,
qwen2_moe, gemma2, gemma3_text.

Subcommands
-----------

make-model --kind KIND --out DIR [--dtype float32|bfloat16|float16] [--seed N] [--tokenizer-dir D]
    Writes a random-weight model folder in the HF layout: config.json, model.safetensors (HF
    tensor names), and tokenizer.json, tokenizer_config.json, generation_config.json copied from
    --tokenizer-dir (default: ../../models/stories260K from this script), so vocab_size is 512.
    Default dtype float32, default seed 0. Weights are drawn in float32 from a generator seeded
    with (seed, KIND) and then cast to --dtype, so the same arguments give the same bytes (with
    the same torch build) and a bfloat16 folder holds the rounded float32 weights. KIND is one of:
      KIND               architectures[0]    hidden layers heads kv head_dim ff  notes
      llama-gqa          LlamaForCausalLM     64     2     8     2   8       96  untied
      llama-mha-hd128    LlamaForCausalLM    256     2     2     2   128     128 tied
      llama-hd-decoupled LlamaForCausalLM     64     2     4     2   32      96  head_dim != 64/4
      qwen2-bias         Qwen2ForCausalLM     64     2     4     2   (16)    96  q/k/v biases,
                                                                                 theta 1e6
      mixtral-4x2        MixtralForCausalLM   64     2     4     2   16      64  4 experts, top-2
      mistral            MistralForCausalLM   64     2     4     1   16      96  sliding_window null
      mistral-window     MistralForCausalLM   64     2     4     1   16      96  sliding_window 5
      qwen2-window       Qwen2ForCausalLM     64     3     4     2   (16)    96  use_sliding_window,
                                                                                 window 5 from layer 1
                                                                                 (max_window_layers 1)
      qwen3              Qwen3ForCausalLM     64     2     4     2   32      96  q/k norm, tied
      qwen3-moe          Qwen3MoeForCausalLM  64     3     4     2   16      96  q/k norm, 8 experts of
                                                                                 32, top-2 renormalised,
                                                                                 layer 1 dense
      qwen2-moe          Qwen2MoeForCausalLM  64     2     4     2   (16)    96  q/k/v biases, 4 experts
                                                                                 of 32, top-2 as routed,
                                                                                 shared expert of 48
      gemma3             Gemma3ForCausalLM    64     3     4     1   32      96  gelu_pytorch_tanh,
                                                                                 query_pre_attn_scalar 24,
                                                                                 window 5 on layers 0-1
                                                                                 (pattern 3), local
                                                                                 theta 1e4, tied (default)
      gemma3-scaled      Gemma3ForCausalLM    64     2     4     2   16      96  layer_types [full,
                                                                                 sliding], rope_scaling
                                                                                 linear 4, untied
      gemma2             Gemma2ForCausalLM    64     3     4     2   32      96  attention scores capped
                                                                                 at 2, logits at 1.5,
                                                                                 query_pre_attn_scalar 24,
                                                                                 window 5 on layers 0, 2,
                                                                                 untied
    (all: vocab 512, max_position_embeddings 512, rms_norm_eps 1e-5, silu; theta 1e4 except
    qwen2-bias, mixtral-4x2 and the gemma3 kinds at 1e6; among the others only llama-mha-hd128 ties
    lm_head to the embeddings)
    or "all", which writes every kind into DIR/<KIND>/. Folders are 0.5-0.8 MB in float32,
    except llama-mha-hd128 (3.3 MB float32, 1.7 MB bfloat16).

make-lora --model DIR --out ADIR --rank R [--alpha A] [--targets q_proj,k_proj,...] [--seed N] [--rslora]
          [--dtype float32|bfloat16|float16] [--layers 0,1]
    Writes a random PEFT LoRA adapter folder for the model folder DIR: adapter_config.json (peft_type LORA,
    task_type CAUSAL_LM, r R, lora_alpha A (default 2R), target_modules, use_rslora, lora_dropout 0, bias none,
    no DoRA / fan_in_fan_out / modules_to_save / rank or alpha patterns, layers_to_transform null,
    base_model_name_or_path DIR) and adapter_model.safetensors with PEFT's names
      base_model.model.model.layers.L.self_attn.{q,k,v,o}_proj.lora_{A,B}.weight
      base_model.model.model.layers.L.mlp.{gate,up,down}_proj.lora_{A,B}.weight
    lora_A [R, in_features], lora_B [out_features, R], the features from DIR's config.json (q: heads x head_dim,
    k/v: kv_heads x head_dim, o: hidden, gate/up: intermediate_size; head_dim from config, else hidden/heads).
    --targets (default all seven) picks the projections, --layers (default all) the layers; MLP targets are
    skipped on sparse (MoE) layers; Phi-3's fused qkv_proj / gate_up_proj are targets of their own there;
    multimodal folders are refused. Values: each
    module's pair from its own generator seeded with (seed, "lora", module name), so a --layers subset holds
    the same values as the full adapter; A ~ N(0, 1/sqrt(in)), B ~ N(0, g) with g = 0.5 / (scaling sqrt(R))
    (PEFT's zero B would be a no-op): the update then has rms ~0.5 x rms(input), against ~1-2 x for the
    make-model projections, so greedy tokens change. Drawn in float32, stored in --dtype (default float32).

merge-lora --model DIR --lora ADIR --out MDIR
    Writes MDIR, a copy of DIR (every file but the safetensors weights and their index copied) whose
    model.safetensors holds W + scaling B A for each adapted projection, computed in float64 from the stored
    values and stored in W's dtype; the other tensors unchanged. The same adapter checks as logits --lora.

logits --model DIR --prompt-ids 1,2,3 --decode-steps N [--out FILE] [--prompt-logits] [--lora ADIR]
       [--compute-dtype float32|float64] [--kv-dtype float32|bfloat16|float16] [--round-inputs bfloat16]
    Loads DIR (any folder above, or models/stories260K), converts the weights to the compute
    dtype (float32 by default) and greedily decodes N >= 1 tokens, recomputing the full forward
    pass over the whole sequence at every step (no KV cache). Writes JSON to FILE (stdout if
    absent):
      {"model": DIR, "prompt_ids": [p_0..p_{P-1}],
       "logits": [row_0, ..., row_{N-1}],     each row a list of vocab_size floats
       "greedy_ids": [g_0, ..., g_{N-1}]}
    row_0 is the logits at the last prompt position (input sequence = prompt);
    row_k (k >= 1) is the logits at the last position of the sequence prompt + g_0..g_{k-1};
    g_k = argmax(row_k), the lowest id on ties. So row k predicts greedy_ids[k]; there are exactly
    N rows and N ids, and g_{N-1} is never fed back. Positions start at 0 for the first prompt
    token. With --prompt-logits, "prompt_logits" is added: one row per prompt position
    (row P-1 equals logits[0]). Floats are float32 (or float64) values printed exactly as doubles.
    --kv-dtype rounds every K (after RoPE) and V through that dtype before attention, as a KV
    cache of that element type stores them (default: the compute dtype, no rounding).
    --round-inputs rounds the input of every product with a weight matrix (projections, MLPs, experts, routers,
    lm_head) through that dtype first, as a CPU's bf16 dot products (vdpbf16ps) do with bf16 weights.
    --lora ADIR applies a PEFT LoRA adapter unmerged, as PEFT's Linear does: for each adapted projection
    y = base(x) (+ bias) + ((x A^T) B^T) * scaling, scaling = lora_alpha / r (lora_alpha / sqrt(r) with
    use_rslora), A and B converted to the compute dtype; with --round-inputs both LoRA products round their
    input (x, then x A^T) like every product with a weight matrix. Refused: an adapter tensor whose name is not
    one of make-lora's (e.g. embeddings, lm_head, experts, fused projections), a lone A or B, a shape that does
    not fit, one the forward pass does not use (e.g. an MLP target on a sparse layer), DoRA, fan_in_fan_out,
    bias other than none, modules_to_save, rank_pattern / alpha_pattern. The JSON gains "lora": ADIR.

suite --out DIR [--prompt-ids ...] [--decode-steps N] [--dtype ...] [--seed N] [--kv-dtype ...] [--round-inputs ...]
    One process (torch is imported once, ~1-2 s): make-model for every kind into DIR/<KIND>/,
    then logits for each into DIR/<KIND>/reference.json (same contract as "logits", with
    "model" = KIND). Defaults: prompt 1,403,407,261,378,432,383,286,261,376,298,315 (12 tokens),
    8 decode steps. Prefer this in test fixtures: separate processes pay the import every time.

Errors (unknown model_type, rope_scaling other than default, hidden_act other than silu or gelu(_pytorch_tanh), a
missing tensor or a wrong shape, a tensor the forward pass did not use, an adapter as refused above) exit
non-zero with a Python traceback.

Forward pass (the HF modelling equations, written out):
  x = embed_tokens[ids]
  per layer:  h = rmsnorm(x, input_layernorm);  x += attn(h);
              h = rmsnorm(x, post_attention_layernorm);  x += mlp(h)   (or the sparse MoE)
  logits = rmsnorm(x, norm) @ W^T,  W = lm_head.weight, or embed_tokens.weight when tied
  rmsnorm(x, w) = x * rsqrt(mean(x^2, -1) + eps) * w
  attn: q = h Wq^T (+bq), k = h Wk^T (+bk), v = h Wv^T (+bv); split into heads of head_dim
        (config head_dim, else hidden/heads); RoPE rotate_half on q and k with
        inv_freq_i = theta^(-2i/head_dim), i < head_dim/2, angle = pos * inv_freq,
        x' = x*cos + rotate_half(x)*sin, rotate_half(x) = cat(-x[d/2:], x[:d/2]);
        query head h uses kv head h // (heads/kv_heads); softmax(q k^T / sqrt(head_dim) +
        causal mask (and, in a layer with a sliding window W, keys with i - j < W only)) v;
        concat heads; @ Wo^T.
  sliding window per layer, as HF's config classes and modelling code decide it:
        llama: none. mistral: config sliding_window on every layer; absent -> 4096 (MistralConfig's
        default), null -> none. mixtral: sliding_window on every layer; absent or null -> none.
        qwen2: none unless use_sliding_window (default false); then W = sliding_window (absent ->
        4096, null -> none) on the layers layer_types marks "sliding_attention", or without
        layer_types on layers i >= max_window_layers (default 28).
  mlp: down(silu(gate(h)) * up(h)).
  mixtral: r = h @ gate^T; p = softmax(r) in float32; top-k of p; renormalise the k weights to
        sum 1; out = sum_j w_j * expert_j(h), expert = w2(silu(w1 h) * w3 h).
  qwen2: q/k/v biases are always present; llama/mistral use attention_bias from config.json.
  qwen3, qwen3_moe: q = rmsnorm_per_head(q, q_norm), k = rmsnorm_per_head(k, k_norm) over each
        head's head_dim features, before RoPE; windows as qwen2. qwen3_moe: a layer is sparse unless
        in mlp_only_layers, when (layer + 1) % decoder_sparse_step == 0; router softmax in float32,
        top-k, renormalised only with norm_topk_prob; experts mlp.experts.E.{gate,up,down}_proj of
        moe_intermediate_size; dense layers use intermediate_size. qwen2_moe: the same routing (qwen2's
        biases and windows, no q/k norm) plus sigmoid(h @ shared_expert_gate^T) * shared_expert(h), the
        shared expert an MLP of shared_expert_intermediate_size.
  gemma3_text (Gemma3ForCausalLM, HF's modeling_gemma3): x = embed_tokens[ids] * normalizer, the
        normalizer sqrt(hidden) rounded to the embedding's stored dtype; every RMSNorm multiplies by
        (1 + w); per layer: x += rmsnorm(attn(rmsnorm(x, input_layernorm)), post_attention_layernorm);
        x += rmsnorm(mlp(rmsnorm(x, pre_feedforward_layernorm)), post_feedforward_layernorm);
        q/k norms per head as qwen3; scores scaled by query_pre_attn_scalar^-1/2; sliding layers
        (layer_types, else all but every sliding_window_pattern-th) use rope_local_base_freq
        without scaling, the others rope_theta with rope_scaling (linear: inv_freq / factor);
        mlp down(gelu_tanh(gate(h)) * up(h)); tie_word_embeddings defaults to true.
  gemma2 (Gemma2ForCausalLM): as gemma3_text without q/k norms or a local RoPE base (rope_theta on
        every layer; sliding layers by layer_types, else the even ones), plus the caps: scores s
        (after the scale) become c tanh(s / c), c = attn_logit_softcapping (absent: 50, null: none),
        and the logits likewise with final_logit_softcapping (absent: 30).
"""

import argparse
import json
import math
import os
import re
import shutil
import struct
import sys
import time
import zlib

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
STORIES_DIR = os.path.normpath(os.path.join(HERE, "..", "..", "models", "stories260K"))
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "generation_config.json")

# --------------------------------------------------------------------------------------------
# safetensors (own reader / writer)

ST_DTYPES = {
    "F64": torch.float64,
    "F32": torch.float32,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "I64": torch.int64,
    "I32": torch.int32,
}
ST_NAMES = {v: k for k, v in ST_DTYPES.items()}


def read_safetensors(path):
    """Returns {name: tensor} (tensors in the file's dtype, own memory)."""
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 8:
        raise ValueError(f"{path}: too short for a safetensors file")
    (hlen,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + hlen].decode("utf-8"))
    base = 8 + hlen
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dt = info["dtype"]
        if dt not in ST_DTYPES:
            raise ValueError(f"{path}: tensor {name}: unsupported dtype {dt}")
        begin, end = info["data_offsets"]
        shape = list(info["shape"])
        buf = bytearray(raw[base + begin:base + end])
        n = math.prod(shape)
        if n == 0:
            t = torch.zeros(shape, dtype=ST_DTYPES[dt])
        else:
            t = torch.frombuffer(buf, dtype=ST_DTYPES[dt])
            if t.numel() != n:
                raise ValueError(f"{path}: tensor {name}: {t.numel()} elements, shape {shape}")
            t = t.reshape(shape)
        out[name] = t
    return out


def write_safetensors(path, tensors, metadata=None):
    """tensors: {name: tensor}. Written in sorted name order; header padded to 8 bytes."""
    names = sorted(tensors)
    header = {}
    chunks = []
    offset = 0
    for name in names:
        t = tensors[name].detach().contiguous().cpu()
        if t.dtype not in ST_NAMES:
            raise ValueError(f"tensor {name}: unsupported dtype {t.dtype}")
        data = t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
        header[name] = {"dtype": ST_NAMES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(data)]}
        chunks.append(data)
        offset += len(data)
    full = {"__metadata__": metadata or {"format": "pt"}}
    full.update(header)
    hbytes = json.dumps(full, separators=(",", ":")).encode("utf-8")
    hbytes += b" " * ((8 - len(hbytes) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hbytes)))
        f.write(hbytes)
        for c in chunks:
            f.write(c)


def load_weights(model_dir):
    single = os.path.join(model_dir, "model.safetensors")
    index = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.exists(single):
        return read_safetensors(single)
    if os.path.exists(index):
        with open(index) as f:
            weight_map = json.load(f)["weight_map"]
        out = {}
        for shard in sorted(set(weight_map.values())):
            out.update(read_safetensors(os.path.join(model_dir, shard)))
        return out
    raise FileNotFoundError(f"{model_dir}: no model.safetensors or model.safetensors.index.json")


# --------------------------------------------------------------------------------------------
# make-model

KINDS = {
    "llama-gqa": dict(arch="LlamaForCausalLM", model_type="llama", hidden=64, layers=2, heads=8,
                      kv_heads=2, head_dim=8, ff=96, tied=False, theta=10000.0),
    "llama-mha-hd128": dict(arch="LlamaForCausalLM", model_type="llama", hidden=256, layers=2,
                            heads=2, kv_heads=2, head_dim=128, ff=128, tied=True, theta=10000.0),
    "llama-hd-decoupled": dict(arch="LlamaForCausalLM", model_type="llama", hidden=64, layers=2,
                               heads=4, kv_heads=2, head_dim=32, ff=96, tied=False,
                               theta=10000.0),
    "qwen2-bias": dict(arch="Qwen2ForCausalLM", model_type="qwen2", hidden=64, layers=2, heads=4,
                       kv_heads=2, head_dim=16, ff=96, tied=False, theta=1000000.0),
    "mixtral-4x2": dict(arch="MixtralForCausalLM", model_type="mixtral", hidden=64, layers=2,
                        heads=4, kv_heads=2, head_dim=16, ff=64, tied=False, theta=1000000.0,
                        experts=4, top_k=2),
    "mistral": dict(arch="MistralForCausalLM", model_type="mistral", hidden=64, layers=2, heads=4,
                    kv_heads=1, head_dim=16, ff=96, tied=False, theta=10000.0),
    # Windows shorter than the suite's 12-token prompt + 8 decode steps.
    "mistral-window": dict(arch="MistralForCausalLM", model_type="mistral", hidden=64, layers=2,
                           heads=4, kv_heads=1, head_dim=16, ff=96, tied=False, theta=10000.0,
                           window=5),
    "qwen2-window": dict(arch="Qwen2ForCausalLM", model_type="qwen2", hidden=64, layers=3, heads=4,
                         kv_heads=2, head_dim=16, ff=96, tied=False, theta=1000000.0, window=5,
                         max_window_layers=1),
    # Qwen3: q/k RMSNorm per head, head_dim decoupled from hidden/heads, tied (as the small ones are).
    "qwen3": dict(arch="Qwen3ForCausalLM", model_type="qwen3", hidden=64, layers=2, heads=4,
                  kv_heads=2, head_dim=32, ff=96, tied=True, theta=1000000.0),
    # Qwen3-MoE: 8 experts of their own width, top-2 renormalised; layer 1 dense (mlp_only_layers).
    "qwen3-moe": dict(arch="Qwen3MoeForCausalLM", model_type="qwen3_moe", hidden=64, layers=3,
                      heads=4, kv_heads=2, head_dim=16, ff=96, tied=False, theta=1000000.0,
                      experts=8, top_k=2, moe_ff=32, norm_topk=True, mlp_only=[1]),
    # Qwen3-MoE as its GGUFs keep it (every layer sparse, the kept weights renormalised): 4 experts of 32, top-2.
    "qwen3-moe-sparse": dict(arch="Qwen3MoeForCausalLM", model_type="qwen3_moe", hidden=64, layers=2,
                             heads=4, kv_heads=2, head_dim=16, ff=96, tied=False, theta=1000000.0,
                             experts=4, top_k=2, moe_ff=32, norm_topk=True, mlp_only=[]),
    # Qwen2-MoE: q/k/v biases, 4 experts of 32 top-2 not renormalised, a shared expert of 48 behind
    # a sigmoid gate.
    "qwen2-moe": dict(arch="Qwen2MoeForCausalLM", model_type="qwen2_moe", hidden=64, layers=2,
                      heads=4, kv_heads=2, head_dim=16, ff=96, tied=False, theta=1000000.0,
                      experts=4, top_k=2, moe_ff=32, shared_ff=48, norm_topk=False, mlp_only=[]),
    # Gemma 3: sandwich norms, (1 + w) norm weights, scaled embeddings, its own attention scale, local RoPE on
    # the sliding layers (window 5 < the suite's 20 tokens), tied by default (no key written).
    "gemma3": dict(arch="Gemma3ForCausalLM", model_type="gemma3_text", hidden=64, layers=3, heads=4,
                   kv_heads=1, head_dim=32, ff=96, tied=True, theta=1000000.0, window=5, pattern=3,
                   qpas=24),
    # Gemma 2: capped attention scores and logits (caps small enough to bend them), no q/k norms (the query scale
    # multiplies the queries), windows on the even layers, untied.
    "gemma2": dict(arch="Gemma2ForCausalLM", model_type="gemma2", hidden=64, layers=3, heads=4, kv_heads=2,
                   head_dim=32, ff=96, tied=False, theta=10000.0, window=5, qpas=24, attn_cap=2.0,
                   final_cap=1.5),
    # Gemma 3 as its 4B+ checkpoints are published (Gemma3ForConditionalGeneration): the text model's config in
    # text_config, its tensors under language_model., a vision tower beside them that the engine does not load.
    "gemma3-multimodal": dict(arch="Gemma3ForCausalLM", model_type="gemma3_text", hidden=64, layers=2, heads=4,
                              kv_heads=2, head_dim=16, ff=96, tied=True, theta=1000000.0, window=5, pattern=2,
                              qpas=16, multimodal=True),
    # Gemma 3 with layer_types, linear RoPE scaling on the global layer, an untied lm_head.
    "gemma3-scaled": dict(arch="Gemma3ForCausalLM", model_type="gemma3_text", hidden=64, layers=2,
                          heads=4, kv_heads=2, head_dim=16, ff=96, tied=False, theta=1000000.0,
                          window=5, layer_types=["full_attention", "sliding_attention"], qpas=16,
                          rope_scaling={"rope_type": "linear", "factor": 4.0}),
    # Phi-3 (3.5-mini's kind): q/k/v fused in qkv_proj, gate/up in gate_up_proj, a window on every layer, LongRoPE
    # whose pretrained context (4096) exceeds the served one: the short factors, attention factor 1.
    "phi3": dict(arch="Phi3ForCausalLM", model_type="phi3", hidden=64, layers=2, heads=4, kv_heads=2,
                 head_dim=16, ff=96, tied=False, theta=10000.0, window=5, original_max=4096,
                 rope_scaling="longrope"),
    # Phi-4-mini's kind: a quarter of each head unrotated (partial_rotary_factor 0.75), tied, LongRoPE past its
    # pretrained context (8 < the served 512): the long factors, cos and sin times sqrt(1 + ln 64 / ln 8).
    "phi3-partial": dict(arch="Phi3ForCausalLM", model_type="phi3", hidden=64, layers=2, heads=4, kv_heads=2,
                         head_dim=16, ff=96, tied=True, theta=10000.0, partial=0.75, original_max=8,
                         rope_scaling="longrope"),
    # YaRN (Qwen's long-context setting) on a Llama: factor 4 over a pretrained context of 64.
    "llama-yarn": dict(arch="LlamaForCausalLM", model_type="llama", hidden=64, layers=2, heads=4,
                       kv_heads=2, head_dim=16, ff=96, tied=False, theta=10000.0,
                       rope_scaling={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64}),
}
QWEN3 = ("qwen3", "qwen3_moe")
QWEN2 = ("qwen2", "qwen2_moe")
QWEN_MOE = ("qwen3_moe", "qwen2_moe")
QK_NORM = QWEN3 + ("gemma3_text",)
GEMMA = ("gemma2", "gemma3_text")
VOCAB = 512
MAX_POS = 512
EPS = 1e-5


def make_config(spec, dtype_name):
    mt = spec["model_type"]
    cfg = {
        "architectures": [spec["arch"]],
        "model_type": mt,
        "hidden_size": spec["hidden"],
        "intermediate_size": spec["ff"],
        "num_hidden_layers": spec["layers"],
        "num_attention_heads": spec["heads"],
        "num_key_value_heads": spec["kv_heads"],
    }
    # Qwen2Config has no head_dim field (always hidden/heads); the others carry it explicitly.
    if mt not in QWEN2:
        cfg["head_dim"] = spec["head_dim"]
    elif spec["head_dim"] * spec["heads"] != spec["hidden"]:
        raise ValueError("qwen2: head_dim must be hidden/heads")
    cfg.update({
        "vocab_size": VOCAB,
        "max_position_embeddings": MAX_POS,
        "rms_norm_eps": EPS,
        "rope_theta": spec["theta"],
        "rope_scaling": None,
        "hidden_act": "silu",
        "tie_word_embeddings": spec["tied"],
        "attention_dropout": 0.0,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "initializer_range": 0.02,
        "torch_dtype": dtype_name,
        "use_cache": True,
    })
    if mt == "llama":
        cfg.update({"attention_bias": False, "mlp_bias": False, "pretraining_tp": 1,
                    "rope_scaling": spec.get("rope_scaling")})
    elif mt == "phi3":
        # Phi3Config: original_max_position_embeddings at the top level; LongRoPE factors per rotated pair.
        rot = int(spec["head_dim"] * spec.get("partial", 1.0))
        g = torch.Generator().manual_seed(zlib.crc32(("factors" + spec["arch"] + str(rot)).encode()))
        short = (1.0 + torch.rand(rot // 2, generator=g) * 0.5).tolist()
        long = (1.0 + torch.rand(rot // 2, generator=g) * 8.0).tolist()
        cfg.update({"original_max_position_embeddings": spec["original_max"],
                    "sliding_window": spec.get("window"), "attention_bias": False,
                    "rope_scaling": {"type": "longrope", "short_factor": short, "long_factor": long}})
        if "partial" in spec:
            cfg["partial_rotary_factor"] = spec["partial"]
    elif mt == "mistral":
        cfg.update({"sliding_window": spec.get("window")})
    elif mt in QWEN2:
        if "window" in spec:
            cfg.update({"use_sliding_window": True, "sliding_window": spec["window"],
                        "max_window_layers": spec["max_window_layers"]})
        else:
            cfg.update({"use_sliding_window": False, "sliding_window": None,
                        "max_window_layers": spec["layers"]})
    elif mt == "mixtral":
        cfg.update({"num_local_experts": spec["experts"], "num_experts_per_tok": spec["top_k"],
                    "sliding_window": None, "output_router_logits": False,
                    "router_aux_loss_coef": 0.001, "router_jitter_noise": 0.0})
    elif mt in QWEN3:
        cfg.update({"attention_bias": False, "use_sliding_window": False, "sliding_window": None,
                    "max_window_layers": spec["layers"]})
    if mt in QWEN_MOE:
        cfg.update({"num_experts": spec["experts"], "num_experts_per_tok": spec["top_k"],
                    "moe_intermediate_size": spec["moe_ff"], "norm_topk_prob": spec["norm_topk"],
                    "decoder_sparse_step": 1, "mlp_only_layers": spec["mlp_only"],
                    "output_router_logits": False, "router_aux_loss_coef": 0.001})
    if mt == "qwen2_moe":
        cfg["shared_expert_intermediate_size"] = spec["shared_ff"]
    if mt == "gemma2":
        del cfg["hidden_act"]
        cfg.update({"hidden_activation": "gelu_pytorch_tanh", "rms_norm_eps": 1e-6,
                    "query_pre_attn_scalar": spec["qpas"], "sliding_window": spec["window"],
                    "attn_logit_softcapping": spec["attn_cap"], "final_logit_softcapping": spec["final_cap"],
                    "attention_bias": False})
    if mt == "gemma3_text":
        # Gemma3TextConfig's keys: hidden_activation, not hidden_act; tie_word_embeddings only when untied.
        del cfg["hidden_act"]
        if spec["tied"]:
            del cfg["tie_word_embeddings"]
        cfg.update({"hidden_activation": "gelu_pytorch_tanh", "rms_norm_eps": 1e-6,
                    "query_pre_attn_scalar": spec["qpas"], "rope_local_base_freq": 10000.0,
                    "sliding_window": spec["window"], "final_logit_softcapping": None,
                    "attn_logit_softcapping": None, "attention_bias": False,
                    "rope_scaling": spec.get("rope_scaling")})
        if "layer_types" in spec:
            cfg["layer_types"] = spec["layer_types"]
        else:
            cfg["sliding_window_pattern"] = spec["pattern"]
    return cfg


def make_weights(kind, spec, seed):
    """float32 tensors with HF names, drawn in a fixed order from one generator seeded with
    (seed, kind): kinds with equal shapes (llama-gqa, mistral) still get different weights."""
    g = torch.Generator().manual_seed(seed * 1000003 + zlib.crc32(kind.encode()))
    h, ff, hd = spec["hidden"], spec["ff"], spec["head_dim"]
    qd, kvd = spec["heads"] * hd, spec["kv_heads"] * hd
    w = {}

    def normal(shape, std):
        return torch.randn(shape, generator=g, dtype=torch.float32) * std

    def mat(out_f, in_f, gain=1.0):
        # std gain/sqrt(fan_in) (0.125 for fan_in 64): every projection output has rms ~gain.
        return normal((out_f, in_f), gain / math.sqrt(in_f))

    # Gemma stores norm weights as offsets from 1.
    norm_base = 0.0 if spec["model_type"] in GEMMA else 1.0

    def norm_w(n):
        return norm_base + normal((n,), 0.1)

    # Logits std ~2 through the (tied or untied) output projection. The layers' outputs (gain 2
    # on o_proj / down_proj) dominate the residual stream over the embedding (rms 2/sqrt(h)),
    # so tied models do not just predict their last input token again.
    emb_std = 2.0 / math.sqrt(h)
    if spec["model_type"] in GEMMA:  # Gemma scales the embeddings up by sqrt(h): rms 0.5 after it
        emb_std = 0.5 / math.sqrt(h)
    w["model.embed_tokens.weight"] = normal((VOCAB, h), emb_std)
    for i in range(spec["layers"]):
        p = f"model.layers.{i}."
        w[p + "input_layernorm.weight"] = norm_w(h)
        w[p + "self_attn.q_proj.weight"] = mat(qd, h)
        w[p + "self_attn.k_proj.weight"] = mat(kvd, h)
        w[p + "self_attn.v_proj.weight"] = mat(kvd, h)
        if spec["model_type"] in QWEN2:
            w[p + "self_attn.q_proj.bias"] = normal((qd,), 0.3)
            w[p + "self_attn.k_proj.bias"] = normal((kvd,), 0.3)
            w[p + "self_attn.v_proj.bias"] = normal((kvd,), 0.3)
        w[p + "self_attn.o_proj.weight"] = mat(h, qd, 2.0)
        if spec["model_type"] in QK_NORM:
            w[p + "self_attn.q_norm.weight"] = norm_w(hd)
            w[p + "self_attn.k_norm.weight"] = norm_w(hd)
        w[p + "post_attention_layernorm.weight"] = norm_w(h)
        if spec["model_type"] in GEMMA:
            w[p + "pre_feedforward_layernorm.weight"] = norm_w(h)
            w[p + "post_feedforward_layernorm.weight"] = norm_w(h)
        if spec["model_type"] in QWEN_MOE and i not in spec["mlp_only"]:
            m = p + "mlp."
            mff = spec["moe_ff"]
            w[m + "gate.weight"] = normal((spec["experts"], h), 0.25)
            for e in range(spec["experts"]):
                w[m + f"experts.{e}.gate_proj.weight"] = mat(mff, h)
                w[m + f"experts.{e}.up_proj.weight"] = mat(mff, h)
                w[m + f"experts.{e}.down_proj.weight"] = mat(h, mff, 2.0)
            if "shared_ff" in spec:
                sff = spec["shared_ff"]
                w[m + "shared_expert.gate_proj.weight"] = mat(sff, h)
                w[m + "shared_expert.up_proj.weight"] = mat(sff, h)
                w[m + "shared_expert.down_proj.weight"] = mat(h, sff, 2.0)
                w[m + "shared_expert_gate.weight"] = normal((1, h), 0.25)
        elif spec["model_type"] == "mixtral":
            m = p + "block_sparse_moe."
            w[m + "gate.weight"] = normal((spec["experts"], h), 0.25)
            for e in range(spec["experts"]):
                w[m + f"experts.{e}.w1.weight"] = mat(ff, h)
                w[m + f"experts.{e}.w3.weight"] = mat(ff, h)
                w[m + f"experts.{e}.w2.weight"] = mat(h, ff, 2.0)
        else:
            w[p + "mlp.gate_proj.weight"] = mat(ff, h)
            w[p + "mlp.up_proj.weight"] = mat(ff, h)
            w[p + "mlp.down_proj.weight"] = mat(h, ff, 2.0)
    w["model.norm.weight"] = norm_w(h)
    if not spec["tied"]:
        w["lm_head.weight"] = normal((VOCAB, h), emb_std)
    if spec["model_type"] == "phi3":  # Phi-3 checkpoints store q/k/v and gate/up fused
        for i in range(spec["layers"]):
            a, m = f"model.layers.{i}.self_attn.", f"model.layers.{i}.mlp."
            w[a + "qkv_proj.weight"] = torch.cat([w.pop(a + n + "_proj.weight") for n in "qkv"])
            w[m + "gate_up_proj.weight"] = torch.cat([w.pop(m + "gate_proj.weight"), w.pop(m + "up_proj.weight")])
    return w


DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def make_model(kind, out_dir, dtype_name="float32", seed=0, tokenizer_dir=STORIES_DIR):
    spec = KINDS[kind]
    os.makedirs(out_dir, exist_ok=True)
    cfg = make_config(spec, dtype_name)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    weights = {k: v.to(DTYPES[dtype_name]) for k, v in make_weights(kind, spec, seed).items()}
    if spec.get("multimodal"):
        cfg = {"architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3", "torch_dtype": dtype_name,
               "text_config": {k: v for k, v in cfg.items() if k not in ("architectures", "torch_dtype")},
               "vision_config": {"model_type": "siglip_vision_model", "hidden_size": 8, "image_size": 16,
                                 "patch_size": 8, "num_hidden_layers": 1},
               "mm_tokens_per_image": 4, "image_token_index": 262144}
        weights = {"language_model." + k: v for k, v in weights.items()}
        g = torch.Generator().manual_seed(seed)
        weights["vision_tower.vision_model.embeddings.patch_embedding.weight"] = torch.randn(
            (8, 3, 8, 8), generator=g).to(DTYPES[dtype_name])
        weights["multi_modal_projector.mm_input_projection_weight"] = torch.randn(
            (8, spec["hidden"]), generator=g).to(DTYPES[dtype_name])
        with open(os.path.join(out_dir, "config.json"), "w") as f:
            json.dump(cfg, f, indent=2)
            f.write("\n")
    write_safetensors(os.path.join(out_dir, "model.safetensors"), weights)
    for name in TOKENIZER_FILES:
        shutil.copyfile(os.path.join(tokenizer_dir, name), os.path.join(out_dir, name))


# --------------------------------------------------------------------------------------------
# LoRA adapters (PEFT's layout)

LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj",
                "qkv_proj", "gate_up_proj")  # the last two: Phi-3's fused projections
LORA_ATTN = ("q_proj", "k_proj", "v_proj", "o_proj", "qkv_proj")
PEFT_PREFIX = "base_model.model."
LORA_NAME = re.compile(r"base_model\.model\.(model\.layers\.\d+\.(?:self_attn\.(?:[qkvo]|qkv)_proj|"
                       r"mlp\.(?:gate|up|down|gate_up)_proj))"
                       r"\.lora_([AB])\.weight")


def sparse_layer(c, l):
    """Whether layer l of config c has a sparse MoE block instead of a dense MLP (Mixtral: all; Qwen MoE: unless
    in mlp_only_layers, when (l + 1) % decoder_sparse_step == 0)."""
    mt = c.get("model_type")
    if mt == "mixtral":
        return True
    if mt in QWEN_MOE:
        return l not in set(c.get("mlp_only_layers", [])) and (l + 1) % c.get("decoder_sparse_step", 1) == 0
    return False


def lora_modules(c):
    """{module name: (out_features, in_features)} of every projection a LoRA adapter may target in a model of
    config c: q/k/v/o on every layer, gate/up/down on the dense-MLP layers (Phi-3: its fused qkv_proj and
    gate_up_proj instead of q/k/v and gate/up)."""
    if "text_config" in c:
        raise ValueError("LoRA: multimodal folders (text_config) are not supported")
    phi3 = c.get("model_type") == "phi3"
    hidden, heads = c["hidden_size"], c["num_attention_heads"]
    kv = c.get("num_key_value_heads") or heads
    hd = c.get("head_dim") or hidden // heads
    ff = c["intermediate_size"]
    shapes = {"q_proj": (heads * hd, hidden), "k_proj": (kv * hd, hidden), "v_proj": (kv * hd, hidden),
              "o_proj": (hidden, heads * hd), "gate_proj": (ff, hidden), "up_proj": (ff, hidden),
              "down_proj": (hidden, ff), "qkv_proj": ((heads + 2 * kv) * hd, hidden), "gate_up_proj": (2 * ff, hidden)}
    fused = ("qkv_proj", "gate_up_proj")
    out = {}
    for l in range(c["num_hidden_layers"]):
        for t in LORA_TARGETS:
            if phi3 != (t in fused) and t not in ("o_proj", "down_proj"):
                continue
            if t in LORA_ATTN:
                out[f"model.layers.{l}.self_attn.{t}"] = shapes[t]
            elif not sparse_layer(c, l):
                out[f"model.layers.{l}.mlp.{t}"] = shapes[t]
    return out


def lora_scaling(alpha, r, rslora):
    """PEFT's LoraLayer.scaling: lora_alpha / r, or lora_alpha / sqrt(r) with use_rslora."""
    return alpha / math.sqrt(r) if rslora else alpha / r


def make_lora(model_dir, out_dir, rank, alpha=None, targets=LORA_TARGETS, seed=0, rslora=False,
              dtype_name="float32", layers=None):
    with open(os.path.join(model_dir, "config.json")) as f:
        c = json.load(f)
    modules = lora_modules(c)
    if rank < 1:
        raise ValueError("--rank must be >= 1")
    bad = [t for t in targets if t not in LORA_TARGETS]
    if bad or not targets:
        raise ValueError(f"--targets: {bad or 'none'}; choose from {','.join(LORA_TARGETS)}")
    n_layers = c["num_hidden_layers"]
    if layers is not None and any(not 0 <= l < n_layers for l in layers):
        raise ValueError(f"--layers: {layers} outside [0, {n_layers})")
    alpha = 2 * rank if alpha is None else alpha
    if isinstance(alpha, float) and alpha.is_integer():
        alpha = int(alpha)
    scaling = lora_scaling(alpha, rank, rslora)
    gain = 0.5 / (scaling * math.sqrt(rank))
    tensors = {}
    for name, (out_f, in_f) in modules.items():
        if name.rsplit(".", 1)[1] not in targets or (layers is not None and int(name.split(".")[2]) not in layers):
            continue
        g = torch.Generator().manual_seed(seed * 1000003 + zlib.crc32(("lora." + name).encode()))
        a = torch.randn((rank, in_f), generator=g, dtype=torch.float32) / math.sqrt(in_f)
        b = torch.randn((out_f, rank), generator=g, dtype=torch.float32) * gain
        tensors[PEFT_PREFIX + name + ".lora_A.weight"] = a.to(DTYPES[dtype_name])
        tensors[PEFT_PREFIX + name + ".lora_B.weight"] = b.to(DTYPES[dtype_name])
    if not tensors:
        raise ValueError("make-lora: no projection to adapt (MLP targets on sparse layers only?)")
    cfg = {"peft_type": "LORA", "task_type": "CAUSAL_LM", "r": rank, "lora_alpha": alpha,
           "target_modules": [t for t in LORA_TARGETS if t in targets], "lora_dropout": 0.0, "bias": "none",
           "fan_in_fan_out": False, "use_rslora": bool(rslora), "use_dora": False, "modules_to_save": None,
           "rank_pattern": {}, "alpha_pattern": {}, "layers_to_transform": None,
           "base_model_name_or_path": model_dir}
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "adapter_config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    write_safetensors(os.path.join(out_dir, "adapter_model.safetensors"), tensors)


def load_lora(adapter_dir):
    """Reads a PEFT LoRA folder: {"r", "alpha", "rslora", "scaling", "modules": {module name: (A, B)}} with A
    [r, in] and B [out, r] in their stored dtype. Refuses what the forward pass here does not implement."""
    with open(os.path.join(adapter_dir, "adapter_config.json")) as f:
        ac = json.load(f)
    if ac.get("peft_type", "LORA") != "LORA":
        raise ValueError(f"{adapter_dir}: peft_type {ac.get('peft_type')!r}, expected LORA")
    for key in ("use_dora", "fan_in_fan_out", "modules_to_save", "rank_pattern", "alpha_pattern"):
        if ac.get(key):
            raise ValueError(f"{adapter_dir}: {key} {ac[key]!r} is not supported")
    if ac.get("bias", "none") != "none":
        raise ValueError(f"{adapter_dir}: bias {ac['bias']!r} is not supported")
    r, alpha, rslora = ac.get("r", 8), ac.get("lora_alpha", 8), bool(ac.get("use_rslora", False))
    pairs = {}
    for name, t in read_safetensors(os.path.join(adapter_dir, "adapter_model.safetensors")).items():
        m = LORA_NAME.fullmatch(name)
        if not m:
            raise ValueError(f"{adapter_dir}: unknown adapter tensor {name}")
        pairs.setdefault(m.group(1), {})[m.group(2)] = t
    modules = {}
    for mod, ab in sorted(pairs.items()):
        if set(ab) != {"A", "B"}:
            raise ValueError(f"{adapter_dir}: {mod} has lora_{list(ab)[0]} without its pair")
        a, b = ab["A"], ab["B"]
        if a.dim() != 2 or b.dim() != 2 or a.shape[0] != r or b.shape[1] != r:
            raise ValueError(f"{adapter_dir}: {mod}: lora_A {list(a.shape)}, lora_B {list(b.shape)}, r {r}")
        modules[mod] = (a, b)
    return {"r": r, "alpha": alpha, "rslora": rslora, "scaling": lora_scaling(alpha, r, rslora),
            "modules": modules}


def merge_lora(model_dir, adapter_dir, out_dir):
    if os.path.realpath(model_dir) == os.path.realpath(out_dir):
        raise ValueError("merge-lora: --out must differ from --model")
    with open(os.path.join(model_dir, "config.json")) as f:
        c = json.load(f)
    shapes = lora_modules(c)
    ad = load_lora(adapter_dir)
    weights = load_weights(model_dir)
    for mod, (a, b) in ad["modules"].items():
        if mod not in shapes:
            raise ValueError(f"adapter module {mod} is not a projection of this model (sparse layer?)")
        out_f, in_f = shapes[mod]
        w = weights[mod + ".weight"]
        if list(w.shape) != [out_f, in_f] or a.shape[1] != in_f or b.shape[0] != out_f:
            raise ValueError(f"{mod}: weight {list(w.shape)}, lora_A {list(a.shape)}, lora_B {list(b.shape)}")
        delta = b.to(torch.float64) @ a.to(torch.float64)
        weights[mod + ".weight"] = (w.to(torch.float64) + ad["scaling"] * delta).to(w.dtype)
    os.makedirs(out_dir, exist_ok=True)
    for fn in sorted(os.listdir(model_dir)):
        src = os.path.join(model_dir, fn)
        if os.path.isfile(src) and not fn.endswith(".safetensors") and fn != "model.safetensors.index.json":
            shutil.copyfile(src, os.path.join(out_dir, fn))
    write_safetensors(os.path.join(out_dir, "model.safetensors"), weights)


# --------------------------------------------------------------------------------------------
# forward pass

def layer_windows(c, model_type, layers):
    """Each layer's sliding window (None: full causal attention), following HF: MistralConfig
    defaults sliding_window to 4096, MixtralConfig to None; Qwen2Config keeps it only with
    use_sliding_window and marks layers >= max_window_layers "sliding_attention" unless the config
    lists layer_types; LlamaAttention has no window."""
    if model_type == "llama":
        return [None] * layers
    if model_type == "mistral":
        return [c.get("sliding_window", 4096)] * layers
    if model_type in ("mixtral", "phi3"):
        return [c.get("sliding_window")] * layers
    if model_type in QWEN2 + QWEN3:
        w = c.get("sliding_window", 4096) if c.get("use_sliding_window", False) else None
        types = c.get("layer_types")
        if types is None:
            first = c.get("max_window_layers", 28)
            types = ["sliding_attention" if w is not None and i >= first else "full_attention"
                     for i in range(layers)]
        return [w if t == "sliding_attention" else None for t in types]
    if model_type in GEMMA:
        w = c.get("sliding_window", 4096)
        types = c.get("layer_types")
        if types is None:
            pattern = c.get("sliding_window_pattern", 6 if model_type == "gemma3_text" else 2)
            types = ["sliding_attention" if (i + 1) % pattern else "full_attention" for i in range(layers)]
        return [w if t == "sliding_attention" else None for t in types]
    raise ValueError(f"no sliding-window rule for model_type {model_type!r}")


def rope_parameters(c, dim, theta):
    """HF's RoPE initialisation (modeling_rope_utils) for the rope_scaling types the engine reads: the inverse
    frequencies [dim / 2] in float32 and the attention factor cos and sin are multiplied by. LongRoPE takes its long
    factors when the served context (max_position_embeddings here: the engine's default max_model_len, as vLLM
    and llama.cpp choose by the context) exceeds the pretrained one; YaRN's factor is rope_scaling.factor as vLLM
    and llama.cpp read it."""
    shape = torch.arange(0, dim, 2, dtype=torch.int64).float() / dim
    inv_freq = 1.0 / (theta ** shape)
    rs = c.get("rope_scaling")
    kind = None if rs is None else rs.get("rope_type", rs.get("type"))
    if kind in (None, "default"):
        return inv_freq, 1.0
    if kind == "linear":
        return inv_freq / rs["factor"], 1.0
    max_pos = c["max_position_embeddings"]
    if kind in ("longrope", "su"):
        original = c.get("original_max_position_embeddings",
                         rs.get("original_max_position_embeddings", max_pos))
        factor = max_pos / original
        attention = rs.get("attention_factor") or (
            1.0 if factor <= 1.0 else math.sqrt(1 + math.log(factor) / math.log(original)))
        ext = torch.tensor(rs["long_factor"] if max_pos > original else rs["short_factor"], dtype=torch.float32)
        return 1.0 / (ext * theta ** shape), attention
    if kind == "yarn":
        factor = rs["factor"]
        original = rs.get("original_max_position_embeddings", max_pos)
        mscale = lambda scale, m=1.0: 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0
        attention = rs.get("attention_factor")
        if attention is None:
            if rs.get("mscale") and rs.get("mscale_all_dim"):
                attention = mscale(factor, rs["mscale"]) / mscale(factor, rs["mscale_all_dim"])
            else:
                attention = mscale(factor)
        beta_fast, beta_slow = rs.get("beta_fast") or 32, rs.get("beta_slow") or 1
        correction = lambda rotations: (dim * math.log(original / (rotations * 2 * math.pi))) / (2 * math.log(theta))
        low, high = correction(beta_fast), correction(beta_slow)
        if rs.get("truncate", True):
            low, high = math.floor(low), math.ceil(high)
        low, high = max(low, 0), min(high, dim - 1)
        if low == high:
            high += 0.001
        ramp = torch.clamp((torch.arange(dim // 2, dtype=torch.float32) - low) / (high - low), 0, 1)
        extrapolation = 1 - ramp
        pos_freqs = theta ** shape
        inv = (1.0 / (factor * pos_freqs)) * (1 - extrapolation) + (1.0 / pos_freqs) * extrapolation
        return inv, attention
    raise ValueError(f"unsupported rope_scaling {rs!r}")


class Model:
    def __init__(self, model_dir, compute_dtype=torch.float32, kv_dtype=None, round_inputs=None, lora=None):
        with open(os.path.join(model_dir, "config.json")) as f:
            c = json.load(f)
        # Gemma3ForConditionalGeneration: its language model (text_config, tensors under language_model.); the vision
        # tower and projector are not part of a text forward pass.
        self.prefix = ""
        if c.get("architectures", [""])[0] == "Gemma3ForConditionalGeneration":
            c = dict(c["text_config"], torch_dtype=c.get("torch_dtype"))
            self.prefix = "language_model."
        self.cfg = c
        self.mt = c.get("model_type")
        if self.mt not in ("llama", "mistral", "qwen2", "mixtral", "qwen2_moe", "phi3") + GEMMA + QWEN3:
            raise ValueError(f"unsupported model_type {self.mt!r}")
        self.gemma = self.mt in GEMMA
        # HF's ACT2FN for the activations the engine supports (the GELU ones serve the example plugin).
        acts = {"silu": torch.nn.functional.silu,
                "gelu_pytorch_tanh": lambda x: torch.nn.functional.gelu(x, approximate="tanh"),
                "gelu": torch.nn.functional.gelu}
        act = c.get("hidden_activation", "gelu_pytorch_tanh") if self.gemma else c.get("hidden_act", "silu")
        if act not in acts:
            raise ValueError(f"unsupported hidden_act {act!r}")
        self.act = acts[act]
        self.dt = compute_dtype
        self.hidden = c["hidden_size"]
        self.layers = c["num_hidden_layers"]
        self.heads = c["num_attention_heads"]
        self.kv_heads = c.get("num_key_value_heads") or self.heads
        # Recent HF modelling code: getattr(config, "head_dim", None) or hidden // heads.
        self.head_dim = c.get("head_dim") or self.hidden // self.heads
        # Partial rotary (Phi-4-mini): RoPE turns the first int(head_dim x factor) features of each head.
        self.rot = int(self.head_dim * c.get("partial_rotary_factor", 1.0))
        self.eps = c.get("rms_norm_eps", 1e-6)
        self.theta = c.get("rope_theta", 1000000.0 if self.mt == "gemma3_text" else 10000.0)
        self.inv_freq, self.rope_attention = rope_parameters(c, self.rot, self.theta)
        # Gemma 3: sliding layers rotate with their own base, unscaled; Gemma: scores scaled by
        # query_pre_attn_scalar; Gemma 2 caps scores and logits (absent: its defaults; null: none).
        self.local_theta = c.get("rope_local_base_freq", 10000.0) if self.mt == "gemma3_text" else None
        gemma2 = self.mt == "gemma2"
        self.attn_cap = c.get("attn_logit_softcapping", 50.0 if gemma2 else None) if self.gemma else None
        self.final_cap = c.get("final_logit_softcapping", 30.0 if gemma2 else None) if self.gemma else None
        self.scale = (c.get("query_pre_attn_scalar", 256) if self.gemma else self.head_dim) ** -0.5
        self.norm_offset = 1.0 if self.gemma else 0.0
        self.vocab = c["vocab_size"]
        self.windows = layer_windows(c, self.mt, self.layers)
        self.kv_dt = kv_dtype or compute_dtype
        # round_inputs: every product with a weight matrix takes its input rounded through this dtype first (what a
        # CPU's bf16 dot products do with bf16 weights); None: inputs as computed.
        self.round_in = round_inputs
        if self.mt == "mixtral":
            self.experts = c["num_local_experts"]
            self.top_k = c["num_experts_per_tok"]
        if self.mt in QWEN_MOE:
            # Qwen3MoeConfig / Qwen2MoeConfig: num_experts, moe_intermediate_size, norm_topk_prob (default
            # False), a layer is sparse unless listed in mlp_only_layers, when (layer + 1) %
            # decoder_sparse_step == 0; Qwen2-MoE adds a shared expert behind a sigmoid gate.
            self.experts = c["num_experts"]
            self.top_k = c["num_experts_per_tok"]
            self.moe_ff = c["moe_intermediate_size"]
            self.norm_topk = bool(c.get("norm_topk_prob", False))
            self.mlp_only = set(c.get("mlp_only_layers", []))
            self.sparse_step = c.get("decoder_sparse_step", 1)
            self.shared_ff = c.get("shared_expert_intermediate_size", 0) if self.mt == "qwen2_moe" else 0
        self.qkv_bias = self.mt in QWEN2 or bool(c.get("attention_bias", False))
        self.o_bias = self.mt in ("llama",) and bool(c.get("attention_bias", False))
        self.mlp_bias = self.mt == "llama" and bool(c.get("mlp_bias", False))
        # HF's defaults: the Gemma configs tie, the others do not.
        self.tied = bool(c.get("tie_word_embeddings", self.gemma))

        raw = {k[len(self.prefix):]: v for k, v in load_weights(model_dir).items() if k.startswith(self.prefix)}
        self.used = set()
        self.raw = raw
        self.W = {k: v.to(compute_dtype) for k, v in raw.items()}
        # Gemma3TextScaledWordEmbedding, Gemma2Model's normalizer: sqrt(hidden) in the embedding's dtype.
        emb_dtype = raw["model.embed_tokens.weight"].dtype
        self.embed_scale = torch.tensor(self.hidden ** 0.5, dtype=emb_dtype).to(compute_dtype) if self.gemma else None
        # LoRA adapter (unmerged): {module name: (A, B)} in the compute dtype, applied in linear().
        self.lora, self.lora_used, self.lora_scaling = {}, set(), None
        if lora is not None:
            if self.prefix:
                raise ValueError("LoRA: multimodal folders are not supported")
            ad = load_lora(lora)
            self.lora = {k: (a.to(compute_dtype), b.to(compute_dtype)) for k, (a, b) in ad["modules"].items()}
            self.lora_scaling = ad["scaling"]

    def w(self, name, shape=None):
        if name not in self.W:
            raise KeyError(f"missing tensor {name}")
        t = self.W[name]
        if shape is not None and list(t.shape) != list(shape):
            raise ValueError(f"tensor {name}: shape {list(t.shape)}, expected {list(shape)}")
        self.used.add(name)
        return t

    def check_all_used(self):
        unused = sorted(set(self.W) - self.used)
        # HF checkpoints sometimes store these buffers; they carry no weights.
        unused = [n for n in unused if not n.endswith("rotary_emb.inv_freq")]
        if self.tied:
            unused = [n for n in unused if n != "lm_head.weight"]
        if unused:
            raise ValueError(f"unused tensors in checkpoint: {unused[:8]}")
        unused = sorted(set(self.lora) - self.lora_used)
        if unused:
            raise ValueError(f"unused LoRA modules in adapter: {unused[:8]}")

    def rmsnorm(self, x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * (self.norm_offset + w)

    def rope(self, x, pos, local=False):
        # x: [n_heads, T, head_dim]; HF rotate_half convention on the first d = self.rot features, pairs
        # (i, i + d/2); cos and sin times the attention factor (LongRoPE, YaRN); the rest pass through.
        d = self.rot
        if local:
            inv_freq = 1.0 / (self.local_theta ** (torch.arange(0, d, 2, dtype=torch.int64).float() / d))
            attention = 1.0
        else:
            inv_freq, attention = self.inv_freq, self.rope_attention
        freqs = pos.to(torch.float32)[:, None] * inv_freq[None, :]    # [T, d/2], f32 as HF's rotary embedding
        emb = torch.cat((freqs, freqs), dim=-1)                        # [T, d]
        cos, sin = (emb.cos() * attention).to(self.dt), (emb.sin() * attention).to(self.dt)
        x_rot, x_pass = x[..., :d], x[..., d:]
        rot = torch.cat((-x_rot[..., d // 2:], x_rot[..., : d // 2]), dim=-1)
        return torch.cat((x_rot * cos + rot * sin, x_pass), dim=-1)

    def mm(self, x, w):
        """x @ w^T, x rounded through round_inputs first when set."""
        if self.round_in is not None:
            x = x.to(self.round_in).to(self.dt)
        return x @ w.T

    def linear(self, x, name, out_f, in_f, bias=False):
        y = self.mm(x, self.w(name + ".weight", (out_f, in_f)))
        if bias:
            y = y + self.w(name + ".bias", (out_f,))
        if name in self.lora:
            y = y + self.lora_delta(x, name, out_f, in_f)
        return y

    def lora_delta(self, x, name, out_f, in_f):
        """PEFT's unmerged LoRA term lora_B(lora_A(x)) * scaling; both products round their input as mm does."""
        a, b = self.lora[name]
        r = a.shape[0]
        if list(a.shape) != [r, in_f] or list(b.shape) != [out_f, r]:
            raise ValueError(f"LoRA {name}: lora_A {list(a.shape)}, lora_B {list(b.shape)}, "
                             f"expected [r, {in_f}] and [{out_f}, r]")
        self.lora_used.add(name)
        return self.mm(self.mm(x, a), b) * self.lora_scaling

    def attention(self, h, p, pos, window):
        T = h.shape[0]
        H, KV, d = self.heads, self.kv_heads, self.head_dim
        a = p + "self_attn."
        if self.mt == "phi3":  # Phi3Attention: one qkv_proj, split q | k | v
            qkv = self.linear(h, a + "qkv_proj", (H + 2 * KV) * d, self.hidden)
            q, k, v = qkv[:, : H * d], qkv[:, H * d: (H + KV) * d], qkv[:, (H + KV) * d:]
        else:
            q = self.linear(h, a + "q_proj", H * d, self.hidden, self.qkv_bias)
            k = self.linear(h, a + "k_proj", KV * d, self.hidden, self.qkv_bias)
            v = self.linear(h, a + "v_proj", KV * d, self.hidden, self.qkv_bias)
        if self.mt in QK_NORM:  # Qwen3, Gemma 3: RMSNorm over each head's d features, before RoPE
            q = self.rmsnorm(q.view(T, H, d), self.w(a + "q_norm.weight", (d,))).view(T, H * d)
            k = self.rmsnorm(k.view(T, KV, d), self.w(a + "k_norm.weight", (d,))).view(T, KV * d)
        q = q.view(T, H, d).transpose(0, 1)   # [H, T, d]
        k = k.view(T, KV, d).transpose(0, 1)  # [KV, T, d]
        v = v.view(T, KV, d).transpose(0, 1)
        local = self.local_theta is not None and window is not None
        q, k = self.rope(q, pos, local), self.rope(k, pos, local)
        # What a KV cache of kv_dt holds: K after RoPE and V, rounded to that type.
        k, v = k.to(self.kv_dt).to(self.dt), v.to(self.kv_dt).to(self.dt)
        group = H // KV
        k = k.repeat_interleave(group, dim=0)  # query head h -> kv head h // group
        v = v.repeat_interleave(group, dim=0)
        scores = (q @ k.transpose(1, 2)) * self.scale  # [H, T, T]
        if self.attn_cap is not None:
            scores = torch.tanh(scores / self.attn_cap) * self.attn_cap
        i = torch.arange(T)[:, None]
        j = torch.arange(T)[None, :]
        allowed = j <= i
        if window is not None:
            allowed = allowed & (i - j < window)
        scores = scores.masked_fill(~allowed, float("-inf"))
        probs = torch.softmax(scores, dim=-1)
        out = (probs @ v).transpose(0, 1).reshape(T, H * d)
        return self.linear(out, a + "o_proj", self.hidden, H * d, self.o_bias)

    def mlp(self, h, p):
        ff = self.cfg["intermediate_size"]
        m = p + "mlp."
        if self.mt == "phi3":  # Phi3MLP: gate_up_proj, chunked gate | up
            gate, up = self.linear(h, m + "gate_up_proj", 2 * ff, self.hidden).chunk(2, dim=-1)
            return self.linear(self.act(gate) * up, m + "down_proj", self.hidden, ff)
        gate = self.linear(h, m + "gate_proj", ff, self.hidden, self.mlp_bias)
        up = self.linear(h, m + "up_proj", ff, self.hidden, self.mlp_bias)
        return self.linear(self.act(gate) * up, m + "down_proj", self.hidden, ff,
                           self.mlp_bias)

    def moe(self, h, p):
        ff = self.cfg["intermediate_size"]
        m = p + "block_sparse_moe."
        router = self.mm(h, self.w(m + "gate.weight", (self.experts, self.hidden)))  # [T, E]
        probs = torch.softmax(router.to(torch.float32), dim=-1)
        top_w, top_i = torch.topk(probs, self.top_k, dim=-1)
        top_w = (top_w / top_w.sum(dim=-1, keepdim=True)).to(self.dt)
        out = torch.zeros_like(h)
        for e in range(self.experts):  # touch every expert so the unused-tensor check is exact
            x1 = self.w(m + f"experts.{e}.w1.weight", (ff, self.hidden))
            x3 = self.w(m + f"experts.{e}.w3.weight", (ff, self.hidden))
            x2 = self.w(m + f"experts.{e}.w2.weight", (self.hidden, ff))
            for t in range(h.shape[0]):
                for s in range(self.top_k):
                    if int(top_i[t, s]) == e:
                        y = self.mm(self.act(self.mm(h[t], x1)) * self.mm(h[t], x3), x2)
                        out[t] += top_w[t, s] * y
        return out

    def qwen_moe(self, h, p):
        """Qwen3MoeSparseMoeBlock: softmax over the router logits in float32, top-k, renormalised
        to sum 1 when norm_topk_prob, cast back; experts down(silu(gate(h)) * up(h))."""
        m = p + "mlp."
        router = self.mm(h, self.w(m + "gate.weight", (self.experts, self.hidden)))
        probs = torch.softmax(router.to(torch.float32), dim=-1)
        top_w, top_i = torch.topk(probs, self.top_k, dim=-1)
        if self.norm_topk:
            top_w = top_w / top_w.sum(dim=-1, keepdim=True)
        top_w = top_w.to(self.dt)
        out = torch.zeros_like(h)
        for e in range(self.experts):
            e_p = m + f"experts.{e}."
            g = self.w(e_p + "gate_proj.weight", (self.moe_ff, self.hidden))
            u = self.w(e_p + "up_proj.weight", (self.moe_ff, self.hidden))
            dn = self.w(e_p + "down_proj.weight", (self.hidden, self.moe_ff))
            for t in range(h.shape[0]):
                for s in range(self.top_k):
                    if int(top_i[t, s]) == e:
                        out[t] += top_w[t, s] * self.mm(self.act(self.mm(h[t], g)) * self.mm(h[t], u), dn)
        if self.shared_ff:
            s_p = m + "shared_expert."
            g = self.w(s_p + "gate_proj.weight", (self.shared_ff, self.hidden))
            u = self.w(s_p + "up_proj.weight", (self.shared_ff, self.hidden))
            dn = self.w(s_p + "down_proj.weight", (self.hidden, self.shared_ff))
            shared = self.mm(self.act(self.mm(h, g)) * self.mm(h, u), dn)
            gate = torch.sigmoid(self.mm(h, self.w(m + "shared_expert_gate.weight", (1, self.hidden))))
            out = out + gate * shared
        return out

    def sparse(self, l):
        return sparse_layer(self.cfg, l)

    def forward(self, ids, all_positions=False):
        """ids: list of ints. Returns logits [T, vocab] (or [1, vocab] for the last position)."""
        T = len(ids)
        pos = torch.arange(T)
        x = self.w("model.embed_tokens.weight", (self.vocab, self.hidden))[torch.tensor(ids)]
        if self.gemma:
            x = x * self.embed_scale
        for l in range(self.layers):
            p = f"model.layers.{l}."
            if self.gemma:  # sandwich norms around each sublayer
                norm = lambda t, name: self.rmsnorm(t, self.w(p + name + ".weight", (self.hidden,)))
                h = norm(x, "input_layernorm")
                x = x + norm(self.attention(h, p, pos, self.windows[l]), "post_attention_layernorm")
                h = norm(x, "pre_feedforward_layernorm")
                x = x + norm(self.mlp(h, p), "post_feedforward_layernorm")
                continue
            h = self.rmsnorm(x, self.w(p + "input_layernorm.weight", (self.hidden,)))
            x = x + self.attention(h, p, pos, self.windows[l])
            h = self.rmsnorm(x, self.w(p + "post_attention_layernorm.weight", (self.hidden,)))
            if not self.sparse(l):
                x = x + self.mlp(h, p)
            elif self.mt == "mixtral":
                x = x + self.moe(h, p)
            else:
                x = x + self.qwen_moe(h, p)
        x = self.rmsnorm(x, self.w("model.norm.weight", (self.hidden,)))
        if not all_positions:
            x = x[-1:]
        if self.tied:
            head = self.w("model.embed_tokens.weight")
        elif "lm_head.weight" in self.W:
            head = self.w("lm_head.weight", (self.vocab, self.hidden))
        else:
            raise KeyError("lm_head.weight missing and tie_word_embeddings is false")
        logits = self.mm(x, head)
        if self.final_cap is not None:
            logits = torch.tanh(logits / self.final_cap) * self.final_cap
        return logits


def argmax_lowest(row):
    m = row.max()
    return int(torch.nonzero(row == m)[0, 0])


def run_logits(model_dir, prompt_ids, steps, compute_dtype=torch.float32, prompt_logits=False,
               kv_dtype=None, round_inputs=None, lora=None):
    if steps < 1:
        raise ValueError("--decode-steps must be >= 1")
    if not prompt_ids:
        raise ValueError("--prompt-ids must not be empty")
    model = Model(model_dir, compute_dtype, kv_dtype, round_inputs, lora)
    for t in prompt_ids:
        if not 0 <= t < model.vocab:
            raise ValueError(f"prompt id {t} outside [0, {model.vocab})")
    seq = list(prompt_ids)
    rows, greedy = [], []
    result = {"model": model_dir, "prompt_ids": list(prompt_ids)}
    if lora is not None:
        result["lora"] = lora
    with torch.no_grad():
        for k in range(steps):
            if k == 0 and prompt_logits:
                full = model.forward(seq, all_positions=True)
                result["prompt_logits"] = [r.tolist() for r in full]
                row = full[-1]
            else:
                row = model.forward(seq)[-1]
            if k == 0:
                model.check_all_used()
            g = argmax_lowest(row)
            rows.append(row.tolist())
            greedy.append(g)
            seq.append(g)
    result["logits"] = rows
    result["greedy_ids"] = greedy
    return result


def write_json(obj, out):
    text = json.dumps(obj, separators=(",", ":")) + "\n"
    if out:
        with open(out, "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)


# --------------------------------------------------------------------------------------------
# CLI

DEFAULT_PROMPT = "1,403,407,261,378,432,383,286,261,376,298,315"
COMPUTE = {"float32": torch.float32, "float64": torch.float64}


def parse_ids(s):
    return [int(t) for t in s.replace(" ", "").split(",") if t != ""]


def main(argv=None):
    torch.set_num_threads(1)  # tiny matrices: one thread is fastest and bitwise reproducible
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)

    mm = sub.add_parser("make-model", help="write a random-weight HF model folder")
    mm.add_argument("--kind", required=True, choices=sorted(KINDS) + ["all"])
    mm.add_argument("--out", required=True)
    mm.add_argument("--dtype", default="float32", choices=sorted(DTYPES))
    mm.add_argument("--seed", type=int, default=0)
    mm.add_argument("--tokenizer-dir", default=STORIES_DIR)

    ml = sub.add_parser("make-lora", help="write a random PEFT LoRA adapter folder for a model folder")
    ml.add_argument("--model", required=True)
    ml.add_argument("--out", required=True)
    ml.add_argument("--rank", type=int, required=True)
    ml.add_argument("--alpha", type=float)
    ml.add_argument("--targets", default=",".join(LORA_TARGETS))
    ml.add_argument("--seed", type=int, default=0)
    ml.add_argument("--rslora", action="store_true")
    ml.add_argument("--dtype", default="float32", choices=sorted(DTYPES))
    ml.add_argument("--layers")

    mg = sub.add_parser("merge-lora", help="write a model folder with a LoRA adapter merged into its weights")
    mg.add_argument("--model", required=True)
    mg.add_argument("--lora", required=True)
    mg.add_argument("--out", required=True)

    lg = sub.add_parser("logits", help="greedy decode with full recompute, dump logits as JSON")
    lg.add_argument("--model", required=True)
    lg.add_argument("--prompt-ids", required=True)
    lg.add_argument("--decode-steps", type=int, required=True)
    lg.add_argument("--out")
    lg.add_argument("--compute-dtype", default="float32", choices=sorted(COMPUTE))
    lg.add_argument("--prompt-logits", action="store_true")
    lg.add_argument("--kv-dtype", choices=sorted(DTYPES))
    lg.add_argument("--round-inputs", choices=sorted(DTYPES))
    lg.add_argument("--lora")

    su = sub.add_parser("suite", help="make every kind and its reference.json in one process")
    su.add_argument("--out", required=True)
    su.add_argument("--prompt-ids", default=DEFAULT_PROMPT)
    su.add_argument("--decode-steps", type=int, default=8)
    su.add_argument("--dtype", default="float32", choices=sorted(DTYPES))
    su.add_argument("--seed", type=int, default=0)
    su.add_argument("--tokenizer-dir", default=STORIES_DIR)
    su.add_argument("--compute-dtype", default="float32", choices=sorted(COMPUTE))
    su.add_argument("--kv-dtype", choices=sorted(DTYPES))
    su.add_argument("--round-inputs", choices=sorted(DTYPES))

    a = ap.parse_args(argv)
    if a.cmd == "make-model":
        if a.kind == "all":
            for kind in sorted(KINDS):
                make_model(kind, os.path.join(a.out, kind), a.dtype, a.seed, a.tokenizer_dir)
        else:
            make_model(a.kind, a.out, a.dtype, a.seed, a.tokenizer_dir)
    elif a.cmd == "make-lora":
        targets = [t for t in a.targets.replace(" ", "").split(",") if t]
        make_lora(a.model, a.out, a.rank, a.alpha, targets, a.seed, a.rslora, a.dtype,
                  parse_ids(a.layers) if a.layers is not None else None)
    elif a.cmd == "merge-lora":
        merge_lora(a.model, a.lora, a.out)
    elif a.cmd == "logits":
        res = run_logits(a.model, parse_ids(a.prompt_ids), a.decode_steps, COMPUTE[a.compute_dtype],
                         a.prompt_logits, DTYPES.get(a.kv_dtype), DTYPES.get(a.round_inputs), a.lora)
        write_json(res, a.out)
    elif a.cmd == "suite":
        for kind in sorted(KINDS):
            d = os.path.join(a.out, kind)
            t0 = time.time()
            make_model(kind, d, a.dtype, a.seed, a.tokenizer_dir)
            res = run_logits(d, parse_ids(a.prompt_ids), a.decode_steps, COMPUTE[a.compute_dtype],
                             kv_dtype=DTYPES.get(a.kv_dtype), round_inputs=DTYPES.get(a.round_inputs))
            res["model"] = kind
            write_json(res, os.path.join(d, "reference.json"))
            print(f"{kind}: greedy {res['greedy_ids']} ({time.time() - t0:.3f} s)",
                  file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
