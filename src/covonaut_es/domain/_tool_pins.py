"""The pin of a tool from a server: which tool, exactly, the model was offered.

A tool that comes from a server the application does not own (an MCP server) may
change between the moment the model saw it and the moment a call of it runs: a new
schema, a new description, another server answering under the same tool name. A
:class:`ToolPin` records the tool as it was listed, and its ``digest`` covers the
server's identity, the tool's name, description and schema; an approval's operation
digest covers the pin's digest (see :func:`~covonaut_es.domain.operation_digest`), so
an approval never runs another tool than the one a person reviewed.
"""

from __future__ import annotations

import hashlib
from typing import Any

import msgspec

from covonaut_es.domain._canonical import canonical_json


class ToolPin(msgspec.Struct, frozen=True):
    """A tool as its server listed it when the model was offered it.

    Attributes:
        server: The name the application gave the server.
        origin: How the server is reached: ``stdio:`` and its command line, or
            ``http:`` and its URL without credentials or query.
        tool: The tool's name on the server.
        description: The tool's description, as the model read it.
        parameters: The tool's input JSON Schema, as the model read it.
        digest: The SHA-256 (hex) of the canonical JSON of the fields above.
    """

    server: str
    origin: str
    tool: str
    description: str
    parameters: dict[str, Any]
    digest: str

    @classmethod
    def of(
        cls, *, server: str, origin: str, tool: str, description: str, parameters: dict[str, Any]
    ) -> ToolPin:
        """The pin of a listed tool, its digest computed here, once."""
        fields = {
            "description": description,
            "origin": origin,
            "parameters": parameters,
            "server": server,
            "tool": tool,
        }
        digest = hashlib.sha256(canonical_json(fields)).hexdigest()
        return cls(server, origin, tool, description, parameters, digest)

    @property
    def label(self) -> str:
        """``server/tool``, for people."""
        return f"{self.server}/{self.tool}"


def change_note(earlier: ToolPin | None, now: ToolPin | None) -> str:
    """What a reviewer must know when the tool a review is asked for is not the tool an
    earlier review of the same name covered; empty when it is the same tool."""
    if earlier is None or now is None or earlier.digest == now.digest:
        return ""
    what = [
        name
        for name, before, after in (
            ("server", (earlier.server, earlier.origin), (now.server, now.origin)),
            ("description", earlier.description, now.description),
            ("input schema", earlier.parameters, now.parameters),
        )
        if before != after
    ]
    return (
        f"the tool changed since it was last reviewed: {earlier.label} is now {now.label}, "
        f"its {', '.join(what) or 'listing'} differs (digest {earlier.digest[:12]} became "
        f"{now.digest[:12]}); a decision on the earlier tool does not run this one"
    )
