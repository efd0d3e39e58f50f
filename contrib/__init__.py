"""Host-framework integrations: `asgi_llm.contrib.django` and `asgi_llm.contrib.litestar`.

Only these modules import a host framework; each is a thin layer over `asgi_llm.LLMApp`.
"""
