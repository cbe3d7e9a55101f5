"""A user's application with its own aggregate beside agent threads. Version 1 of its
events, which the golden fixture ``golden/own-v1`` holds, kept weights in grams;
version 2 keeps kilograms, and upcasts the older events the eventsourcing way."""

from __future__ import annotations

from decimal import Decimal
from typing import Any
from uuid import UUID

from eventsourcing.domain import Aggregate, event

from covonaut_es import AgentApplication


def _grams_to_kilograms(state: dict[str, Any]) -> None:
    state["weight_kg"] = str(Decimal(state.pop("weight_grams")) / 1000)


class Parcel(Aggregate):
    """A parcel whose weight is recorded when it is registered and when it is weighed."""

    class Registered(Aggregate.Created):
        class_version = 2
        sender: str
        weight_kg: Decimal

        @staticmethod
        def upcast_v1_v2(state: dict[str, Any]) -> None:
            _grams_to_kilograms(state)

    @event(Registered)
    def __init__(self, sender: str, weight_kg: Decimal) -> None:
        self.sender = sender
        self.weight_kg = weight_kg

    class Weighed(Aggregate.Event):
        class_version = 2
        weight_kg: Decimal

        @staticmethod
        def upcast_v1_v2(state: dict[str, Any]) -> None:
            _grams_to_kilograms(state)

    @event(Weighed)
    def weigh(self, weight_kg: Decimal) -> None:
        self.weight_kg = weight_kg


class Parcels(AgentApplication):
    """The application holding parcels and agent threads."""

    aggregate_classes = (Parcel,)

    def register(self, sender: str, weight_kg: Decimal) -> UUID:
        """Register a parcel; its id."""
        parcel = Parcel(sender, weight_kg)
        self.save(parcel)
        return parcel.id
