"""Where a campaign ran, as summary.json records it ("host"; docs in rundir.md): the run writes it, merge reads it
back per host (readers/merge.py host_of)."""

import platform
import shutil
import socket
import subprocess


def host_info():
    """Where a campaign ran: hostname, CPU, each GPU's name and driver (nvidia-smi), package versions."""
    from .fixtures import _versions

    gpus = []
    if shutil.which("nvidia-smi"):
        listing = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                                 capture_output=True, text=True, check=False, timeout=30).stdout
        gpus = [dict(zip(("name", "driver"), (p.strip() for p in line.split(",", 1)), strict=False))
                for line in listing.splitlines() if line.strip()]
    return {"hostname": socket.gethostname(), "cpu": f"{platform.machine()} {platform.processor()}".strip(),
            "gpus": gpus, "packages": _versions()}
