#!/bin/sh
# Before a removal (not an upgrade: dpkg says remove, rpm 0): stop and
# disable the service. The data dir and the user stay: they hold messages.
set -e
case "$1" in
remove | 0)
	if [ -d /run/systemd/system ]; then
		systemctl disable --now natsdelay.service || true
	fi
	;;
esac
