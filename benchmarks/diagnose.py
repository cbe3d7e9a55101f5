"""Diagnosis: where the bytes and the time go, for the targets the figures judge.

Every diagnosis runs on every run (also in quick mode, so it cannot rot); a target that
was missed gets its explanation from the diagnosis, with the measured numbers. The
profiles are cProfile's, which inflates Python-level costs against C calls: read them
for where the time goes, not for absolute figures. "What if" rows change nothing in the
library: they use public options (`open_store(compress="none")`), or write a snapshot
on a copy of the database, to show what a change would buy before anyone makes it.
"""

from __future__ import annotations

import cProfile
import pstats
import re
import sqlite3
import tempfile
import time
from contextlib import closing
from pathlib import Path
from typing import TYPE_CHECKING, Any

import workload
import zstandard
from harness import BUDGET_S, Context, cli, isolated, log
from report import MISSED, Section, Table, intro, ratio, seconds, size, times
from single_thread import LONG_T, REFERENCE_T

from covonaut_es import Agent, Store, open_store
from covonaut_es.domain import ThreadSnapshot
from covonaut_es.store._dictionary import ZstdDictionaryCompressor
from covonaut_es.store._writer import (
    SNAPSHOT_AT_REST_MIN,
    SNAPSHOT_AT_REST_SHARE,
    SNAPSHOT_MIN_VERSION,
    SNAPSHOT_TAIL_SHARE,
)

if TYPE_CHECKING:
    from harness import Progress

TOP = 12


def _label(entry: tuple[str, int, str]) -> str:
    filename, line, name = entry
    if filename == "~":
        return name.replace("{method ", "{").replace(" objects}", "}")
    for marker in ("site-packages/", "/src/", "/benchmarks/"):
        if marker in filename:
            filename = filename.split(marker, 1)[1]
            break
    else:
        filename = re.sub(r".*/lib/python3\.\d+/", "", filename)
    return f"{filename}:{line} {name}"


def profile(action: Any, sort: str = "tottime") -> list[list[Any]]:
    """``action()`` under cProfile: the top functions as ``[label, calls, tottime,
    cumtime]``."""
    profiler = cProfile.Profile()
    profiler.runcall(action)
    stats = pstats.Stats(profiler)
    entries = stats.stats  # type: ignore[attr-defined]
    index = 2 if sort == "tottime" else 3
    top = sorted(entries.items(), key=lambda item: item[1][index], reverse=True)[:TOP]
    return [[_label(key), value[1], value[2], value[3]] for key, value in top]


def _profile_table(title: str, rows: list[list[Any]]) -> Table:
    return Table(
        title,
        ["function", "calls", "own time", "with callees"],
        [[f"`{r[0]}`", str(r[1]), seconds(r[2]), seconds(r[3])] for r in rows],
    )


# Children --------------------------------------------------------------------------------


def run_storage(progress: Progress, target: str) -> None:
    """Where the bytes of a SQLite store go."""
    with closing(sqlite3.connect(target)) as con:
        try:
            pages = dict(con.execute("SELECT name, sum(pgsize) FROM dbstat GROUP BY name"))
        except sqlite3.OperationalError:  # SQLite built without the dbstat table
            pages = {}
        topics = con.execute(
            "SELECT topic, count(*), sum(length(state)), sum(length(topic)), "
            "sum(length(originator_id)) FROM stored_events GROUP BY topic ORDER BY 3 DESC"
        ).fetchall()
        snapshots = con.execute(
            "SELECT count(*), coalesce(sum(length(state)), 0), max(originator_version) "
            "FROM stored_snapshots"
        ).fetchone()
    progress.update(
        pages=pages, topics=topics, snapshots=snapshots, layouts=what_if_layouts(target)
    )


CONTENTLESS = ("Started", "RunStarted", "TurnStarted", "CheckpointSaved", "RunFinished")
"""The events of a run that carry no conversation."""


