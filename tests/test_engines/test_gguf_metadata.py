"""The GGUF header reader, on files written here byte by byte: every value type, and every way
a file can be cut short or be something else. (The packaged model is read in test_e2e.)"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import pytest

from asgi_llm.core import ModelFacts
from asgi_llm.engines.gguf_metadata import read_facts

_TYPES = {"u8": (0, "B"), "i8": (1, "b"), "u16": (2, "H"), "i16": (3, "h"), "u32": (4, "I"), "i32": (5, "i")}
_TYPES |= {"f32": (6, "f"), "bool": (7, "?"), "u64": (10, "Q"), "i64": (11, "q"), "f64": (12, "d")}


def _string(text: str) -> bytes:
    raw = text.encode()
    return struct.pack("<Q", len(raw)) + raw


def _value(kind: str, value: Any) -> bytes:
    """A value's type and bytes; `value` is a list for `array:<kind>`."""
    if kind == "str":
        return struct.pack("<I", 8) + _string(value)
    if kind.startswith("array:"):
        inner = kind.removeprefix("array:")
        items = [_value(inner, v)[4:] for v in value]  # elements carry no type of their own
        code = 9 if inner.startswith("array:") else 8 if inner == "str" else _TYPES[inner][0]
        return struct.pack("<IIQ", 9, code, len(value)) + b"".join(items)
    code, fmt = _TYPES[kind]
    return struct.pack("<I" + fmt, code, value)


def gguf(entries: list[tuple[str, str, Any]], tensors: list[tuple[str, tuple[int, ...]]], version: int = 3) -> bytes:
    out = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(entries))
    for key, kind, value in entries:
        out += _string(key) + _value(kind, value)
    for name, dims in tensors:
        out += _string(name) + struct.pack("<I", len(dims)) + struct.pack(f"<{len(dims)}Q", *dims)
        out += struct.pack("<IQ", 2, 0)
    return out + b"\0" * 32  # where the weights would start


ENTRIES: list[tuple[str, str, Any]] = [
    ("general.architecture", "str", "llama"),
    ("general.name", "str", "Tiny ünïcode"),
    ("general.file_type", "u32", 15),
    ("llama.context_length", "u64", 8192),
    ("llama.block_count", "u8", 2),
    ("a.i8", "i8", -3),
    ("a.u16", "u16", 65535),
    ("a.i16", "i16", -2),
    ("a.i32", "i32", -70000),
    ("a.i64", "i64", -(2**40)),
    ("llama.rope.freq_base", "f32", 10000.0),
    ("llama.attention.layer_norm_rms_epsilon", "f32", 1e-5),
    ("a.f64", "f64", 0.1),
    ("tokenizer.ggml.add_bos_token", "bool", True),
    ("tokenizer.ggml.tokens", "array:str", ["<s>", "a", "bb", ""]),
    ("tokenizer.ggml.scores", "array:f32", [0.0, -1.5]),
    ("a.nested", "array:array:u16", [[1, 2], [], [3]]),
    ("general.quantization_version", "u32", 2),
]
TENSORS = [("token_embd.weight", (64, 100)), ("blk.0.attn_q.weight", (64, 64)), ("output_norm.weight", (64,))]


ONE_ENTRY = b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + _string("k")


def write(tmp_path: Path, data: bytes) -> str:
    path = tmp_path / "model.gguf"
    path.write_bytes(data)
    return str(path)


@pytest.mark.parametrize("version", [2, 3])
def test_every_scalar_is_read_and_arrays_are_passed_over(tmp_path: Path, version: int) -> None:
    facts = read_facts(write(tmp_path, gguf(ENTRIES, TENSORS, version)))
    assert (facts.architecture, facts.file_type, facts.parameters) == ("llama", "Q4_K_M", 64 * 100 + 64 * 64 + 64)
    assert facts.metadata == {
        "general.architecture": "llama",
        "general.name": "Tiny ünïcode",
        "general.file_type": 15,
        "llama.context_length": 8192,
        "llama.block_count": 2,
        "a.i8": -3,
        "a.u16": 65535,
        "a.i16": -2,
        "a.i32": -70000,
        "a.i64": -(2**40),
        "llama.rope.freq_base": 10000.0,
        "llama.attention.layer_norm_rms_epsilon": 1e-05,  # the float32 at its shortest
        "a.f64": 0.1,
        "tokenizer.ggml.add_bos_token": True,
        "general.quantization_version": 2,
    }


