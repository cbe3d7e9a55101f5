"""The store's shape: a Store composed of collaborators with its public surface kept,
and eventsourcing's private names used only in the store's back-end modules."""

from __future__ import annotations

import ast
import functools
import importlib
import importlib.metadata
import importlib.util
import inspect
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from covonaut_es._closing import Closing
from covonaut_es.store import Store, open_store

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "src" / "covonaut_es"
BACKENDS = PACKAGE / "store" / "_backends"

# Store's public names and signatures when it was five mixins, and those added since;
# each must stay.
PUBLIC_SIGNATURES = {
    "log_position": "(self, consumer: 'str') -> 'int'",
    "last_log_position": "(self) -> 'int'",
    "record_log_position": "(self, consumer: 'str', position: 'int') -> 'None'",
    "abandon": "(self, thread_id: 'str', reason: 'str' = '', *, now: 'datetime | None' = None) -> 'None'",  # noqa: E501
    "acheckpoints": "(self, thread_id: 'str') -> 'tuple[Checkpoint, ...]'",
    "aexists": "(self, thread_id: 'str') -> 'bool'",
    "afind": "(self, thread_id: 'str', *, version: 'int | None' = None, snapshot_migrators: 'Mapping[int, Upcaster]' = mappingproxy({})) -> 'AgentThread | None'",  # noqa: E501
    "ahistory": "(self, thread_id: 'str') -> 'tuple[AgentThread.Event, ...]'",
    "alease": "(self, thread_id: 'str') -> 'AsyncIterator[Lease]'",
    "aload": "(self, thread_id: 'str', *, version: 'int | None' = None, snapshot_migrators: 'Mapping[int, Upcaster]' = mappingproxy({})) -> 'AgentThread'",  # noqa: E501
    "areplay_state": "(self, thread_id: 'str') -> 'ThreadState'",
    "astate_at": "(self, thread_id: 'str', version: 'int | None' = None) -> 'ThreadState'",
    "asubmit": "(self, thread_id: 'str', text: 'str') -> 'int'",
    "branch_points": "(self, root_thread_id: 'str') -> 'tuple[BranchPoint, ...]'",
    "checkpoints": "(self, thread_id: 'str') -> 'tuple[Checkpoint, ...]'",
    "children": "(self, thread_id: 'str') -> 'tuple[str, ...]'",
    "database_now": "(self) -> 'datetime | None'",
    "close": "(self) -> 'None'",
    "events_after": "(self, thread_id: 'str', version: 'int') -> 'tuple[AgentThread.Event, ...]'",
    "exists": "(self, thread_id: 'str') -> 'bool'",
    "find": "(self, thread_id: 'str', *, version: 'int | None' = None, snapshot_migrators: 'Mapping[int, Upcaster]' = mappingproxy({})) -> 'AgentThread | None'",  # noqa: E501
    "fork": "(self, thread_id: 'str', *, at_version: 'int | None' = None, at_checkpoint: 'int | None' = None, new_thread_id: 'str | None' = None, now: 'datetime | None' = None) -> 'str'",  # noqa: E501
    "forks": "(self) -> 'tuple[ForkRecord, ...]'",
    "from_application": "(application: 'AgentApplication', *, max_checkpoints_per_thread: 'int' = 0) -> 'Store'",  # noqa: E501
    "head_version": "(self, thread_id: 'str') -> 'int | None'",
    "held_lease": "(self, thread_id: 'str') -> 'Lease | None'",
    "history": "(self, thread_id: 'str') -> 'tuple[AgentThread.Event, ...]'",
    "label": "(self, thread_id: 'str', label: 'str', *, version: 'int | None' = None, now: 'datetime | None' = None) -> 'None'",  # noqa: E501
    "lease": "(self, thread_id: 'str') -> 'Iterator[Lease]'",
    "leaves": "(self, root_thread_id: 'str') -> 'tuple[str, ...]'",
    "list_threads": "(self, *, after: 'int | None' = None, limit: 'int' = 1000) -> 'ThreadPage'",
    "live_workers": "(self) -> 'tuple[WorkerRecord, ...]'",
    "load": "(self, thread_id: 'str', *, version: 'int | None' = None, snapshot_migrators: 'Mapping[int, Upcaster]' = mappingproxy({})) -> 'AgentThread'",  # noqa: E501
    "name_lease_holder": "(self, holder: 'str') -> 'None'",
    "parent": "(self, thread_id: 'str') -> 'ThreadParent | None'",
    "path_to_root": "(self, thread_id: 'str') -> 'tuple[str, ...]'",
    "ping": "(self, *, timeout: 'float' = 2.0) -> 'None'",
    "publish_worker": "(self, record: 'WorkerRecord') -> 'None'",
    "read_state": "(self, key: 'str') -> 'dict[str, Any] | None'",
    "replay": "(self, thread_id: 'str') -> 'Iterator[AuditEntry]'",
    "replay_state": "(self, thread_id: 'str') -> 'ThreadState'",
    "save": "(self, thread: 'AgentThread') -> 'None'",
    "session_tree": "(self) -> 'SessionTree'",
    "snapshot_if_due": "(self, thread: 'AgentThread', *, at_rest: 'bool' = False) -> 'bool'",
    "state_at": "(self, thread_id: 'str', version: 'int | None' = None) -> 'ThreadState'",
    "submit": "(self, thread_id: 'str', text: 'str') -> 'int'",
    "thread_ids": "(self) -> 'Iterator[str]'",
    "threads_held": "(self) -> 'tuple[str, ...]'",
    "threads_with_review": "(self, review_id: 'str') -> 'tuple[str, ...]'",
    "tree": "(self, root_thread_id: 'str') -> 'ThreadTree'",
    "tree_stats": "(self, root_thread_id: 'str') -> 'TreeStats'",
    "verify": "(self, thread_id: 'str') -> 'AuditReport'",
    "withdraw_worker": "(self, worker_id: 'str') -> 'None'",
    "write_state": "(self, key: 'str', document: 'Mapping[str, Any]') -> 'None'",
}
PUBLIC_ATTRIBUTES = {
    "clock",
    "database",
    "lease_holder",
    "log",
    "max_checkpoints_per_thread",
    "outstanding_threads",
    "read_only",
    "submissions",
    "url",
}