def _layout_bytes(
    rows: list[tuple[bytes, int, str, bytes]], snapshots: list[tuple[bytes, int, str, bytes]]
) -> int:
    """The file size of ``rows`` and ``snapshots`` written into a fresh SQLite file with
    a compact layout: the stream id as 16 bytes, the topic as a small integer naming a
    row of a topic table, the notification id as the rowid, and the key index on
    (stream, version)."""
    with tempfile.TemporaryDirectory() as directory:
        path = f"{directory}/layout.db"
        with closing(sqlite3.connect(path)) as con:
            con.executescript(
                "CREATE TABLE topics (id INTEGER PRIMARY KEY, topic TEXT UNIQUE);"
                "CREATE TABLE events (stream BLOB, version INTEGER, topic INTEGER, state BLOB,"
                " PRIMARY KEY (stream, version));"
                "CREATE TABLE snapshots (stream BLOB, version INTEGER, topic INTEGER, state BLOB,"
                " PRIMARY KEY (stream, version)) WITHOUT ROWID;"
            )
            codes: dict[str, int] = {}
            for table, found in (("events", rows), ("snapshots", snapshots)):
                for stream, version, topic, state in found:
                    code = codes.setdefault(topic, len(codes) + 1)
                    con.execute("INSERT OR IGNORE INTO topics VALUES (?, ?)", (code, topic))
                    con.execute(
                        f"INSERT INTO {table} VALUES (?, ?, ?, ?)", (stream, version, code, state)
                    )
            con.commit()
        return Path(path).stat().st_size


def _stream_bytes(stored: bytes | str) -> bytes:
    """A stored stream id as its 16 bytes: a store keeps them so since ADR 0074, as
    hex before."""
    return stored if isinstance(stored, bytes) else bytes.fromhex(stored)


