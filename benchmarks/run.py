"""Run every benchmark and write BENCHMARKS.md (``--quick``: tiny T, for the tests).

    .venv/bin/python benchmarks/run.py [--quick] [--output PATH]

Each figure module can also run alone, e.g. ``benchmarks/writers.py --quick``.
"""

from __future__ import annotations

from harness import Figure, cli


def figures() -> list[Figure]:
    """Every figure, in the report's order.

    The figure modules are imported here, not when this module is: each measurement
    runs in a process of its own, which imports this module again (``spawn``) and needs
    only the module of its own measurement, not MCP's client and every other figure's
    dependencies (a second's start-up for each of some forty processes).
    """
    import diagnose
    import fork
    import inbox
    import limits
    import mcp_calls
    import queue_lag
    import queue_scale
    import replay
    import scaling
    import single_thread
    import workers
    import writers

    import streaming
    import tracing

    return [
        single_thread.run,  # 1-3
        fork.run,  # 4
        replay.run,  # 5
        writers.run,  # 6
        queue_lag.run,  # 7
        limits.run,  # 8
        inbox.run,  # 9
        workers.run,  # 10
        streaming.run,  # 11
        tracing.run,  # 12
        mcp_calls.run,  # 13
        queue_scale.run,  # 14
        scaling.run,  # 15
        diagnose.run,  # why the missed targets were missed
    ]


if __name__ == "__main__":
    raise SystemExit(cli(figures()))
