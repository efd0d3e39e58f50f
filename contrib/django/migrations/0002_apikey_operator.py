"""Operator keys: the ones that may read /metrics."""

from __future__ import annotations

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("asgi_llm", "0001_initial")]  # noqa: RUF012

    operations = [  # noqa: RUF012
        migrations.AddField(
            model_name="apikey",
            name="operator",
            field=models.BooleanField(default=False, help_text="May also read /metrics, which shows every key's usage."),
        ),
    ]
