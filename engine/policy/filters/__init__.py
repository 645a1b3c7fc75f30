"""Placement filters, one module per feature (kube-scheduler's ``framework/plugins/<name>/``).

Each feature module holds the whole rule of one thing a node must offer a pod: the check when the
node is empty (``ever``), the check as things are (``now``), and the words when it fails
(``why``). ``registry`` orders them into the one list that both the hot path (``Placer``, which
compiles the ``now`` checks a pod can trip) and ``diagnose`` (the "why pending" breakdown) run.

This package's ``__init__`` imports nothing: ``state`` imports ``extras`` and ``hostports`` (how a
node offers what it does not list), which must load without the filters that read ``state``.
"""
