"""What an open checks before it hands out a store: that a SQLite file is a store
(:func:`check_sqlite_file`), or at least a database (:func:`check_sqlite_database`, for
a projection's tables), and its encryption and compression, recorded when it is
created (:func:`check_settings`).

Without this check a process with a wrong key, or none, would write new threads into
an encrypted store (in plain text when it has no key), and listing the store would
fail afterwards even with the right key. A store records a fingerprint of its key (an
HMAC-SHA256 of a fixed label under the key: never the key) and its compression in a
small table of its own; :func:`check_settings` compares them with the options of each
open, before anything is written.

Opens that must not write (``create_tables=False``, as every read-only command uses)
are checked against what the store recorded, and record nothing: a store opened without
its key says so, instead of every record seeming corrupt.

An open that names no compression (``compress=None``) takes the store's: a new store
records zstd with the shipped dictionary (ADR 0061), and :func:`check_settings` returns
what an existing store records, for the open to apply (:func:`as_recorded`).

A store created before this existed has no such record. If it holds no events yet, the
first open records its options. Otherwise its first stored event is decoded with the
options given (no compression, when the open names none: what such a store was written
with unless told otherwise), so a wrong key or compression still fails at open; nothing
is written to it, since its data must never be changed behind its owner's back.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import os
import sqlite3
from collections.abc import Iterator, Mapping
from pathlib import Path
from uuid import UUID

from eventsourcing.application import Application
from eventsourcing.persistence import StoredEvent
from eventsourcing.utils import resolve_topic

from covonaut_es.errors import (
    CipherKeyMismatchError,
    CompressionMismatchError,
    ForeignSchemaError,
    NotAStoreError,
    ReadOnlyStoreError,
    SerializationError,
    StoredRowError,
    StoreSettingsError,
    StoreUnavailableError,
)
from covonaut_es.store._backend import backend_of
from covonaut_es.store._cipher_keys import key_material
from covonaut_es.store._codec import decode_object
from covonaut_es.store._mapper import MsgspecMapper
from covonaut_es.store._settings_tables import SETTINGS_TABLE, SettingsTable
from covonaut_es.store._stream_ids import (
    KEYED,
    STREAM_IDS,
    KeyedEvents,
    first_stream_keyed,
    recorded_stream_ids,
)
from covonaut_es.store._topic_codes import TOPIC_CODES, full_topic
from covonaut_es.store._urls import (
    COMPRESSION_AS_RECORDED,
    COMPRESSIONS,
    COMPRESSOR_TOPIC,
    compression_of,
    read_only_uri,
    with_compression,
)

NO_KEY = "none"
_LABEL = b"covonaut-es store key check v1"


_RECORD_COLUMNS = frozenset({"originator_id", "originator_version", "topic", "state"})
_TABLE_COLUMNS = {
    "stored_events": _RECORD_COLUMNS,
    "stored_snapshots": _RECORD_COLUMNS,
    SETTINGS_TABLE: frozenset({"name", "value"}),
}


def check_sqlite_file(path: str, url: str, *, writable: bool) -> None:
    """Check an existing SQLite file before eventsourcing opens (and writes) it.

    Raises:
        NotAStoreError: The file is not a SQLite database, or (unless ``writable``) holds
            no store: a reader would write to it (put it in WAL mode) before finding so.
        ForeignSchemaError: A table under a store's name has other columns.
        ReadOnlyStoreError: ``writable`` is asked for and the file is read-only.
        StoreUnavailableError: The file cannot be opened, or read now.
    """
    with _sqlite_file(path, f"store {url}", "a store", writable=writable) as conn:
        if conn is None:
            if not writable and Path(path).is_file():
                _refuse_no_store(url, path, "is empty")
            return
        found = {
            table: {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}
            for table in _TABLE_COLUMNS
        }
        # Only a file without a store's settings is read further (a scan of its
        # events, which every store since settings were recorded is spared).
        events = _TABLE_COLUMNS["stored_events"] <= found["stored_events"]
        if not writable and not found["stored_events"]:
            _refuse_no_store(url, path, "has no table 'stored_events'")
        foreign = _foreign_topic(conn) if events and not found[SETTINGS_TABLE] else None
    for table, columns in found.items():
        if columns and not _TABLE_COLUMNS[table] <= columns:
            msg = (
                f"store {url}: table {table!r} belongs to another application: expected "
                f"columns {sorted(_TABLE_COLUMNS[table])}, found {sorted(columns)}; use "
                "another file for the store (nothing was written)"
            )
            raise ForeignSchemaError(msg)
    if foreign is not None:
        refuse_application_tables(url, f"table 'stored_events' (an event of topic {foreign!r})")


def check_sqlite_database(path: str, where: str, *, writable: bool) -> None:
    """Check that an existing file is a SQLite database this process may read (and
    write, if ``writable``), whatever tables it holds, before eventsourcing opens it: a
    projection's tables may live in any database, and its opening would otherwise fail
    on the file with SQLite's own error. The same checks as :func:`check_sqlite_file`'s
    of the file.

    Args:
        path: The file; none there, or an empty one, is a new database.
        where: What the file is, as the messages name it ("the review queue's view
            URL").
        writable: Whether it is opened to be written.

    Raises:
        NotAStoreError: The file is not a SQLite database.
        ReadOnlyStoreError: ``writable`` is asked for and the file is read-only.
        StoreUnavailableError: The file cannot be opened, or read now.
    """
    with _sqlite_file(
        path, where, "a SQLite database, or a file that does not exist yet", writable=writable
    ) as conn:
        if conn is not None:
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()


@contextlib.contextmanager
def _sqlite_file(
    path: str, where: str, expected: str, *, writable: bool
) -> Iterator[sqlite3.Connection | None]:
    """A connection that reads the SQLite file at ``path`` and never writes it (None
    where there is no file, or an empty one); SQLite's failures to read it, in the
    block too, raise the typed errors :func:`check_sqlite_database` lists, naming it as
    ``where`` and saying it is ``expected`` there."""
    clash = sqlite_journal_of(path)
    if clash is not None:
        msg = (
            f"{where}: the file {path!r} is {clash}: made a database, or written, it would "
            "lose or corrupt what that one holds; expected "
            f"{expected} under another name (nothing was written)"
        )
        raise NotAStoreError(msg)
    file = Path(path)
    if not file.is_file() or file.stat().st_size == 0:
        yield None
        return
    if writable and not os.access(file, os.W_OK):
        msg = (
            f"{where}: the file {path!r} is read-only; make it writable, or add "
            "?mode=ro to the URL to read it"
        )
        raise ReadOnlyStoreError(msg)
    try:
        with contextlib.closing(sqlite3.connect(read_only_uri(file), uri=True)) as conn:
            yield conn
    except sqlite3.DatabaseError as exc:
        code = (getattr(exc, "sqlite_errorcode", None) or 0) & 0xFF
        if code not in (*_NOT_A_DATABASE, *_CANNOT_OPEN):
            msg = (
                f"{where}: the file {path!r} cannot be read now ({exc}): the disk or "
                "its file system failed (full, or an I/O error); nothing was written"
            )
            raise StoreUnavailableError(msg) from exc
        if code in _CANNOT_OPEN:
            msg = (
                f"{where}: the file {path!r} cannot be opened ({exc}): it is not readable "
                "by this user, or it lies in a directory this user may not write to with "
                "its write-ahead log beside it (copy both to a writable directory)"
            )
            raise StoreUnavailableError(msg) from exc
        msg = f"{where}: the file {path!r} is not a SQLite database ({exc}); expected {expected}"
        raise NotAStoreError(msg) from exc
    except UnicodeDecodeError as exc:
        # sqlite3 decodes SQLite's message as UTF-8: a message naming a damaged schema's
        # table ("malformed database schema (...)") fails that instead of being raised.
        msg = (
            f"{where}: the file {path!r} is not a SQLite database (its schema does not "
            f"read: {exc}); expected {expected}"
        )
        raise NotAStoreError(msg) from exc


_CANNOT_OPEN = (sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_READONLY)
_NOT_A_DATABASE = (sqlite3.SQLITE_NOTADB, sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_ERROR)
"""SQLite's codes for a file whose bytes are no database it reads; SQLITE_ERROR, its
generic code, answers the check's one fixed statement only for its header's format
numbers damaged ("unsupported file format")."""

SQLITE_SHARED_MEMORY = "-shm"
"""What SQLite names the shared memory it keeps beside a database in WAL mode."""

SQLITE_JOURNALS = ("-wal", SQLITE_SHARED_MEMORY, "-journal")
"""What SQLite names the files it keeps beside a database: written over, or made a
database of their own, they lose the database's latest transactions or corrupt it."""


def sqlite_journal_of(path: str) -> str | None:
    """What makes ``path`` one of the files beside a SQLite database, as a phrase
    ("the -wal file of SQLite database '/x/threads.db'"); None when it is not. It is
    such a file either way round: named as a journal (``-wal``, ``-shm``, ``-journal``)
    of a database, existing or not yet, or named as a database whose journal's name
    is a database already, which SQLite would take as its journal and delete. Both the
    name as given and the real path are asked (SQLite names a journal after the name
    it opened). The one rule of the files no command writes or makes as anything else:
    an export's output, a view's file, a store's file (ADR 0125).

    A ``-shm`` file is never read (:func:`is_sqlite_database`), so a name ending so is
    refused whatever is there: a database there could not be told from the shared
    memory of one, nor found later, when a database at the name without the suffix is
    opened and SQLite resets it. Nor is a file of several names (hard links): another
    name of a live store's ``-shm`` is that shared memory.
    """
    names = _hard_links(Path(path))
    if names > 1:
        return (
            f"a file of {names} names (hard links), which SQLite keeps a journal beside "
            "each of, so that what one name writes the other loses (an import killed as "
            "it finished leaves a second name, .covonaut-import-XXXXXXXX, beside the "
            "store: remove that one)"
        )
    for named in dict.fromkeys((Path(path), Path(os.path.realpath(path)))):
        journal = next((s for s in SQLITE_JOURNALS if named.name.endswith(s)), None)
        if journal is not None:
            database = named.parent / named.name[: -len(journal)]
            if is_sqlite_database(database) or _hard_links(database) > 1:
                return f"the {journal} file of SQLite database {str(database)!r}"
            if journal == SQLITE_SHARED_MEMORY:
                where = str(database)
                return f"named as the {journal} file SQLite keeps beside a database at {where!r}"
        for suffix in SQLITE_JOURNALS:
            beside = named.with_name(named.name + suffix)
            # A live database's own -wal, -shm or -journal is no database: no header;
            # one truncated as it is read reads as an empty one, which holds no page.
            if is_sqlite_database(beside, empty=False):
                return f"named so that its {suffix} file is SQLite database {str(beside)!r}"
    return None


def is_sqlite_database(path: Path, *, empty: bool = True) -> bool:
    """Whether ``path`` is a file SQLite reads as a database (a file of one byte is an
    empty one, unless not ``empty``), or may be one it cannot read now (locked,
    damaged); not one it cannot open at all, and never a ``-shm`` file.

    SQLite itself is asked, never ``open()``: closing a descriptor of a database file
    drops every POSIX lock this process's connections hold on it, and SQLite defers
    closing its own while they hold some. It knows nothing of that kind of a ``-shm``
    file, the shared memory of a database in WAL mode: closing one it had opened as a
    database would drop the locks of this process's connections on that memory, and the
    next process to open the database would reset it under them (a crash, or a reader
    seeing another snapshot). So a ``-shm`` file is not read, and counts as none; nor
    is a file of several names (hard links), which may be another name of one.
    """
    if path.name.endswith(SQLITE_SHARED_MEMORY):
        return False
    if _hard_links(path) > 1:  # perhaps another name of a -shm
        return False
    try:
        if not path.is_file() or path.stat().st_size == 0:  # absent, a pipe, or new
            return False
        # Immutable: read as it is, making no journal or shared memory beside it.
        uri = f"{path.resolve().as_uri()}?mode=ro&immutable=1"
        with contextlib.closing(sqlite3.connect(uri, uri=True)) as conn:
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
            if not empty and not conn.execute("PRAGMA page_count").fetchone()[0]:
                return False
    except OSError:
        return False
    except sqlite3.DatabaseError as exc:
        code = (getattr(exc, "sqlite_errorcode", None) or 0) & 0xFF
        # A read that failed (another process truncating its journal as it commits) says
        # nothing of what the file is.
        return code not in (sqlite3.SQLITE_NOTADB, sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_IOERR)
    return True


def _hard_links(path: Path) -> int:
    """How many names the file at ``path`` has (0: there is none), asked without
    opening it."""
    try:
        return path.stat().st_nlink if path.is_file() else 0
    except OSError:
        return 0


def _refuse_no_store(url: str, path: str, why: str) -> None:
    msg = (
        f"store {url}: the file {path!r} {why}: expected a covonaut-es store there "
        "(nothing was written)"
    )
    raise NotAStoreError(msg)


def refuse_application_tables(url: str, found: str) -> None:
    """Refuse to open, as a store, a database that holds an eventsourcing
    application's tables (``found`` names them) and no store: a store opened there
    would be a second one beside the application, which its own settings open.

    Raises:
        ForeignSchemaError: Always.
    """
    msg = (
        f"store {url}: the database holds an eventsourcing application's {found} and no "
        "store; open that application by its own settings instead: --application "
        "MODULE:CLASS (or $COVONAUT_ES_APPLICATION) on the command line, "
        "Store.from_application(app) in code (nothing was written)"
    )
    raise ForeignSchemaError(msg)


def _foreign_topic(conn: sqlite3.Connection) -> str | None:
    """A topic in the events table that is none of a store's (all of which begin
    ``covonaut.``, or are their codes), clipped: the first event of an application's
    own aggregates."""
    codes = tuple(TOPIC_CODES)
    row = conn.execute(
        "SELECT topic FROM stored_events WHERE topic NOT LIKE 'covonaut.%' "
        f"AND topic NOT IN ({', '.join('?' * len(codes))}) LIMIT 1",
        codes,
    ).fetchone()
    return None if row is None else str(row[0])[:80]


def key_fingerprint(material: bytes | None) -> str:
    """The fingerprint of a cipher key (its :func:`key_material`) as a store records
    it; ``"none"`` without one."""
    if material is None:
        return NO_KEY
    return "hmac-sha256:" + hmac.new(material, _LABEL, hashlib.sha256).hexdigest()


def requested_settings(env: Mapping[str, str]) -> dict[str, str]:
    """The settings an open asks for, from its eventsourcing environment: an encrypted
    store created by it keeps its stream ids keyed (:mod:`._stream_ids`)."""
    requested = {
        "cipher": key_fingerprint(key_material(env)),
        "compression": compression_of(env),
    }
    if env.get("CIPHER_KEY"):
        requested[STREAM_IDS] = KEYED
    return requested


def key_stream_ids(app: Application[UUID], where: str) -> None:
    """Have ``app``'s recorders store stream ids as its store records (nothing for an
    open without a cipher key, which :func:`check_settings` refuses for an encrypted
    store before anything is read or written).

    Raises:
        StoreSettingsError: The store records a scheme of stream ids this version does
            not know.
    """
    material = key_material(app.env)
    if material is None:
        return
    ids = recorded_stream_ids(settings_table(app).read(), material, where)
    snapshots = app.snapshots
    for recorder in (app.recorder, None if snapshots is None else snapshots.recorder):
        if isinstance(recorder, KeyedEvents):
            recorder.stream_ids = ids


def as_recorded(env: Mapping[str, str], compression: str) -> dict[str, str]:
    """``env`` with the ``compression`` :func:`check_settings` found, when the open
    takes the store's (``compress=None``); ``env`` as it is otherwise."""
    if env.get(COMPRESSION_AS_RECORDED):
        return with_compression(env, compression)
    return dict(env)


def check_settings(app: Application[UUID], env: Mapping[str, str], url: str) -> str:
    """Check the options of an open against those the store was created with,
    recording them for a store that has none and no events yet; returns the store's
    compression (one of :data:`~covonaut_es.store._urls.COMPRESSIONS`).

    Raises:
        CipherKeyMismatchError: The key is not the store's, or one of the two has none.
        CompressionMismatchError: The compression is not the store's.
        StoreSettingsError: An older store's first event does not decode with these
            options.
    """
    requested = requested_settings(env)
    table = settings_table(app)
    recorded = table.read()
    # A store with events and no settings was written before stores recorded them, when
    # a store opened without compress was not compressed (one without events records
    # what it is opened with, below).
    older = {**requested, "compression": "none"} if env.get(COMPRESSION_AS_RECORDED) else requested
    if recorded.get("compression", "none") not in COMPRESSIONS:
        # Read as none, an unknown value would have every record seem damaged, and a
        # writer add uncompressed events to a compressed store.
        msg = (
            f"store {url} records compression {recorded['compression']!r}: expected one "
            f"of {list(COMPRESSIONS)}; its settings were altered (nothing was read or written)"
        )
        raise StoreSettingsError(msg)
    if recorded and "cipher" not in recorded:
        # Every store that records its settings records its cipher, "none" included:
        # read as none, a deleted record would have keyless opens write plain text into
        # an encrypted store.
        msg = (
            f"store {url} records its settings but not whether it is encrypted ('cipher'): "
            "its settings were altered (nothing was read or written); restore table "
            f"{SETTINGS_TABLE!r} from a backup"
        )
        raise StoreSettingsError(msg)
    if env.get("CREATE_TABLE") == "n":
        # An open that must not write checks what the store recorded, and records
        # nothing; a store that recorded nothing reports each record that does not
        # decode instead.
        if recorded:
            _compare(recorded, requested, env, url, written="nothing was read")
            _check_stored_as_recorded(app, url, recorded)
        compression = recorded.get("compression", older["compression"])
        _check_stream_ids(app, url, recorded, requested, compression, writes=False)
        return compression
    if not recorded:
        if app.recorder.max_notification_id():
            _check_first_event(app, url, older)
            _check_stream_ids(app, url, recorded, requested, older["compression"], writes=True)
            return older["compression"]
        table.write(requested)
        recorded = table.read()
    _compare(recorded, requested, env, url)
    _check_stored_as_recorded(app, url, recorded)
    compression = recorded.get("compression", "none")
    if _check_stream_ids(app, url, recorded, requested, compression, writes=True):
        table.write({STREAM_IDS: KEYED})
    return compression


def _check_stream_ids(
    app: Application[UUID],
    url: str,
    recorded: Mapping[str, str],
    requested: Mapping[str, str],
    compression: str,
    *,
    writes: bool,
) -> bool:
    """Refuse an encrypted store that records no scheme of stream ids (the open's key
    checked already) when its rows may be keyed: a writer without the key deleted or
    renamed the record, and every new stream would be stored under its unkeyed id
    (ADR 0095). Its first event, which names its stream, tells: stored under that
    stream's keyed id, it is refused; under the stream's own id, it is a store created
    before keyed ids, which keeps its ids. An open that may write is refused when the
    first event tells neither. Returns whether the store holds no events, which a
    writer then records keyed, as a new store.

    Raises:
        StoreSettingsError: As said.
    """
    if STREAM_IDS not in requested or STREAM_IDS in recorded:
        return False
    if not app.recorder.max_notification_id():
        return writes
    try:
        [first] = app.recorder.select_notifications(None, 1)
        payload = decode_object(_mapper_for(app, compression).plain_payload(first), where="")
    except (StoredRowError, SerializationError):
        keyed = None
    else:
        stored = UUID(str(first.originator_id))
        keyed = first_stream_keyed(
            stored, full_topic(first.topic), payload, key_material(app.env) or b""
        )
    if keyed is False or (keyed is None and not writes):
        return False
    found = "is stored under a keyed id" if keyed else "does not show its stream's id"
    msg = (
        f"store {url} is encrypted and its table {SETTINGS_TABLE!r} records no scheme of "
        f"stream ids ({STREAM_IDS!r}), but its first event {found}: the record was "
        f"deleted or altered; restore table {SETTINGS_TABLE!r} from a backup (nothing "
        "was written)"
    )
    raise StoreSettingsError(msg)


def _compare(
    recorded: Mapping[str, str],
    requested: Mapping[str, str],
    env: Mapping[str, str],
    url: str,
    *,
    written: str = "nothing was written",
) -> None:
    stored_key, given_key = recorded.get("cipher", NO_KEY), requested["cipher"]
    if stored_key != given_key:
        if given_key == NO_KEY:
            found = (
                "pass its key. It was opened without a cipher key: pass the key it was "
                "created with (cipher_key=, or --cipher-key-env VAR on the command line)"
            )
        elif stored_key == NO_KEY:
            found = "it is not encrypted, but a cipher key was given; open it without one"
        else:
            found = "the cipher key given is another; pass the key it was created with"
        msg = f"store {url} is {_describe(stored_key)}: {found} ({written})"
        raise CipherKeyMismatchError(msg)
    stored_mode, given_mode = recorded.get("compression", "none"), requested["compression"]
    if stored_mode != given_mode and not env.get(COMPRESSION_AS_RECORDED):
        msg = (
            f"store {url} was created with compression {stored_mode!r} but opened with "
            f"{given_mode!r}: leave compress out (--compressed on the command line) to open "
            f"it as it records, or pass compress={stored_mode!r} ({written})"
        )
        raise CompressionMismatchError(msg)


def _check_stored_as_recorded(
    app: Application[UUID], url: str, recorded: Mapping[str, str]
) -> None:
    """Refuse a store whose first event is stored with a compression other than the one
    it records: a writer changed or deleted the record, and the store would then read
    every event as damaged and write new ones another way. Only a first event that
    decodes whole under another compression is taken as proof: a damaged first row (one
    byte changed, other bytes, a column that is no record's) decodes under none, and is
    the reads' and verify's to report. An encrypted store's first event is decrypted
    with the key its fingerprint was checked against already."""
    if not app.recorder.max_notification_id():
        return
    compression = recorded.get("compression", "none")
    try:
        [first] = app.recorder.select_notifications(None, 1)
    except StoredRowError:
        return
    stored = _stored_compression(app, first)
    if stored is not None and stored != compression:
        msg = (
            f"store {url} records compression {compression!r}, but its first event is "
            f"stored with {stored!r}: its settings were altered (nothing was read or "
            "written); restore its settings from a backup"
        )
        raise StoreSettingsError(msg)


def _stored_compression(app: Application[UUID], first: StoredEvent) -> str | None:
    """The one compression under which ``first`` (decrypted, if the store has a cipher)
    decodes to an event's payload, or None if none does, or more than one. Every
    event's payload names its time; other JSON (a payload replaced with ``{}``) is
    damage, no proof."""
    decodes = []
    for compression in COMPRESSIONS:
        try:
            payload = decode_object(_mapper_for(app, compression).plain_payload(first), where="")
        except SerializationError:
            continue
        if "timestamp" in payload:
            decodes.append(compression)
    return decodes[0] if len(decodes) == 1 else None


def _mapper_for(app: Application[UUID], compression: str) -> MsgspecMapper:
    """A mapper that reads payloads stored with ``compression`` and the store's cipher."""
    assert isinstance(app.mapper, MsgspecMapper)
    topic = with_compression({}, compression).get(COMPRESSOR_TOPIC)
    compressor = None if topic is None else resolve_topic(topic)()
    return MsgspecMapper(compressor=compressor, cipher=app.mapper.cipher)


def _describe(fingerprint: str) -> str:
    return "not encrypted" if fingerprint == NO_KEY else "encrypted"


def _check_first_event(app: Application[UUID], url: str, requested: Mapping[str, str]) -> None:
    # The open's own mapper compresses as a new store would, when it names no compression.
    mapper = _mapper_for(app, requested["compression"])
    [first] = app.recorder.select_notifications(None, 1)
    try:
        decode_object(mapper.plain_payload(first), where=f"store {url}")
    except SerializationError as exc:
        options = (
            f"cipher key {'given' if requested['cipher'] != NO_KEY else 'not given'}, "
            f"compression {requested['compression']!r}"
        )
        msg = (
            f"store {url} predates recorded settings and its first event does not decode "
            f"with the options given ({options}): open it with the cipher key and compress "
            f"option it was written with (nothing was written). {exc}"
        )
        raise StoreSettingsError(msg) from exc


def settings_table(app: Application[UUID], name: str = SETTINGS_TABLE) -> SettingsTable:
    """The store's table of name and value pairs called ``name``."""
    return backend_of(app.factory).settings_table(app.factory, app.recorder, name)
