"""The API key store."""

from __future__ import annotations

from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True

    operations = [  # noqa: RUF012
        migrations.CreateModel(
            name="APIKey",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("name", models.CharField(help_text="Who or what uses the key.", max_length=100, unique=True)),
                ("hashed_key", models.CharField(editable=False, max_length=64, unique=True)),
                ("created", models.DateTimeField(auto_now_add=True)),
                (
                    "revoked",
                    models.DateTimeField(blank=True, help_text="When set, the key no longer works.", null=True),
                ),
            ],
            options={"verbose_name": "API key", "ordering": ("name",)},
        ),
    ]
