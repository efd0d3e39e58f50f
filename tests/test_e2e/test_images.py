"""Images through the llama.cpp engine (#40), with the packaged model and a stand-in projector of
random weights (benchmarks/_standin.py): pictures are noise to it, so these tests assert what holds
whatever the weights."""

from __future__ import annotations

import ctypes
from pathlib import Path

import pytest
from llama_cpp import llama_cpp, mtmd_cpp

from asgi_llm.config.sources import default_model_path

from .standin_projector import write_projector

pytestmark = pytest.mark.model


@pytest.fixture(scope="session")
def projector(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_projector(tmp_path_factory.mktemp("projector") / "mmproj.gguf")


def test_the_stand_in_projector_loads_for_the_packaged_model(projector: Path) -> None:
    llama_cpp.llama_backend_init()
    model = llama_cpp.llama_model_load_from_file(default_model_path().encode(), llama_cpp.llama_model_default_params())
    assert model
    try:
        params = mtmd_cpp.mtmd_context_params_default()
        params.use_gpu, params.n_threads, params.warmup = False, 1, False
        context = mtmd_cpp.mtmd_init_from_file(str(projector).encode(), model, params)
        assert context, "llama.cpp's clip loader refused the stand-in projector"
        try:
            assert mtmd_cpp.mtmd_support_vision(context)
        finally:
            mtmd_cpp.mtmd_free(ctypes.c_void_p(context))
    finally:
        llama_cpp.llama_model_free(model)
