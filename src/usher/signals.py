"""Clean shutdown for the long-running commands (``--no-ui``, ``agent``, ``sandbox``).

SIGTERM (Kubernetes stopping a pod) and SIGINT (Ctrl-C) cancel the command's main task, so its
``finally`` blocks run: the controller gives up its Lease, servers close their sockets.
"""

from __future__ import annotations

import asyncio
import signal


def cancel_on_signals() -> None:
    """Make SIGTERM and SIGINT cancel the task that calls this."""
    main = asyncio.current_task()
    assert main is not None, "call from inside the command's main task"
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, main.cancel)
