"""The action forms. Ranges come from the protocol core so the form and the core cannot disagree (the
core validates again anyway: a value the form let through and the core refuses becomes an error message)."""

from __future__ import annotations

from django import forms

from coordinator.protocol.model import MAX_MAX_CONCURRENCY, MAX_SHARD_COUNT, OrderingMode


class MaxConcurrencyForm(forms.Form):
    max_concurrency = forms.IntegerField(
        min_value=1,
        max_value=MAX_MAX_CONCURRENCY,
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
