"""The request path every protocol shares, below the composition root: the one endpoint
(endpoint.py: body → parse → pool → render or stream), a generation's way through its fallback
chain (fallback.py), Responses run in the background (background.py), and the routes answered
from a model rather than a generation (model_routes.py: `/rerank`, `/lora-adapters`).
"""
