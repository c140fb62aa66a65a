"""Which machine measured a speed: its CPU, its core count, and the boot it was measured in.

Speeds are compared only between measurements of one machine boot (the frontier's report
groups its records by :func:`boot_key`); a record of another boot may have run on another
machine of the same name, or on this one under other load."""

import os
import platform
from typing import Dict, Optional, Tuple


def _read(path: str) -> Optional[str]:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError:
        return None


def cpu_model() -> str:
    cpuinfo = _read("/proc/cpuinfo") or ""
    names = [line.split(":", 1)[1].strip() for line in cpuinfo.splitlines()
             if line.startswith("model name")]
    return names[0] if names else platform.processor()


def describe() -> Dict:
    boot = _read("/proc/sys/kernel/random/boot_id")
    return {"host": platform.node(), "cpu_model": cpu_model(), "cpu_count": os.cpu_count(),
            "boot_id": boot.strip() if boot else None}


def boot_key(machine: Optional[Dict]) -> Tuple:
    """Records with equal keys were measured on one machine in one boot."""
    machine = machine or {}
    return (machine.get("host"), machine.get("cpu_model"), machine.get("boot_id"))
