"""Model weights: a parsed `Source` value, fetching (file://, s3://, hf://), the on-disk store
and its index, what a model directory holds (for sizing), and the `Catalog` the rest of the
agent uses.

May import: contract, sizing, refusals, host, botocore/huggingface_hub (their fetchers only),
the standard library. Called by: slots, controlapi (models routes), runtime.
"""
