"""asgi_llm in a Django project.

- `get_asgi_application()` for the project's `asgi.py`: the LLM API at `ASGI_LLM["PREFIX"]`
  (default `/v1`), Django everywhere else, models loaded at server startup.
- Add `"asgi_llm.contrib.django"` to `INSTALLED_APPS` for system checks of `ASGI_LLM`, and
  for the key store: `APIKey` in the admin, `manage.py create_llm_key NAME` /
  `revoke_llm_key NAME`, and `verify_key` for an auth verifier.

Importing this package needs no configured settings and loads no models.
"""

from __future__ import annotations

from .asgi import LLMDispatcher, get_asgi_application
from .keys import KeyExists, create_key, revoke_key, verify_key

__all__ = ["KeyExists", "LLMDispatcher", "create_key", "get_asgi_application", "revoke_key", "verify_key"]
