"""What rsupd shows: socket API, journald, metrics, systemd service, notifications, reports."""
