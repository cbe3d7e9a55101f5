"""docs/providers.md: its examples run, against recorded answers on a local server."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

import test_anthropic_provider as anthropic_answers
import test_openai_provider as openai_answers
from wire_server import WireServer, json_reply, sse_reply

DOC = Path(__file__).parent.parent / "docs" / "providers.md"


@pytest.fixture
def server() -> Iterator[WireServer]:
    with WireServer() as server:
        yield server


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
        json_reply(openai_answers.TOOL_CALL_COMPLETION),
        json_reply(openai_answers.ANSWER_COMPLETION),
        json_reply(anthropic_answers.ANSWER_MESSAGE),
        sse_reply((None, data) for data in openai_answers.TEXT_STREAM),
    )
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.DOTALL)
    assert len(blocks) == 5
    for number, block in enumerate(blocks, 1):
        exec(compile(block, f"{DOC.name}, block {number}", "exec"), {})
    printed = capsys.readouterr().out
    assert printed.count("It's 18°C and sunny in Paris.") == 2
    assert anthropic_answers.ANSWER in printed
    assert len(server.requests) == 4
