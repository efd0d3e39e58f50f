"""What every layer may lean on, importing nothing of ours: tasks that outlive the call starting
them (tasks.py) and OpenTelemetry's API where it is installed (otel.py). Below the pool, the
engines, the layers and the shared backends, so none of them imports the package's root.
"""
