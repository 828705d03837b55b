"""python -m labkit.book: build the course book (labkit/book/__init__.py says how)."""
import sys

from labkit.book import main

sys.exit(main())
