"""The console's login session: a short-lived cookie, sealed (AES-GCM), that any gateway replica
can open.

The login form takes a Kubernetes token or an admin API key once; the cookie then holds the token
(to act with the caller's own rights) or the key's hash (never the key), a CSRF token and an
expiry, encrypted and authenticated with a key derived from the fleet key (HMAC-SHA256 with a
label of its own, so every replica shares it and it opens nothing else); without a fleet key a
random one per process (sessions then last until a restart and stay on one replica). Nobody can
read the credential out of the cookie or forge one. `HttpOnly; SameSite=Strict; Path=/`, and
`Secure` when the request came over TLS. State-changing requests made with the cookie must repeat
its CSRF token in `X-CSRF-Token` (or the form field `csrf`); requests with an `Authorization`
header need none.
May import: cryptography, the standard library. Called by: console.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

COOKIE = "mlxfleet_console"
TTL_S = 8 * 3600  # a working day at most; a Kubernetes token's own expiry ends it sooner
LABEL = b"mlxfleet console session v1"
NONCE_BYTES = 12
MAX_COOKIE_CHARS = 8192


@dataclass(frozen=True, slots=True)
class Session:
    kind: str  # "kube" (credential: the token) or "key" (credential: the key's SHA-256)
    credential: str
    csrf: str
    expires: float  # epoch seconds

    def csrf_ok(self, offered: str | None) -> bool:
        return bool(offered) and hmac.compare_digest(self.csrf, offered or "")


def session_key(fleet_key: str | None) -> bytes:
    """The AES-256 key sessions are sealed with."""
    if fleet_key is None:
        return secrets.token_bytes(32)
    return hmac.new(fleet_key.encode(), LABEL, hashlib.sha256).digest()


class Sessions:
    def __init__(
        self, key: bytes, *, ttl_s: float = TTL_S, clock: Callable[[], float] = time.time
    ) -> None:
        self._aead = AESGCM(key)
        self.ttl_s = ttl_s
        self._clock = clock

    def new(self, kind: str, credential: str) -> Session:
        return Session(kind, credential, secrets.token_urlsafe(24), self._clock() + self.ttl_s)

    def seal(self, s: Session) -> str:
        nonce = secrets.token_bytes(NONCE_BYTES)
        body = json.dumps({"k": s.kind, "c": s.credential, "x": s.csrf, "e": s.expires})
        sealed = self._aead.encrypt(nonce, body.encode(), LABEL)
        return base64.urlsafe_b64encode(nonce + sealed).decode().rstrip("=")

    def open(self, cookie: str | None) -> Session | None:
        """The session in a cookie; None when absent, forged, tampered with or expired."""
        if not cookie or len(cookie) > MAX_COOKIE_CHARS:
            return None
        try:
            raw = base64.urlsafe_b64decode(cookie + "=" * (-len(cookie) % 4))
            body = json.loads(self._aead.decrypt(raw[:NONCE_BYTES], raw[NONCE_BYTES:], LABEL))
            s = Session(str(body["k"]), str(body["c"]), str(body["x"]), float(body["e"]))
        except (InvalidTag, ValueError, KeyError, TypeError, binascii.Error):
            return None
        return s if s.expires > self._clock() else None

    def set_cookie(self, s: Session, *, secure: bool) -> bytes:
        attrs = (
            f"{COOKIE}={self.seal(s)}; Path=/; HttpOnly; SameSite=Strict; Max-Age={int(self.ttl_s)}"
        )
        return (attrs + ("; Secure" if secure else "")).encode()

    @staticmethod
    def clear_cookie(*, secure: bool) -> bytes:
        attrs = f"{COOKIE}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0"
        return (attrs + ("; Secure" if secure else "")).encode()
