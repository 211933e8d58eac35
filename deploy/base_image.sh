#!/usr/bin/env bash
# base_image.sh - makes the Debian 12 base images the Dockerfile names, debian:bookworm and
# debian:bookworm-slim, in podman's local store, for machines that cannot pull from a registry.
#
# A `debootstrap --variant=minbase bookworm` root from the Debian mirror this machine's apt
# already uses (/etc/apt/sources.list*), imported with `podman import`. The slim tag is the same
# root with documentation, man pages and locales removed and dpkg told to keep them out, as the
# official slim image does. Images already in the store are kept: delete them
# (`podman rmi debian:bookworm debian:bookworm-slim`) to rebuild.
#
#   deploy/base_image.sh            make whichever of the two is missing
#   MIRROR=http://... deploy/base_image.sh
set -euo pipefail

have() { podman image exists "$1" 2>/dev/null; }
if have docker.io/library/debian:bookworm && have docker.io/library/debian:bookworm-slim; then
  echo "base_image: debian:bookworm and debian:bookworm-slim already in podman's store"
  exit 0
fi

# The first Debian (not -security, not third-party) mirror in apt's sources.
if [ -z "${MIRROR:-}" ]; then
  MIRROR=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources \
             2>/dev/null |
           grep -oE '(https?)://[^ ]+/debian/?( |$)' | grep -v security | head -n1 | tr -d ' ' || true)
  MIRROR=${MIRROR:-http://deb.debian.org/debian}
fi
MIRROR=${MIRROR%/}
SECURITY=${SECURITY_MIRROR:-${MIRROR%/debian}/debian-security}

ROOT=$(mktemp -d /var/tmp/tpud-base.XXXXXX)
trap 'rm -rf "$ROOT"' EXIT
echo "base_image: debootstrap --variant=minbase bookworm from $MIRROR"
t0=$(date +%s)
debootstrap --variant=minbase bookworm "$ROOT/rootfs" "$MIRROR" >"$ROOT/debootstrap.log" 2>&1 || {
  tail -n 30 "$ROOT/debootstrap.log" >&2
  exit 1
}
R=$ROOT/rootfs
# Apt sources as the official image has them (deb822), apt caches empty.
rm -f "$R/etc/apt/sources.list"
cat >"$R/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: $MIRROR
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: $SECURITY
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
rm -rf "$R"/var/lib/apt/lists/* "$R"/var/cache/apt/*.bin "$R"/var/cache/apt/archives/*.deb
# Container rootfs hygiene: no host identity, no machine-id.
: >"$R/etc/machine-id"
echo "localhost" >"$R/etc/hostname"
rm -f "$R/etc/resolv.conf"

if ! have docker.io/library/debian:bookworm; then
  tar -C "$R" --numeric-owner -c . |
    podman import -q --change 'CMD ["bash"]' - docker.io/library/debian:bookworm >/dev/null
fi
if ! have docker.io/library/debian:bookworm-slim; then
  mkdir -p "$R/etc/dpkg/dpkg.cfg.d"
  cat >"$R/etc/dpkg/dpkg.cfg.d/docker" <<'EOF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-exclude /usr/share/lintian/*
EOF
  find "$R/usr/share/doc" -mindepth 1 -not -name copyright -not -type d -delete 2>/dev/null || true
  rm -rf "$R"/usr/share/man/* "$R"/usr/share/info/* "$R"/usr/share/locale/* "$R"/usr/share/lintian/*
  tar -C "$R" --numeric-owner -c . |
    podman import -q --change 'CMD ["bash"]' - docker.io/library/debian:bookworm-slim >/dev/null
fi
echo "base_image: debian:bookworm and debian:bookworm-slim ready in $(($(date +%s) - t0)) s"
