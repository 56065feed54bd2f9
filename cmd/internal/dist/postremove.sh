#!/bin/sh
# After a removal or an upgrade: systemd forgets the unit file that went.
set -e
if [ -d /run/systemd/system ]; then
	systemctl daemon-reload
fi
