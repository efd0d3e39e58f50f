"""The site's ASGI entry point: the LLM API at ASGI_LLM["PREFIX"], Django everywhere else.

Run from the repository root (Django's `runserver` is WSGI and serves no LLM API):

    .venv/bin/uvicorn --app-dir examples/django_project mysite.asgi:application
"""

import os

from asgi_llm.contrib.django import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mysite.settings")

application = get_asgi_application()
