"""Facts about the certificates this agent serves (when they expire), read from their PEM files.

May import: the standard library, cryptography. Called by: runtime.compose (the TLS expiry gauge).
"""

from __future__ import annotations

from pathlib import Path

from cryptography import x509


def expires_at(path: Path) -> float | None:
    """Unix seconds of the notAfter of the first (leaf) certificate in `path`; None when the
    file holds no PEM certificate (the server refused to start on it already)."""
    try:
        certs = x509.load_pem_x509_certificates(path.read_bytes())
    except (OSError, ValueError):
        return None
    return certs[0].not_valid_after_utc.timestamp() if certs else None
