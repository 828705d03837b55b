"""Client libraries' connection chatter goes to a log file, not into lesson outputs.

kazoo logs every dropped connection and every reconnect attempt as a WARNING ("Connection
dropped: socket connection error", "Transition to CONNECTING", "Failed connecting to
Zookeeper within the connection retry policy."). With no logging configured, Python prints
any logger's WARNING records on stderr, and a notebook shows them in red: a learner reads
them as errors, when they are the expected echo of the fault the lesson just made (a cut
link, a killed leader, an expired session). The lesson shows what happened through its
History and its asserts; the chatter belongs in a file.

    route_client_logs()        # labkit.up calls it: $LABKIT_HOME/clients.log (lab.client_log)
    routed_to()                # that path, or None
    show_client_logs()         # undo: kazoo's records go where Python sends them by default

What is routed: every record of the loggers in ``CLIENT_LOGGERS`` (kazoo and its children)
goes to the file, one line each with its time; those of level ERROR and above (an exception
in kazoo's own threads, such as a watch callback that raised) are also printed on stderr.
No other logger is touched: labkit's own warnings and a lesson's exceptions show as before.
The file is not in a lab's folder, which is removed when the lab stops while its clients
may still be logging their last disconnections; it is kept at 1 MB (one older copy,
``clients.log.1``). Calling ``route_client_logs`` again moves the records to the new file.
Nothing here raises: a file that cannot be written loses its records silently, because
chatter must never turn into a traceback in a lesson.
"""
from __future__ import annotations

import logging
import logging.handlers
import sys
from pathlib import Path

from labkit.servers.run_folder import labkit_home

CLIENT_LOGGERS = ("kazoo",)
_FORMAT = "%(asctime)s %(name)s %(levelname)s %(message)s"


class _Stderr(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is when a record comes (Jupyter replaces it per kernel)."""

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value) -> None:  # StreamHandler.__init__ assigns it; the property wins
        pass


class _QuietFile(logging.handlers.RotatingFileHandler):
    """A size-capped file that drops records it cannot write instead of printing a traceback."""

    def handleError(self, record: logging.LogRecord) -> None:
        pass


_installed: list[logging.Handler] = []   # the handlers this module added, to swap or remove them


def route_client_logs(path: str | Path | None = None) -> Path:
    """Send the client libraries' records to ``path`` (appended; default
    ``$LABKIT_HOME/clients.log``), and those of ERROR and above to stderr too. Returns the path."""
    path = Path(path) if path is not None else labkit_home() / "clients.log"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError:
        pass  # the file handler then drops the records: see the module docstring
    to_file = _QuietFile(path, maxBytes=1_000_000, backupCount=1, encoding="utf-8", delay=True)
    to_file.setFormatter(logging.Formatter(_FORMAT))
    errors = _Stderr()
    errors.setLevel(logging.ERROR)
    errors.setFormatter(logging.Formatter("%(name)s: %(message)s"))
    show_client_logs()
    for name in CLIENT_LOGGERS:
        logger = logging.getLogger(name)
        logger.addHandler(to_file)
        logger.addHandler(errors)
        logger.propagate = False   # else Python's last-resort handler prints every WARNING on stderr
    _installed[:] = [to_file, errors]
    return path


def routed_to() -> Path | None:
    """The file the client libraries' records go to now, or None if they are not routed."""
    files = [handler for handler in _installed if isinstance(handler, _QuietFile)]
    return Path(files[0].baseFilename) if files else None


def show_client_logs() -> None:
    """Undo ``route_client_logs``: the client libraries log where Python's configuration says."""
    for name in CLIENT_LOGGERS:
        logger = logging.getLogger(name)
        for handler in _installed:
            logger.removeHandler(handler)
        logger.propagate = True
    for handler in _installed:
        handler.close()
    _installed.clear()
