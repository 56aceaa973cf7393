"""Two models: a placeholder that carries the operator pages' permission, and the audit trail's admin proxy.

``ConsumerGroup`` has no table (``managed = False``): consumer groups live in Redis, not in the ORM. It
exists so that the admin can list "Consumer groups" on its index page (its changelist is replaced by
the pages in ``admin_ui/admin.py``) and so that the permission ``admin_ui.view_groups`` exists. Changes
are authorised by the coordinator's own ``coordinator.manage_groups`` (see ``admin_ui/access.py``).

``AuditEntry`` here is a proxy of ``coordinator.AuditEntry`` (coordinator/models.py explains the
audit trail), registered in the admin under this app's label.
"""

from __future__ import annotations

from django.db import models

from coordinator.models import AuditEntry as CoordinatorAuditEntry


class ConsumerGroup(models.Model):
    """Placeholder: no table, no rows. Only its permission and its admin entry are used."""

    class Meta:
        managed = False
        # add/change/delete/view of rows mean nothing for a model without rows.
        default_permissions = ()
        permissions = (("view_groups", "Can view consumer groups: epochs, assignments, revocations"),)
        verbose_name = "consumer group"
        verbose_name_plural = "consumer groups"


class AuditEntry(CoordinatorAuditEntry):
    """The audit trail as the operator pages list it: a proxy of ``coordinator.AuditEntry`` (the model
    and its table belong to the operations layer, coordinator/models.py). It keeps the admin's address
    ``/admin/admin_ui/auditentry/`` and the permission ``admin_ui.view_auditentry`` that operators hold."""

    class Meta:
        proxy = True
        verbose_name = "audit entry"
        verbose_name_plural = "audit entries"
