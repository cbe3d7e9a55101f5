"""An application's CIPHER_KEY that the cipher does not take (not set, not base64, the
wrong length): a ConfigurationError saying which, never quoting the key, and on the
command line with ``--application`` one line and exit status 2, as any bad setting."""

from __future__ import annotations

import base64
import contextlib
import io
import os
import sqlite3
from pathlib import Path

import pytest
from eventsourcing.cryptography import AESCipher
from eventsourcing.utils import Environment
from hypothesis import given, settings
from hypothesis import strategies as st

from covonaut_es import AgentApplication, ReviewQueue, Store, create_cipher_key, open_store
from covonaut_es.cli import main as cli_main
from covonaut_es.errors import ConfigurationError
from covonaut_es.store._urls import persistence_env
from test_embedded_tools import Shop, cli, configured, paused_order, shop_env
from test_queue_passes_over_damage import _listed, _paused

CIPHER_TOPIC = "eventsourcing.cryptography:AESCipher"
REFUSALS = {
    "it is not set",
    "it is not base64",
    "it is not 16, 24 or 32 bytes long",
    "it is not base64 as create_cipher_key() writes it",
}


def _opened(key: str, topic: str | None = CIPHER_TOPIC) -> str | None:
    """Why an application with ``key`` (and ``topic``: None, eventsourcing's default
    cipher) does not open; None when it opens."""
    env = {
        "PERSISTENCE_MODULE": "eventsourcing.sqlite",
        "SQLITE_DBNAME": ":memory:",
        "CIPHER_KEY": key,
        **({} if topic is None else {"CIPHER_TOPIC": topic}),
    }
    try:
        AgentApplication(env=env).close()
    except ConfigurationError as exc:
        return str(exc)
    return None


_AES_KEYS = st.sampled_from([16, 24, 32]).flatmap(
    lambda n: st.binary(min_size=n, max_size=n).map(lambda b: base64.b64encode(b).decode())
)
_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"


def _unused_bits_set(key: str, bits: int) -> str:
    """``key`` (which ends in padding) with its last character's unused bits set to
    ``bits``: another text of the same bytes."""
    body = key.rstrip("=")
    unused = 0xF if key.endswith("==") else 0x3
    last = _ALPHABET.index(body[-1])
    return body[:-1] + _ALPHABET[(last & ~unused) | (bits & unused)] + key[len(body) :]


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
    | st.tuples(_AES_KEYS.filter(lambda k: k.endswith("=")), st.integers(1, 15)).map(
        lambda k: _unused_bits_set(*k)
    ),
    topic=st.sampled_from([CIPHER_TOPIC, "eventsourcing.cipher:AESCipher", None]),
)
def test_a_cipher_key_opens_or_is_refused_naming_why_without_quoting_it(
    key: str, topic: str | None
) -> None:
    """Property: any text as CIPHER_KEY, with either of eventsourcing's AES ciphers
    named or none (it makes its own then), opens the application (the base64 of 16, 24
    or 32 bytes, as create_cipher_key writes it) or is refused with a
    ConfigurationError that says what is wrong and quotes nothing of the key. (Without
    a CIPHER_TOPIC a key the cipher reads leniently was not checked, and its review
    queue was not sealed; a text of the same bytes with unused bits set broke every
    snapshot's seal: helper-113.)"""
    refused = _opened(key, topic)
    if refused is None and topic is None and not key:
        return  # no cipher named, no key given: not encrypted
    if refused is None:
        aes = base64.b64decode(key, validate=True)
        assert len(aes) in (16, 24, 32) and base64.b64encode(aes).decode() == key
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


class HexCipher(AESCipher):
    """A cipher of the application's own, whose key is hex."""

    def __init__(self, environment: Environment) -> None:
        self.key = bytes.fromhex(environment.get("CIPHER_KEY") or "")


def test_a_cipher_of_the_applications_own_reads_its_key_its_own_way() -> None:
    """A CIPHER_TOPIC naming a cipher of the application's own (any ``Cipher``, as
    eventsourcing allows) opens with the key that cipher takes: only eventsourcing's
    AES ciphers' keys are read as base64 here (refused since ADR 0088 until
    helper-113)."""
    assert _opened("00" * 32, f"{__name__}:HexCipher") is None


@pytest.mark.parametrize("own_cipher", [False, True], ids=["default-cipher", "own-cipher"])
def test_an_encrypted_applications_queue_is_sealed_whatever_made_its_cipher(
    tmp_path: Path, own_cipher: bool
) -> None:
    """An application given a CIPHER_KEY and no CIPHER_TOPIC is encrypted by
    eventsourcing's default cipher, one naming a cipher of its own by that cipher; its
    review queue, kept in the same database, is sealed as an encrypted store's is. The
    first was kept in the clear, thread ids, tool names and arguments beside encrypted
    events (helper-113); the second refused its key as no AES key (helper-114)."""
    path = tmp_path / "app.db"
    cipher = (
        {"CIPHER_TOPIC": f"{__name__}:HexCipher", "CIPHER_KEY": "00" * 32}
        if own_cipher
        else {"CIPHER_KEY": create_cipher_key()}
    )
    env = {**persistence_env(f"sqlite:///{path}"), **cipher}
    with contextlib.closing(AgentApplication(env=env)) as app:
        store = Store.from_application(app)
        _paused(store)
        assert _listed(store, ReviewQueue.from_application(app))
    with contextlib.closing(sqlite3.connect(path)) as conn:
        tables = [
            name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        ]
        for table in (t for t in tables if t.startswith("covonaut_")):
            for row in conn.execute(f"SELECT * FROM {table}"):
                assert "pay" not in repr(row), (table, row)


_BAD_KEYS = (
    st.text(max_size=60)
    | st.binary(max_size=40).map(lambda b: base64.b64encode(b).decode())
    | st.tuples(_AES_KEYS, st.integers(0, 44), st.sampled_from([" ", "!", "-", "é"])).map(
        lambda k: k[0][: k[1]] + k[2] + k[0][k[1] :]
    )
).filter(lambda key: "\x00" not in key and _opened(key, None) is not None)


@settings(max_examples=25, deadline=None)
@given(key=_BAD_KEYS)
def test_a_bad_key_is_refused_naming_where_it_was_given_without_quoting_it(key: str) -> None:
    """A key open_store is given, or the variable ``--cipher-key-env`` names holds, that
    the cipher does not take is refused naming where it was given, not the
    application's setting CIPHER_KEY, which that operator never set (helper-223), and
    quoting nothing of it."""
    with pytest.raises(ConfigurationError, match=r"the cipher key \(open_store\(cipher_key=\)\)"):
        open_store("memory://", cipher_key=key)
    os.environ["COVONAUT_TEST_KEY"] = key
    try:
        with contextlib.redirect_stderr(io.StringIO()) as said:
            status = cli_main(
                ["threads", "--store", "memory://", "--cipher-key-env", "COVONAUT_TEST_KEY"]
            )
    finally:
        del os.environ["COVONAUT_TEST_KEY"]
    told = said.getvalue()
    assert status == 2, told
    assert "the cipher key (the variable --cipher-key-env names)" in told
    assert "CIPHER_KEY" not in told and len(told.splitlines()) == 1
    if len(key) >= 4:
        assert key not in told
