"""GGUF files the rerank and LoRA tests write with gguf-py (llama.cpp's own writer): a rank-pooling
reranker of random weights with the packaged model's tokenizer, and LoRA adapters of random weights
for the packaged model's shapes. Random weights prove the path and the shapes, not the quality."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gguf
import numpy as np

from asgi_llm.config.sources import default_model_path

EMBEDDING, LAYERS, HEADS, KV_HEADS, FEED_FORWARD = 64, 2, 4, 2, 128  # the reranker's (tiny) shape


def _tokenizer(writer: Any) -> int:
    """The packaged model's tokenizer (and templates) copied into `writer`; the vocabulary's size."""
    vocab = 0
    for entry in gguf.GGUFReader(default_model_path()).fields.values():
        if entry.name.startswith("tokenizer."):
            kind = entry.types[0]
            sub = entry.types[-1] if kind == gguf.GGUFValueType.ARRAY else None
            if entry.name == "tokenizer.ggml.tokens":
                vocab = len(entry.contents())
            writer.add_key_value(entry.name, entry.contents(), kind, sub_type=sub)
    return vocab


def write_reranker(dest: Path, *, template: str | None = None) -> Path:
    """A Qwen3-architecture reranker, as Qwen3-Reranker converts: rank pooling, a `cls.output` head
    over the labels yes and no (llama.cpp softmaxes them), and optionally a `rerank` template."""
    rng = np.random.default_rng(7)
    writer = gguf.GGUFWriter(str(dest), "qwen3")
    vocab = _tokenizer(writer)
    if template is not None:
        writer.add_string("tokenizer.chat_template.rerank", template)
    head = EMBEDDING // HEADS
    writer.add_context_length(2048)
    writer.add_embedding_length(EMBEDDING)
    writer.add_block_count(LAYERS)
    writer.add_feed_forward_length(FEED_FORWARD)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(KV_HEADS)
    writer.add_key_length(head)
    writer.add_value_length(head)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_pooling_type(gguf.PoolingType.RANK)
    writer.add_array("qwen3.classifier.output_labels", ["yes", "no"])
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)

    def weights(*size: int) -> Any:
        return rng.standard_normal(size, dtype=np.float32) * 0.05

    def norm(size: int = EMBEDDING) -> Any:
        return np.ones(size, dtype=np.float32)

    writer.add_tensor("token_embd.weight", weights(vocab, EMBEDDING))
    writer.add_tensor("output_norm.weight", norm())
    writer.add_tensor("cls.output.weight", weights(2, EMBEDDING))
    for layer in range(LAYERS):
        prefix = f"blk.{layer}."
        writer.add_tensor(prefix + "attn_norm.weight", norm())
        writer.add_tensor(prefix + "attn_q.weight", weights(HEADS * head, EMBEDDING))
        writer.add_tensor(prefix + "attn_k.weight", weights(KV_HEADS * head, EMBEDDING))
        writer.add_tensor(prefix + "attn_v.weight", weights(KV_HEADS * head, EMBEDDING))
        writer.add_tensor(prefix + "attn_output.weight", weights(EMBEDDING, HEADS * head))
        writer.add_tensor(prefix + "attn_q_norm.weight", norm(head))
        writer.add_tensor(prefix + "attn_k_norm.weight", norm(head))
        writer.add_tensor(prefix + "ffn_norm.weight", norm())
        writer.add_tensor(prefix + "ffn_gate.weight", weights(FEED_FORWARD, EMBEDDING))
        writer.add_tensor(prefix + "ffn_up.weight", weights(FEED_FORWARD, EMBEDDING))
        writer.add_tensor(prefix + "ffn_down.weight", weights(EMBEDDING, FEED_FORWARD))
    return _close(writer, dest)


def write_lora(dest: Path, *, seed: int = 1, rank: int = 8, width: int | None = None) -> Path:
    """A LoRA adapter for the packaged model (general.type adapter, adapter.type lora, an alpha):
    `lora_a` / `lora_b` pairs on every layer's `attn_q` and `ffn_down`. `width` other than the
    model's makes one that does not fit it."""
    reader = gguf.GGUFReader(default_model_path())
    shapes = {t.name: tuple(int(n) for n in t.shape) for t in reader.tensors}  # ggml order: (in, out)
    rng = np.random.default_rng(seed)
    writer = gguf.GGUFWriter(str(dest), "llama")
    writer.add_string("general.type", "adapter")
    writer.add_string("adapter.type", "lora")
    writer.add_float32("adapter.lora.alpha", float(rank))
    for name, shape in shapes.items():
        if not name.endswith(("attn_q.weight", "ffn_down.weight")):
            continue
        n_in, n_out = width or shape[0], shape[1]
        writer.add_tensor(f"{name}.lora_a", rng.standard_normal((rank, n_in), dtype=np.float32) * 0.3)
        writer.add_tensor(f"{name}.lora_b", rng.standard_normal((n_out, rank), dtype=np.float32) * 0.3)
    return _close(writer, dest)


def _close(writer: Any, dest: Path) -> Path:
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return dest
