"""ASGI plumbing every layer above shares: message types and senders, the one body decoder,
route matching, and the per-request context the middleware and the endpoint read and fill.

It imports only the core, so middleware, adapters' glue and the app can all stand on it.
"""
