"""The benchmark workload and the code that drives each system through it.

Every benchmark uses the same conversation: a user prompt, then ``turns`` turns in which
the model answers with about 200 bytes of text and one tool call and the tool returns
about 400 bytes, then one final text answer. Both systems make the same model calls,
tool calls and messages (2 x turns + 2 messages), and their text is the same
deterministic English-like prose (so compression figures are not flattered by
repeated characters).

Each ``run_*`` function is meant to run in a fresh process (``harness.isolated``):
it warms up on an in-memory store, then reports each measurement to its ``progress``
as soon as it has it, so a run killed for exceeding its budget keeps what it measured.
"""

from __future__ import annotations

import functools
import itertools
import random
import sqlite3
import statistics
import time
from collections.abc import Callable, Sequence
from contextlib import closing
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from covonaut_es import (
    Agent,
    AgentConfig,
    CheckpointSettings,
    Message,
    ProviderRequest,
    ProviderResponse,
    ScriptedProvider,
    Store,
    ThreadState,
    Tool,
    ToolCall,
    ToolContext,
    open_store,
)
from covonaut_es.store import Compression, _zstd
from covonaut_es.store._dictionary import ZstdDictionaryCompressor

if TYPE_CHECKING:
    from harness import Progress

TEXT_BYTES = 200
"""Bytes of text in each model answer."""
RESULT_BYTES = 400
"""Bytes of text each tool call returns."""
TOOL_NAME = "lookup"
PROMPT = "Research the history of the printing press and report what you find."
THREAD_ID = "t"
WARMUP_TURNS = 3
REPEAT_LOADS = 21
"""Restores per measurement; the median is reported."""

_TEXT = (
    "the of and to in is was for on that with as by at from his an were are which this "
    "be had it not or have one their first new after also other two its time who been "
    "they more but years all when during there city into only has most later would "
    "between history first printing press paper ink type book made work used early "
    "europe century small large press metal letters machine print copies world trade "
)
_WORDS = tuple(_TEXT.split())


def prose(size: int, seed: int) -> str:
    """Deterministic English-like ASCII text of exactly ``size`` bytes."""
    rng = random.Random(seed)
    words: list[str] = []
    length = 0
    while length < size:
        word = rng.choice(_WORDS)
        words.append(word)
        length += len(word) + 1
    return " ".join(words)[:size]


@functools.cache
def answer(turn: int) -> str:
    """The model's text on ``turn`` (0-based)."""
    return prose(TEXT_BYTES, 2 * turn)


@functools.cache
def arguments(turn: int) -> str:
    """The JSON arguments of the tool call on ``turn``."""
    return msgspec.json.encode({"query": prose(40, 10**6 + turn), "n": turn}).decode()


@functools.cache
def tool_result(turn: int) -> str:
    """What the tool returns for the call made on ``turn``."""
    return prose(RESULT_BYTES, 2 * turn + 1)


def prepare(turns: int) -> None:
    """Generate the texts of ``turns`` turns ahead, so no run times their making."""
    for turn in range(turns + 1):
        answer(turn), arguments(turn), tool_result(turn)


TOOL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"query": {"type": "string"}, "n": {"type": "integer"}},
    "required": ["query", "n"],
}


def median(values: list[float]) -> float:
    """The median, or NaN for no values."""
    return statistics.median(values) if values else float("nan")


