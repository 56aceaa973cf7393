import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    # The audit trail moves here from admin_ui (the operations layer owns it). Its table keeps its
    # name and rows: this migration only tells Django's state that the model is now this app's, and
    # admin_ui's 0004 removes it from admin_ui's state (leaving a proxy for the operator pages).
    dependencies = [
        ("coordinator", "0002_credential_scopes"),
        ("admin_ui", "0003_alter_auditentry_action"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[],
            state_operations=[
                migrations.CreateModel(
                    name="AuditEntry",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                            ),
                        ),
                        ("timestamp", models.DateTimeField(auto_now_add=True, db_index=True)),
                        ("username", models.CharField(max_length=150)),
                        (
                            "action",
                            models.CharField(
                                choices=[
                                    ("create_group", "create group"),
                                    ("set_max_concurrency", "set max_concurrency"),
                                    ("change_shard_count", "change shard count"),
                                    ("delete_group", "delete group"),
                                    ("skip_entries", "skip pending entries"),
                                    ("redeliver", "redeliver pending entries"),
                                    ("release_drain", "release a group from a migration's drain"),
                                    ("replay_dead_letters", "replay dead letters"),
                                    ("purge_dead_letters", "purge dead letters"),
                                    ("set_retention", "set retention policy"),
                                    ("delete_prefix", "delete stream prefix"),
                                ],
                                max_length=32,
                            ),
                        ),
                        ("stream_prefix", models.CharField(max_length=64)),
                        ("consumer_group", models.CharField(blank=True, max_length=64)),
                        (
                            "source",
                            models.CharField(
                                choices=[
                                    ("api", "HTTP API"),
                                    ("admin_ui", "operator pages"),
                                    ("command", "management command"),
                                ],
                                default="admin_ui",
                                max_length=16,
                            ),
                        ),
                        ("details", models.JSONField(blank=True, default=dict)),
                        (
                            "outcome",
                            models.CharField(
                                help_text="'ok', the coordinator's error code, or 'pending' (written before the change; still 'pending' means the outcome was never recorded).",
                                max_length=32,
                            ),
                        ),
                        (
                            "message",
                            models.TextField(
                                blank=True, help_text="The error message when the action was refused."
                            ),
                        ),
                        (
                            "user",
                            models.ForeignKey(
                                blank=True,
                                null=True,
                                on_delete=django.db.models.deletion.SET_NULL,
                                related_name="+",
                                to=settings.AUTH_USER_MODEL,
                            ),
                        ),
                    ],
                    options={
                        "verbose_name": "audit entry",
                        "verbose_name_plural": "audit entries",
                        "db_table": "admin_ui_auditentry",
                        "ordering": ("-timestamp", "-id"),
                    },
                ),
            ],
        ),
    ]
