#!/bin/sh
# After install or upgrade: the system user the unit runs as, the
# environment file readable by it, and systemd told of the unit. The
# service is neither enabled nor started: the environment file needs
# FFD_DATABASE_URL first (docs/operations.md, "Install").
set -e
if ! getent group ffd >/dev/null; then
  groupadd --system ffd
fi
if ! getent passwd ffd >/dev/null; then
  useradd --system --gid ffd --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin ffd
fi
chown root:ffd /etc/ffd/ffd.env
chmod 0640 /etc/ffd/ffd.env
if [ -d /run/systemd/system ]; then
  systemctl daemon-reload >/dev/null 2>&1 || true
  # An upgrade restarts a running daemon on the new binary.
  if systemctl is-active --quiet ffd; then
    systemctl restart ffd || true
  fi
fi
exit 0
