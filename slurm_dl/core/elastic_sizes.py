"""The GPU counts an elastic job may run at: a range (``8-32``) or a set (``8,16,32``).

The one place slurm-dl reads them: the filter (``dl:elastic=`` in ``--comment``), the tag
(``elastic=8-32`` or ``elastic=8+16+32``: the tag's own spelling of a set) and the resize
executor. Pure; errors are ValueError with a message for users, naming the bad value.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MAX_SIZES = 32
MAX_ELASTIC_GPUS = 100_000
_RANGE = re.compile(r"^(\d{1,7})-(\d{1,7})$")
_SET = re.compile(rf"^\d{{1,6}}(?:[,+]\d{{1,6}}){{0,{MAX_SIZES - 1}}}$")


@dataclass(frozen=True, slots=True)
class ElasticSizes:
    """``low``..``high`` (a range: every count between), or exactly ``choices`` (a set)."""

    low: int
    high: int
    choices: tuple[int, ...] | None = None

    @property
    def is_range(self) -> bool:
        return self.choices is None

    def allows(self, gpus: int) -> bool:
        if self.choices is not None:
            return gpus in self.choices
        return self.low <= gpus <= self.high

    def sizes(self, fits=lambda g: True) -> tuple[int, ...]:
        """The allowed counts (ascending) that ``fits`` accepts (e.g. the node shapes)."""
        pool = self.choices if self.choices is not None else range(self.low, self.high + 1)
        return tuple(g for g in pool if fits(g))

    def text(self) -> str:
        """As users write it: ``8-32`` or ``8,16,32``."""
        if self.choices is None:
            return f"{self.low}-{self.high}"
        return ",".join(str(g) for g in self.choices)

    def tag_text(self) -> str:
        """As the tag writes it: ``8-32`` or ``8+16+32``."""
        return self.text().replace(",", "+")


def parse_sizes(text: str) -> ElasticSizes:
    """``8-32`` or ``8,16,32`` (also ``8+16+32``) -> ElasticSizes; ValueError names the bad part."""
    value = text.strip()
    m = _RANGE.match(value)
    if m:
        low, high = int(m.group(1)), int(m.group(2))
        if low < 1:
            raise ValueError(f"elastic GPUs {value!r}: the minimum must be at least 1")
        if low >= high:
            raise ValueError(
                f"elastic GPUs {value!r}: the minimum {low} must be below the maximum {high}"
            )
        if high > MAX_ELASTIC_GPUS:
            raise ValueError(f"elastic GPUs {value!r}: at most {MAX_ELASTIC_GPUS} GPUs")
        return ElasticSizes(low, high)
    if not _SET.match(value):
        raise ValueError(
            f"elastic GPUs {value!r}: write a range (8-32) or sizes in rising order (8,16,32)"
        )
    counts = [int(p) for p in re.split(r"[,+]", value)]
    if len(counts) < 2:
        raise ValueError(f"elastic GPUs {value!r}: name at least two sizes (8,16) or a range")
    if counts[0] < 1:
        raise ValueError(f"elastic GPUs {value!r}: the smallest size must be at least 1")
    for a, b in zip(counts, counts[1:]):
        if a == b:
            raise ValueError(f"elastic GPUs {value!r}: {a} is given twice")
        if b < a:
            raise ValueError(f"elastic GPUs {value!r}: {b} comes after {a}; sort the sizes")
    if counts[-1] > MAX_ELASTIC_GPUS:
        raise ValueError(f"elastic GPUs {value!r}: at most {MAX_ELASTIC_GPUS} GPUs")
    return ElasticSizes(counts[0], counts[-1], tuple(counts))


def parse_tag_sizes(text: str) -> ElasticSizes | None:
    """The tag's ``elastic=`` value, or None when it is not one (never raises)."""
    try:
        return parse_sizes(text)
    except ValueError:
        return None


def fits_nodes(gpus: int, gpus_per_node: int, nodes: int) -> bool:
    """Whether ``gpus`` fit whole on one node, or as whole nodes of the site's shape."""
    if gpus < 1 or gpus_per_node < 1:
        return False
    if gpus <= gpus_per_node:
        return True
    return gpus % gpus_per_node == 0 and gpus // gpus_per_node <= nodes


def node_shape(gpus: int, gpus_per_node: int) -> tuple[int, int]:
    """(nodes, GPUs per node) a size that fits runs as (see :func:`fits_nodes`)."""
    if gpus <= gpus_per_node:
        return 1, gpus
    return gpus // gpus_per_node, gpus_per_node
