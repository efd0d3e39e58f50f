"""Stand-in models for GPU timing: a llama-architecture GGUF of random F16 weights, of any shape,
with the tokenizer (and chat template) of a small GGUF, written with gguf-py.

With random weights the text is noise, which is fine for throughput, memory and offload checks:
every step does the real work of a model of that shape. gguf-py is llama.cpp's own Python package
(`pip install gguf`, or the `gguf-py` folder of llama.cpp's source; see `gguf_module`); the
package does not depend on it.

It also writes a stand-in vision projector (`mmproj`) for a text model: a tiny vision tower of
random weights feeding the text model's embedding width, as llama.cpp's multimodal library (clip)
reads one. Its pictures are noise to the model, which is fine for the paths, the counts, the cache
and timing an image's prefill; tests/test_e2e/test_images.py loads this module for it.

Run on its own: python benchmarks/_standin.py SHAPE DEST.gguf [--tokenizer-from GGUF]
          or:   python benchmarks/_standin.py mmproj DEST.gguf [--text-model GGUF]
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path
from types import ModuleType
from typing import Any, NamedTuple


class Shape(NamedTuple):
    embedding: int
    layers: int
    heads: int
    kv_heads: int
    feed_forward: int

    @property
    def label(self) -> str:
        return f"{self.embedding}x{self.layers}L"

    def parameters(self, vocab: int) -> int:
        """Weights of a llama of this shape whose output matrix is its token embeddings (tied)."""
        head = self.embedding // self.heads
        attention = self.embedding * head * (2 * self.heads + 2 * self.kv_heads)
        per_layer = attention + 3 * self.embedding * self.feed_forward + 2 * self.embedding
        return vocab * self.embedding + self.layers * per_layer + self.embedding


SHAPES = {
    "tiny": Shape(64, 2, 4, 2, 128),  # a smoke test's: loads and decodes in a blink on a CPU
    "packaged": Shape(576, 30, 9, 3, 1536),  # SmolLM2-135M, the packaged model's own shape (0.13B)
    "360m": Shape(960, 32, 15, 5, 2560),  # SmolLM2-360M's shape (0.36B)
    "1b": Shape(2048, 16, 32, 8, 8192),  # Llama-3.2-1B's shape: 1.07B with this vocabulary, 2 GiB of F16
}
"""Named shapes; any other is given as `EMBEDDING,LAYERS,HEADS,KV_HEADS,FEED_FORWARD`."""


def parse_shape(text: str) -> Shape:
    if text in SHAPES:
        return SHAPES[text]
    try:
        return Shape(*(int(part) for part in text.split(",")))
    except (TypeError, ValueError):
        raise ValueError(f"not a shape: {text!r} (one of {', '.join(SHAPES)}, or E,L,H,KV,FF)") from None


def gguf_module(extra_path: str | None = None) -> ModuleType:
    """gguf-py: from `extra_path` (a folder holding the `gguf` package, e.g. llama.cpp's `gguf-py`)
    if given, else as installed."""
    if extra_path is not None:
        sys.path.insert(0, str(extra_path))
    try:
        return importlib.import_module("gguf")
    except ImportError:
        raise SystemExit(
            "gguf-py is needed to write the stand-in model: `pip install gguf`, or pass --gguf-py with the "
            "gguf-py folder of llama.cpp's source (vendor/llama.cpp/gguf-py in llama-cpp-python's sdist)"
        ) from None


def write_standin(gguf: ModuleType, tokenizer_from: str, dest: Path, shape: Shape, seed: int = 0) -> int:
    """Write the stand-in to `dest` (through a temporary file beside it); its parameter count."""
    import numpy as np

    reader = gguf.GGUFReader(tokenizer_from)
    partial = dest.with_suffix(".partial")
    writer = gguf.GGUFWriter(str(partial), "llama")
    vocab = 0
    for entry in reader.fields.values():
        if entry.name.startswith("tokenizer."):
            kind = entry.types[0]
            sub = entry.types[-1] if kind == gguf.GGUFValueType.ARRAY else None
            value = entry.contents()
            if entry.name == "tokenizer.ggml.tokens":
                vocab = len(value)
            writer.add_key_value(entry.name, value, kind, sub_type=sub)
    head = shape.embedding // shape.heads
    writer.add_name(f"random-llama-{shape.label}")
    writer.add_context_length(8192)
    writer.add_embedding_length(shape.embedding)
    writer.add_block_count(shape.layers)
    writer.add_feed_forward_length(shape.feed_forward)
    writer.add_head_count(shape.heads)
    writer.add_head_count_kv(shape.kv_heads)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_dimension_count(head)
    writer.add_vocab_size(vocab)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    rng = np.random.default_rng(seed)

    def weights(*size: int) -> Any:
        return (rng.standard_normal(size, dtype=np.float32) * 0.02).astype(np.float16)

    def norm() -> Any:
        return np.ones(shape.embedding, dtype=np.float32)

    writer.add_tensor("token_embd.weight", weights(vocab, shape.embedding))  # also the output matrix (tied)
    writer.add_tensor("output_norm.weight", norm())
    for layer in range(shape.layers):
        prefix = f"blk.{layer}."
        writer.add_tensor(prefix + "attn_norm.weight", norm())
        writer.add_tensor(prefix + "attn_q.weight", weights(shape.heads * head, shape.embedding))
        writer.add_tensor(prefix + "attn_k.weight", weights(shape.kv_heads * head, shape.embedding))
        writer.add_tensor(prefix + "attn_v.weight", weights(shape.kv_heads * head, shape.embedding))
        writer.add_tensor(prefix + "attn_output.weight", weights(shape.embedding, shape.heads * head))
        writer.add_tensor(prefix + "ffn_norm.weight", norm())
        writer.add_tensor(prefix + "ffn_gate.weight", weights(shape.feed_forward, shape.embedding))
        writer.add_tensor(prefix + "ffn_up.weight", weights(shape.feed_forward, shape.embedding))
        writer.add_tensor(prefix + "ffn_down.weight", weights(shape.embedding, shape.feed_forward))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    partial.rename(dest)
    return shape.parameters(vocab)


def standin(gguf: ModuleType, tokenizer_from: str, folder: Path, shape: Shape) -> Path:
    """The stand-in of `shape` in `folder`, written unless it is there already."""
    folder.mkdir(parents=True, exist_ok=True)
    dest = folder / f"standin-{'-'.join(str(x) for x in shape)}-{Path(tokenizer_from).stem}.gguf"
    if not dest.exists():
        count = write_standin(gguf, tokenizer_from, dest, shape)
        print(f"wrote {dest.name}: {count / 1e9:.2f}B parameters, {dest.stat().st_size / 2**30:.2f} GiB", flush=True)
    return dest


class Projector(NamedTuple):
    """A stand-in projector's vision tower: `image` pixels a side in `patch`-pixel patches, so
    (image / patch)² tokens an image."""

    width: int = 64
    layers: int = 2
    heads: int = 4
    feed_forward: int = 128
    image: int = 64
    patch: int = 16

    @property
    def tokens(self) -> int:
        return (self.image // self.patch) ** 2


def text_width(gguf: ModuleType, text_model: str) -> int:
    """The embedding width of a text model, from its GGUF header."""
    fields = gguf.GGUFReader(text_model).fields
    arch = fields["general.architecture"].contents()
    return int(fields[f"{arch}.embedding_length"].contents())


PROJECTOR = Projector()


def write_projector(
    gguf: ModuleType, text_model: str, dest: Path, shape: Projector = PROJECTOR, seed: int = 0, kind: str = "mlp"
) -> Path:
    """A LLaVA-style (`mlp`) projector of random weights for `text_model`: a ViT of `shape`, then
    two linear layers to the text model's width. LLaVA's and not SmolVLM's (`idefics3`) layout,
    though SmolVLM-256M's text model is the packaged SmolLM2-135M: idefics3 frames each image
    with tokens SmolVLM adds to the vocabulary (`<fake_token_around_image>`, `<global-img>`),
    which the packaged model lacks, and llama.cpp aborts the process decoding their -1 ids. An
    `mlp` projector frames images with nothing, so any text model's vocabulary serves. `kind`
    `idefics3` writes SmolVLM's layout all the same (a pixel shuffle of 2, then one linear layer),
    for proving that such a pairing is refused at load."""
    import numpy as np

    rng = np.random.default_rng(seed)
    out = text_width(gguf, text_model)
    w, ff = shape.width, shape.feed_forward
    partial = dest.with_suffix(".partial")
    writer = gguf.GGUFWriter(str(partial), "clip")
    writer.add_name("stand-in projector")
    writer.add_bool("clip.has_vision_encoder", True)
    writer.add_string("clip.projector_type", kind)
    writer.add_uint32("clip.vision.embedding_length", w)
    writer.add_uint32("clip.vision.feed_forward_length", ff)
    writer.add_uint32("clip.vision.block_count", shape.layers)
    writer.add_uint32("clip.vision.attention.head_count", shape.heads)
    writer.add_float32("clip.vision.attention.layer_norm_epsilon", 1e-6)
    writer.add_uint32("clip.vision.image_size", shape.image)
    writer.add_uint32("clip.vision.patch_size", shape.patch)
    writer.add_uint32("clip.vision.projection_dim", out)
    writer.add_array("clip.vision.image_mean", [0.5, 0.5, 0.5])
    writer.add_array("clip.vision.image_std", [0.5, 0.5, 0.5])
    writer.add_bool("clip.use_gelu", True)
    writer.add_uint32("general.file_type", 0)  # all F32

    def weights(*size: int) -> Any:
        return rng.standard_normal(size, dtype=np.float32) * 0.02

    def ones() -> Any:
        return np.ones(w, dtype=np.float32)

    writer.add_tensor("v.patch_embd.weight", weights(w, 3, shape.patch, shape.patch))
    writer.add_tensor("v.patch_embd.bias", weights(w))
    writer.add_tensor("v.position_embd.weight", weights(shape.tokens, w))
    for layer in range(shape.layers):
        prefix = f"v.blk.{layer}."
        for name in ("attn_q", "attn_k", "attn_v", "attn_out"):
            writer.add_tensor(prefix + name + ".weight", weights(w, w))
            writer.add_tensor(prefix + name + ".bias", weights(w))
        for name in ("ln1", "ln2"):
            writer.add_tensor(prefix + name + ".weight", ones())
            writer.add_tensor(prefix + name + ".bias", np.zeros(w, dtype=np.float32))
        writer.add_tensor(prefix + "ffn_up.weight", weights(ff, w))
        writer.add_tensor(prefix + "ffn_up.bias", weights(ff))
        writer.add_tensor(prefix + "ffn_down.weight", weights(w, ff))
        writer.add_tensor(prefix + "ffn_down.bias", weights(w))
    writer.add_tensor("v.post_ln.weight", ones())
    writer.add_tensor("v.post_ln.bias", np.zeros(w, dtype=np.float32))
    if kind == "idefics3":
        writer.add_uint32("clip.vision.projector.scale_factor", 2)
        writer.add_tensor("mm.model.fc.weight", weights(out, w * 4))
    else:
        writer.add_tensor("mm.0.weight", weights(out, w))
        writer.add_tensor("mm.0.bias", weights(out))
        writer.add_tensor("mm.2.weight", weights(out, out))
        writer.add_tensor("mm.2.bias", weights(out))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    partial.rename(dest)
    return dest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("shape", help=f"{', '.join(SHAPES)}, or E,L,H,KV,FF; or mmproj, for a projector")
    parser.add_argument("dest", type=Path)
    parser.add_argument(
        "--tokenizer-from", default=None, help="GGUF whose tokenizer to copy (default: the packaged model)"
    )
    parser.add_argument(
        "--text-model", default=None, help="mmproj: the text model it feeds (default: the packaged model)"
    )
    parser.add_argument("--gguf-py", default=None, help="folder holding the gguf package, if not installed")
    args = parser.parse_args()
    if args.shape == "mmproj":
        from asgi_llm.config import default_model_path

        text_model = args.text_model or default_model_path()
        write_projector(gguf_module(args.gguf_py), text_model, args.dest)
        print(f"wrote {args.dest}: a stand-in projector for {Path(text_model).name}")
        return
    if args.tokenizer_from is None:
        from asgi_llm.config import default_model_path

        args.tokenizer_from = default_model_path()
    count = write_standin(gguf_module(args.gguf_py), args.tokenizer_from, args.dest, parse_shape(args.shape))
    print(f"wrote {args.dest}: {count / 1e9:.2f}B parameters")


if __name__ == "__main__":
    main()
