#!/bin/sh
# Install Debian's Chromium for the browser tests (tests/e2e/browser), unless it is already there.
# Playwright drives this browser (/usr/bin/chromium); it never downloads one of its own.
# Needs root (or sudo) and the Debian package mirror.
set -eu

if [ -x /usr/bin/chromium ]; then
    echo "chromium is installed: $(/usr/bin/chromium --version 2>/dev/null || echo /usr/bin/chromium)"
    exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    SUDO="sudo"
fi

export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update
$SUDO apt-get install -y --no-install-recommends chromium
/usr/bin/chromium --version
