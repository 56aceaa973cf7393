"""The action forms. Ranges come from the protocol core so the form and the core cannot disagree (the
core validates again anyway: a value the form let through and the core refuses becomes an error message)."""

from __future__ import annotations

import re
from typing import Any

from django import forms
from django.core.exceptions import ValidationError

from coordinator.operations import MAX_REASON_CHARS
from coordinator.protocol.errors import InvalidRequest
from coordinator.protocol.limits import GROUP_CONFIG_RANGES
from coordinator.protocol.model import (
    MAX_ENTRY_IDS,
    MAX_MAX_LEN,
    MAX_RETENTION_MS,
    MAX_SHARD_COUNT,
    MIN_MAX_AGE_MS,
    MIN_MAX_LEN,
    OrderingMode,
    RetentionPolicy,
    validate_entry_ids,
)


class MaxConcurrencyForm(forms.Form):
    max_concurrency = forms.IntegerField(
        min_value=GROUP_CONFIG_RANGES["max_concurrency"][0],
        max_value=GROUP_CONFIG_RANGES["max_concurrency"][1],
        help_text="The server-side cap on worker threads inside ONE member (never an assignment weight). "
        "Each member runs min(its reported capacity, this).",
    )


class ShardCountForm(forms.Form):
    shard_count = forms.IntegerField(min_value=1, max_value=MAX_SHARD_COUNT)
    ordering = forms.ChoiceField(
        choices=[
            (
                OrderingMode.STRICT.value,
                "strict: a new shard is read only after the old shards it shares keys "
                "with have drained (per-key order kept)",
            ),
            (
                OrderingMode.RELAXED.value,
                "relaxed: new shards are read at once (keys written around the "
                "switch may be handled out of order)",
            ),
        ],
        initial=OrderingMode.STRICT.value,
        widget=forms.RadioSelect,
    )
    # Set by the confirmation page: the change runs only if the active version is still this one, so a
    # confirmation reviewed against one topology is never applied to another (double submit, a second
    # operator's change in between).
    from_version = forms.IntegerField(required=False, widget=forms.HiddenInput)

    def ordering_mode(self) -> OrderingMode:
        return OrderingMode(self.cleaned_data["ordering"])


# ------------------------------------------------------------------------------------------ entry lifecycle
# Each action's reason is stored in the audit trail by coordinator/operations.py (1..500 characters).

MAX_OLDER_THAN_S = MAX_RETENTION_MS // 1000


def reason_field(*, required: bool) -> forms.CharField:
    return forms.CharField(
        required=required,
        max_length=MAX_REASON_CHARS,
        strip=True,
        help_text="Why, for the audit trail" + (" (required)." if required else " (optional)."),
    )


def parse_entry_ids(values: list[str]) -> list[str]:
    """Stream entry ids (``1700000000000-0``) from inputs that may each hold several, separated by
    spaces, commas or new lines; order kept, duplicates dropped, each checked and written the way the
    protocol core does (``validate_entry_ids``). ValidationError on anything else."""
    ids: dict[str, None] = {}
    for value in values:
        for token in re.split(r"[\s,]+", value.strip()):
            if not token:
                continue
            try:
                (canonical,) = validate_entry_ids([token], "entry_ids")
            except InvalidRequest as e:
                raise ValidationError(
                    f"{token!r} is not a stream entry id (written like 1700000000000-0)", code="invalid"
                ) from e
            ids[canonical] = None
    if len(ids) > MAX_ENTRY_IDS:
        raise ValidationError(f"at most {MAX_ENTRY_IDS} entry ids at a time; got {len(ids)}", code="max")
    return list(ids)


class EntryIdsField(forms.Field):
    """Entry ids from repeated inputs (checkboxes, hidden inputs) or one text area: a list of str."""

    def to_python(self, value: Any) -> list[str]:
        if value in self.empty_values:
            return []
        return parse_entry_ids([value] if isinstance(value, str) else list(value))

    def validate(self, value: Any) -> None:
        if self.required and not value:
            raise ValidationError(self.error_messages["required"], code="required")


class RedeliverForm(forms.Form):
    reason = reason_field(required=False)


