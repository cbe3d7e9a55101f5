"""A user's application with its own aggregate beside agent threads, as the golden
fixture ``golden/own-v1`` stored it: version 1 of its events kept weights in grams."""

from __future__ import annotations

from uuid import UUID

from eventsourcing.domain import Aggregate, event

from covonaut_es import AgentApplication


class Parcel(Aggregate):
    """A parcel whose weight is recorded when it is registered and when it is weighed."""

    class Registered(Aggregate.Created):
        sender: str
        weight_grams: int

    @event(Registered)
    def __init__(self, sender: str, weight_grams: int) -> None:
        self.sender = sender
        self.weight_grams = weight_grams

    class Weighed(Aggregate.Event):
        weight_grams: int

    @event(Weighed)
    def weigh(self, weight_grams: int) -> None:
        self.weight_grams = weight_grams


class Parcels(AgentApplication):
    """The application holding parcels and agent threads."""

    aggregate_classes = (Parcel,)

    def register(self, sender: str, weight_grams: int) -> UUID:
        """Register a parcel; its id."""
        parcel = Parcel(sender, weight_grams)
        self.save(parcel)
        return parcel.id
