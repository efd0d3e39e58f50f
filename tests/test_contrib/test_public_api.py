"""Each integration's `__all__` is complete, and importing one needs no configured host."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys

import pytest


@pytest.mark.parametrize("module", ["asgi_llm.contrib.django", "asgi_llm.contrib.litestar"])
def test_all_is_complete_and_resolvable(module: str) -> None:
    mod = importlib.import_module(module)
    public = {n for n, v in vars(mod).items() if not n.startswith("_") and not isinstance(v, type(os))}
    public.discard("annotations")
    assert set(mod.__all__) == public
    assert all(getattr(mod, name) is not None for name in mod.__all__)


@pytest.mark.slow  # it starts an interpreter
def test_importing_the_django_integration_needs_no_settings_and_loads_nothing() -> None:
    code = (
        "import sys, asgi_llm.contrib.django\n"
        "from django.conf import settings\n"
        "assert not settings.configured\n"
        "assert 'llama_cpp' not in sys.modules\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    subprocess.run([sys.executable, "-P", "-c", code], check=True, env=env)
