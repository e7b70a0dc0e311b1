#!/bin/sh
# Before removal (not upgrade): stop and disable the daemon.
set -e
case "$1" in
  remove | purge | 0)
    if [ -d /run/systemd/system ]; then
      systemctl disable --now ffd >/dev/null 2>&1 || true
    fi
    ;;
esac
exit 0
