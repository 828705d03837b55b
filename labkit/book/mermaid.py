"""mermaid.js for the book's pages, fetched once from npm and checked against its pinned hash.

The pages draw the lock maps' Mermaid text with the ``mermaid`` npm package, copied into the
built book beside the pages so that opening them loads nothing from the network. npm fetches
the package (``npm pack``: no install, no scripts run) into ``~/.cache/labkit/npm``; its
integrity (the sha512 npm publishes) is checked before ``dist/mermaid.min.js`` is kept.
tests/widgets/test_maps_browser.py renders every map's export with the same file.

What can go wrong: no npm, or no registry within reach (``MermaidUnavailable``, saying what
to install or that the cache can be filled on another machine); a package whose hash differs
from the pin (``MermaidUnavailable`` too: the file is not used).
"""
from __future__ import annotations

import base64
import hashlib
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

from labkit.errors import LabError

MERMAID = "12.3.0"
MERMAID_INTEGRITY = "sha512-4113TdXeLAsMruJ79OpFL5O8+LTFXhQqZ260rF3tgUmiNAtRm4Uume04I+65PRN6yZ69J4f8rVYWW8zRk65UYw=="


class MermaidUnavailable(LabError):
    """mermaid.js could not be fetched, or what was fetched is not the pinned package."""


def npm_cache() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "labkit" / "npm"


def mermaid_script(timeout: float = 300) -> Path:
    """dist/mermaid.min.js of mermaid@MERMAID, fetched once by npm into the cache."""
    cache = npm_cache()
    script = cache / f"mermaid-{MERMAID}.min.js"
    if script.exists():
        return script
    npm = shutil.which("npm")
    if npm is None:
        raise MermaidUnavailable("npm is not installed: the mermaid package cannot be fetched",
                                 hint=f"Debian/Ubuntu: sudo apt-get install nodejs npm; or copy {script.name} "
                                      f"into {cache} from a machine that has it")
    cache.mkdir(parents=True, exist_ok=True)
    try:
        packed = subprocess.run([npm, "pack", f"mermaid@{MERMAID}", "--pack-destination", str(cache),
                                 "--no-audit", "--no-fund"], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise MermaidUnavailable(f"npm could not fetch mermaid@{MERMAID} within {timeout:.0f} s",
                                 hint="is the npm registry within reach? (npm config get registry)") from None
    if packed.returncode != 0:
        raise MermaidUnavailable(f"npm could not fetch mermaid@{MERMAID}: {packed.stderr.strip()[-500:]}",
                                 hint="is the npm registry within reach? (npm config get registry)")
    archive = cache / f"mermaid-{MERMAID}.tgz"
    digest = "sha512-" + base64.b64encode(hashlib.sha512(archive.read_bytes()).digest()).decode()
    if digest != MERMAID_INTEGRITY:
        archive.unlink()
        raise MermaidUnavailable(f"{archive.name} is not the pinned mermaid@{MERMAID} (its hash is {digest})",
                                 hint="the registry served another file: check npm's registry setting")
    with tarfile.open(archive) as package:
        member = package.extractfile("package/dist/mermaid.min.js")
        if member is None:
            raise MermaidUnavailable(f"{archive.name} has no dist/mermaid.min.js", hint="report this")
        script.write_bytes(member.read())
    archive.unlink()
    return script
