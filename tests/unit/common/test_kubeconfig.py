"""The shared kubeconfig loader (`mlxfleet_common.kubeconfig`): what the operator, kopf's session
and `mlxfleet-agent leave` authenticate with, read without the `kubernetes` package.

Each way a kubeconfig user proves who it is (token, token file, basic, client certificate
data, exec plugin), the in-cluster ServiceAccount, and malformed files: every error names the
file and the field. The client certificate is checked in a real TLS handshake with a loopback
server that requires it; the exec plugin is a real program run by the loader.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import ssl
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from aiohttp import web

from mlxfleet_agent.join import credentials
from mlxfleet_common import kubeconfig

CLUSTER = '{server: "https://127.0.0.1:6443", insecure-skip-tls-verify: true}'


def _write(tmp_path: Path, user: str, *, cluster: str = CLUSTER, extra: str = "") -> Path:
    path = tmp_path / "kubeconfig"
    path.write_text(
        textwrap.dedent(
            f"""\
            apiVersion: v1
            kind: Config
            clusters: [{{name: c, cluster: {cluster}}}]
            users: [{{name: u, user: {user}}}]
            contexts:
            - {{name: x, context: {{cluster: c, user: u, namespace: team-a}}}}
            - {{name: other, context: {{cluster: c}}}}
            current-context: x
            {extra}"""
        )
    )
    return path


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def test_a_token_user_and_the_cluster_settings(tmp_path: Path) -> None:
    cluster = (
        '{server: "https://kube.test:6443/", tls-server-name: api.internal, '
        'proxy-url: "http://proxy.test:3128", certificate-authority: ca.crt}'
    )
    creds = kubeconfig.load(_write(tmp_path, "{token: secret-token}", cluster=cluster))
    assert creds.server == "https://kube.test:6443"  # no trailing slash
    assert creds.authorization() == "Bearer secret-token"
    assert creds.tls_server_name == "api.internal"
    assert creds.proxy_url == "http://proxy.test:3128"
    assert creds.ca_file == str(tmp_path / "ca.crt")  # relative to the kubeconfig's folder
    assert creds.verify
    assert creds.namespace == "team-a"
    assert creds.expiration is None


def test_a_named_context_wins_over_the_current_one(tmp_path: Path) -> None:
    creds = kubeconfig.load(_write(tmp_path, "{token: t}"), context="other")
    assert creds.authorization() is None  # that context names no user
    assert creds.namespace is None


def test_a_token_file_is_read_again_at_each_ask(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("first\n")
    creds = kubeconfig.load(_write(tmp_path, "{tokenFile: token}"))
    assert creds.authorization() == "Bearer first"
    token.write_text("rotated\n")
    assert creds.authorization() == "Bearer rotated"
    token.unlink()
    with pytest.raises(kubeconfig.ConfigError, match="token file"):
        creds.authorization()


def test_basic_credentials(tmp_path: Path) -> None:
    creds = kubeconfig.load(_write(tmp_path, "{username: ada, password: 's3cret'}"))
    assert creds.authorization() == "Basic " + _b64("ada:s3cret")


def test_client_certificate_data_is_written_private_and_used_in_a_handshake(
    tmp_path: Path,
) -> None:
    """The server requires a client certificate and trusts only ours: the handshake succeeds
    with the credentials' context and fails without the certificate."""
    server_cert, server_key = credentials.self_signed("kube.test")
    client_cert, client_key = credentials.self_signed("operator", client=True)
    (tmp_path / "server.crt").write_text(server_cert)
    (tmp_path / "server.key").write_text(server_key)
    (tmp_path / "client.crt").write_text(client_cert)
    cluster = (
        '{server: "https://127.0.0.1:1", tls-server-name: kube.test, '
        f"certificate-authority-data: {_b64(server_cert)}}}"
    )
    user = f"{{client-certificate-data: {_b64(client_cert)}, client-key-data: {_b64(client_key)}}}"
    creds = kubeconfig.load(_write(tmp_path, user, cluster=cluster))
    assert creds.authorization() is None
    for name in (creds.cert_file, creds.key_file):
        assert name is not None
        assert stat.S_IMODE(os.stat(name).st_mode) == 0o600
    assert Path(creds.key_file or "").read_text() == client_key

    async def handshake(context: ssl.SSLContext) -> int:
        server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        server_tls.load_cert_chain(tmp_path / "server.crt", tmp_path / "server.key")
        server_tls.verify_mode = ssl.CERT_REQUIRED
        server_tls.load_verify_locations(tmp_path / "client.crt")

        async def hello(request: web.Request) -> web.Response:
            return web.Response(text="hello")

        app = web.Application()
        app.router.add_get("/", hello)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=server_tls)
        await site.start()
        port = runner.addresses[0][1]
        try:
            reader, writer = await asyncio.open_connection(
                "127.0.0.1", port, ssl=context, server_hostname="kube.test"
            )
            writer.write(b"GET / HTTP/1.1\r\nHost: kube.test\r\nConnection: close\r\n\r\n")
            answer = await reader.read()
            writer.close()
            return int(answer.split()[1])
        finally:
            await runner.cleanup()

    assert asyncio.run(handshake(creds.ssl_context())) == 200
    bare = ssl.create_default_context(cadata=server_cert)  # the CA, no client certificate
    with pytest.raises((ssl.SSLError, ConnectionError, IndexError)):
        asyncio.run(handshake(bare))


