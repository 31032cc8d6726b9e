"""The etcd and kube-apiserver command lines of the dev control plane (pure: argv only).

Loopback only, the given ports, data and certificates under the given folders; RBAC on, static
tokens plus bootstrap tokens, no fsync (test data), no profiling unless asked (`profiling`: the
scale bench's CPU profile of the API server, /debug/pprof, admin only). API Priority and
Fairness stays on, as in every real cluster since 1.20: without it the server refuses (429)
whatever exceeds its max-in-flight limits at once, where APF queues it fairly per client (the
500-node bench's 429s).
May import: the standard library only. Called by: dev.controlplane (`start`).
"""

from __future__ import annotations

from pathlib import Path


def etcd(*, binary: Path, data_dir: Path, client_port: int, peer_port: int) -> list[str]:
    """A one-member etcd listening on loopback."""
    return [
        str(binary),
        "--name=mlxfleet-dev",
        f"--data-dir={data_dir}",
        f"--listen-client-urls=http://127.0.0.1:{client_port}",
        f"--advertise-client-urls=http://127.0.0.1:{client_port}",
        f"--listen-peer-urls=http://127.0.0.1:{peer_port}",
        f"--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}",
        f"--initial-cluster=mlxfleet-dev=http://127.0.0.1:{peer_port}",
        "--unsafe-no-fsync",
        "--log-level=warn",
    ]


def apiserver(
    *, binary: Path, etcd_port: int, port: int, pki: Path, profiling: bool = False
) -> list[str]:
    """kube-apiserver on 127.0.0.1:`port`; `pki` holds sa.key, tokens.csv and serving/;
    `profiling`: serve /debug/pprof (to identities allowed that path: the admin)."""
    return [
        str(binary),
        f"--etcd-servers=http://127.0.0.1:{etcd_port}",
        "--bind-address=127.0.0.1",
        "--advertise-address=127.0.0.1",
        f"--secure-port={port}",
        f"--cert-dir={pki / 'serving'}",
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
        f"--service-account-key-file={pki / 'sa.key'}",
        f"--service-account-signing-key-file={pki / 'sa.key'}",
        "--service-cluster-ip-range=10.0.0.0/16",  # one Service per ModelDeployment
        "--authorization-mode=RBAC",
        f"--token-auth-file={pki / 'tokens.csv'}",
        "--enable-bootstrap-token-auth",  # `mlxfleet token create` + `mlxfleet-agent join`
        "--endpoint-reconciler-type=none",
        f"--profiling={'true' if profiling else 'false'}",
        "-v=1",
    ]
