"""Run by each candidate interpreter of scripts/ci/pythons.sh: prints "MINOR EXECUTABLE" when it
is a CPython 3.10+ that can make a venv; otherwise exits non-zero with the reason. Written for
any Python 3 (no f-strings), so that old ones can say why they do not count."""
import platform
import sys

if platform.python_implementation() != "CPython" or sys.version_info < (3, 10):
    sys.exit("%s %s: not CPython 3.10+" % (platform.python_implementation(), platform.python_version()))
try:
    import ensurepip  # noqa: F401  (a venv with pip needs it; Debian: python3.X-venv)
    import venv  # noqa: F401
except ImportError as exc:
    sys.exit("cannot make a venv (%s): on Debian/Ubuntu install python3.%d-venv" % (exc, sys.version_info[1]))
print("%d.%d" % sys.version_info[:2], sys.executable)
