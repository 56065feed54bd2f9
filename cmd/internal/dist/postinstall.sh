#!/bin/sh
# After the files land: the data dir is natsdelay's alone (it holds the
# messages), and systemd learns of the unit. An upgrade restarts a running
# service on the new binary; a fresh install starts nothing, so that the
# settings can be made first.
set -e
chown natsdelay:natsdelay /var/lib/natsdelay
chmod 0700 /var/lib/natsdelay
chown root:natsdelay /etc/natsdelay /etc/natsdelay/natsdelay.json
chmod 0750 /etc/natsdelay
chmod 0640 /etc/natsdelay/natsdelay.json
if [ -d /run/systemd/system ]; then
	systemctl daemon-reload
	systemctl try-restart natsdelay.service
fi