def _plugin(tmp_path: Path, *, expires_in: float | None, fail: bool = False) -> Path:
    """An exec plugin (a real program): prints a new token per run, counts its runs, writes its
    KUBERNETES_EXEC_INFO and the env the kubeconfig gives it."""
    script = tmp_path / "plugin.py"
    expiry = (
        "None"
        if expires_in is None
        else f"time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(time.time() + {expires_in}))"
    )
    script.write_text(
        textwrap.dedent(
            f"""\
            import json, os, sys, time
            runs = {str(tmp_path / "runs")!r}
            n = len(open(runs).read()) if os.path.exists(runs) else 0
            open(runs, "a").write("x")
            open({str(tmp_path / "info.json")!r}, "w").write(os.environ["KUBERNETES_EXEC_INFO"])
            if {fail!r}:
                print("login required: run kubelogin", file=sys.stderr)
                sys.exit(3)
            status = {{"token": f"{{os.environ['PLUGIN_PREFIX']}}-{{n}}"}}
            expiry = {expiry}
            if expiry is not None:
                status["expirationTimestamp"] = expiry
            print(json.dumps({{"apiVersion": "client.authentication.k8s.io/v1",
                              "kind": "ExecCredential", "status": status}}))
            """
        )
    )
    return script


def _exec_user(script: Path, extra: str = "") -> str:
    return (
        f"{{exec: {{apiVersion: client.authentication.k8s.io/v1, command: {sys.executable}, "
        f"args: [{script}], env: [{{name: PLUGIN_PREFIX, value: tok}}]{extra}}}}}"
    )


def test_an_exec_plugin_runs_once_until_its_token_expires(tmp_path: Path) -> None:
    script = _plugin(tmp_path, expires_in=kubeconfig.EXPIRY_MARGIN_S + 60)
    cluster = (
        '{server: "https://127.0.0.1:6443", certificate-authority-data: '
        f"{_b64('not used')}, insecure-skip-tls-verify: true}}"
    )
    creds = kubeconfig.load(
        _write(tmp_path, _exec_user(script, ", provideClusterInfo: true"), cluster=cluster)
    )
    assert (tmp_path / "runs").read_text() == "x"  # the load ran it: a failure fails the load
    assert creds.authorization() == "Bearer tok-0"
    assert creds.authorization() == "Bearer tok-0"  # kept while valid
    assert creds.expiration is not None
    info = json.loads((tmp_path / "info.json").read_text())
    assert info["kind"] == "ExecCredential"
    assert info["spec"]["interactive"] is False
    assert info["spec"]["cluster"]["server"] == "https://127.0.0.1:6443"
    # past its expiry (less the margin): run again
    later = time.time() + 61
    assert creds.authorization(now=later) == "Bearer tok-1"
    assert (tmp_path / "runs").read_text() == "xx"


def test_an_exec_plugin_without_expiry_runs_once(tmp_path: Path) -> None:
    creds = kubeconfig.load(_write(tmp_path, _exec_user(_plugin(tmp_path, expires_in=None))))
    for _ in range(3):
        assert creds.authorization(now=time.time() + 86_400) == "Bearer tok-0"
    assert (tmp_path / "runs").read_text() == "x"


def test_a_failing_exec_plugin_fails_the_load_with_its_message(tmp_path: Path) -> None:
    path = _write(tmp_path, _exec_user(_plugin(tmp_path, expires_in=None, fail=True)))
    with pytest.raises(kubeconfig.ConfigError, match=r"exited 3: login required"):
        kubeconfig.load(path)


