"""docs/providers.md: its examples run, against recorded answers on a local server."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import anthropic_wire
import openai_wire
from wire_server import WireServer

DOC = Path(__file__).parent.parent / "docs" / "providers.md"


@pytest.mark.filterwarnings("ignore:The model .* is deprecated:DeprecationWarning")
def test_examples_run(
    server: WireServer, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every Python block of docs/providers.md runs and prints the recorded answers."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("OPENAI_BASE_URL", f"{server.url}/v1")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
    server.reply(
        openai_wire.TOOL_CALL_REPLY,
        openai_wire.ANSWER_REPLY,
        anthropic_wire.ANSWER_REPLY,
        openai_wire.TEXT_STREAM_REPLY,
    )
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.DOTALL)
    assert len(blocks) == 5
    for number, block in enumerate(blocks, 1):
        exec(compile(block, f"{DOC.name}, block {number}", "exec"), {})
    printed = capsys.readouterr().out
    assert printed.count(openai_wire.ANSWER) == 2
    assert anthropic_wire.ANSWER in printed
    assert len(server.requests) == 4
