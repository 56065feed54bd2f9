#!/bin/sh
# Before the files land: the system user and group natsdelay runs as, so
# that the data dir can be theirs.
set -e
if ! getent group natsdelay >/dev/null; then
	groupadd --system natsdelay
fi
if ! getent passwd natsdelay >/dev/null; then
	useradd --system --gid natsdelay --home-dir /var/lib/natsdelay --no-create-home \
		--shell /usr/sbin/nologin --comment "natsdelay service" natsdelay
fi
