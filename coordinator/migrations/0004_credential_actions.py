from django.db import migrations, models


class Migration(migrations.Migration):
    # Credential issue, deactivation, re-activation and role / scope changes are audited operations
    # (coordinator/operations.py). Only the choices change: no database change.
    dependencies = [
        ("coordinator", "0003_auditentry"),
    ]

    operations = [
        migrations.AlterField(
            model_name="auditentry",
            name="action",
            field=models.CharField(
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
                    ("issue_credential", "issue API credential"),
                    ("deactivate_credential", "deactivate API credential"),
                    ("reactivate_credential", "re-activate API credential"),
                    ("change_credential", "change an API credential's role or scope"),
                ],
                max_length=32,
            ),
        ),
    ]
