"""Schema versions and the rules for upgrading stored data one version step at a time.

Every stored document (an event's payload, a snapshot's state, a named state) carries
the schema version it was written at under ``"_v"``. Reading upgrades older data in
memory with one upcaster per step, in order; stored data is never rewritten.
Data without a version is version 0, and 0 -> 1 is the identity unless an upcaster is
given for it. Data newer than the code, and an upcaster that does not return the
next version, are errors.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

import attrs

from covonaut_es._text import exception_line
from covonaut_es.errors import (
    ConfigurationError,
    MissingUpcasterError,
    NewerSchemaError,
    SchemaVersionError,
    StaleSnapshotError,
    UpcasterError,
)

VERSION_KEY = "_v"
"""The key under which every stored document carries its schema version."""

Upcaster = Callable[[dict[str, Any]], dict[str, Any]]
"""Upgrades a document by exactly one version: it receives the document with
``"_v": v`` and returns it with ``"_v": v + 1``. It may change its argument."""

NO_MIGRATORS: Mapping[int, Upcaster] = MappingProxyType({})


def frozen_steps(steps: Mapping[int, Upcaster]) -> Mapping[int, Upcaster]:
    """A read-only copy of upcasters keyed by step, so that they cannot change later."""
    return MappingProxyType(dict(steps))


def stored_version(document: Mapping[str, Any]) -> object:
    """The schema version a document was written at: 0 when it has none."""
    return document.get(VERSION_KEY, 0)


@attrs.frozen
class Schema:
    """How one stored type is versioned.

    Attributes:
        name: The type's name, used in every message.
        version: The version the running code writes and reads.
        upcasters: One upcaster per step, keyed by the version it upgrades from. Every
            step from 1 up to ``version`` needs one; 0 -> 1 is the identity unless given.
        own: It is a class of the application's, versioned by its ``class_version`` and
            upcast by its ``upcast_vN_vN+1`` methods; its messages say what to change
            there rather than in covonaut-es.
        snapshot: It is a snapshot's state (the thread's, or an aggregate's of the
            application's), a cache that is rebuilt from its events when it cannot be
            upgraded; its upcasters may raise
            :class:`~covonaut_es.errors.StaleSnapshotError` to ask for that.
    """

    name: str
    version: int
    upcasters: Mapping[int, Upcaster] = attrs.field(default=NO_MIGRATORS, converter=frozen_steps)
    own: bool = False
    snapshot: bool = False

    def __attrs_post_init__(self) -> None:
        self.check_steps(self.upcasters, what=f"{self.name} upcasters")

    def check_steps(self, steps: Mapping[int, Upcaster], *, what: str) -> None:
        """Refuse upcasters keyed by a step this schema does not have.

        Raises:
            ConfigurationError: A key is not a version from 0 to ``version - 1``, or a
                value is not callable.
        """
        for step, upcaster in steps.items():
            if not isinstance(step, int) or isinstance(step, bool) or not 0 <= step < self.version:
                fix = (
                    f"raise {self.name}'s class_version to the version its newest "
                    "upcast_vN_vN+1 method upgrades to"
                    if self.own
                    else "key each upcaster by the version it upgrades from, "
                    f"0 to {self.version - 1}"
                )
                msg = (
                    f"{what}: {step!r} is not a step of {self.name}, whose current version is "
                    f"{self.version}; {fix}"
                )
                raise ConfigurationError(msg)
            if not callable(upcaster):
                msg = f"{what}: the upcaster for {step} -> {step + 1} is not callable"
                raise ConfigurationError(msg)

    def missing_steps(self) -> tuple[int, ...]:
        """The steps from 1 to the current version that have no upcaster."""
        return tuple(step for step in range(1, self.version) if step not in self.upcasters)

    def upgrade(
        self,
        document: dict[str, Any],
        *,
        where: str,
        migrators: Mapping[int, Upcaster] = NO_MIGRATORS,
    ) -> dict[str, Any]:
        """Upgrade a stored document to the current version, one step at a time.

        Args:
            document: The decoded document; its ``"_v"`` says its version.
            where: What is being read, for messages (e.g. the event and thread).
            migrators: The application's upcasters; each replaces the schema's own for
                its step.

        Returns:
            The document at the current version, with ``"_v"`` set to it.

        Raises:
            NewerSchemaError: The document is newer than the code.
            SchemaVersionError: Its version is not a version, or an upcaster returned
                another version than the next one.
            MissingUpcasterError: A step has no upcaster.
            StaleSnapshotError: An upcaster of a snapshot's schema raised it (a snapshot
                it cannot upgrade).
            UpcasterError: An upcaster failed with any other error (covonaut-es's
                included, and a StaleSnapshotError of any schema but a snapshot's) or
                returned something other than a dict.
        """
        stored = stored_version(document)
        if not isinstance(stored, int) or isinstance(stored, bool) or stored < 0:
            msg = f"{where}: {self.name} data has schema version {stored!r}, which is not a version"
            raise SchemaVersionError(msg)
        if stored > self.version:
            upgrade = "the application" if self.own else "covonaut-es"
            msg = (
                f"{where}: {self.name} data has schema version {stored}, but this code "
                f"supports up to version {self.version}; upgrade {upgrade} to read it"
            )
            raise NewerSchemaError(msg)
        for step in range(stored, self.version):
            document = self._step(document, step, where, migrators.get(step))
        return document

    def upgrade_state(
        self,
        state: dict[str, Any],
        version: object,
        *,
        where: str,
        migrators: Mapping[int, Upcaster] = NO_MIGRATORS,
    ) -> tuple[dict[str, Any], int]:
        """An aggregate's ``state`` at schema ``version`` (a snapshot's), upgraded as
        :meth:`upgrade` upgrades a document, and the version it is at now. The version
        travels apart from the state: an attribute of the aggregate's named as the
        version key comes back as it was stored (upcasters see the version there).

        Raises:
            SchemaVersionError: As :meth:`upgrade` (and its other errors alike).
        """
        upgraded = self.upgrade({**state, VERSION_KEY: version}, where=where, migrators=migrators)
        current: int = upgraded.pop(VERSION_KEY)
        if VERSION_KEY in state:
            upgraded[VERSION_KEY] = state[VERSION_KEY]
        return upgraded, current

    def _step(
        self, document: dict[str, Any], step: int, where: str, migrator: Upcaster | None
    ) -> dict[str, Any]:
        upcaster = migrator if migrator is not None else self.upcasters.get(step)
        if upcaster is None:
            if step == 0:
                return {**document, VERSION_KEY: 1}  # unversioned data is version 0
            add = (
                f"define a static method upcast_v{step}_v{step + 1}(state) on {self.name}"
                if self.own
                else "add one to covonaut_es.migrations"
            )
            msg = (
                f"{where}: {self.name} has no upcaster for schema version {step} -> "
                f"{step + 1}; {add}"
            )
            raise MissingUpcasterError(msg)
        try:
            upgraded = upcaster(document)
        except Exception as exc:
            if self.snapshot and isinstance(exc, StaleSnapshotError):
                # The one error that keeps its class, and only from a snapshot's
                # upcaster: it asks for the snapshot to be passed over and its thread
                # rebuilt. Any other, the library's own included, is an UpcasterError
                # naming the record, so that a cache passes it over too; an event has
                # nothing to be rebuilt from (ADR 0130).
                msg = f"{where}: {exc}"
                raise StaleSnapshotError(msg) from exc
            msg = (
                f"{where}: the {self.name} upcaster for {step} -> {step + 1} failed: "
                f"{exception_line(exc)}"
            )
            raise UpcasterError(msg) from exc
        if not isinstance(upgraded, dict):
            msg = (
                f"{where}: the {self.name} upcaster for {step} -> {step + 1} returned a "
                f"{type(upgraded).__name__}; it must return the upgraded document as a dict"
            )
            raise UpcasterError(msg)
        found = stored_version(upgraded)
        if found != step + 1 or isinstance(found, bool):
            msg = (
                f"{where}: the {self.name} upcaster for {step} -> {step + 1} returned "
                f"schema version {found!r}; an upcaster upgrades exactly one step, so it "
                f"must return the document with {VERSION_KEY!r} set to {step + 1}"
            )
            raise SchemaVersionError(msg)
        return upgraded