def flatness(stamps: list[float]) -> tuple[float, float, float]:
    """Median per-turn time of the first and last 10% of turns, and their ratio.

    ``stamps`` are the times of the model calls; a turn's time runs from its model call
    to the next one, so it covers the commits, the tool call and the checkpoint.
    """
    times = [b - a for a, b in itertools.pairwise(stamps)]
    k = max(1, len(times) // 10)
    first, last = median(times[:k]), median(times[-k:])
    return first, last, last / first


# Sizes ----------------------------------------------------------------------------------


def sqlite_bytes(path: Path) -> int:
    """The file's size after a WAL checkpoint (plus whatever WAL is left)."""
    with closing(sqlite3.connect(path)) as con:
        con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    wal = Path(f"{path}-wal")
    return path.stat().st_size + (wal.stat().st_size if wal.exists() else 0)


def postgres_bytes(url: str) -> int:
    """``pg_total_relation_size`` (heap, indexes, TOAST) summed over all user tables."""
    query = """
        SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::bigint
        FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE c.relkind IN ('r', 'p', 'm')
          AND n.nspname NOT IN ('pg_catalog', 'information_schema')
    """
    import psycopg

    with psycopg.connect(url) as conn:
        row = conn.execute(query).fetchone()
    return int(row[0]) if row else 0


def store_bytes(target: str) -> int:
    """Bytes stored at a SQLite path or a PostgreSQL URL."""
    if target.startswith("postgresql://"):
        return postgres_bytes(target)
    return sqlite_bytes(Path(target))


def row_bytes(target: str) -> int:
    """The bytes of every stored value in every table (no page or index overhead):
    ``length()`` of each column in SQLite, ``pg_column_size`` of each row in PostgreSQL.
    The difference across an operation is what it wrote, at byte granularity."""
    if target.startswith("postgresql://"):
        import psycopg

        total = 0
        with psycopg.connect(target) as conn:
            tables = conn.execute(
                "SELECT quote_ident(tablename) FROM pg_tables WHERE schemaname = 'public'"
            ).fetchall()
            for (name,) in tables:
                query = f"SELECT coalesce(sum(pg_column_size(t.*)), 0) FROM {name} t"
                row = conn.execute(query).fetchone()  # type: ignore[arg-type]
                total += int(row[0]) if row else 0
        return total
    total = 0
    with closing(sqlite3.connect(target)) as con:
        tables = con.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
        for (name,) in tables:
            columns = [row[1] for row in con.execute(f"PRAGMA table_info({name})")]
            lengths = " + ".join(f"coalesce(length({c}), 0)" for c in columns)
            total += con.execute(f"SELECT coalesce(sum({lengths}), 0) FROM {name}").fetchone()[0]
    return int(total)


def busy_until(due: float) -> None:
    """Keep the CPU busy until ``perf_counter()`` reaches ``due``: the disk meets a
    commit after work as an agent's, not after sleep."""
    while time.perf_counter() < due:
        pass


def commit_probe(directory: Path, commits: int = 100, busy_s: float = 0.0) -> float:
    """Median seconds of a one-row ``INSERT`` + ``COMMIT`` into a fresh WAL SQLite file:
    how fast this disk syncs right now (other work on the machine changes it), with the
    CPU kept busy for ``busy_s`` before each commit."""
    path = directory / "probe.db"
    durations = []
    with closing(sqlite3.connect(path, isolation_level=None)) as con:
        con.execute("PRAGMA journal_mode=WAL")
        con.execute("CREATE TABLE probe (n INTEGER PRIMARY KEY, payload BLOB)")
        for n in range(commits):
            busy_until(time.perf_counter() + busy_s)
            start = time.perf_counter()
            con.execute("BEGIN")
            con.execute("INSERT INTO probe VALUES (?, ?)", (n, b"x" * 400))
            con.execute("COMMIT")
            durations.append(time.perf_counter() - start)
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    return statistics.median(durations)


def store_url(target: str) -> str:
    """Our store URL for a SQLite path or a PostgreSQL URL."""
    return target if target.startswith("postgresql://") else f"sqlite:///{target}"


# Stored rows and the raw write limit ------------------------------------------------------

LONGEST = "SELECT originator_id FROM {} GROUP BY 1 ORDER BY count(*) DESC LIMIT 1"
SELECT = (
    "SELECT originator_id, originator_version, topic, state FROM {} "
    "WHERE originator_id = {} ORDER BY originator_version"
)
Row = tuple[Any, int, str, bytes]


class Reader:
    """Reads the stored rows of the longest thread at a SQLite path or PostgreSQL URL
    with bare SQL, on one connection: ``(originator_id, version, topic, payload)``."""

    def __init__(self, target: str) -> None:
        self.postgres = target.startswith("postgresql://")
        if self.postgres:
            import psycopg

            self.conn: Any = psycopg.connect(target, autocommit=True)
            self.table = "covonaut_events"
        else:
            self.conn = sqlite3.connect(target)
            self.table = "stored_events"
        [(self.originator,)] = self.conn.execute(LONGEST.format(self.table)).fetchall()

    def rows(self) -> list[Row]:
        """The thread's events in version order."""
        statement = SELECT.format(self.table, "%s" if self.postgres else "?")
        found = self.conn.execute(statement, (self.originator,)).fetchall()
        if self.postgres:
            return [(i, v, topic, bytes(state)) for i, v, topic, state in found]
        return list(found)

    def close(self) -> None:
        """Close the connection."""
        self.conn.close()


def rows(target: str) -> list[Row]:
    """The stored events of the longest thread at ``target``."""
    with closing(Reader(target)) as reader:
        return reader.rows()


Head = tuple[Any, int, str]
"""A stream's head anchor row: (originator_id, version, chain)."""
Write = Callable[[str, list[Row], Head | None], None]

_UPSERT_HEAD = (
    "INSERT INTO stored_events_heads (originator_id, version, chain) VALUES ({0}, {0}, {0}) "
    "ON CONFLICT (originator_id) DO UPDATE SET version = excluded.version, "
    "chain = excluded.chain"
)


def _head(batch: list[Row]) -> Head:
    """The head anchor a save of ``batch`` writes: its newest version and chain hash
    (read from the payload as stored: JSON, or JSON in a zstd frame, ADR 0061)."""
    originator, version, _, payload = batch[-1]
    if payload.startswith(_zstd.MAGIC):
        payload = ZstdDictionaryCompressor().decompress(payload)
    return originator, version, str(msgspec.json.decode(payload).get("chain", ""))


def _sqlite_writer(source: str, target: str) -> tuple[Any, Write]:
    with closing(sqlite3.connect(source)) as con:
        ddl = [sql for (sql,) in con.execute("SELECT sql FROM sqlite_master WHERE type = 'table'")]
    conn = sqlite3.connect(target, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    for statement in ddl:
        conn.execute(statement)

    def write(table: str, batch: list[Row], head: Head | None) -> None:
        conn.execute("BEGIN")
        conn.executemany(f"INSERT INTO {table} VALUES (?, ?, ?, ?)", batch)
        if head is not None:
            conn.execute(_UPSERT_HEAD.format("?"), head)
        conn.execute("COMMIT")

    return conn, write


def _postgres_writer(target: str) -> tuple[Any, Write]:
    import psycopg

    conn = psycopg.connect(target)
    for table in ("stored_events", "stored_snapshots"):
        conn.execute(
            f"CREATE TABLE {table} (originator_id uuid, originator_version bigint, "
            "topic text, state bytea, PRIMARY KEY (originator_id, originator_version))"
        )
    conn.execute(
        "CREATE TABLE stored_events_heads (originator_id uuid PRIMARY KEY, "
        "version bigint NOT NULL, chain text NOT NULL)"
    )
    conn.commit()

    def write(table: str, batch: list[Row], head: Head | None) -> None:
        with conn.cursor() as cursor:
            cursor.executemany(f"INSERT INTO {table} VALUES (%s, %s, %s, %s)", batch)
            if head is not None:
                cursor.execute(_UPSERT_HEAD.format("%s"), head)
        conn.commit()

    return conn, write


def raw_write(
    source: str,
    target: str,
    groups: list[list[int]],
    written: list[tuple[int, str, bytes]],
    starts: list[float] | None = None,
) -> dict[str, Any]:
    """The write limit: the source's rows, and the snapshots the run ``written``, written
    again into an empty ``target`` (a SQLite file with the same schema, or a PostgreSQL
    database) in the source run's transactions, with bare ``INSERT`` + ``COMMIT``; each
    transaction of events also updates the stream's head anchor row, as the store's
    does (tamper evidence, ADR 0013).

    Back to back by default; given the moments our run began each transaction
    (``starts``, one per transaction), each is begun at the same moment after the first,
    the time in between spent busy as our run's was, and only the transactions are
    timed."""
    events = rows(source)
    originator = events[0][0]
    snapshots: list[Row] = [(originator, *snapshot) for snapshot in written]
    if target.startswith("postgresql://"):
        conn, write = _postgres_writer(target)
    else:
        conn, write = _sqlite_writer(source, target)
    transactions: list[tuple[str, list[Row], Head | None]] = []
    position, pending = 0, iter(snapshots)
    for count, snapshot in groups:
        batch = events[position : position + count]
        transactions.append(("stored_events", batch, _head(batch)))
        position += count
        if snapshot:
            transactions.append(("stored_snapshots", [next(pending)], None))
    if starts is not None and len(starts) != len(transactions):
        msg = f"{len(starts)} start times for {len(transactions)} transactions"
        raise ValueError(msg)
    seconds, first = 0.0, time.perf_counter()
    for n, transaction in enumerate(transactions):
        if starts is not None:  # busy in between, as our run is between its commits
            busy_until(first + starts[n] - starts[0])
        start = time.perf_counter()
        write(*transaction)
        seconds += time.perf_counter() - start
    conn.close()
    return {
        "raw_s": seconds,
        "raw_commits": len(transactions),
        "raw_bytes": sum(len(row[3]) for row in events + snapshots),
    }


def conversation_text(messages: Sequence[Message]) -> bytes:
    """The conversation's own bytes, the strict reference of storage: the UTF-8 text of
    every message, and of each tool call its name and arguments; no roles, ids, field
    names or timestamps."""
    parts: list[str] = []
    for message in messages:
        parts.append(message.content)
        parts += [part for call in message.tool_calls for part in (call.name, call.arguments)]
    return "".join(parts).encode()


def zstd_whole(data: bytes) -> bytes:
    """``data`` in one zstd frame at the store's level (3): the floor a store of the
    conversation could reach, with no per-row framing at all."""
    return _zstd.compress(data)


# Our side ------------------------------------------------------------------------------


class Model:
    """Scripted model: ``turns`` answers with a tool call, then a final answer; it
    records the time of every call."""

    def __init__(self, turns: int) -> None:
        self.turns = turns
        self.stamps: list[float] = []

    def __call__(self, request: ProviderRequest) -> ProviderResponse:
        turn = len(self.stamps)
        self.stamps.append(time.perf_counter())
        if turn < self.turns:
            call = ToolCall(f"call_{turn}", TOOL_NAME, arguments(turn))
            return ProviderResponse(content=answer(turn), tool_calls=(call,))
        return ProviderResponse(content=answer(turn))


def lookup_tool(result: Callable[[dict[str, Any]], str], *, read_only: bool = False) -> Tool:
    """The workload's ``lookup`` tool, answering a call with ``result(args)``; declared
    ``read_only`` (it is: it changes nothing), its calls need no write-ahead."""

    def lookup(ctx: ToolContext, args: dict[str, Any]) -> str:
        return result(args)

    return Tool(TOOL_NAME, "Look up a fact", TOOL_SCHEMA, lookup, read_only=read_only)


def _looked_up(args: dict[str, Any]) -> str:
    return tool_result(int(args["n"]))


LOOKUP = lookup_tool(_looked_up)
READ_ONLY_LOOKUP = lookup_tool(_looked_up, read_only=True)
"""The same tool declared read-only: a turn commits once, not twice (ADR 0150)."""


def scripted_agent(
    store: Store | None,
    respond: Callable[[ProviderRequest], ProviderResponse],
    thread_id: str,
    *,
    tools: Sequence[Tool] = (LOOKUP,),
    **settings: Any,
) -> AgentConfig:
    """A benchmark's agent: the scripted model ``respond`` with ``tools``, saving
    thread ``thread_id`` to ``store`` (unbound when None: a worker binds it), with any
    further ``AgentConfig`` ``settings``."""
    bound = None if store is None else CheckpointSettings(store=store, thread_id=thread_id)
    return AgentConfig(
        provider=ScriptedProvider(respond=respond),
        model="bench",
        tools=tuple(tools),
        checkpoint=bound,
        **settings,
    )


def agent_config(
    store: Store, model: Model, thread_id: str = THREAD_ID, *, read_only: bool = False
) -> AgentConfig:
    """Our agent for the workload; one ``run()`` does all of the model's turns, calling
    :data:`READ_ONLY_LOOKUP` if ``read_only``."""
    tool = READ_ONLY_LOOKUP if read_only else LOOKUP
    return scripted_agent(store, model, thread_id, tools=(tool,), max_turns=model.turns + 1)


class PersistenceTimer:
    """Times every commit and snapshot of a store, and records how many events each
    commit wrote and the snapshots it wrote (wraps the two methods on the instance; the
    library is unchanged). A snapshot's row is read back after its timing, since the
    store keeps only the newest one."""

    def __init__(self, store: Store) -> None:
        self.seconds = 0.0
        self.groups: list[list[int]] = []  # [events in the commit, snapshot written]
        self.snapshots: list[tuple[int, str, bytes]] = []  # (version, topic, payload)
        self.starts: list[float] = []  # when each transaction that wrote began
        save, snapshot = store.save, store.snapshot_if_due

        def timed_save(thread: Any) -> None:
            events = len(thread.pending_events)
            start = time.perf_counter()
            save(thread)
            self.seconds += time.perf_counter() - start
            if events:
                self.groups.append([events, 0])
                self.starts.append(start)

        def timed_snapshot(thread: Any, **options: Any) -> bool:  # at_rest, at a run's end
            start = time.perf_counter()
            written = snapshot(thread, **options)
            self.seconds += time.perf_counter() - start
            if written and self.groups:
                self.groups[-1][1] = 1
                self.starts.append(start)
                assert store._app.snapshots is not None
                recorder = store._app.snapshots.recorder
                (row,) = recorder.select_events(thread.id, lte=thread.version, desc=True, limit=1)
                self.snapshots.append((row.originator_version, row.topic, row.state))
            return written

        store.save = timed_save  # type: ignore[method-assign]
        store.snapshot_if_due = timed_snapshot  # type: ignore[method-assign]


def run_ours(
    progress: Progress,
    target: str,
    turns: int,
    history: bool = True,
    compress: Compression | None = None,
    raw_target: str | None = None,
    paced_target: str | None = None,
    read_only: bool = False,
) -> None:
    """One thread of ``turns`` turns in our store at ``target`` (compressed as a new
    store is unless ``compress`` says otherwise), its lookup declared ``read_only`` or
    not; then, into ``raw_target`` at once (so that both see the same disk and load),
    the write limit for the same rows, back to back, and into ``paced_target`` paced as
    our run's transactions were; then the store's size, restore and history times."""
    with closing(open_store("memory://")) as warm:
        Agent(agent_config(warm, Model(WARMUP_TURNS))).run(PROMPT)
    prepare(turns)
    store = open_store(store_url(target), compress=compress)
    timer = PersistenceTimer(store)
    model = Model(turns)
    start = time.perf_counter()
    Agent(agent_config(store, model, read_only=read_only)).run(PROMPT)
    wall = time.perf_counter() - start
    first, last, flat = flatness(model.stamps)
    store.close()
    progress.update(
        turns=turns,
        wall_s=wall,
        first_turn_s=first,
        last_turn_s=last,
        flatness=flat,
        persistence_s=timer.seconds,
        groups=timer.groups,
    )
    if raw_target is not None:
        progress.update(**raw_write(target, raw_target, timer.groups, timer.snapshots))
    if paced_target is not None:
        paced = raw_write(target, paced_target, timer.groups, timer.snapshots, timer.starts)
        progress.update(raw_paced_s=paced["raw_s"])
    progress.update(bytes=store_bytes(target))
    with closing(open_store(store_url(target), compress=compress)) as store:
        thread = store.load(THREAD_ID)  # opens the store's connection
        state = thread.state
        encoded = msgspec.json.encode(state)
        decoder = msgspec.json.Decoder(ThreadState)
        plain = msgspec.msgpack.encode(msgspec.to_builtins(state.messages))
        plain_decoder = msgspec.msgpack.Decoder()
        loads, decodes, plain_decodes = [], [], []
        # In turn, so that all three meet the machine's same moments; each result is
        # dropped after its timing, so that none pays for freeing the one before. The
        # strict limit's decode is timed just after an untimed one, warm, as it was when
        # timed back to back: in turn alone, the caches the restore filled made the
        # limit 5-15% slower, and our restore look better by as much.
        for _ in range(REPEAT_LOADS):
            plain_decoder.decode(plain)  # untimed: the warm-up
            start = time.perf_counter()
            decoded = plain_decoder.decode(plain)
            plain_decodes.append(time.perf_counter() - start)
            del decoded
            start = time.perf_counter()
            decoded = decoder.decode(encoded)
            decodes.append(time.perf_counter() - start)
            del decoded
            start = time.perf_counter()
            loaded = store.load(THREAD_ID)
            loads.append(time.perf_counter() - start)
            del loaded
        progress.update(
            events=state.version,
            messages=len(state.messages),
            logical_bytes=len(msgspec.json.encode(state.messages)),
            conversation_bytes=len(conversation_text(state.messages)),
            conversation_zstd_bytes=len(zstd_whole(conversation_text(state.messages))),
            state_bytes=len(encoded),
            restore_s=median(loads),
            decode_latest_s=median(decodes),
            decode_plain_s=median(plain_decodes),
        )
        if history:
            start = time.perf_counter()
            count = len(store.history(THREAD_ID))
            progress.update(history_s=time.perf_counter() - start, history_items=count)