def test_the_store_keeps_every_public_name_and_signature() -> None:
    """An open store has exactly the public names it had as five mixins (and those added
    since), each method with the same signature."""
    with open_store("memory://") as store:
        public = {name for name in dir(store) if not name.startswith("_")}
    assert public == PUBLIC_SIGNATURES.keys() | PUBLIC_ATTRIBUTES
    signatures = {name: str(inspect.signature(getattr(Store, name))) for name in PUBLIC_SIGNATURES}
    assert signatures == PUBLIC_SIGNATURES


def test_the_store_is_composed_not_mixed_in() -> None:
    """Store's only base is the context-manager protocol; what it does is done by the
    collaborators it holds."""
    assert Store.__mro__[1:] == Closing.__mro__
    with open_store("memory://") as store:
        parts = {type(value).__module__ for value in vars(store).values()}
    assert {
        "covonaut_es.store._records",
        "covonaut_es.store._reader",
        "covonaut_es.store._writer",
        "covonaut_es.store._forks",
        "covonaut_es.store._leasing",
        "covonaut_es.store._submissions",
        "covonaut_es.store._states",
    } <= parts


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _names_a_store(node: ast.expr) -> bool:
    """Whether the expression is a store by its name: ``store``, ``self.store``,
    ``self._store``."""
    name = node.id if isinstance(node, ast.Name) else getattr(node, "attr", "")
    return name.lstrip("_") == "store"


