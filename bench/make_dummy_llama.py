#!/usr/bin/env python3
"""Write a randomly initialised, Llama-shaped HF model folder for benchmarks.

Default shape (~134M parameters): hidden 768, 12 layers, 12 heads (12 KV heads), FFN 2048,
vocab 32000, context 2048, BF16 weights, untied lm_head. Weights are seeded normal(0, 0.02),
norm weights 1.0. --gemma3 writes a Gemma3ForCausalLM instead (sandwich and q/k norms stored as
offsets from 1, so 0.0; tied embeddings; windows of 512 on five layers of six), e.g. Gemma 3 1B's
shape: --gemma3 --hidden 1152 --layers 26 --heads 4 --kv-heads 1 --head-dim 256 --ffn 6912
--vocab 262144. --gemma2 writes a Gemma2ForCausalLM (no q/k norms, one RoPE base, windows of 4096 on
every second layer, attention and logits capped at 50 and 30), e.g. Gemma 2 2B's shape: --gemma2 --hidden 2304
--layers 26 --heads 8 --kv-heads 4 --head-dim 256 --ffn 9216 --vocab 256000. --phi3 writes a Phi3ForCausalLM
(q/k/v fused in qkv_proj, gate/up in gate_up_proj, LongRoPE over a pretrained 4096 with factors of Phi-3.5's
range, --partial-rotary of each head rotated, --tied to tie the embeddings), e.g. Phi-4-mini's shape: --phi3
--hidden 3072 --layers 32 --heads 24 --kv-heads 8 --ffn 8192 --vocab 200064 --ctx 131072 --partial-rotary 0.75
--tied. The folder gets config.json, generation_config.json, model.safetensors,
tokenizer.json (trivial SentencePiece-style BPE: <unk>, <s>, </s>, 256 byte tokens, filler
tokens tok_N, byte fallback, no merges) and tokenizer_config.json.

The output is meaningless text; it only exists to measure speed.

Usage: python3 bench/make_dummy_llama.py OUT_DIR [--seed 0] [--hidden 768] [--layers 12] ...
Requires numpy.
"""
import argparse
import json
import os
import struct

import numpy as np


def to_bf16_bits(a):
    """float32 -> bfloat16 bit pattern (uint16), round to nearest even."""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)
    u = u + (np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1)))
    return (u >> np.uint32(16)).astype("<u2")


