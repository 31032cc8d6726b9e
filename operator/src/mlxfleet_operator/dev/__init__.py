"""Developer tooling: the local control plane (etcd + kube-apiserver on loopback) and the demo.

May import: any operator module. Called by: `mlxfleet dev ...`, the Makefile and the test fixtures.
"""
