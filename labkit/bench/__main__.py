"""``python -m labkit.bench``: the same as ``labkit bench`` (labkit/bench/command.py)."""
import sys

from labkit.bench.command import main

sys.exit(main())