def test_in_cluster_reads_the_service_account(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(kubeconfig.ConfigError, match="not running in a pod"):
        kubeconfig.in_cluster(tmp_path)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "fd00::1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    with pytest.raises(kubeconfig.ConfigError, match="no ServiceAccount token"):
        kubeconfig.in_cluster(tmp_path)
    (tmp_path / "token").write_text("sa-1")
    (tmp_path / "ca.crt").write_text("pem")
    (tmp_path / "namespace").write_text("mlxfleet-system\n")
    creds = kubeconfig.in_cluster(tmp_path)
    assert creds.server == "https://[fd00::1]:443"
    assert creds.ca_file == str(tmp_path / "ca.crt")
    assert creds.namespace == "mlxfleet-system"
    assert creds.authorization() == "Bearer sa-1"
    (tmp_path / "token").write_text("sa-2")  # the kubelet rotated it
    assert creds.authorization() == "Bearer sa-2"


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("[unclosed", "not YAML"),
        ("- a list", "not a kubeconfig"),
        ("clusters: []", "no current-context"),
        ("current-context: nowhere\ncontexts: []", "contexts has no entry named 'nowhere'"),
        (
            "current-context: x\ncontexts: [{name: x, context: {user: u}}]",
            "context 'x' names no cluster",
        ),
        (
            "current-context: x\ncontexts: [{name: x, context: {cluster: c}}]\nclusters: []",
            "clusters has no entry named 'c'",
        ),
        (
            "current-context: x\ncontexts: [{name: x, context: {cluster: c}}]\n"
            "clusters: [{name: c, cluster: {server: kube:6443}}]",
            r"server must be a URL \(https://host:port\), got 'kube:6443'",
        ),
        (
            "current-context: x\ncontexts: [{name: x, context: {cluster: c}}]\n"
            "clusters: [{name: c, cluster: [not, a, mapping]}]",
            "cluster must be a mapping",
        ),
    ],
)
def test_malformed_files_name_what_is_wrong(tmp_path: Path, text: str, error: str) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text(text)
    with pytest.raises(kubeconfig.ConfigError, match=error) as caught:
        kubeconfig.load(path)
    assert str(path) in str(caught.value)


@pytest.mark.parametrize(
    ("user", "error"),
    [
        (
            "{auth-provider: {name: oidc, config: {id-token: x}}}",
            "user 'u': auth-provider 'oidc' is not supported.*exec plugin",
        ),
        ("{client-certificate-data: '%%%'}", "client-certificate-data is not base64"),
        ("{client-certificate-data: 42}", "client-certificate-data must be base64 text"),
        ("{client-certificate: c.crt}", "client-certificate without client-key"),
        ("{exec: {command: [a, list]}}", "exec needs a command"),
        (
            "{exec: {apiVersion: client.authentication.k8s.io/v1alpha1, command: x}}",
            "exec apiVersion 'client.authentication.k8s.io/v1alpha1' is not one of",
        ),
        (
            "{exec: {apiVersion: client.authentication.k8s.io/v1, command: x, "
            "interactiveMode: Always}}",
            "interactiveMode Always needs a terminal",
        ),
        (
            "{exec: {apiVersion: client.authentication.k8s.io/v1, command: x, args: [1, 2]}}",
            "exec args must be a list of strings",
        ),
        (
            "{exec: {apiVersion: client.authentication.k8s.io/v1, command: x, env: [{a: b}]}}",
            r"exec env must be a list of \{name, value\} strings",
        ),
        (
            "{exec: {apiVersion: client.authentication.k8s.io/v1, command: /nonexistent/plugin}}",
            "exec plugin /nonexistent/plugin",
        ),
    ],
)
def test_malformed_users_name_the_field(tmp_path: Path, user: str, error: str) -> None:
    with pytest.raises(kubeconfig.ConfigError, match=error):
        kubeconfig.load(_write(tmp_path, user))


@pytest.mark.parametrize(
    ("stdout", "error"),
    [
        ("not json", "did not print an ExecCredential"),
        ('{"status": "no"}', "did not print an ExecCredential"),
        ('{"status": {}}', "neither a token nor clientCertificateData"),
        (
            '{"status": {"token": "t", "expirationTimestamp": "tomorrow"}}',
            "expirationTimestamp 'tomorrow' is not an RFC 3339 time",
        ),
    ],
)
def test_a_plugin_answer_that_is_not_a_credential_is_an_error(
    tmp_path: Path, stdout: str, error: str
) -> None:
    script = tmp_path / "plugin.py"
    script.write_text(f"print({stdout!r})")
    user = (
        f"{{exec: {{apiVersion: client.authentication.k8s.io/v1beta1, "
        f"command: {sys.executable}, args: [{script}]}}}}"
    )
    with pytest.raises(kubeconfig.ConfigError, match=error):
        kubeconfig.load(_write(tmp_path, user))


def test_the_operator_process_never_loads_the_kubernetes_package() -> None:
    """kopf imports the `kubernetes` client whenever it is installed (10 MB for nothing in the
    operator); the operator's entry keeps it out, and nothing the operator runs needs it."""
    code = textwrap.dedent(
        """\
        import sys
        from mlxfleet_operator import main
        main.keep_kubernetes_out()
        import kopf
        from mlxfleet_operator import handlers
        from mlxfleet_operator.adapters import apisession, election, kubeapi, lease, runtime
        loaded = sorted(m for m in sys.modules if m.startswith("kubernetes") and sys.modules[m])
        print(",".join(loaded) or "none")
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert done.stdout.strip() == "none"