def test_a_file_type_llama_cpp_has_no_name_for_is_left_blank(tmp_path: Path) -> None:
    facts = read_facts(write(tmp_path, gguf([("general.file_type", "u32", 999)], [])))
    assert (facts.file_type, facts.parameters, facts.architecture) == ("", 0, "")


def test_a_file_cut_anywhere_in_its_header_reads_as_unknown(tmp_path: Path) -> None:
    data = gguf(ENTRIES, TENSORS)
    header = len(data) - 32
    assert read_facts(write(tmp_path, data[:header])).parameters  # the header alone is enough
    for cut in range(header):
        assert read_facts(write(tmp_path, data[:cut])) == ModelFacts(), cut


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"GGML" + b"\0" * 64,
        b"GGUF" + struct.pack("<IQQ", 1, 0, 0),  # version 1 counted in 32 bits
        b"GGUF" + struct.pack("<IQQ", 4, 0, 0),
        ONE_ENTRY + struct.pack("<IB", 77, 1),  # a value type GGUF doesn't have
        b"GGUF" + struct.pack("<IQQ", 3, 0, 2**63) + _string("k") + struct.pack("<IB", 0, 1),
        ONE_ENTRY + struct.pack("<IIQ", 9, 10, 2**62) + b"\0" * 64,  # far more elements than bytes
        ONE_ENTRY + struct.pack("<IIQ", 9, 8, 3) + struct.pack("<Q", 2**40),  # a string longer than the file
        b"GGUF" + struct.pack("<IQQ", 3, 1, 0) + _string("t") + struct.pack("<I", 4096),  # dimensions
    ],
    ids=[
        "empty",
        "not-gguf",
        "version-1",
        "version-4",
        "unknown-type",
        "entries-overrun",
        "array-overrun",
        "string-overrun",
        "too-many-dimensions",
    ],
)
def test_what_is_not_a_readable_gguf_reads_as_unknown(tmp_path: Path, data: bytes) -> None:
    assert read_facts(write(tmp_path, data)) == ModelFacts()


def test_a_missing_file_or_a_directory_reads_as_unknown(tmp_path: Path) -> None:
    assert read_facts(str(tmp_path / "absent.gguf")) == ModelFacts()
    assert read_facts(str(tmp_path)) == ModelFacts()


def placed_gguf(tensors: list[tuple[str, int]], data_bytes: int) -> bytes:
    """A header whose tensors start at the given offsets, padded to the default alignment (32),
    then `data_bytes` of tensor data."""
    out = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), 0)
    for name, offset in tensors:
        out += _string(name) + struct.pack("<IQ", 1, 8) + struct.pack("<IQ", 2, offset)
    out += b"\0" * (-len(out) % 32)
    return out + b"\1" * data_bytes


def test_tensor_bytes_come_from_their_offsets_grouped_by_layer(tmp_path: Path) -> None:
    tied = [("token_embd.weight", 0), ("blk.0.attn_q.weight", 64), ("blk.1.attn_q.weight", 96)]
    tied += [("blk.1.ffn_up.weight", 128), ("output_norm.weight", 160)]
    facts = read_facts(write(tmp_path, placed_gguf(tied, 176)))
    # no output.weight: llama.cpp copies the token embeddings (64 bytes) as the output matrix
    assert (facts.layer_weights, facts.output_weights, facts.output_copy) == ((32, 64), 16, 64)
    untied = read_facts(write(tmp_path, placed_gguf([*tied, ("output.weight", 176)], 200)))
    assert (untied.layer_weights, untied.output_weights, untied.output_copy) == ((32, 64), 16 + 24, 0)
    header_only = read_facts(write(tmp_path, placed_gguf(tied, 0)))
    assert (header_only.layer_weights, header_only.output_weights) == ((32, 64), 0)  # the last one cut: 0, never less


def test_a_file_is_read_once_while_it_stays_the_same_file(tmp_path: Path) -> None:
    """The header walk is cached by the file's identity: asked again, the same facts come back
    without a read; replaced (a new file of the same size at the same path), it is read afresh,
    and the shared facts cannot be changed by one of their readers."""
    path = write(tmp_path, gguf([("general.architecture", "str", "aaaa")], TENSORS))
    first = read_facts(path)
    assert read_facts(path) is first
    with pytest.raises(TypeError):
        first.metadata["general.architecture"] = "other"  # type: ignore[index]
    replacement = tmp_path / "replacement.gguf"
    replacement.write_bytes(gguf([("general.architecture", "str", "bbbb")], TENSORS))
    replacement.replace(path)
    assert read_facts(path).architecture == "bbbb"
