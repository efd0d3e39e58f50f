"""`LLMPlugin`: mounts an `LLMApp` in a Litestar app and ties its models to the app's lifespan.

app = Litestar(route_handlers=[...], plugins=[LLMPlugin(LLMConfig(settings))])
"""

from __future__ import annotations

from litestar.config.app import AppConfig
from litestar.handlers import asgi
from litestar.plugins import InitPluginProtocol
from litestar.types import Receive, Scope, Send

from ...app import LLMApp
from .._protocols import OLLAMA, ollama_root_paths
from .config import LLMConfig

__all__ = ["LLMPlugin"]


class LLMPlugin(InitPluginProtocol):
    """Adds the mount (`copy_scope=True`; the app tolerates the trailing slash Litestar adds)
    and `llm.lifespan` to the app, so models load at startup and unload at shutdown."""

    __slots__ = ("config", "llm")

    def __init__(self, config: LLMConfig | None = None) -> None:
        self.config = config or LLMConfig()
        self.llm = LLMApp(self.config.settings, adapters=self.config.adapters)

    def on_app_init(self, app_config: AppConfig) -> AppConfig:
        api = self.llm

        async def llm_api(scope: Scope, receive: Receive, send: Send) -> None:
            await api(scope, receive, send)  # type: ignore[arg-type]

        app_config.route_handlers.append(asgi(self.config.path, is_mount=True, copy_scope=True)(llm_api))
        if self.config.ollama_at_root:
            ollama = api.sibling(OLLAMA, health_path=None)

            async def ollama_api(scope: Scope, receive: Receive, send: Send) -> None:
                await ollama(scope, receive, send)  # type: ignore[arg-type]

            app_config.route_handlers.append(asgi(list(ollama_root_paths()), copy_scope=True)(ollama_api))
        app_config.lifespan.append(api.lifespan)
        return app_config