def tokenizer_json(vocab_size):
    specials = ["<unk>", "<s>", "</s>"]
    vocab = {s: i for i, s in enumerate(specials)}
    for b in range(256):
        vocab[f"<0x{b:02X}>"] = len(vocab)
    while len(vocab) < vocab_size:
        vocab[f"tok_{len(vocab)}"] = len(vocab)
    added = [{"id": i, "content": s, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for i, s in enumerate(specials)]
    bos = {"SpecialToken": {"id": "<s>", "type_id": 0}}
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": "\u2581"},
            {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]},
        "pre_tokenizer": None,
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [bos, {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [bos, {"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": "<s>", "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
            {"type": "ByteFallback"},
            {"type": "Fuse"},
            {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
        "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>", "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": True, "byte_fallback": True,
                  "ignore_merges": False, "vocab": vocab, "merges": []},
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out_dir")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--hidden", type=int, default=768)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--kv-heads", type=int, default=12)
    ap.add_argument("--ffn", type=int, default=2048)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--ctx", type=int, default=2048)
    ap.add_argument("--std", type=float, default=0.02)
    ap.add_argument("--experts", type=int, default=0, help="Mixtral: experts per layer (0: a dense Llama)")
    ap.add_argument("--experts-per-tok", type=int, default=2)
    ap.add_argument("--rope-theta", type=float, default=10000.0)
    ap.add_argument("--head-dim", type=int, default=0, help="0: hidden / heads")
    ap.add_argument("--gemma3", action="store_true", help="a Gemma3ForCausalLM of this shape")
    ap.add_argument("--gemma2", action="store_true", help="a Gemma2ForCausalLM of this shape")
    ap.add_argument("--phi3", action="store_true", help="a Phi3ForCausalLM of this shape (fused tensors, LongRoPE)")
    ap.add_argument("--partial-rotary", type=float, default=1.0, help="--phi3: the share of each head RoPE turns")
    ap.add_argument("--tied", action="store_true", help="--phi3: tie the embeddings (no lm_head)")
    ap.add_argument("--no-weights", action="store_true",
                    help="config and tokenizer only, for load_format: dummy (random weights made at load)")
    args = ap.parse_args()

    h, L, nh, nkv, ffn, V = args.hidden, args.layers, args.heads, args.kv_heads, args.ffn, args.vocab
    hd = args.head_dim or h // nh
    g3 = args.gemma3
    g2 = args.gemma2
    gemma = g2 or g3
    os.makedirs(args.out_dir, exist_ok=True)

    cfg = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "hidden_size": h, "intermediate_size": ffn, "num_hidden_layers": L,
        "num_attention_heads": nh, "num_key_value_heads": nkv, "head_dim": hd,
        "vocab_size": V, "max_position_embeddings": args.ctx, "rms_norm_eps": 1e-5,
        "rope_theta": args.rope_theta, "hidden_act": "silu", "tie_word_embeddings": False,
        "attention_bias": False, "mlp_bias": False, "bos_token_id": 1, "eos_token_id": 2,
        "torch_dtype": "bfloat16", "initializer_range": args.std, "pretraining_tp": 1,
        "rope_scaling": None, "use_cache": True,
    }
    if g3:
        del cfg["hidden_act"]
        cfg.update({"architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text", "tie_word_embeddings": True,
                    "hidden_activation": "gelu_pytorch_tanh", "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
                    "rope_local_base_freq": 10000.0, "sliding_window": 512, "sliding_window_pattern": 6,
                    "query_pre_attn_scalar": hd, "final_logit_softcapping": None, "attn_logit_softcapping": None})
    if g2:
        del cfg["hidden_act"]
        cfg.update({"architectures": ["Gemma2ForCausalLM"], "model_type": "gemma2", "tie_word_embeddings": True,
                    "hidden_activation": "gelu_pytorch_tanh", "rms_norm_eps": 1e-6, "sliding_window": 4096,
                    "query_pre_attn_scalar": hd, "attn_logit_softcapping": 50.0, "final_logit_softcapping": 30.0})
    phi3 = args.phi3
    if phi3:
        rot = int(hd * args.partial_rotary)
        pairs = np.arange(rot // 2, dtype=np.float64) / max(rot // 2 - 1, 1)
        cfg.update({"architectures": ["Phi3ForCausalLM"], "model_type": "phi3", "tie_word_embeddings": args.tied,
                    "original_max_position_embeddings": 4096, "sliding_window": 262144,
                    "partial_rotary_factor": args.partial_rotary,
                    "rope_scaling": {"type": "longrope", "short_factor": (1.0 + 0.1 * pairs).tolist(),
                                     "long_factor": (1.0 + 40.0 * pairs ** 2).tolist()}})
    if args.experts:
        cfg.update({"architectures": ["MixtralForCausalLM"], "model_type": "mixtral",
                    "num_local_experts": args.experts, "num_experts_per_tok": args.experts_per_tok})
    tensors = [("model.embed_tokens.weight", (V, h), False)]
    for i in range(L):
        p = f"model.layers.{i}."
        tensors.append((p + "input_layernorm.weight", (h,), True))
        if phi3:
            tensors.append((p + "self_attn.qkv_proj.weight", ((nh + 2 * nkv) * hd, h), False))
        else:
            tensors += [(p + "self_attn.q_proj.weight", (nh * hd, h), False),
                        (p + "self_attn.k_proj.weight", (nkv * hd, h), False),
                        (p + "self_attn.v_proj.weight", (nkv * hd, h), False)]
        tensors += [(p + "self_attn.o_proj.weight", (h, nh * hd), False),
                    (p + "post_attention_layernorm.weight", (h,), True)]
        if g3:
            tensors += [(p + "self_attn.q_norm.weight", (hd,), True), (p + "self_attn.k_norm.weight", (hd,), True)]
        if gemma:
            tensors += [(p + "pre_feedforward_layernorm.weight", (h,), True),
                        (p + "post_feedforward_layernorm.weight", (h,), True)]
        if args.experts:
            tensors.append((p + "block_sparse_moe.gate.weight", (args.experts, h), False))
            for e in range(args.experts):
                q = p + f"block_sparse_moe.experts.{e}."
                tensors += [(q + "w1.weight", (ffn, h), False), (q + "w3.weight", (ffn, h), False),
                            (q + "w2.weight", (h, ffn), False)]
        elif phi3:
            tensors += [(p + "mlp.gate_up_proj.weight", (2 * ffn, h), False), (p + "mlp.down_proj.weight", (h, ffn), False)]
        else:
            tensors += [(p + "mlp.gate_proj.weight", (ffn, h), False), (p + "mlp.up_proj.weight", (ffn, h), False),
                        (p + "mlp.down_proj.weight", (h, ffn), False)]
    tied = gemma or (phi3 and args.tied)
    tensors += [("model.norm.weight", (h,), True)] + ([] if tied else [("lm_head.weight", (V, h), False)])

    header, off, n_params = {}, 0, 0
    for name, shape, _ in tensors:
        n = int(np.prod(shape))
        n_params += n
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [off, off + 2 * n]}
        off += 2 * n
    header["__metadata__"] = {"format": "pt"}
    hb = json.dumps(header, separators=(",", ":")).encode()
    hb += b" " * ((-len(hb)) % 8)

    rng = np.random.default_rng(args.seed)
    with open(os.devnull if args.no_weights else os.path.join(args.out_dir, "model.safetensors"), "wb") as f:
        if args.no_weights:
            tensors = []
        f.write(struct.pack("<Q", len(hb)) + hb)
        for name, shape, is_norm in tensors:
            if is_norm:  # Gemma's norm weights are offsets from 1
                a = np.zeros(shape, dtype=np.float32) if gemma else np.ones(shape, dtype=np.float32)
            else:
                a = rng.standard_normal(shape, dtype=np.float32) * np.float32(args.std)
            to_bf16_bits(a).tofile(f)

    def dump(name, obj):
        with open(os.path.join(args.out_dir, name), "w", encoding="utf-8") as f:
            json.dump(obj, f, indent=2, ensure_ascii=False)
            f.write("\n")

    dump("config.json", cfg)
    dump("generation_config.json", {"bos_token_id": 1, "eos_token_id": 2, "do_sample": False,
                                     "max_length": args.ctx})
    dump("tokenizer.json", tokenizer_json(V))
    dump("tokenizer_config.json", {
        "add_bos_token": True, "add_eos_token": False, "bos_token": "<s>", "eos_token": "</s>",
        "unk_token": "<unk>", "clean_up_tokenization_spaces": False, "legacy": False,
        "model_max_length": args.ctx, "tokenizer_class": "LlamaTokenizer", "sp_model_kwargs": {},
        "pad_token": None})
    what = "no weights (load_format: dummy)" if args.no_weights else f"{len(tensors)} tensors (BF16)"
    print(f"wrote {args.out_dir}: {n_params / 1e6:.1f}M parameters, {what}")


if __name__ == "__main__":
    main()
