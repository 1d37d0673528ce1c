#!/usr/bin/env bash
# Fetch Quadlet's generator (podman's /usr/libexec/podman/quadlet) from Debian trixie's podman
# .deb without installing podman 5 or touching the system's apt state: apt runs on a private
# sources list (trixie only), lists and cache; only the one binary is unpacked. Debian 12's podman
# (4.3.1) predates Quadlet; trixie's binary links against libc only (GLIBC <= 2.34) and runs here.
#   bash tests/fetch-quadlet.sh [CACHE_DIR]   # prints the binary's path on its last line
set -euo pipefail

VERSION=${PAROCTL_QUADLET_VERSION:-5.4.2+ds1-2+b2}  # the pin; the test asserts `quadlet -version`
CACHE=${1:-${PAROCTL_CACHE:-$HOME/.cache/paroctl}/quadlet}
DEST="$CACHE/$VERSION"
BIN="$DEST/usr/libexec/podman/quadlet"

if [ ! -x "$BIN" ]; then
  APT=$(mktemp -d)
  trap 'rm -rf "$APT"' EXIT
  mkdir -p "$APT/sources.list.d" "$APT/preferences.d" "$APT/lists/partial" \
    "$APT/cache/archives/partial" "$APT/deb"
  echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian trixie main" \
    >"$APT/sources.list"
  : >"$APT/status"
  # Every path apt reads or writes state from points into $APT; the system's apt.conf.d (proxy,
  # Check-Valid-Until) still applies, as it should for this network.
  opts=(
    -o "Dir::Etc::SourceList=$APT/sources.list"
    -o "Dir::Etc::SourceParts=$APT/sources.list.d"
    -o "Dir::Etc::Preferences=$APT/preferences"
    -o "Dir::Etc::PreferencesParts=$APT/preferences.d"
    -o "Dir::State=$APT"
    -o "Dir::State::Lists=$APT/lists"
    -o "Dir::State::status=$APT/status"
    -o "Dir::Cache=$APT/cache"
    -o "Debug::NoLocking=1"
    -o "APT::Sandbox::User=root"
  )
  apt-get "${opts[@]}" -qq update
  (cd "$APT/deb" && apt-get "${opts[@]}" -qq download "podman=$VERSION")
  mkdir -p "$DEST.partial"
  dpkg-deb --fsys-tarfile "$APT"/deb/podman_*.deb |
    tar -x -C "$DEST.partial" ./usr/libexec/podman/quadlet
  rm -rf "$DEST"
  mv "$DEST.partial" "$DEST"
fi
echo "quadlet $VERSION: $("$BIN" -version)" >&2
echo "$BIN"