def test_no_package_outside_the_store_reads_a_stores_private_attributes() -> None:
    """The packages above the store reach its collaborators through its ports
    (``store.log``, ``store.submissions``, ``store.outstanding_threads``) and public
    methods, never through a private attribute such as ``store._records`` (ADR 0121)."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if PACKAGE / "store" in path.parents:
            continue
        tree = ast.parse(path.read_text(), filename=str(path))
        found += [
            f"{path.relative_to(ROOT)}:{node.lineno}: .{node.attr}"
            for node in ast.walk(tree)
            if isinstance(node, ast.Attribute)
            and _private(node.attr)
            and _names_a_store(node.value)
        ]
    assert found == []


ES_MODULES = ("domain", "application", "persistence", "popo", "sqlite", "postgres", "projection")


@functools.cache
def eventsourcing_private_names() -> frozenset[str]:
    """Every private name eventsourcing's classes define: methods, class attributes,
    and attributes they set on ``self`` (read from its source, nothing imported)."""
    names: set[str] = set()
    for module in ES_MODULES:
        spec = importlib.util.find_spec(f"eventsourcing.{module}")
        assert spec is not None and spec.origin is not None
        tree = ast.parse(Path(spec.origin).read_text())
        for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
            for node in ast.walk(cls):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                    names.add(node.name)
                elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                    names.add(node.attr)
                elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                    names.add(node.target.id)
    return frozenset(n for n in names if _private(n))


DOCUMENTED = {"_create"}
"""Private by name, public by eventsourcing's documentation: its domain module's docs
("Creating new aggregates") tell subclasses to create aggregates with ``_create``."""


def _modules_outside_backends() -> Iterator[Path]:
    for path in sorted(PACKAGE.rglob("*.py")):
        if BACKENDS not in path.parents:
            yield path


def _own_names(cls: ast.ClassDef) -> set[str]:
    """The private names a class of ours defines itself, in its body or on ``self``."""
    names = set()
    for node in ast.walk(cls):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            names.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            if isinstance(node.value, ast.Name) and node.value.id == "self":
                names.add(node.attr)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return {n for n in names if _private(n)}


def _accesses(tree: ast.Module) -> Iterator[tuple[ast.Attribute, list[ast.ClassDef]]]:
    """Each attribute access with the classes around it, innermost last."""

    def walk(node: ast.AST, classes: list[ast.ClassDef]) -> Iterator[Any]:
        for child in ast.iter_child_nodes(node):
            inner = [*classes, child] if isinstance(child, ast.ClassDef) else classes
            if isinstance(child, ast.Attribute):
                yield child, classes
            yield from walk(child, inner)

    return walk(tree, [])


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _derives_from_eventsourcing(path: Path, classes: list[ast.ClassDef]) -> bool:
    module = importlib.import_module(_module_name(path))
    cls = functools.reduce(getattr, [c.name for c in classes], module)
    return any(base.__module__.startswith("eventsourcing.") for base in cls.__mro__)


def test_only_the_back_ends_use_private_names_of_eventsourcing() -> None:
    """No module outside ``store/_backends`` reads, writes or overrides a private name
    of eventsourcing's classes. The one allowed access is ``self._name`` in a class of
    ours that defines ``_name`` itself and is no eventsourcing class (our own attribute
    that happens to share a name)."""
    private = eventsourcing_private_names() - DOCUMENTED
    assert {"_take_snapshots", "_notify", "_insert_tracking", "_database_lock"} <= private
    found = []
    for path in _modules_outside_backends():
        tree = ast.parse(path.read_text(), filename=str(path))
        where = path.relative_to(ROOT)
        for node, classes in _accesses(tree):
            if node.attr not in private:
                continue
            own = (
                isinstance(node.value, ast.Name)
                and node.value.id in ("self", "cls")
                and classes
                and node.attr in _own_names(classes[-1])
                and not _derives_from_eventsourcing(path, classes)
            )
            if not own:
                found.append(f"{where}:{node.lineno}: .{node.attr}")
        for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
            overridden = {
                item.name
                for item in cls.body
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef) and item.name in private
            }
            if overridden and _derives_from_eventsourcing(path, _enclosing(tree, cls)):
                found += [f"{where}:{cls.lineno}: {cls.name} overrides {n}" for n in overridden]
    assert found == []


def _enclosing(tree: ast.Module, target: ast.ClassDef) -> list[ast.ClassDef]:
    """The classes from the module's top down to ``target``."""

    def path_to(node: ast.AST, classes: list[ast.ClassDef]) -> list[ast.ClassDef] | None:
        for child in ast.iter_child_nodes(node):
            inner = [*classes, child] if isinstance(child, ast.ClassDef) else classes
            if child is target:
                return inner
            found = path_to(child, inner)
            if found is not None:
                return found
        return None

    found = path_to(tree, [])
    assert found is not None
    return found


def test_each_back_end_module_using_them_names_the_version_checked() -> None:
    """A back-end module that uses a private name of eventsourcing says which version of
    eventsourcing it was checked against."""
    version = importlib.metadata.version("eventsourcing").rsplit(".", 1)[0]
    private = eventsourcing_private_names()
    unnamed = []
    for path in sorted(BACKENDS.glob("*.py")):
        text = path.read_text()
        tree = ast.parse(text)
        uses = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)} & private
        if uses and f"eventsourcing {version}." not in text:
            unnamed.append(f"{path.name}: {sorted(uses)}")
    assert unnamed == []


def test_every_module_outside_the_store_is_forbidden_its_back_ends() -> None:
    """The import contract that keeps the back ends the store's own names every module
    and package of ``covonaut_es`` but the store: a module added beside them is checked
    from its first commit, not once someone remembers to list it."""
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    [contract] = [
        c
        for c in contracts["contracts"]
        if c.get("forbidden_modules") == ["covonaut_es.store._backends"]
    ]
    beside_the_store = {
        f"covonaut_es.{path.stem if path.is_file() else path.name}"
        for path in PACKAGE.iterdir()
        if (path.suffix == ".py" and path.stem != "__init__") or (path / "__init__.py").is_file()
    } - {"covonaut_es.store"}
    assert beside_the_store <= set(contract["source_modules"])
