"""This node's own credentials: the keys its data plane accepts and the keys its peer file server
checks fetch tokens with (`contract.credentials` says how they are made).

Two sources: the operator's (PUT /v1/credentials, a `contract.NodeCredentials`, kept in
`<state-dir>/credentials.json`, 0600, written atomically and read back at start) and the admin's
(`--data-api-keys-file`, the legacy shared `--peer-token-file`: read at start). The data plane is
open only while it has no key at all and may be (`may_be_open`: `--allow-open-data-plane`, or
bound to loopback); otherwise a data plane without a key refuses every request. A credentials
file that cannot be read or parsed is set aside with a warning: the node then holds no operator
key (closed, never open) until the operator sends them again, which it does on its next poll.
May import: the standard library, contract, host.files. Called by: runtime (builds it), the
control API (PUT /v1/credentials; the fingerprint in GET /v1/state), the data plane and the peer
server (through their own narrow protocols).
"""

from __future__ import annotations

import hmac
import logging
from pathlib import Path

import pydantic

from mlxfleet_agent import contract
from mlxfleet_agent.host import files

log = logging.getLogger("mlxfleet_agent.credentials")
FILE_NAME = "credentials.json"


class NodeKeys:
    """Every credential this node accepts, replaced whole when the operator sends new ones."""

    def __init__(
        self,
        path: Path,
        *,
        file_keys: frozenset[str] | None = None,
        legacy_peer_token: str | None = None,
        may_be_open: bool = False,
    ) -> None:
        self.path = path
        self._file_keys = tuple(k.encode() for k in sorted(file_keys or ()))
        self._legacy_peer = legacy_peer_token.encode() if legacy_peer_token else None
        self._may_be_open = may_be_open
        self.pushed: contract.NodeCredentials | None = None
        self.fingerprint: str | None = None
        self.data_keys: tuple[bytes, ...] = self._file_keys
        self.peer_keys: tuple[str, ...] = ()
        self.open = not self.data_keys and may_be_open
        self._apply(self._read())

    @property
    def serves_peers(self) -> bool:
        """Whether any fetch token (or the legacy shared token) can open the peer server."""
        return bool(self.peer_keys) or self._legacy_peer is not None

    def save(self, creds: contract.NodeCredentials) -> None:
        """Write the operator's new keys to disk (blocking: run it in a worker thread), then
        `use` them on the event loop."""
        files.write_atomic(self.path, creds.model_dump_json(by_alias=True).encode())

    def use(self, creds: contract.NodeCredentials) -> str:
        """Accept the operator's new keys from now on (on the event loop the data plane reads
        them on); their fingerprint."""
        self._apply(creds)
        log.info("node credentials replaced", extra={"fingerprint": self.fingerprint})
        return self.fingerprint or ""

    def accepts(self, given: bytes) -> bool:
        """`given` (a bearer token) is one of the data plane's keys (constant time)."""
        ok = False
        for key in self.data_keys:
            ok |= hmac.compare_digest(given, key)
        return ok

    def fetcher(self, token: bytes, *, model_id: str) -> str | None:
        """Who may read `model_id` with `token`: the node a fetch token was made for, `"peer"`
        for the legacy shared token, None: nobody."""
        if self._legacy_peer is not None and hmac.compare_digest(token, self._legacy_peer):
            return "peer"
        try:
            text = token.decode("ascii")
        except UnicodeDecodeError:
            return None
        return contract.credentials.fetcher_of(text, peer_keys=self.peer_keys, model_id=model_id)

    def _read(self) -> contract.NodeCredentials | None:
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            log.warning(
                "cannot read the node credentials; the data plane stays closed until the "
                "operator sends them again",
                extra={"path": str(self.path), "error": exc.strerror or str(exc)},
            )
            return None
        try:
            return contract.NodeCredentials.model_validate_json(raw)
        except pydantic.ValidationError as exc:
            aside = self.path.with_name(self.path.name + ".bad")
            try:
                self.path.replace(aside)
            except OSError:
                aside = self.path
            log.warning(
                "the node credentials file is not valid (set aside); the data plane stays "
                "closed until the operator sends them again",
                extra={"path": str(aside), "error": str(exc.errors()[0]["msg"])},
            )
            return None

    def _apply(self, creds: contract.NodeCredentials | None) -> None:
        pushed = tuple(k.encode() for k in creds.data_plane) if creds is not None else ()
        data_keys = (*pushed, *self._file_keys)
        self.open = False  # closed first: never open with keys half replaced
        self.pushed = creds
        self.fingerprint = contract.credentials.fingerprint(creds) if creds is not None else None
        self.data_keys = data_keys
        self.peer_keys = tuple(creds.peer) if creds is not None else ()
        self.open = not data_keys and self._may_be_open
