"""Credentials for a Kubernetes API server, read without a Kubernetes client library.

`load(path)` reads a kubeconfig file's context (the current one, or the one named): the
cluster's `server`, `certificate-authority` / `-data`, `insecure-skip-tls-verify`,
`tls-server-name` and `proxy-url`; the user's `token`, `tokenFile`, `username` / `password`,
`client-certificate` / `client-key` (files, relative to the kubeconfig's folder, or `-data`) or an
`exec` plugin (client-go's ExecCredential, `client.authentication.k8s.io/v1` or `v1beta1`: run
without a terminal, its token kept until its `expirationTimestamp`, run again after). The removed
`auth-provider` plugins (gcp and azure left client-go in 1.26; oidc has an exec replacement,
kubelogin) are refused with the field named. `in_cluster()` reads the pod's ServiceAccount
(`KUBERNETES_SERVICE_HOST` / `_PORT`, the token file read again as it rotates, its CA).

Why not the `kubernetes` package's loaders, which did this before: importing any part of that
package imports all of it (511 modules, 36 MB of resident memory on its own; 10 MB more in
the operator beside what it imports anyway), in a process that needs a server, a certificate
and a header (docs/operator.md, "Kubernetes clients").

A `Credentials` says where the server is, gives its TLS settings (`ssl_context`) and the
Authorization header (`authorization`, which reads a token file again and runs an expired exec
plugin again: callers bound how often they ask). Key and certificate data are written to files
of a private temporary folder (0600; Python's TLS loads a client certificate from files only),
removed at exit. Errors are `ConfigError` naming the file and the field.
May import: the standard library, yaml. Called by: the operator's adapters.kubeapi (its own
calls, kopf's session, the election's), the agent's join.kubeapi (leave).
"""

from __future__ import annotations

import atexit
import base64
import binascii
import json
import os
import shutil
import ssl
import subprocess
import tempfile
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
EXEC_TIMEOUT_S = 60.0  # an exec plugin that answers nothing this long fails the login
EXPIRY_MARGIN_S = 10.0  # an exec token is renewed this long before it expires
EXEC_API_VERSIONS = ("client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1")


class ConfigError(Exception):
    """No usable credentials: the message names the file, and the field where one is wrong."""


