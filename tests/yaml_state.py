"""PyYAML's SafeLoader, as it was, after the SAM CLI's YAML helpers have changed it.

``samcli.yamlhelper.yaml_parse`` and ``samcli.vendor.serverlessrepo.parser.parse_template``
register constructors on ``yaml.SafeLoader`` for the whole process (mappings become
``OrderedDict``, whose equality is order-sensitive; timestamps stay strings). Tests that call them
in the pytest process restore the loader afterwards, or every later ``yaml.safe_load`` (and
samtranslator's ``yaml_parse``, which the build check uses) reads differently.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import yaml

_TABLES = ("yaml_constructors", "yaml_multi_constructors")
_CLASSES: tuple[type[Any], ...] = (yaml.SafeLoader, yaml.constructor.SafeConstructor)


@contextmanager
def safe_loader_restored() -> Iterator[None]:
    """Run the body, then put back SafeLoader's and SafeConstructor's constructor tables."""
    saved = {
        (cls, table): dict(cls.__dict__[table]) if table in cls.__dict__ else None
        for cls in _CLASSES
        for table in _TABLES
    }
    try:
        yield
    finally:
        for (cls, table), value in saved.items():
            if value is None:
                if table in cls.__dict__:
                    delattr(cls, table)
            else:
                cls.__dict__[table].clear()
                cls.__dict__[table].update(value)