def what_if_layouts(target: str) -> list[tuple[str, int]]:
    """The directions the strict storage target points to, measured on the run's own
    rows rewritten into fresh files: nothing in the library changes. The first keeps
    the payloads as stored (a new store's: zstd with the shipped dictionary, ADR 0061);
    the others compress them afresh from their plain bytes."""
    with closing(sqlite3.connect(target)) as con:
        stored = [
            (_stream_bytes(s), v, t, bytes(p))
            for s, v, t, p in con.execute(
                "SELECT originator_id, originator_version, topic, state FROM stored_events "
                "ORDER BY rowid"
            )
        ]
        snapshots = [
            (_stream_bytes(s), v, t, bytes(p))
            for s, v, t, p in con.execute(
                "SELECT originator_id, originator_version, topic, state FROM stored_snapshots"
            )
        ]
        (compression,) = con.execute(
            "SELECT value FROM covonaut_settings WHERE name = 'compression'"
        ).fetchone()
    assert compression in ("zstd", "none"), compression
    shipped = ZstdDictionaryCompressor()
    rows = [
        (s, v, t, shipped.decompress(p) if compression == "zstd" else p) for s, v, t, p in stored
    ]
    plain = zstandard.ZstdCompressor(level=3, write_content_size=False, write_dict_id=False)

    def compressed(compressor: Any, found: list[Any]) -> list[Any]:
        return [(s, v, t, compressor.compress(p)) for s, v, t, p in found]

    content = [row for row in rows if row[2].rsplit(".", 1)[-1] not in CONTENTLESS]
    found = [
        (
            f"compact topics and 16-byte stream ids (payloads as stored: {compression})",
            _layout_bytes(stored, snapshots),
        ),
        (
            "compact, and each payload in its own zstd frame without a dictionary",
            _layout_bytes(compressed(plain, rows), snapshots),
        ),
    ]
    try:  # zstd needs enough samples to train on: tiny runs have too few
        trained = zstandard.train_dictionary(16384, [row[3] for row in rows[: len(rows) // 10]])
    except zstandard.ZstdError:
        return found
    dictionary = zstandard.ZstdCompressor(level=3, dict_data=trained, write_dict_id=False)
    with_dict = _layout_bytes(compressed(dictionary, rows), snapshots) + len(trained.as_bytes())
    without = _layout_bytes(compressed(dictionary, content), snapshots) + len(trained.as_bytes())
    found.append(
        (
            "compact, each payload zstd with a dictionary of the first tenth (flattered: figure 1)",
            with_dict,
        )
    )
    found.append(("the same without the rows of events that carry no conversation", without))
    return found


def _median_load(store: Store) -> float:
    """The median time of the thread's restores, each dropped after its timing, as in
    figure 3, but back to back (figure 3 takes each in turn with the limits' decodes):
    warmer, they may read a few percent faster than figure 3's."""
    loads = []
    for _ in range(workload.REPEAT_LOADS):
        start = time.perf_counter()
        loaded = store.load(workload.THREAD_ID)
        loads.append(time.perf_counter() - start)
        del loaded
    return workload.median(loads)


def run_restore(progress: Progress, target: str, copy: str) -> None:
    """Profile ``store.load``, and time it again with the snapshot as far behind the
    head as the snapshot policy lets it be: after a run that ended (ADR 0085), and
    after one that stopped on an error, whose last snapshot is a checkpoint's (ADR 0014)."""
    url = workload.store_url(target)
    with closing(open_store(url)) as store:
        thread = store.load(workload.THREAD_ID)
        load_s = _median_load(store)
        rows = profile(lambda: [store.load(workload.THREAD_ID) for _ in range(5)])
    with closing(sqlite3.connect(target)) as con:
        (snapshot,) = con.execute("SELECT max(originator_version) FROM stored_snapshots").fetchone()
    progress.update(head=thread.version, snapshot=snapshot, load_s=load_s, profile=rows)
    # On a copy, the one snapshot is replaced by one just before the policy would write
    # the next: the longest tail a restore of this head can meet.
    for name, least, share in (
        ("rest", SNAPSHOT_AT_REST_MIN, SNAPSHOT_AT_REST_SHARE),
        ("longest", SNAPSHOT_MIN_VERSION, SNAPSHOT_TAIL_SHARE),
    ):
        behind = max(1, thread.version - (max(least, thread.version // share) - 1))
        with closing(sqlite3.connect(target)) as con, closing(sqlite3.connect(copy)) as dst:
            con.backup(dst)
            dst.execute("DELETE FROM stored_snapshots")
            dst.commit()
        with closing(open_store(workload.store_url(copy))) as store:
            assert store._app.snapshots is not None
            old = store.load(workload.THREAD_ID, version=behind)
            store._app.snapshots.put([ThreadSnapshot.take(old)])
        with closing(open_store(workload.store_url(copy))) as store:
            load_s = _median_load(store)
            if name == "longest":
                longest = profile(lambda: [store.load(workload.THREAD_ID) for _ in range(5)])
                progress.update(profile_longest=longest)
        progress.update(**{f"{name}_tail_at": behind, f"load_{name}_tail_s": load_s})


def run_persistence(progress: Progress, target: str, turns: int) -> None:
    """Profile one run of the workload, and split the persistence time."""
    with closing(open_store("memory://")) as warm:
        Agent(workload.agent_config(warm, workload.Model(workload.WARMUP_TURNS))).run("warm")
    workload.prepare(turns)
    with closing(open_store(workload.store_url(target))) as store:
        timer = workload.PersistenceTimer(store)
        agent = Agent(workload.agent_config(store, workload.Model(turns)))
        profiler = cProfile.Profile()
        profiler.runcall(agent.run, workload.PROMPT)
    stats = pstats.Stats(profiler).stats  # type: ignore[attr-defined]
    # Where the client waits on the database: sqlite3's C calls (including the fsync of
    # a commit); psycopg's Connection.wait and pipeline _communicate_gen, whose own time
    # is the unprofiled C calls that wait on and talk to the server's socket.
    database = 0.0
    for (filename, _, name), value in stats.items():
        if (filename == "~" and "sqlite3." in name) or (
            (filename.endswith("psycopg/connection.py") and name == "wait")
            or (filename.endswith("psycopg/_pipeline_base.py") and name == "_communicate_gen")
        ):
            database += value[2]
    rows = sorted(stats.items(), key=lambda item: item[1][2], reverse=True)[:TOP]
    progress.update(
        persistence_s=timer.seconds,
        database_s=database,
        total_s=sum(value[2] for value in stats.values()),
        profile=[[_label(key), value[1], value[2], value[3]] for key, value in rows],
    )


# Sections --------------------------------------------------------------------------------


def storage(ctx: Context, turns: int) -> Table:
    """Where the bytes of a thread of ``turns`` turns go, and what compression would
    change."""
    ours = ctx.ours("sqlite", turns)[0]
    log(f"diagnose: storage at T={turns}")
    found = isolated(run_storage, BUDGET_S, target=ours["target"])
    uncompressed_target = ctx.target("sqlite", f"uncompressed_{turns}")
    uncompressed = isolated(
        workload.run_ours,
        BUDGET_S,
        target=uncompressed_target,
        turns=turns,
        history=False,
        compress="none",
    )
    ctx.discard("sqlite", f"uncompressed_{turns}")
    total, logical = ours.get("bytes"), ours.get("logical_bytes")
    conversation = ours.get("conversation_bytes")
    table = Table(
        f"SQLite, T={turns}: where the {size(total)} go ({times(ratio(total, conversation))} "
        f"the conversation's {size(conversation)}, {times(ratio(total, logical))} the JSON of "
        f"its messages, {size(logical)})",
        ["part", "rows", "bytes", "share of file", "per turn"],
    )
    if "error" in found:
        table.notes.append(f"failed: `{found['error'].splitlines()[-1]}`")
        return table
    pages = found["pages"]

    def part(label: str, rows: str, bytes_: float) -> list[str]:
        return [label, rows, size(bytes_), f"{ratio(bytes_, total):.0%}", size(bytes_ / turns)]

    for name, bytes_ in sorted(pages.items(), key=lambda item: -item[1]):
        table.rows.append(part(f"pages of `{name}`", "", bytes_))
    for topic, count, state, _, _ in found["topics"]:
        table.rows.append(part(f"payload of `{topic.rsplit('.', 1)[-1]}`", str(count), state))
    events = sum(row[1] for row in found["topics"])
    count, snapshot_bytes, last = found["snapshots"]
    table.rows += [
        part("topic strings, one per event", str(events), sum(r[3] for r in found["topics"])),
        part(
            "thread ids (16 bytes since ADR 0074), one per event (the key index holds them again)",
            str(events),
            sum(r[4] for r in found["topics"]),
        ),
        part(
            f"snapshot payloads, zstd-compressed msgpack (newest at version {last})",
            str(count),
            snapshot_bytes,
        ),
    ]
    without = (total or 0) - pages.get("stored_snapshots", snapshot_bytes)
    table.notes += [
        f"What if (the run's rows rewritten into a fresh file; snapshots as they are): {label}: "
        f"{size(bytes_)}, {times(ratio(bytes_, conversation))} the conversation."
        for label, bytes_ in found["layouts"]
    ]
    table.notes += [
        f"What if there were no snapshots: about {size(without)}, "
        f"{times(ratio(without, logical))} the logical bytes (now {times(ratio(total, logical))}).",
        f'What if `open_store(..., compress="none")` (a public option; a store before ADR '
        f"0061): {size(uncompressed.get('bytes'))}, "
        f"{times(ratio(uncompressed.get('bytes'), logical))} the logical bytes.",
    ]
    layouts = "; ".join(
        f"{label}: {times(ratio(bytes_, conversation))}" for label, bytes_ in found["layouts"]
    )
    target = ctx.targets.get(f"storage-conversation-{turns}")
    if target and target.status == MISSED:
        target.explanation = (
            f"Cause: of the file, event payloads (JSON with field names, timestamps and "
            f"chain links) are {ratio(sum(r[2] for r in found['topics']), total):.0%}, the "
            f"snapshot {ratio(snapshot_bytes, total):.0%}; each turn stores "
            f"{events / turns:.1f} events, and each row repeats its topic and stream "
            f"id. Measured on the run's own rows rewritten (Diagnosis): {layouts}."
        )
    target = ctx.targets.get(f"storage-logical-{turns}")
    if target and target.status == MISSED:
        target.explanation = (
            f"Cause: snapshots are {ratio(snapshot_bytes, total):.0%} of the file "
            "(`Store.snapshot_if_due` in `store/_store.py` keeps one per thread, "
            "the newest, ADR 0014, as msgpack in a zstd frame, ADR 0022), and each "
            f"turn stores {events / turns:.1f} events, of which only the message events carry "
            "conversation; every event row repeats its topic code and thread id "
            "(eventsourcing's SQLite schema, in `ThreadsApplication`). Without snapshots "
            f"the file would be {times(ratio(without, logical))} the logical bytes; with "
            f'`compress="none"` {times(ratio(uncompressed.get("bytes"), logical))}. See '
            "Diagnosis."
        )
    return table


def restore(ctx: Context) -> list[Table]:
    """Profile of a restore at the longest T, and the same restore from a snapshot at
    the head."""
    turns = LONG_T if LONG_T in ctx.turns else max(ctx.turns)
    ours = ctx.ours("sqlite", turns)[0]
    log(f"diagnose: restore at T={turns}")
    copy = ctx.target("sqlite", f"restore_copy_{turns}")
    found = isolated(run_restore, BUDGET_S, target=ours["target"], copy=copy)
    ctx.discard("sqlite", f"restore_copy_{turns}")
    if "error" in found:
        return [Table("restore", [], notes=[f"failed: `{found['error'].splitlines()[-1]}`"])]
    decode = ours.get("decode_latest_s")
    head, snapshot = found["head"], found["snapshot"] or 0
    table = _profile_table(
        f"SQLite, T={turns}: `store.load` x5 under cProfile, by own time", found["profile"]
    )
    replayed = head - snapshot
    now, longest = found["load_s"], found.get("load_longest_tail_s")
    behind = found.get("longest_tail_at", head)
    rest, rest_behind = found.get("load_rest_tail_s"), found.get("rest_tail_at", head)
    where = (
        f"the newest snapshot is at version {snapshot}, so a restore decodes it and then "
        if snapshot
        else "there is no snapshot yet, so a restore "
    )
    table.notes += [
        f"The head is version {head}; {where}replays {replayed} events "
        f"({replayed / head:.0%} of the thread).",
        f"Restore now: {seconds(now)}, {times(ratio(now, decode))} the decode of the latest "
        f"state ({seconds(decode)}).",
        f"With the longest tail the snapshot policy allows after a run that ended (ADR "
        f"0085: a snapshot at version {rest_behind}, {head - rest_behind} events behind the "
        f"head, written on a copy): {seconds(rest)}, {times(ratio(rest, decode))} the decode "
        "time.",
        f"With the longest tail it allows after a run stopped by an error, whose last "
        f"snapshot is a checkpoint's (ADR 0014: a snapshot at version {behind}, "
        f"{head - behind} events behind the head, written on a copy): {seconds(longest)}, "
        f"{times(ratio(longest, decode))} the decode time.",
    ]
    top = ", ".join(f"`{row[0]}`" for row in found["profile"][:4])
    strict = ours.get("decode_plain_s")
    table.notes.append(
        f"Against one msgpack decode of the final messages as plain data ({seconds(strict)}): "
        f"{times(ratio(now, strict))} now, {times(ratio(rest, strict))} with the longest tail "
        f"after a run that ended, {times(ratio(longest, strict))} after one stopped by an error."
    )
    for key, reference in (("restore-plain", strict), ("restore-decode", decode)):
        target = ctx.targets.get(key)
        if target and longest and rest:
            target.measured += (
                f" ({times(ratio(rest, reference))} with the longest tail after a run that "
                f"ended, {times(ratio(longest, reference))} after an error; Diagnosis)"
            )
    for key in ("restore-plain", "restore-decode", "restore-peer"):
        target = ctx.targets.get(key)
        if target and target.status == MISSED:
            target.explanation = (
                f"Cause: `Store.find` (`store/_store.py`) reads the newest snapshot, at version "
                f"{snapshot} of {head}, with the events from its version on in one statement "
                "(ADR 0055), decompresses the snapshot's zstd frame and decodes it typed, then "
                f"folds the {replayed} events after it (`MsgspecMapper.to_domain_event`, "
                f"`store/_mapper.py`); by own time the profile's top functions are {top}. "
                "The snapshot policy lets that tail grow to a sixty-fourth of the thread "
                "after a run that ended (ADR 0085), a sixteenth after one stopped by an error "
                "(ADR 0014), and decompressing the whole state takes about as long as the "
                "reference decode at every zstd level: uncompressed snapshots would meet the "
                "strict limit and miss storage's strict one by more (ADR 0080 has the numbers "
                "and keeps them compressed). In the diagnosis run a restore (timed back to "
                "back) took "
                f"{times(ratio(now, decode))} the decode time, "
                f"{times(ratio(rest, decode))} with the longest tail after a run that ended, "
                f"and {times(ratio(longest, decode))} after an error. See Diagnosis."
            )
    longest_table = _profile_table(
        f"SQLite, T={turns}: `store.load` x5 with the longest tail the snapshot policy "
        "allows after a run stopped by an error, by own time",
        found.get("profile_longest", []),
    )
    return [table, longest_table]


def persistence(ctx: Context) -> list[Table]:
    """Profile of a whole run on each backend, split into database time and the rest."""
    turns = REFERENCE_T if REFERENCE_T in ctx.turns else max(ctx.turns)
    tables = []
    for backend in ctx.backends:
        log(f"diagnose: persistence on {backend} at T={turns}")
        name = f"profile_{backend}_{turns}"
        found = isolated(run_persistence, BUDGET_S, target=ctx.target(backend, name), turns=turns)
        ctx.discard(backend, name)
        if "error" in found:
            tables.append(
                Table(backend, [], notes=[f"failed: `{found['error'].splitlines()[-1]}`"])
            )
            continue
        table = _profile_table(
            f"{backend}, T={turns}: one run under cProfile, by own time", found["profile"]
        )
        share = ratio(found["database_s"], found["persistence_s"])
        table.notes.append(
            f"Under the profiler, {seconds(found['persistence_s'] / turns)} per turn is "
            f"persistence (inside `Store.save` / `snapshot_if_due`), of which "
            f"{share:.0%} is the client waiting in the database driver (SQLite's C calls, "
            "fsync included; psycopg's socket waits and pipeline I/O) and the rest Python in "
            "eventsourcing, psycopg and covonaut_es; the whole run is "
            f"{seconds(found['total_s'] / turns)} per turn."
        )
        tables.append(table)
        if backend != "sqlite":
            continue
        for judged in (REFERENCE_T, LONG_T):
            for key in (f"persistence-{judged}", f"persistence-softer-{judged}"):
                target = ctx.targets.get(key)
                if target and target.status == MISSED and judged in ctx.turns:
                    target.explanation = _persistence_cause(ctx, judged, share, turns)
    return tables


def _persistence_cause(ctx: Context, turns: int, share: float, profiled: int) -> str:
    runs = [run for run in ctx.ours("sqlite", turns) if "raw_paced_s" in run]
    ours = workload.median([run["persistence_s"] for run in runs])
    raw = workload.median([run["raw_paced_s"] for run in runs])
    commits = runs[0]["raw_commits"] if runs else 0
    return (
        f"Cause: the same rows in the same {commits / turns:.1f} transactions per turn, "
        f"paced as ours, cost {seconds(raw / turns)} per turn with bare statements and "
        f"{seconds(ours / turns)} in our store, {seconds((ours - raw) / max(commits, 1))} "
        f"more per transaction. Under cProfile (T={profiled}) {share:.0%} of our persistence "
        "time is the client blocked in SQLite (the same commits and fsyncs as the limit); the "
        "rest is Python per commit on the path `Store.save` (`store/_store.py`) -> "
        "`ThreadsApplication.save` (`store/_application.py`) -> "
        "`MsgspecMapper.to_sealed_event` (`store/_mapper.py`: each event encoded, linked "
        "into its chain by `store/_chain.py` and read back) -> the store's own writing "
        "connection (`store/_backends/_sqlite_connections.py`, one `execute` per event, "
        "and one for the lease fence), and the snapshot's encoding and compression when "
        "one is due (`store/_zstd.py`). See Diagnosis."
    )


def run(ctx: Context) -> list[Section]:
    """The diagnosis section."""
    section = Section("Diagnosis", intro(__doc__))
    for turns in sorted({REFERENCE_T, LONG_T} & set(ctx.turns)) or [max(ctx.turns)]:
        section.tables.append(storage(ctx, turns))
    section.tables += restore(ctx)
    section.tables += persistence(ctx)
    return [section]


if __name__ == "__main__":
    raise SystemExit(cli([run]))
