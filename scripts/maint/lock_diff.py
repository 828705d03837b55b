"""What the installed packages of this Python change from the lock (./lab.sh test --latest).

    python scripts/maint/lock_diff.py requirements/lock.txt

One line per package whose installed version differs from its pin (or that only one side has).
"""
import re
import sys
from importlib.metadata import distributions

from packaging.markers import Marker
from packaging.utils import canonicalize_name

PIN = re.compile(r"([A-Za-z0-9._-]+)==([^\s;\\]+)\s*(?:;\s*([^\\]+?))?\s*\\?$")


def main(lock: str) -> None:
    locked = {}
    with open(lock) as lines:
        for line in lines:
            pin = PIN.match(line)
            if pin and (pin[3] is None or Marker(pin[3]).evaluate()):
                locked[canonicalize_name(pin[1])] = pin[2]
    installed = {canonicalize_name(d.metadata["Name"]): d.version for d in distributions()}
    changes = [f"    {name}: {locked.get(name, '-')} -> {installed.get(name, '-')}"
               for name in sorted((set(locked) | set(installed)) - {"labkit", "pip", "setuptools"})
               if locked.get(name) != installed.get(name)]
    print("\n".join(changes) if changes else "    nothing: the lock is already the newest")


if __name__ == "__main__":
    main(sys.argv[1])
