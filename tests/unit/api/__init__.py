"""Tests of the api layer: models, quantities, CRD generation, manifests, Argo CD health."""
