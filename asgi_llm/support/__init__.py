"""What every layer may lean on, importing nothing of ours: tasks that outlive the call starting
them (tasks.py), OpenTelemetry's API where it is installed (otel.py), and the clients of outside
services one pool's apps share, one per URL (clients.py). Below the pool, the engines, the layers
and the shared backends, so none of them imports the package's root.
"""
