"""Django configured once for this folder (no pytest-django): an in-memory database, the admin,
and `asgi_llm.contrib.django` installed. Tests change `ASGI_LLM` with `override_settings`."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from asgi_llm import ModelConfig, ModelPool, Settings
from asgi_llm.engines.fake import FakeEngine

DJANGO_SETTINGS: dict[str, Any] = {
    "DEBUG": False,
    "SECRET_KEY": "tests-only",
    "ALLOWED_HOSTS": ["testserver"],
    "INSTALLED_APPS": [
        "django.contrib.admin",
        "django.contrib.auth",
        "django.contrib.contenttypes",
        "django.contrib.sessions",
        "django.contrib.messages",
        "asgi_llm.contrib.django",
    ],
    "MIDDLEWARE": [
        "django.contrib.sessions.middleware.SessionMiddleware",
        "django.contrib.auth.middleware.AuthenticationMiddleware",
        "django.contrib.messages.middleware.MessageMiddleware",
    ],
    "TEMPLATES": [
        {
            "BACKEND": "django.template.backends.django.DjangoTemplates",
            "APP_DIRS": True,
            "OPTIONS": {
                "context_processors": [
                    "django.template.context_processors.request",
                    "django.contrib.auth.context_processors.auth",
                    "django.contrib.messages.context_processors.messages",
                ]
            },
        }
    ],
    "DATABASES": {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}},
    "USE_TZ": True,
    "ASGI_LLM": {"API_KEYS": ["sk-test"]},
}


@pytest.fixture(scope="session")
def django_setup() -> None:
    import django
    from django.conf import settings

    if not settings.configured:
        settings.configure(**DJANGO_SETTINGS)
        django.setup()


@pytest.fixture(scope="session")
def django_database(django_setup: None) -> Iterator[None]:
    """Migrated tables (our migration included) in a shared in-memory database, so the
    async ORM's worker thread sees the same data."""
    from django.db import connection

    name = connection.settings_dict["NAME"]
    connection.creation.create_test_db(verbosity=0, autoclobber=True)
    yield
    connection.creation.destroy_test_db(name, verbosity=0)


@pytest.fixture
def django_db(django_database: None) -> Iterator[None]:
    """The migrated database, emptied after each test, so a test (or its run on the other
    anyio backend) never meets the keys another one made."""
    from django.core.management import call_command

    yield
    call_command("flush", interactive=False, verbosity=0)


@pytest.fixture
def fake_pool() -> ModelPool:
    """A pool of one scripted model, "fake", that answers "Hello there"."""
    settings = Settings(models=(ModelConfig(id="fake", path="unused.gguf"),))
    return ModelPool(settings, engine_factory=lambda config, thread: FakeEngine(config, thread))
