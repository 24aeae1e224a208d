"""rsupd and the rsup CLI: the daemon side of rsup (never imports torch).

The folders tell the architecture, from the inside out:

- ``core``: pure. The typed job spec, the plan in force, the lifecycle states, the one
  function that concludes why an attempt ended, the policy and the one step that turns
  (job, event, now) into (state, decision, plan, effects). No I/O, no clock of its own.
- ``recognize``: reading what jobs print (signatures, the live classifier, torchrun ranks,
  kernel log lines). Pure parsing, except where it reads the kernel log.
- ``effects``: carrying decisions out. The engine loop, the attempt runner, the read-only
  watcher of attempt files, the store, process control, cgroups, devices.
- ``probe``: the staged GPU probe run as a child, its remedy ladder and its cache.
- ``surfaces``: what rsupd shows to the world: socket API, journald, metrics, systemd,
  notifications, reports.
- ``cli``: the ``rsup`` command and what runs without a daemon (``run``, ``diagnose``).

``daemon`` is the composition root that wires them together.
"""
