"""Write one named section of BENCHMARKS.md (between HTML comment markers), keeping the rest."""
from __future__ import annotations

import platform
import re
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def machine() -> str:
    import numpy as np

    try:
        from threadpoolctl import threadpool_info

        blas = ", ".join(f"{i.get('internal_api')} {i.get('version')} ({i.get('num_threads')} threads)" for i in threadpool_info())
    except Exception:
        blas = "unknown"
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import os

    return (
        f"{cpu}, {os.cpu_count()} cores; Python {platform.python_version()}, numpy {np.__version__}; BLAS: {blas}; "
        f"{datetime.now(timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}; commit {git_rev()}"
    )


def git_rev() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    except OSError:
        return "unknown"


def write_section(name: str, body: str) -> None:
    path = ROOT / "BENCHMARKS.md"
    text = path.read_text(encoding="utf-8") if path.exists() else "# Benchmarks\n\nEach section is written by the script named in it; rerun the script to refresh it.\n"
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    block = f"{start}\n{body.rstrip()}\n{end}"
    if start in text:
        text = re.sub(re.escape(start) + ".*?" + re.escape(end), lambda m: block, text, flags=re.S)
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    from backretrieval.core import atomic_write_text

    atomic_write_text(path, text)
    print(f"updated section {name!r} of {path}", file=sys.stderr)
