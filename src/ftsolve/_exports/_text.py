"""Writing exports safely: every file goes through the YAML or JSON serializer, header included.

Catalog strings (provider, region, instance type, GPU spelling) may hold anything an imported
file held. In a value the serializer quotes them; in the header, which YAML can only carry as
comments, they are first reduced to one printable line (`clean`) and the header is then itself
serialized and every line of that output commented out, so no string can end the comment and
start a key.
"""

from __future__ import annotations

import json
from typing import Any

import yaml

# Catalog names are at most 200 characters (Offer.MAX_NAME_CHARS); a header line need not show more.
HEADER_VALUE_MAX_CHARS = 200


def clean(value: object, limit: int = HEADER_VALUE_MAX_CHARS) -> str:
    """`value` as one printable line: line breaks (YAML's too: NEL, LS, PS), control and format
    characters become spaces, runs of spaces collapse, at most `limit` characters."""
    text = "".join(ch if ch.isprintable() else " " for ch in str(value))
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _cleaned(node: Any) -> Any:
    if isinstance(node, dict):
        return {clean(k): _cleaned(v) for k, v in node.items()}
    if isinstance(node, (list, tuple)):
        return [_cleaned(v) for v in node]
    if isinstance(node, str):
        return clean(node)
    return node


class _Dumper(yaml.SafeDumper):
    """SafeDumper writing multi-line strings (setup and run scripts) as literal blocks."""


def _str(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
    style = "|" if "\n" in data else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)


_Dumper.add_representer(str, _str)


def yaml_text(body: dict[str, Any], header: dict[str, Any] | None = None) -> str:
    """`body` as YAML, after `header` serialized as comment lines."""
    text = yaml.dump(body, Dumper=_Dumper, sort_keys=False, allow_unicode=False, width=1_000_000)
    if header is None:
        return text
    return yaml_comment(header) + text


def yaml_comment(header: dict[str, Any]) -> str:
    """`header` (strings cleaned) serialized as YAML, each line commented out."""
    dumped = yaml.safe_dump(_cleaned(header), sort_keys=False, allow_unicode=False, width=1_000_000)
    return "".join(f"# {line}\n" if line else "#\n" for line in dumped.splitlines())


HEADER_KEY = "_ftsolve"


def json_text(body: dict[str, Any], header: dict[str, Any] | None = None) -> str:
    """`body` as JSON; JSON has no comments, so the header is the first key, `_ftsolve`."""
    data = body if header is None else {HEADER_KEY: _cleaned(header), **body}
    return json.dumps(data, indent=2, ensure_ascii=True, allow_nan=False) + "\n"
