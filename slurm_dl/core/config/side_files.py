"""The files a site config names beside itself (a Gittins prior, a throughput matrix), read
while the config is validated so that a bad file is reported at its key; a relative path is
taken from the folder of the config file (the ``base_dir`` of the validation context)."""

from __future__ import annotations

import csv
from pathlib import Path

from pydantic import ValidationInfo

from ..throughput import parse_matrix_csv
from .base import MAX_GPU_S


MAX_PRIOR_SAMPLES = 10_000_000


def side_file_path(name: str, info: ValidationInfo) -> Path:
    """Where the file a key names is: relative to the config file's folder when there is one."""
    base = info.context.get("base_dir") if isinstance(info.context, dict) else None
    return Path(base) / name if base is not None else Path(name)


def read_prior_csv(path: Path) -> tuple[float, ...]:
    """Sorted GPU-second durations from a CSV with a ``duration`` column; ValueError says why not."""
    try:
        with open(path, newline="", encoding="utf-8") as fh:
            reader = csv.DictReader(fh)
            if "duration" not in (reader.fieldnames or []):
                raise ValueError(
                    f"{path}: no 'duration' column; allowed: 'tiresias' or a CSV file with one"
                )
            out: list[float] = []
            for row in reader:
                raw = (row.get("duration") or "").strip()
                if not raw:
                    continue
                try:
                    x = float(raw)
                except ValueError:
                    raise ValueError(
                        f"{path}, line {reader.line_num}: duration {raw[:40]!r} is not a number"
                    ) from None
                if not (0 <= x <= MAX_GPU_S):
                    raise ValueError(
                        f"{path}, line {reader.line_num}: duration {raw[:40]!r} is outside 0 to {MAX_GPU_S:g}"
                    )
                out.append(x)
                if len(out) > MAX_PRIOR_SAMPLES:
                    raise ValueError(f"{path}: more than {MAX_PRIOR_SAMPLES} durations")
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise ValueError(
            f"cannot read {path} ({getattr(e, 'strerror', None) or e}); "
            "allowed: 'tiresias' or a readable CSV file"
        ) from None
    if not out:
        raise ValueError(f"{path}: no durations in the 'duration' column")
    return tuple(sorted(out))


def read_matrix_csv(path: Path) -> dict[str, dict[str, float]]:
    """The throughput matrix CSV at ``path``; ValueError says why not (file, line, cell)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(
            f"cannot read {path} ({getattr(e, 'strerror', None) or e}); allowed: a readable "
            "CSV file kind,TYPE1,TYPE2,..."
        ) from None
    return parse_matrix_csv(text, str(path))
