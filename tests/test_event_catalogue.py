"""The event catalogue of the docs is generated from the code (docs/_ext/event_catalogue.py):
it lists every type the store keeps events of, with the topic a record of it is stored
under and the schema version the code writes. ``make test`` builds the site with
``--strict``, which runs the hook on docs/concepts.md."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType

from eventsourcing.utils import get_topic

from covonaut_es import AgentThread
from covonaut_es.domain import StateDocument, ThreadSnapshot
from covonaut_es.migrations import schema_for
from covonaut_es.migrations._registry import registry
from covonaut_es.store._mapper import MsgspecMapper

ROOT = Path(__file__).resolve().parents[1]
ROW = re.compile(r"^\| `(?P<name>[\w.]+)` \| `(?P<topic>[\w.]+)` \| (?P<version>\d+) \|")


def hook() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "event_catalogue", ROOT / "docs" / "_ext" / "event_catalogue.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def rows(markdown: str) -> dict[str, tuple[str, int]]:
    found = [m for m in map(ROW.match, markdown.splitlines()) if m]
    return {m["name"]: (m["topic"], int(m["version"])) for m in found}


def test_the_catalogue_lists_every_stored_event_type_with_its_topic_and_version() -> None:
    listed = rows(hook().catalogue())
    not_events = {ThreadSnapshot.__qualname__, StateDocument.__qualname__}
    stored = {schema.name: schema.version for schema in registry()}
    assert set(listed) == set(stored) - not_events
    mapper = MsgspecMapper()
    for name, (topic, version) in listed.items():
        cls = mapper.event_class(topic, where="the catalogue")  # the store reads it there
        assert cls.__qualname__ == name
        assert version == stored[name] == schema_for(cls).version


def test_a_subscriber_by_topic_is_told_every_topic_of_a_decision() -> None:
    text = hook().catalogue()
    family = next(
        line for line in text.splitlines() if line.startswith("- `AgentThread.ReviewDecided`")
    )
    kinds: list[type] = AgentThread.ReviewDecided.__subclasses__()
    assert len(kinds) >= 3  # edits, responses and expiries have topics of their own
    for cls in [AgentThread.ReviewDecided, *kinds]:
        assert f"`{get_topic(cls)}`" in family


def test_each_family_lists_every_subclass_however_far_down_and_by_any_base() -> None:
    """A record is stored under its own class's topic: a subscriber to a class's topic
    must be told every catalogued subclass's, including one that derives from two
    (``StartedWithInput`` is a ``Started``, a ``RunStarted`` and a ``MessageAppended``)."""
    module = hook()
    classes = module.catalogued_classes()
    families = {
        line.split("`")[1]: line
        for line in module.catalogue().splitlines()
        if line.startswith("- `")
    }
    for cls in classes:
        kinds = [sub for sub in classes if sub is not cls and issubclass(sub, cls)]
        if not kinds:
            assert cls.__qualname__ not in families
            continue
        family = families[cls.__qualname__]
        for kind in [cls, *kinds]:
            assert f"`{get_topic(kind)}`" in family, (cls, kind)
    assert "`covonaut.thread.StartedWithInput`" in families["AgentThread.MessageAppended"]


def test_the_docs_expand_the_catalogue_in_one_place() -> None:
    module = hook()
    pages = [p for p in (ROOT / "docs").glob("*.md") if module.MARKER in p.read_text()]
    assert [p.name for p in pages] == ["concepts.md"]
    page = (ROOT / "docs" / "concepts.md").read_text()
    rendered = module.on_page_markdown(page)
    assert module.MARKER not in rendered
    assert rows(rendered) == rows(module.catalogue())
    assert "docs/_ext/event_catalogue.py" in (ROOT / "mkdocs.yml").read_text()
