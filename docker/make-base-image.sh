#!/usr/bin/env bash
# Make a Debian base image locally, for machines where no image registry answers.
#
#   docker/make-base-image.sh [SUITE]      SUITE: bookworm (Debian 12, the default) or trixie
#                                          (Debian 13); the image is labkit-base:SUITE
#
# debootstrap downloads a minimal Debian from the normal Debian mirror (about 30 s), and
# `docker import` turns that folder into an image; the Dockerfiles then build FROM it with
# `--build-arg BASE=labkit-base:SUITE`. Debian 12 is the lab's base; Debian 13 is what the
# Docker leg also checks the course on (scripts/ci/debian13.sh). Needs root, debootstrap and
# a running Docker engine. Does nothing when the image already exists.
set -euo pipefail
SUITE="${1:-bookworm}"
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"

say() { printf '[base image] %s\n' "$*"; }
die() { printf '[base image] %s\n' "$*" >&2; exit 1; }

case "$SUITE" in
    bookworm|trixie) ;;
    *) printf '[base image] unknown Debian suite "%s": expected bookworm (Debian 12) or trixie (Debian 13)\n' \
           "$SUITE" >&2
       exit 2 ;;
esac
TAG="labkit-base:$SUITE"

if docker image inspect "$TAG" >/dev/null 2>&1; then
    say "$TAG already exists"
    exit 0
fi
[ "$(id -u)" = 0 ] || die "debootstrap needs root: run this script with sudo"
command -v debootstrap >/dev/null || die "debootstrap is missing: apt-get install -y debootstrap"

ROOTFS=$(mktemp -d /tmp/labkit-rootfs.XXXXXX)
trap 'rm -rf "$ROOTFS"' EXIT
say "debootstrap --variant=minbase $SUITE from $MIRROR (about 30 s)"
debootstrap --variant=minbase "$SUITE" "$ROOTFS" "$MIRROR" > "$ROOTFS.log" 2>&1 \
    || { tail -20 "$ROOTFS.log" >&2; die "debootstrap failed (full log: $ROOTFS.log)"; }
rm -f "$ROOTFS.log"

# The same apt sources and container habits as Debian's official slim image: updates and
# security fixes, no daemons started by package scripts, no apt caches or docs kept.
rm -f "$ROOTFS/etc/apt/sources.list"
cat > "$ROOTFS/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: $MIRROR
Suites: $SUITE $SUITE-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://deb.debian.org/debian-security
Suites: $SUITE-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
cat > "$ROOTFS/etc/dpkg/dpkg.cfg.d/docker-slim" <<'EOF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
EOF
printf '#!/bin/sh\nexit 101\n' > "$ROOTFS/usr/sbin/policy-rc.d"
chmod 755 "$ROOTFS/usr/sbin/policy-rc.d"
rm -rf "$ROOTFS"/var/lib/apt/lists/* "$ROOTFS"/var/cache/apt/archives/*.deb "$ROOTFS"/var/cache/apt/*.bin \
    "$ROOTFS"/usr/share/man/* "$ROOTFS"/usr/share/info/* "$ROOTFS"/usr/share/locale/*

say "docker import -> $TAG"
tar --numeric-owner -C "$ROOTFS" -c . | docker import --change 'CMD ["bash"]' - "$TAG" >/dev/null
say "$TAG ready ($(docker image inspect --format '{{.Size}}' "$TAG" | awk '{printf "%.0f MB", $1/1e6}'))"
