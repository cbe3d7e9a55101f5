"""The saver of the embedded anchors' kill test: the shop, configured by the
environment, saves an order and the thread that reviews it together, over and over,
printing a line before each save, until killed."""

from __future__ import annotations

from decimal import Decimal

from covonaut_es import AgentThread, Message, Role, Store
from shop_app import NOW, Order, Shop


def main() -> None:
    """Save an order shipped and its thread steered in one transaction, again and again."""
    with Shop() as app, Store.from_application(app) as store:
        if not store.exists("t"):
            app.save(Order("lamp", Decimal("19.90")), AgentThread.start("t", now=NOW))
        n = 0
        while True:
            thread = store.load("t")
            order = Order("lamp", Decimal(n))
            order.ship("ups")
            thread.steer(Message(Role.USER, f"order {n} shipped"), now=NOW)
            print("saving", flush=True)
            app.save(order, thread)
            n += 1


if __name__ == "__main__":
    main()
