"""A shop of the user's own for tests of the library's tools on an embedded
application: an eventsourcing application with its own aggregate, ``Order``, that keeps
agent threads beside it, configured by environment variables alone
(``PERSISTENCE_MODULE``, ``SQLITE_DBNAME`` or ``POSTGRES_*``, ``IS_SNAPSHOTTING_ENABLED``,
``CIPHER_TOPIC`` and ``CIPHER_KEY``). The command line imports it as
``shop_app:Shop`` (or ``shop_app:RenamedShop``, whose PostgreSQL tables bear the name
it chose)."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from typing import Any
from uuid import UUID

from eventsourcing.domain import Aggregate, event

from covonaut_es import (
    Agent,
    AgentApplication,
    AgentConfig,
    CheckpointSettings,
    InterruptError,
    Message,
    ProviderRequest,
    ProviderResponse,
    Role,
    ScriptedProvider,
    Store,
    Tool,
    ToolCall,
    ToolContext,
)

NOW = datetime(2026, 5, 6, tzinfo=UTC)


class Order(Aggregate):
    """A customer's order, shipped once a manager agrees."""

    @event("Placed")
    def __init__(self, item: str, amount: Decimal) -> None:
        self.item, self.amount, self.carrier = item, amount, ""

    @event("Shipped")
    def ship(self, carrier: str) -> None:
        """Hand the order to a carrier."""
        self.carrier = carrier


class Shop(AgentApplication):
    """Orders, and the agent threads that review them, in one event store."""

    aggregate_classes = (Order,)

    def place(self, item: str, amount: Decimal) -> UUID:
        """Store a new order; its id."""
        order = Order(item, amount)
        self.save(order)
        return order.id

    def ship(self, order_id: UUID, thread: Any, carrier: str) -> None:
        """Ship the order and tell its reviewing agent, in one transaction."""
        order: Order = self.repository.get(order_id)
        order.ship(carrier)
        thread.steer(Message(Role.USER, f"shipped with {carrier}"), now=NOW)
        self.save(order, thread)


class RenamedShop(Shop):
    """The shop under a name of its own: on PostgreSQL its tables are
    ``acme_orders_events`` and ``acme_orders_snapshots``."""

    name = "acme_orders"


def _review(request: ProviderRequest) -> ProviderResponse:
    if any("shipped with" in m.content for m in request.messages):
        return ProviderResponse(content="Order reviewed.")
    return ProviderResponse(tool_calls=(ToolCall("ask-1", "ask_manager", "{}"),))


def _ask_manager(ctx: ToolContext, args: dict[str, Any]) -> Any:
    raise InterruptError("manager approval needed", {"thread": ctx.thread_id})


def reviewer(store: Store, order_id: UUID) -> Agent:
    """The agent reviewing an order, on the thread ``order-<id>``; it pauses for a
    manager until told the order shipped."""
    return Agent(
        AgentConfig(
            provider=ScriptedProvider(respond=_review),
            tools=[Tool("ask_manager", "Ask a manager", {"type": "object"}, _ask_manager)],
            checkpoint=CheckpointSettings(store=store, thread_id=f"order-{order_id}"),
        )
    )
