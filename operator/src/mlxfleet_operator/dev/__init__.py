"""Developer tooling: the local control plane (etcd + kube-apiserver on loopback) and the demo.

Control plane: `controlplane` (lifecycle and the `ControlPlane` handle), `commands` (etcd and
kube-apiserver command lines), `credentials` (identities, tokens, kubeconfigs), `processes`
(spawn, terminate, free ports). `demo` is `make demo`; `cli` is `mlxfleet dev ...`.
May import: any operator module. Called by: `mlxfleet dev ...`, the Makefile and the test fixtures.
"""
