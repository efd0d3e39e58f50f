"""The header reader against llama.cpp itself, on the packaged model: the same metadata, the
same parameter count, and a name for every file type llama.cpp defines."""

from __future__ import annotations

import llama_cpp
import pytest

from asgi_llm.config import default_model_path
from asgi_llm.engines.gguf_metadata import FILE_TYPES, read_facts


@pytest.mark.model
def test_the_packaged_model_reads_as_llama_cpp_reads_it() -> None:
    path = default_model_path()
    facts = read_facts(path)
    model = llama_cpp.Llama(path, n_ctx=64, verbose=False)
    try:
        assert set(facts.metadata) == set(model.metadata)  # every scalar entry, and no array
        texts = {key: value for key, value in facts.metadata.items() if isinstance(value, str)}
        assert texts == {key: model.metadata[key] for key in texts}
        assert facts.metadata["llama.context_length"] == llama_cpp.llama_model_n_ctx_train(model.model) == 8192
        assert facts.parameters == llama_cpp.llama_model_n_params(model.model) == 134_515_008
    finally:
        model.close()
    assert (facts.architecture, facts.file_type) == ("llama", "Q4_1")


def test_every_file_type_llama_cpp_defines_has_its_name() -> None:
    defined = {
        getattr(llama_cpp, name): name.removeprefix("LLAMA_FTYPE_MOSTLY_").removeprefix("LLAMA_FTYPE_ALL_")
        for name in dir(llama_cpp)
        if name.startswith("LLAMA_FTYPE_") and name != "LLAMA_FTYPE_GUESSED"
    }
    assert defined == FILE_TYPES
