"""A mkdocs hook (mkdocs.yml): the marker ``<!-- event-catalogue -->`` in a page becomes
the catalogue of every event type the store reads, generated from the classes themselves
(topic, schema version, parent event, fields and their types, first docstring paragraph),
so the docs cannot list fewer events, or other fields, than the code stores.
"""

from __future__ import annotations

import dataclasses
import re
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from eventsourcing.domain import Snapshot
from eventsourcing.utils import get_topic

# The catalogue describes the checkout whose docs are built, not whichever copy of the
# package the environment has installed (an editable install may point at another tree).
_SOURCE = str(Path(__file__).resolve().parents[2] / "src")
if _SOURCE not in sys.path:
    sys.path.insert(0, _SOURCE)

from covonaut_es.migrations._registry import class_version  # noqa: E402
from covonaut_es.store._mapper import library_event_classes  # noqa: E402

MARKER = "<!-- event-catalogue -->"
_ROLE = re.compile(r":[a-z]+:`~?(?:[\w.]+\.)?([^`.]+)`")


def catalogued_classes() -> list[type]:
    """Every concrete event type the store reads (the mapper's own allowlist, without
    its abstract base and the snapshot), once each, in the mapper's order."""
    unique: dict[str, type] = {}
    for cls in library_event_classes():
        if isinstance(cls, type) and not issubclass(cls, Snapshot) and "TOPIC" in vars(cls):
            unique.setdefault(get_topic(cls), cls)  # Started is also AgentThread.Created
    return list(unique.values())


def _type_name(annotation: Any) -> str:
    return (
        annotation
        if isinstance(annotation, str)
        else getattr(annotation, "__name__", repr(annotation))
    )


def _summary(cls: type) -> str:
    paragraph = (cls.__doc__ or "").strip().split("\n\n", 1)[0]
    return _ROLE.sub(r"`\1`", " ".join(paragraph.split())).replace("|", "\\|")


def _parents(cls: type, catalogued: Iterable[type]) -> list[type]:
    """The nearest catalogued classes ``cls`` derives from (two for an event that records
    what two others would)."""
    ancestors = [base for base in cls.__mro__[1:] if base in catalogued]
    return [a for a in ancestors if not any(o is not a and issubclass(o, a) for o in ancestors)]


def _envelope(classes: list[type]) -> list[str]:
    """The fields every catalogued event has, listed once rather than per event."""
    common = set.intersection(*({f.name for f in dataclasses.fields(c)} for c in classes))
    return [f.name for f in dataclasses.fields(classes[0]) if f.name in common]


def _fields(cls: type, skip: list[str]) -> str:
    parts = []
    for field in dataclasses.fields(cls):
        if field.name not in skip:
            default = "" if field.default is dataclasses.MISSING else f" = {field.default!r}"
            parts.append(f"`{field.name}: {_type_name(field.type)}{default}`")
    return ", ".join(parts) or "none"


def _families(classes: list[type]) -> Iterator[str]:
    # Every catalogued subclass, however far down and by whichever base: a record of
    # `StartedWithInput` is one a subscriber to `RunStarted` or `MessageAppended` misses
    # unless it lists that topic too.
    for cls in classes:
        kinds = [sub for sub in classes if sub is not cls and issubclass(sub, cls)]
        if kinds:
            topics = ", ".join(f"`{get_topic(c)}`" for c in [cls, *kinds])
            yield (
                f"- `{cls.__qualname__}` and its subclass{'es' if len(kinds) > 1 else ''} "
                f"{', '.join(f'`{k.__qualname__}`' for k in kinds)}: {topics}."
            )


def catalogue() -> str:
    """The catalogue as Markdown: the events' envelope, the families a subscriber by
    topic must list whole, and one table row per event type."""
    classes = catalogued_classes()
    envelope = _envelope(classes)
    lines = [
        f"{len(classes)} event types. Every one also has "
        + ", ".join(f"`{name}`" for name in envelope)
        + ", not repeated below.",
        "",
        "A record is stored under its own class's topic, and a projection or a reader "
        "that asks for events by topic receives only the topics it lists, never a "
        "subclass's: to see every event of a family, list every topic of it.",
        "",
        *_families(classes),
        "",
        "| Event | Topic | Version | Subclass of | Fields | What it records |",
        "|---|---|---|---|---|---|",
    ]
    for cls in classes:
        parents = ", ".join(f"`{p.__qualname__}`" for p in _parents(cls, classes))
        lines.append(
            f"| `{cls.__qualname__}` | `{get_topic(cls)}` | {class_version(cls)} | "
            f"{parents} | {_fields(cls, envelope)} | {_summary(cls)} |"
        )
    return "\n".join(lines)


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    """mkdocs' hook: expand the marker wherever a page has it."""
    return markdown.replace(MARKER, catalogue()) if MARKER in markdown else markdown
