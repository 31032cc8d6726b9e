"""Provider keys: Secrets of type `mlxfleet.io/provider-key` in the gateway's namespace, and where
each one may be sent.

The Secret's owner decides both who may use the key and where it may go:

    type: mlxfleet.io/provider-key
    metadata:
      annotations:
        mlxfleet.io/allowed-namespaces: team-a,team-b          # whose routes may use it ("*": all)
        mlxfleet.io/allowed-urls: https://api.openai.com/v1    # URL prefixes it may be sent to
    stringData:
      apiKey: sk-...

A route's external URL gets the key only when one allowed URL is a prefix of it: the same scheme
(plain http only where the owner listed an http:// prefix), the same host, the same port (80/443
filled in when left out) and the prefix's path segments first, compared whole (`/v1` covers
`/v1/beta`, never `/v1evil`). No wildcards. The URLs are parsed the way the gateway's HTTP client
parses them (`urlsplit`: hostname, port), so the host compared is the host connected to. A URL
with userinfo (`user@`), a query or fragment, a dot segment (`..`, `%2e%2e`), an encoded slash or
a backslash, or a control character never matches. Without `allowed-urls` the key goes nowhere.
May import: the standard library, the sibling api modules. Called by: the gateway (catalog, view)
and the operator's ModelRoute status (core.modelroute.status), so both judge a key alike.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from mlxfleet_operator.api import modelroute as mroute

DEFAULT_PORTS = {"http": 80, "https": 443}
HOST = re.compile(r"([a-z0-9-]+\.)*[a-z0-9-]+|[0-9a-f:.]+")  # as urlsplit gives it: lower case


class InvalidUrl(ValueError):
    """A URL that cannot be matched safely; the message says why."""


@dataclass(frozen=True, slots=True)
class Destination:
    """A normalised http(s) URL: where a request goes, or an allowed prefix of it."""

    scheme: str
    host: str
    port: int
    path: tuple[str, ...]  # the path's segments, without the trailing slash

    def covers(self, url: Destination) -> bool:
        """`url` is this prefix or below it (whole path segments)."""
        head = (self.scheme, self.host, self.port)
        return head == (url.scheme, url.host, url.port) and url.path[: len(self.path)] == self.path


def destination(url: str) -> Destination:
    """Parse and normalise one http(s) URL; InvalidUrl says what is wrong with it."""
    if not url.isascii() or any(ch <= " " or ch in "\x7f\\" for ch in url):
        raise InvalidUrl("it contains a space, a control character, a backslash or non-ASCII")
    try:
        parts = urlsplit(url)
    except ValueError:
        raise InvalidUrl("it is not a URL") from None
    if parts.scheme not in DEFAULT_PORTS:
        raise InvalidUrl("it is not an http:// or https:// URL")
    if "?" in url or "#" in url:
        raise InvalidUrl("it has a query or fragment")
    if "@" in parts.netloc:
        raise InvalidUrl("it has userinfo (user@)")
    if not parts.hostname or not HOST.fullmatch(parts.hostname):
        raise InvalidUrl("its host is not a DNS name or IP address (no wildcards)")
    try:
        port = parts.port or DEFAULT_PORTS[parts.scheme]
    except ValueError:
        raise InvalidUrl("its port is not a number from 1 to 65535") from None
    path = parts.path.rstrip("/")
    segments = tuple(path.split("/")[1:]) if path else ()
    for segment in segments:
        plain = unquote(segment)
        if plain in (".", "..") or "/" in plain or "\\" in plain:
            raise InvalidUrl("its path has a dot segment or an encoded slash")
    return Destination(parts.scheme, parts.hostname, port, segments)


@dataclass(frozen=True, slots=True)
class ProviderKey:
    """A provider-key Secret: its data, whose routes may use it and where it may be sent."""

    name: str
    data: Mapping[str, str]
    namespaces: frozenset[str]  # "*" = every namespace
    urls: tuple[Destination, ...] = ()  # allowed URL prefixes; none: the key goes nowhere

    def allows(self, namespace: str) -> bool:
        return "*" in self.namespaces or namespace in self.namespaces

    def may_send_to(self, url: str) -> bool:
        """The key may go to `url` (one of the allowed prefixes covers it)."""
        try:
            found = destination(url)
        except InvalidUrl:
            return False
        return any(prefix.covers(found) for prefix in self.urls)

    def refuses(self, url: str) -> str:
        """Why a route's external URL does not get this key (for the backend's problem)."""
        if not self.urls:
            return (
                f"provider-key Secret {self.name} has no {mroute.PROVIDER_KEY_URLS} annotation "
                "listing where it may be sent"
            )
        return (
            f"provider-key Secret {self.name} may not be sent to {url}: its "
            f"{mroute.PROVIDER_KEY_URLS} annotation does not cover that URL"
        )


def _split(value: str) -> list[str]:
    return [p.strip() for p in value.split(",") if p.strip()]


def from_secret(
    name: str, annotations: Mapping[str, str], data: Mapping[str, str]
) -> tuple[ProviderKey, list[str]]:
    """One Secret's key, and what is wrong with its annotations (entries that cannot be used are
    left out: a key with none usable is sent nowhere)."""
    problems: list[str] = []
    urls: list[Destination] = []
    for entry in _split(annotations.get(mroute.PROVIDER_KEY_URLS, "")):
        try:
            urls.append(destination(entry))
        except InvalidUrl as exc:
            problems.append(
                f"{mroute.PROVIDER_KEY_URLS}: {entry!r} is left out because {exc}; list URL "
                "prefixes such as https://api.openai.com/v1 (no wildcards)"
            )
    if not urls:
        problems.append(
            f"no usable {mroute.PROVIDER_KEY_URLS} annotation, so no route may use this key: "
            "list the URL prefixes it may be sent to, such as https://api.openai.com/v1"
        )
    key = ProviderKey(
        name=name,
        data=data,
        namespaces=frozenset(_split(annotations.get(mroute.PROVIDER_KEY_NAMESPACES, ""))),
        urls=tuple(urls),
    )
    return key, problems
