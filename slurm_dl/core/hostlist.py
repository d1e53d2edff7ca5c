"""Slurm hostlist expressions (``gpu[01-04,07]``, ``a1,b[1-2]``): expand and compress."""

from __future__ import annotations

import re

_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")


def _split_top(expr: str) -> list[str]:
    parts, depth, cur = [], 0, ""
    for ch in expr:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise ValueError(f"unbalanced ']' in hostlist {expr!r}")
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    if depth != 0:
        raise ValueError(f"unbalanced '[' in hostlist {expr!r}")
    parts.append(cur)
    return [p for p in (x.strip() for x in parts) if p]


def _expand_one(item: str, whole: str) -> list[str]:
    m = re.match(r"^([^\[\]]*)\[([^\[\]]+)\](.*)$", item)
    if not m:
        if "[" in item or "]" in item:
            raise ValueError(f"bad bracket in hostlist {whole!r}")
        return [item]
    prefix, body, rest = m.groups()
    out: list[str] = []
    for rng in body.split(","):
        rm = _RANGE.match(rng.strip())
        if not rm:
            raise ValueError(f"bad range {rng!r} in hostlist {whole!r}")
        lo_s, hi_s = rm.group(1), rm.group(2) or rm.group(1)
        lo, hi = int(lo_s), int(hi_s)
        if hi < lo:
            raise ValueError(f"descending range {rng!r} in hostlist {whole!r}")
        if hi - lo > 100_000:
            raise ValueError(f"range {rng!r} too large in hostlist {whole!r}")
        width = len(lo_s)
        for i in range(lo, hi + 1):
            for tail in _expand_one(rest, whole):
                out.append(f"{prefix}{i:0{width}d}{tail}")
    return out


def expand_hostlist(expr: str) -> list[str]:
    """``gpu[01-03]`` → ``['gpu01', 'gpu02', 'gpu03']``. Raises ValueError on a malformed list."""
    if not isinstance(expr, str) or not expr.strip():
        raise ValueError("empty hostlist")
    out: list[str] = []
    for item in _split_top(expr.strip()):
        out.extend(_expand_one(item, expr))
    return out


def compress_hostlist(names: list[str]) -> str:
    """The inverse of :func:`expand_hostlist` for names of the form PREFIX + zero-padded number."""
    groups: dict[tuple[str, int], list[int]] = {}
    plain: list[str] = []
    order: list[tuple[str, int] | str] = []
    for n in names:
        m = re.match(r"^(.*?)(\d+)$", n)
        if not m:
            plain.append(n)
            order.append(n)
            continue
        key = (m.group(1), len(m.group(2)))
        if key not in groups:
            groups[key] = []
            order.append(key)
        groups[key].append(int(m.group(2)))
    parts: list[str] = []
    for key in order:
        if isinstance(key, str):
            parts.append(key)
            continue
        prefix, width = key
        nums = sorted(set(groups[key]))
        if len(nums) == 1:
            parts.append(f"{prefix}{nums[0]:0{width}d}")
            continue
        ranges, start, prev = [], nums[0], nums[0]
        for x in nums[1:] + [None]:  # type: ignore[list-item]
            if x is not None and x == prev + 1:
                prev = x
                continue
            ranges.append(f"{start:0{width}d}" if start == prev else f"{start:0{width}d}-{prev:0{width}d}")
            if x is not None:
                start = prev = x
        parts.append(f"{prefix}[{','.join(ranges)}]")
    return ",".join(parts)