class SkipForm(forms.Form):
    """Skip (acknowledge without handling) pending entries of one shard: listed ids, or every pending
    entry older than an age. The first POST shows the entries; the confirmation posts their ids, so
    exactly the entries the operator saw are skipped (an age re-evaluated later would take more)."""

    entry_ids = EntryIdsField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 3, "cols": 60}),
        help_text=f"Pending entry ids such as 1700000000000-0, separated by spaces, commas or new lines "
        f"(at most {MAX_ENTRY_IDS}).",
    )
    older_than_s = forms.IntegerField(
        required=False,
        min_value=0,
        max_value=MAX_OLDER_THAN_S,
        label="Older than (seconds)",
        help_text="Or: every pending entry whose id is at least this old (0: every pending entry).",
    )
    reason = reason_field(required=True)

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        has_ids, has_age = bool(data.get("entry_ids")), data.get("older_than_s") is not None
        if has_ids == has_age and not self.has_error("entry_ids") and not self.has_error("older_than_s"):
            raise ValidationError("Give either entry ids or an age, not both and not neither.", code="one_of")
        return data


class ReleaseDrainForm(forms.Form):
    # The count of unconsumed entries the operator saw: the store refuses if it has changed since.
    confirm_unconsumed = forms.IntegerField(min_value=0, widget=forms.HiddenInput)
    reason = reason_field(required=True)


class DeadLetterReplayForm(forms.Form):
    ids = EntryIdsField(widget=forms.MultipleHiddenInput, error_messages={"required": "Select dead letters."})
    reason = reason_field(required=False)
    # UNSIGNED dead letters (no MAC: from before dead letters were signed) only when ticked; FORGED never.
    accept_unsigned = forms.BooleanField(required=False)


class DeadLetterPurgeForm(forms.Form):
    """The selection (ids or all); the confirmation adds the required reason (``confirming=True``)."""

    ids = EntryIdsField(required=False, widget=forms.MultipleHiddenInput)
    all = forms.BooleanField(required=False, widget=forms.HiddenInput)
    reason = reason_field(required=True)  # asked on the confirmation page; "(required)" in its help

    def __init__(self, *args: Any, confirming: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["reason"].required = confirming

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        if bool(data.get("ids")) == bool(data.get("all")) and not self.has_error("ids"):
            raise ValidationError("Select dead letters, or all of them (not both).", code="one_of")
        return data

    def selection(self) -> list[str] | None:
        """The ids to purge; None for all."""
        return None if self.cleaned_data.get("all") else self.cleaned_data.get("ids", [])


class RetentionForm(forms.Form):
    """A stream prefix's retention policy. Bounds come from the protocol core (RetentionPolicy)."""

    max_age_ms = forms.IntegerField(
        required=False,
        min_value=MIN_MAX_AGE_MS,
        max_value=MAX_RETENTION_MS,
        label="max_age_ms",
        help_text=f"Empty: no age cap. Otherwise {MIN_MAX_AGE_MS} (1 minute) to {MAX_RETENTION_MS} "
        "(365 days). Entries older than this are trimmed WHETHER OR NOT every group has consumed them.",
    )
    max_len = forms.IntegerField(
        required=False,
        min_value=MIN_MAX_LEN,
        max_value=MAX_MAX_LEN,
        label="max_len",
        help_text=f"Empty: no length cap. Otherwise {MIN_MAX_LEN} to {MAX_MAX_LEN} entries per shard "
        "stream. Older entries beyond it are trimmed WHETHER OR NOT every group has consumed them.",
    )
    retired_grace_ms = forms.IntegerField(
        min_value=0,
        max_value=MAX_RETENTION_MS,
        label="retired_grace_ms",
        help_text="How long a retired version's streams are kept after it retired (they are deleted only "
        "once every group has acknowledged every entry anyway).",
    )
    accept_data_loss = forms.BooleanField(
        required=False,
        label="I understand that a cap may drop entries no group has handled (data loss)",
    )
    reason = reason_field(required=False)

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        capped = data.get("max_age_ms") is not None or data.get("max_len") is not None
        if capped and not data.get("accept_data_loss") and not self.errors:
            self.add_error(
                "accept_data_loss",
                ValidationError(
                    "A cap may drop unconsumed entries: tick the box to accept that.", "required"
                ),
            )
        return data

    def policy(self) -> RetentionPolicy:
        data = self.cleaned_data
        return RetentionPolicy(
            max_age_ms=data["max_age_ms"], max_len=data["max_len"], retired_grace_ms=data["retired_grace_ms"]
        ).validated()


class DeletePrefixForm(forms.Form):
    force = forms.BooleanField(
        required=False,
        label="Delete even though it has groups or unconsumed entries (they are lost)",
    )
    reason = reason_field(required=False)
