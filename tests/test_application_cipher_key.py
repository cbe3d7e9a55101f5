"""An application's CIPHER_KEY that the cipher does not take (not set, not base64, the
wrong length): a ConfigurationError saying which, never quoting the key, and on the
command line with ``--application`` one line and exit status 2, as any bad setting."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from covonaut_es import AgentApplication, Store
from covonaut_es.errors import ConfigurationError
from test_embedded_tools import Shop, cli, configured, paused_order, shop_env

CIPHER_TOPIC = "eventsourcing.cryptography:AESCipher"
REFUSALS = {
    "it is not set",
    "it is not base64",
    "it is not 16, 24 or 32 bytes long",
}


def _opened(key: str) -> str | None:
    """Why an application with ``key`` does not open; None when it opens."""
    env = {
        "PERSISTENCE_MODULE": "eventsourcing.sqlite",
        "SQLITE_DBNAME": ":memory:",
        "CIPHER_TOPIC": CIPHER_TOPIC,
        "CIPHER_KEY": key,
    }
    try:
        AgentApplication(env=env).close()
    except ConfigurationError as exc:
        return str(exc)
    return None


_AES_KEYS = st.sampled_from([16, 24, 32]).flatmap(
    lambda n: st.binary(min_size=n, max_size=n).map(lambda b: base64.b64encode(b).decode())
)
"""The keys a store takes; with a character outside base64's alphabet put in, keys that
eventsourcing's lenient cipher would take as the same AES key."""


@settings(max_examples=80, deadline=None)
@given(
    key=st.text(max_size=60)
    | st.binary(max_size=40).map(lambda b: base64.b64encode(b).decode())
    | _AES_KEYS
    | st.tuples(
        _AES_KEYS, st.integers(0, 44), st.sampled_from([" ", "\n", "!", "\x00", "-", "é"])
    ).map(lambda k: k[0][: k[1]] + k[2] + k[0][k[1] :])
)
def test_a_cipher_key_opens_or_is_refused_naming_why_without_quoting_it(key: str) -> None:
    """Property: any text as CIPHER_KEY opens the application (the base64 of 16, 24 or
    32 bytes) or is refused with a ConfigurationError that says which of three things
    is wrong and quotes nothing of the key."""
    refused = _opened(key)
    if refused is None:
        assert len(base64.b64decode(key, validate=True)) in (16, 24, 32)
        return
    (found,) = (reason for reason in REFUSALS if f": {reason};" in refused)
    assert refused == (
        f"the cipher key (CIPHER_KEY) is not one the cipher takes: {found}; expected the "
        "base64 of 16, 24 or 32 bytes, as create_cipher_key() returns (its alphabet and "
        "padding only: no space or line end)"
    )


@pytest.mark.parametrize("key", ["not-base64-secret!!", "c2VjcmV0LXNlY3JldA==", "sécret-kéy"])
def test_the_command_line_refuses_a_bad_key_of_an_application_in_one_line(
    tmp_path: Path, key: str
) -> None:
    """``covonaut-es threads --application`` with a CIPHER_KEY the cipher does not take
    exits 2 with one line naming the setting, no traceback, and nothing of the key."""
    env = shop_env(str(tmp_path / "shop.db"), encrypted=True)
    with configured(env), Shop() as app, Store.from_application(app) as store:
        paused_order(app, store)
    with configured({**env, "CIPHER_KEY": key}):
        result = cli("threads")
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert "cipher key (CIPHER_KEY)" in result.stderr
    assert key not in result.stderr and key[:8] not in result.stderr
