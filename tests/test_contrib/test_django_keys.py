"""The Django key store: keys made by `create_llm_key` verify until `revoke_llm_key` revokes them."""

from __future__ import annotations

import io
from collections.abc import Callable

import pytest

pytestmark = pytest.mark.usefixtures("django_db")


def command(*args: str) -> str:
    from django.core.management import call_command

    out = io.StringIO()
    call_command(*args, stdout=out)
    return out.getvalue().strip()


@pytest.mark.anyio
async def test_a_created_key_verifies_until_revoked() -> None:
    from asgi_llm.contrib.django import verify_key
    from asgi_llm.contrib.django.models import APIKey

    key = await sync(command, "create_llm_key", "ci-bot")
    assert key.startswith("sk-llm-") and len(key) > 40
    assert await verify_key(key) == "ci-bot"
    stored = await APIKey.objects.aget(name="ci-bot")
    assert key not in stored.hashed_key and len(stored.hashed_key) == 64
    assert await verify_key(key + "x") is None
    assert await verify_key("sk-llm-guess") is None
    assert await verify_key("") is None
    assert await sync(command, "revoke_llm_key", "ci-bot") == "Revoked ci-bot."
    assert await verify_key(key) is None
    assert (await APIKey.objects.aget(name="ci-bot")).revoked is not None


async def sync(fn: Callable[..., str], *args: str) -> str:
    from asgiref.sync import sync_to_async

    return await sync_to_async(fn)(*args)


def test_names_are_unique_and_revoking_an_unknown_key_fails() -> None:
    from django.core.management.base import CommandError

    command("create_llm_key", "twice")
    with pytest.raises(CommandError, match="exists already"):
        command("create_llm_key", "twice")
    command("revoke_llm_key", "twice")
    with pytest.raises(CommandError, match="no API key named 'twice' is in force"):
        command("revoke_llm_key", "twice")
    with pytest.raises(CommandError, match="no API key named 'nobody'"):
        command("revoke_llm_key", "nobody")


def test_the_admin_lists_and_revokes_keys_but_does_not_add_them() -> None:
    from django.contrib import admin
    from django.contrib.messages.storage.cookie import CookieStorage
    from django.test import RequestFactory

    from asgi_llm.contrib.django.models import APIKey

    model_admin = admin.site.get_model_admin(APIKey)
    request = RequestFactory().post("/admin/asgi_llm/apikey/")
    request._messages = CookieStorage(request)  # type: ignore[attr-defined]
    assert not model_admin.has_add_permission(request)
    command("create_llm_key", "from-admin")
    model_admin.revoke(request, APIKey.objects.filter(name="from-admin"))  # type: ignore[attr-defined]
    assert APIKey.objects.get(name="from-admin").revoked is not None
    assert [m.message for m in request._messages] == ["Revoked 1 key(s)."]  # type: ignore[attr-defined]


def test_the_migrations_match_the_models() -> None:
    command("makemigrations", "asgi_llm", "--check", "--dry-run")


@pytest.mark.anyio
@pytest.mark.model  # the app's first request loads the default model
async def test_the_api_accepts_a_database_key_and_refuses_it_once_revoked() -> None:
    import httpx
    from django.test import override_settings

    from asgi_llm.contrib.django import get_asgi_application

    key = await sync(command, "create_llm_key", "served")
    with override_settings(ASGI_LLM={"DATABASE_KEYS": True, "API_KEYS": ["ops=sk-config-key"]}):
        app = get_asgi_application()
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as http:
            assert (await http.get("/v1/models")).status_code == 401
            ok = await http.get("/v1/models", headers={"authorization": f"Bearer {key}"})
            assert ok.status_code == 200 and ok.json()["object"] == "list"
            assert (await http.get("/v1/models", headers={"x-api-key": "sk-config-key"})).status_code == 200
            await sync(command, "revoke_llm_key", "served")
            refused = await http.get("/v1/models", headers={"authorization": f"Bearer {key}"})
            assert refused.status_code == 401 and refused.json()["error"]["code"] == "invalid_api_key"
        await app.llm.pool.stop()


@pytest.mark.anyio
async def test_only_an_operator_key_from_the_database_reads_the_metrics() -> None:
    import httpx
    from django.test import override_settings

    from asgi_llm.contrib.django import get_asgi_application

    tenant = await sync(command, "create_llm_key", "tenant")
    operator = await sync(command, "create_llm_key", "ops-db", "--operator")
    with override_settings(ASGI_LLM={"DATABASE_KEYS": True}):
        app = get_asgi_application()
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as http:
            refused = await http.get("/v1/metrics", headers={"authorization": f"Bearer {tenant}"})
            shown = await http.get("/v1/metrics", headers={"authorization": f"Bearer {operator}"})
        await app.llm.pool.stop()
    assert refused.status_code == 403 and "operator" in refused.json()["error"]["message"]
    assert shown.status_code == 200 and "asgi_llm_requests_total" in shown.text


@pytest.mark.anyio
@pytest.mark.model  # the app's first request loads the default model
async def test_a_key_works_until_it_expires_and_then_is_401_saying_so() -> None:
    import datetime as dt

    import httpx
    from django.test import override_settings

    from asgi_llm.contrib.django import create_key, get_asgi_application, verify_key
    from asgi_llm.contrib.django.models import APIKey

    lasting = await sync(command, "create_llm_key", "lasting", "--expires", "30d")
    stored = await APIKey.objects.aget(name="lasting")
    assert stored.expires is not None
    assert dt.timedelta(days=29) < stored.expires - stored.created < dt.timedelta(days=31)
    past = dt.datetime(2020, 1, 1, tzinfo=dt.UTC)
    from asgiref.sync import sync_to_async

    old = await sync_to_async(create_key)("old", expires=past)
    assert await verify_key(lasting) == "lasting" and await verify_key(old) is None
    with override_settings(ASGI_LLM={"DATABASE_KEYS": True}):
        app = get_asgi_application()
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://testserver") as http:
            ok = await http.get("/v1/models", headers={"authorization": f"Bearer {lasting}"})
            expired = await http.get("/v1/models", headers={"authorization": f"Bearer {old}"})
        await app.llm.pool.stop()
    assert ok.status_code == 200
    assert expired.status_code == 401
    assert expired.json()["error"]["message"] == "This API key expired at 2020-01-01T00:00:00Z."


def test_an_unreadable_expiry_is_a_command_error() -> None:
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="give a date"):
        command("create_llm_key", "soon", "--expires", "soon")
