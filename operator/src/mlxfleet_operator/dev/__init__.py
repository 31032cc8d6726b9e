"""Developer tooling: the local control plane (etcd + kube-apiserver on loopback) and the demo.

Control plane: `controlplane` (lifecycle and the `ControlPlane` handle), `commands` (etcd and
kube-apiserver command lines), `credentials` (identities, tokens, kubeconfigs), `processes`
(spawn, terminate, free ports). Demo: `demo` (the story), `demofleet` (its processes),
`demoobjects` (its Kubernetes objects), `demotraffic` (the openai client and load generator).
`cli` is `mlxfleet dev ...`.
May import: any operator module. Called by: `mlxfleet dev ...`, the Makefile and the test fixtures.
"""
