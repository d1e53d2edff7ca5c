"""systemd's readiness protocol (``sd_notify``): a datagram to the socket named by
``$NOTIFY_SOCKET``, which systemd sets for a ``Type=notify`` service. Nothing happens without
it (started by hand, under another supervisor, in tests). An ``@`` first means the Linux
abstract namespace. See sd_notify(3).
"""

from __future__ import annotations

import os
import socket


def notify(state: str) -> bool:
    """Send ``state`` (``READY=1``, ``STOPPING=1``, ``STATUS=…``, lines joined by newlines);
    True when it was sent, False without ``$NOTIFY_SOCKET`` or when the socket refuses it."""
    address = os.environ.get("NOTIFY_SOCKET")
    if not address:
        return False
    if address.startswith("@"):
        address = "\0" + address[1:]
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as s:
            s.connect(address)
            s.sendall(state.encode())
        return True
    except OSError:
        return False
