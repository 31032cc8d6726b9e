"""This machine and the plumbing every folder shares: OS facts and process hooks (`platform`),
durable file writes (`files`), the one S3 client builder (`s3client`), when the served
certificate expires (`certs`).

May import: psutil, boto3 (s3client only), cryptography (certs only), the standard library.
Called by: models, backends, telemetry, slots, controlapi, runtime.
"""