@dataclass(slots=True)
class ExecPlugin:
    """A kubeconfig user's `exec` plugin: what to run, and the token it last gave."""

    command: str
    args: tuple[str, ...]
    env: dict[str, str]
    exec_info: str  # KUBERNETES_EXEC_INFO, the plugin's input
    where: str  # the kubeconfig and user, for errors
    token: str | None = None
    expires: float | None = None  # Unix seconds; None: never
    cert_pem: str | None = None
    key_pem: str | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    def current(self, now: float) -> str | None:
        """The plugin's token, running it (again) when there is none yet or it expires soon."""
        with self.lock:
            stale = self.expires is not None and now >= self.expires - EXPIRY_MARGIN_S
            if (self.token is None and self.cert_pem is None) or stale:
                self.run()
            return self.token

    def run(self) -> None:
        env = {**os.environ, **self.env, "KUBERNETES_EXEC_INFO": self.exec_info}
        try:
            done = subprocess.run(
                [self.command, *self.args],
                env=env,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=EXEC_TIMEOUT_S,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise ConfigError(f"{self.where}: exec plugin {self.command}: {exc}") from exc
        if done.returncode != 0:
            tail = done.stderr.decode("utf-8", "replace").strip()[-500:]
            raise ConfigError(
                f"{self.where}: exec plugin {self.command} exited {done.returncode}: {tail}"
            )
        try:
            found = json.loads(done.stdout)
            status = found["status"]
            if not isinstance(status, dict):
                raise TypeError("status is not an object")
        except (ValueError, KeyError, TypeError) as exc:
            raise ConfigError(
                f"{self.where}: exec plugin {self.command} did not print an ExecCredential with "
                f"a status ({exc})"
            ) from None
        token = status.get("token")
        cert, key = status.get("clientCertificateData"), status.get("clientKeyData")
        if not isinstance(token, str) and not (isinstance(cert, str) and isinstance(key, str)):
            raise ConfigError(
                f"{self.where}: exec plugin {self.command}: its status has neither a token nor "
                "clientCertificateData with clientKeyData"
            )
        self.token = token if isinstance(token, str) and token else None
        if isinstance(cert, str) and isinstance(key, str):
            self.cert_pem, self.key_pem = cert, key
        self.expires = _expiry(status.get("expirationTimestamp"), self.where)


@dataclass(slots=True)
class Credentials:
    """Where an API server is and how to prove who we are to it (see the module docstring)."""

    server: str  # scheme://host[:port], no trailing slash
    verify: bool = True
    ca_file: str | None = None
    ca_data: str | None = None  # PEM
    cert_file: str | None = None
    key_file: str | None = None
    tls_server_name: str | None = None
    proxy_url: str | None = None
    namespace: str | None = None
    token: str | None = None
    token_file: str | None = None
    basic: tuple[str, str] | None = None
    plugin: ExecPlugin | None = None

    def authorization(self, now: float | None = None) -> str | None:
        """The Authorization header: a token (a token file read now; an exec plugin's, run
        again once it expired), basic credentials, or None (a client certificate, or nothing)."""
        if self.plugin is not None:
            token = self.plugin.current(time.time() if now is None else now)
            return f"Bearer {token}" if token else None
        if self.token_file is not None:
            try:
                token = Path(self.token_file).read_text().strip()
            except OSError as exc:
                raise ConfigError(f"token file {self.token_file}: {exc}") from exc
            return f"Bearer {token}" if token else None
        if self.token:
            return f"Bearer {self.token}"
        if self.basic is not None:
            pair = base64.b64encode(f"{self.basic[0]}:{self.basic[1]}".encode()).decode()
            return f"Basic {pair}"
        return None

    @property
    def expiration(self) -> datetime | None:
        """When the current token stops being valid (an exec plugin's), for a session that
        logs in again before then; None: it does not expire on a clock."""
        if self.plugin is None or self.plugin.expires is None:
            return None
        return datetime.fromtimestamp(self.plugin.expires).astimezone()

    def ssl_context(self) -> ssl.SSLContext:
        """TLS to the server: its CA (else the system's), the client certificate, and no
        check at all when the kubeconfig says `insecure-skip-tls-verify`."""
        context = ssl.create_default_context(cafile=self.ca_file or None)
        if self.ca_data:
            try:
                context.load_verify_locations(cadata=self.ca_data)
            except ssl.SSLError as exc:
                raise ConfigError(
                    f"certificate-authority-data: not a PEM certificate ({exc})"
                ) from None
        if not self.verify:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        if self.cert_file:
            try:
                context.load_cert_chain(self.cert_file, self.key_file or None)
            except (ssl.SSLError, OSError) as exc:
                raise ConfigError(
                    f"client certificate {self.cert_file} / key {self.key_file}: {exc}"
                ) from None
        return context


def load(path: str | os.PathLike[str], *, context: str | None = None) -> Credentials:
    """The credentials of `context` (None: `current-context`) in the kubeconfig at `path`;
    an exec plugin runs once here (blocking: call it off an event loop)."""
    where = f"kubeconfig {path}"
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ConfigError(f"{where}: {exc.strerror or exc}") from exc
    try:
        config = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{where}: not YAML ({exc})") from None
    if not isinstance(config, dict):
        raise ConfigError(f"{where}: not a kubeconfig (expected a mapping with contexts)")
    name = context or config.get("current-context")
    if not isinstance(name, str) or not name:
        raise ConfigError(f"{where}: no current-context, and no context was named")
    ctx = _named(config, "contexts", "context", name, where)
    cluster_name, user_name = ctx.get("cluster"), ctx.get("user")
    if not isinstance(cluster_name, str):
        raise ConfigError(f"{where}: context {name!r} names no cluster")
    cluster = _named(config, "clusters", "cluster", cluster_name, where)
    user = _named(config, "users", "user", user_name, where) if user_name else {}
    base = Path(path).parent
    server = cluster.get("server")
    if not isinstance(server, str) or "://" not in server:
        raise ConfigError(
            f"{where}: cluster {cluster_name!r} server must be a URL (https://host:port), "
            f"got {server!r}"
        )
    creds = Credentials(
        server=server.rstrip("/"),
        verify=not bool(cluster.get("insecure-skip-tls-verify")),
        ca_file=_path(cluster.get("certificate-authority"), base),
        ca_data=_pem(cluster, "certificate-authority-data", f"{where}: cluster {cluster_name!r}"),
        tls_server_name=_text(cluster.get("tls-server-name")),
        proxy_url=_text(cluster.get("proxy-url")),
        namespace=_text(ctx.get("namespace")),
    )
    _user(creds, user, base, f"{where}: user {user_name!r}", cluster=cluster)
    return creds


def in_cluster(root: Path = SERVICE_ACCOUNT) -> Credentials:
    """The pod's ServiceAccount: its API server from the environment, its CA and token files
    (the token read again at each `authorization`: the kubelet rotates it)."""
    host = os.environ.get("KUBERNETES_SERVICE_HOST", "")
    port = os.environ.get("KUBERNETES_SERVICE_PORT", "")
    if not host or not port:
        raise ConfigError(
            "not running in a pod: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are unset"
        )
    token = root / "token"
    if not token.is_file():
        raise ConfigError(f"in-cluster: no ServiceAccount token at {token}")
    ca = root / "ca.crt"
    try:
        namespace: str | None = (root / "namespace").read_text().strip() or None
    except OSError:
        namespace = None
    host = f"[{host}]" if ":" in host else host
    return Credentials(
        server=f"https://{host}:{port}",
        ca_file=str(ca) if ca.is_file() else None,
        token_file=str(token),
        namespace=namespace,
    )


def _user(
    creds: Credentials,
    user: Mapping[str, Any],
    base: Path,
    where: str,
    *,
    cluster: Mapping[str, Any],
) -> None:
    """The user's way of proving who it is, onto `creds`."""
    if "auth-provider" in user:
        found = user["auth-provider"]
        kind = found.get("name") if isinstance(found, dict) else None
        raise ConfigError(
            f"{where}: auth-provider {kind!r} is not supported (client-go removed these plugins); "
            "use an exec plugin (for OIDC: kubelogin's `kubectl oidc-login`), a token or a "
            "client certificate"
        )
    creds.token = _text(user.get("token"))
    creds.token_file = _path(user.get("tokenFile"), base)
    username, password = user.get("username"), user.get("password")
    if isinstance(username, str) and isinstance(password, str):
        creds.basic = (username, password)
    cert_pem = _pem(user, "client-certificate-data", where)
    key_pem = _pem(user, "client-key-data", where)
    creds.cert_file = _path(user.get("client-certificate"), base)
    creds.key_file = _path(user.get("client-key"), base)
    found = user.get("exec")
    if found is not None:
        creds.plugin = _plugin(found, base, where, cluster=cluster, server=creds.server)
        creds.plugin.current(time.time())  # fails the load, not the first request
        if creds.plugin.cert_pem is not None:
            cert_pem, key_pem = creds.plugin.cert_pem, creds.plugin.key_pem
    if cert_pem is not None:
        creds.cert_file = _private_file(cert_pem.encode(), "client.crt")
    if key_pem is not None:
        creds.key_file = _private_file(key_pem.encode(), "client.key")
    if creds.cert_file and not creds.key_file:
        raise ConfigError(f"{where}: client-certificate without client-key (or client-key-data)")


def _plugin(
    found: object, base: Path, where: str, *, cluster: Mapping[str, Any], server: str
) -> ExecPlugin:
    if not isinstance(found, dict) or not isinstance(found.get("command"), str):
        raise ConfigError(f"{where}: exec needs a command (a string)")
    version = found.get("apiVersion")
    if version not in EXEC_API_VERSIONS:
        raise ConfigError(
            f"{where}: exec apiVersion {version!r} is not one of {', '.join(EXEC_API_VERSIONS)}"
        )
    if found.get("interactiveMode") == "Always":
        raise ConfigError(f"{where}: exec interactiveMode Always needs a terminal; this has none")
    command = found["command"]
    if os.sep in command and not os.path.isabs(command):  # client-go: relative to the file
        command = str(base / command)
    args = found.get("args") or []
    env = found.get("env") or []
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise ConfigError(f"{where}: exec args must be a list of strings")
    if not isinstance(env, list) or not all(
        isinstance(e, dict) and isinstance(e.get("name"), str) and isinstance(e.get("value"), str)
        for e in env
    ):
        raise ConfigError(f"{where}: exec env must be a list of {{name, value}} strings")
    spec: dict[str, Any] = {"interactive": False}
    if found.get("provideClusterInfo"):
        info: dict[str, Any] = {"server": server}
        for key, out in (
            ("certificate-authority-data", "certificate-authority-data"),
            ("insecure-skip-tls-verify", "insecure-skip-tls-verify"),
            ("tls-server-name", "tls-server-name"),
            ("proxy-url", "proxy-url"),
        ):
            if key in cluster:
                info[out] = cluster[key]
        spec["cluster"] = info
    exec_info = json.dumps({"apiVersion": version, "kind": "ExecCredential", "spec": spec})
    return ExecPlugin(
        command=command,
        args=tuple(args),
        env={e["name"]: e["value"] for e in env},
        exec_info=exec_info,
        where=where,
    )


def _named(
    config: Mapping[str, Any], section: str, key: str, name: object, where: str
) -> dict[str, Any]:
    """The `key` mapping of the entry called `name` in the list `section`."""
    entries = config.get(section)
    for entry in entries if isinstance(entries, list) else ():
        if isinstance(entry, dict) and entry.get("name") == name:
            found = entry.get(key)
            if found is None:
                return {}
            if not isinstance(found, dict):
                raise ConfigError(f"{where}: {section} entry {name!r}: {key} must be a mapping")
            return found
    raise ConfigError(f"{where}: {section} has no entry named {name!r}")


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _path(value: object, base: Path) -> str | None:
    """A file the kubeconfig names, relative to its own folder."""
    if not isinstance(value, str) or not value:
        return None
    return str(base / os.path.expanduser(value))


def _pem(section: Mapping[str, Any], key: str, where: str) -> str | None:
    value = section.get(key)
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise ConfigError(f"{where}: {key} must be base64 text")
    try:
        return base64.b64decode("".join(value.split()), validate=True).decode()
    except (binascii.Error, UnicodeDecodeError) as exc:
        raise ConfigError(f"{where}: {key} is not base64 of a PEM file ({exc})") from None


def _expiry(value: object, where: str) -> float | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise ConfigError(f"{where}: exec expirationTimestamp must be an RFC 3339 time")
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        raise ConfigError(
            f"{where}: exec expirationTimestamp {value!r} is not an RFC 3339 time"
        ) from None


_private: list[str] = []
_private_lock = threading.Lock()


def _private_file(data: bytes, name: str) -> str:
    """`data` in a new 0600 file of this process's private folder (removed at exit)."""
    with _private_lock:
        if not _private:
            _private.append(tempfile.mkdtemp(prefix="mlxfleet-kube-"))
            atexit.register(shutil.rmtree, _private[0], True)
        fd, out = tempfile.mkstemp(dir=_private[0], suffix=f"-{name}")
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    return out
