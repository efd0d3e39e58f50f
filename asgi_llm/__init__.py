"""asgi_llm: a mountable ASGI app serving local GGUF models over popular LLM wire protocols."""
