from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("admin_ui", "0003_alter_auditentry_action"),
        ("coordinator", "0003_auditentry"),
    ]

    # The model moved to coordinator with its table (coordinator 0003): forget it here without
    # dropping the table, then list the rows through a proxy that keeps the admin's address and the
    # permission admin_ui.view_auditentry.
    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[],
            state_operations=[migrations.DeleteModel(name="AuditEntry")],
        ),
        migrations.CreateModel(
            name="AuditEntry",
            fields=[],
            options={
                "verbose_name": "audit entry",
                "verbose_name_plural": "audit entries",
                "proxy": True,
                "indexes": [],
                "constraints": [],
            },
            bases=("coordinator.auditentry",),
        ),
    ]
