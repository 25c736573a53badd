"""Helpers shared by the Python benchmarks under bench/ (standard library only)."""

from __future__ import annotations

import os
import platform
from typing import Optional


def describe_machine(cores: Optional[int] = None) -> str:
    """CPU model, cores, memory, OS and Python, for the header of every result."""
    model = platform.processor() or "unknown CPU"
    try:
        with open("/proc/cpuinfo") as info:
            model = next(line.split(":", 1)[1].strip() for line in info
                         if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    memory_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return (f"{model}, {cores or os.cpu_count()} cores, {memory_gib:.0f} GiB, "
            f"{platform.system()} {platform.release()}, Python {platform.python_version()}")
