"""Base of every wire model, the API prefix and the slot-name pattern.

May import: pydantic and the standard library only (pure).
Called by: the sibling contract modules.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

API_PREFIX = "/v1"
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


class Wire(BaseModel):
    """Base for every contract model: camelCase on the wire, tolerant of fields added later."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        validate_by_name=True,
        validate_by_alias=True,
        serialize_by_alias=True,
        extra="ignore",
    )


class StrictWire(Wire):
    """Request bodies: unknown fields are rejected so typos surface as 422 naming the field."""

    model_config = ConfigDict(extra="forbid")
