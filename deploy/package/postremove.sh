#!/bin/sh
# After removal: systemd forgets the unit. The ffd user and /etc/ffd stay
# (Debian leaves system users; purge removes the environment file).
set -e
if [ -d /run/systemd/system ]; then
  systemctl daemon-reload >/dev/null 2>&1 || true
fi
exit 0
