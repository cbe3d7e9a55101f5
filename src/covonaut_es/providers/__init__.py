"""Model providers: the protocol the runtime calls, and adapters to real APIs.

This package owns :class:`Provider` and :class:`AsyncProvider` (what the runtime calls),
:class:`ScriptedProvider` (offline and in tests), and the retry policy that adapters
share. The adapters are public modules of their own, :mod:`covonaut_es.providers.openai`
and :mod:`covonaut_es.providers.anthropic`; each needs its optional extra and is never
imported from here, so ``import covonaut_es`` needs no SDK. The protocol imports only
:mod:`covonaut_es.messages` and :mod:`covonaut_es.errors`.
"""

from covonaut_es.providers._protocol import (
    AsyncProvider,
    Provider,
    ScriptedProvider,
    StreamingProvider,
    StreamScript,
    collect_stream,
)
from covonaut_es.providers._retry import RetryPolicy

__all__ = [
    "AsyncProvider",
    "Provider",
    "RetryPolicy",
    "ScriptedProvider",
    "StreamScript",
    "StreamingProvider",
    "collect_stream",
]
