"""The lock lab control panel (ipywidgets): a live lock, buttons that break it for real,
and plain words for who holds it and why it changed hands.

    from labkit.widgets import LockPanel
    with labkit.up(zookeeper=3, etcd=0) as lab:
        panel = LockPanel(lab, recipe="zookeeper", clients=3)
        panel.widget          # display it; panel.close() when done (also at kernel exit)
"""
from labkit.widgets.narration import describe_event, holder_text, why_text
from labkit.widgets.lifetime import close_all_panels
from labkit.widgets.panel import LockPanel

__all__ = ["LockPanel", "close_all_panels", "describe_event", "holder_text", "why_text"]
